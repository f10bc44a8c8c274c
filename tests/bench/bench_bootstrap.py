"""Benchmark of provisioning: prints figures, asserts nothing about time.

    .venv/bin/python tests/bench/bench_bootstrap.py [--events N] [--skip-bootstrap]

1. Event ingestion: N synthetic ansible-runner events pushed through the engine's event handler from a
   producer thread (as runner does) and stored by the consumer in batches; rate and lost events.
   Target: >= 5,000 events/s, zero lost.
2. The demo bootstrap in a fresh state directory: wall time of `manage.py bootstrap` (first run, which
   changes everything), then of the converged rerun `bootstrap --force`, next to bare `ansible-playbook`
   runs of the same stage playbooks with the same inventory and variables on the same converged nodes,
   with both the linear and the mitogen_linear strategies. Every run reaches the simulated nodes as the
   engine does: over SSH (one sshd per node), the appliance's key, host keys checked, become to the
   unprivileged login account. Target: the engine's time for the stages is at most 1.1 x the bare
   `ansible-playbook` run with Ansible's own linear strategy; the ratio to bare Mitogen is printed too.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setup_django(state_dir: Path) -> None:
    os.environ["APPLIANCE_STATE_DIR"] = str(state_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def synthetic_event(counter: int, host: str) -> dict:
    return {
        "uuid": f"00000000-0000-0000-0000-{counter:012d}", "counter": counter, "event": "runner_on_ok",
        "pid": 4242, "created": "2026-11-30T00:00:00.000000+00:00",
        "stdout": f"ok: [{host}] => (item={counter})",
        "event_data": {"host": host, "task": f"Task {counter % 40}", "play": "Bench", "role": "bench",
                       "res": {"changed": counter % 7 == 0, "msg": "x" * 120, "item": counter}},
    }


def bench_ingestion(events: int) -> None:
    from appliance.inventory.models import Appliance
    from appliance.provisioning.events import EventIngestor, Scrubber
    from appliance.provisioning.models import Run, StageRun, TaskEvent

    appliance = Appliance.objects.create(name=f"bench-{int(time.time())}")
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["bench"])
    stage_run = StageRun.objects.create(run=run, stage="bench", order=1)
    ingestor = EventIngestor(stage_run, Scrubber(["not-a-real-secret"]))
    prepared = [synthetic_event(i, f"gpu{i % 8:02d}") for i in range(1, events + 1)]

    def produce():
        for event in prepared:
            ingestor.handle(event)

    producer = threading.Thread(target=produce)
    started = time.perf_counter()
    producer.start()
    result = ingestor.consume(producer.is_alive)
    elapsed = time.perf_counter() - started
    stored = TaskEvent.objects.filter(stage_run=stage_run).count()
    print(f"event ingestion: {result.emitted} emitted, {stored} stored, {result.emitted - stored} lost, "
          f"{elapsed:.2f} s, {result.emitted / elapsed:,.0f} events/s (target >= 5,000, zero lost)")


def run_command(args: list[str], env: dict) -> tuple[float, int, str]:
    started = time.perf_counter()
    process = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - started, process.returncode, process.stdout + process.stderr


def bench_bootstrap(state_dir: Path) -> None:
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(state_dir)}
    env.pop("DATABASE_URL", None)
    manage = [sys.executable, str(ROOT / "manage.py"), "bootstrap", "--no-input"]
    first, rc, output = run_command(manage, env)
    print(f"demo bootstrap, first run (fresh state): {first:.1f} s, exit {rc}")
    if rc != 0:
        print(output[-4000:])
        return
    forced, rc, output = run_command(manage + ["--force"], env)
    print(f"demo bootstrap --force (converged): {forced:.1f} s command wall time, exit {rc}")

    from appliance.provisioning import catalogue, executor, playbook_vars
    from appliance.provisioning.models import Run

    run = Run.objects.filter(kind=Run.Kind.BOOTSTRAP, dry_run=False, state="succeeded").order_by("-id").first()
    engine = (run.ended - run.started).total_seconds()
    stage_seconds = {s.stage: (s.ended - s.started).total_seconds() for s in run.stage_runs.all() if s.started}
    print(f"  engine, stages of run #{run.pk}: {engine:.1f} s ({run.changed_count} changed tasks) "
          + ", ".join(f"{k} {v:.1f} s" for k, v in stage_seconds.items()))

    nodes = list(run.appliance.nodes.select_related("platform", "bmc").order_by("name"))
    work = Path(tempfile.mkdtemp(prefix="bare-", dir=state_dir))
    mitogen_name, plugin_dir, _ = executor.strategy()
    bare = {}
    for strategy_name in ("linear", mitogen_name):
        total = 0.0
        for stage in catalogue.active().select(only=run.stages):
            stage_nodes = [n for n in nodes if stage.applies_to(n)]
            data = playbook_vars.build(run, stage, stage_nodes)
            directory = work / f"{strategy_name}-{stage.name}"
            (directory / "tmp" / "local").mkdir(parents=True)
            (directory / "tmp" / "remote").mkdir(parents=True)
            (directory / "hosts.json").write_text(json.dumps(data.inventory))
            (directory / "extravars.json").write_text(json.dumps(data.extravars))
            secrets = directory / "secrets.json"
            secrets.write_text(json.dumps(data.secrets))
            secrets.chmod(0o600)
            stage_env = {**os.environ, **executor._environment(directory, strategy_name, plugin_dir)}
            if strategy_name == "linear":
                stage_env.pop("ANSIBLE_STRATEGY_PLUGINS", None)
            elapsed, rc, output = run_command(
                [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(directory / "hosts.json"),
                 "-e", f"@{directory / 'extravars.json'}", "-e", f"@{secrets}", str(stage.playbook_path())],
                stage_env)
            secrets.unlink()
            if rc != 0:
                print(f"  bare {strategy_name} {stage.name}: exit {rc}\n{output[-2000:]}")
            total += elapsed
        bare[strategy_name] = total
        print(f"  bare ansible-playbook, {strategy_name}: {total:.1f} s")
    print(f"bootstrap engine / bare linear run: {engine / bare['linear']:.2f} x (target <= 1.1); "
          f"/ bare {mitogen_name} run: {engine / bare[mitogen_name]:.2f} x")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--skip-bootstrap", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="appliance-bench-") as state:
        setup_django(Path(state))
        bench_ingestion(options.events)
        if not options.skip_bootstrap:
            try:
                bench_bootstrap(Path(state))
            finally:
                # The emulated BMCs outlive the command that started them; stop them before the state goes.
                env = {**os.environ, "APPLIANCE_STATE_DIR": state}
                subprocess.run([sys.executable, str(ROOT / "manage.py"), "simulation", "stop"], cwd=ROOT, env=env,
                               capture_output=True)


if __name__ == "__main__":
    main()
