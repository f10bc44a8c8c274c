"""The README's main command on the demo site, as an operator runs it, in a fresh state directory:

- it exits 0, the acceptance passes and the BIOS values the emulated BMCs serve equal the baseline;
- nothing outside the state directory changed on this machine;
- a second run changes nothing;
- each fault injected into the simulation (a port down or at the wrong rate, a missing module, a
  bandwidth below its gate, a mount that fails, a BMC certificate from another CA, a wrong BMC
  password, a BMC down) fails its stage or check with a message naming node, check, expected and
  measured, and a rerun after clearing it completes;
- kill -9 during a stage, then rerun: it resumes, finishes, the inventory is right and the audit
  log verifies;
- node health as an operator meets it: GPU 5 of gpu02 taken off the bus, the gpu stage marks it missing
  (the other seven ok) and gpu02 is not Ready; rerunning only the `os` stage (which does not look at
  GPUs) leaves it failed with a short reason naming GPU 5, while every other node returns to Ready; once
  the GPU is back, the gpu stage clears it.

The tests of this module share one bootstrapped appliance (a full bootstrap is the costly part) and
run in file order; each leaves it converged. They drive the appliance as it is installed: the `appliance`
command of the wheel `pip wheel .` builds, in a fresh venv with the extra simulation, run from an empty
directory (tests/wheel.py), in its own process on the embedded SQLite database whatever DATABASE_URL says,
so they run once, in the SQLite pass.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml
from django.conf import settings

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

ROOT = Path(settings.BASE_DIR)
# The installed wheel (tests/wheel.py) every command of this module runs through: set by `through_the_wheel`.
INSTALLED = {}
# Places a package install, a kernel module, a service, a sysctl or a boot setting would touch on the host.
WATCHED = ["/etc", "/usr/lib/modules-load.d", "/usr/lib/systemd/system", "/lib/modprobe.d", "/boot",
           "/var/lib/dpkg/status", "/usr/local/bin", os.path.expanduser("~/.ansible")]


# The one documented exception (README "The simulated nodes' SSH"): as root, the first prepare creates the
# simulation's service account appliance-sim (the account databases, their backups, its sudoers drop-in).
ACCOUNT_FILES = {f"/etc/{name}{suffix}" for name in ("passwd", "group", "shadow", "gshadow") for suffix in ("", "-")}
ACCOUNT_FILES |= {"/etc", "/etc/sudoers.d", "/etc/sudoers.d/appliance-sim", "/etc/.pwd.lock"}


def snapshot() -> dict:
    listing = {}
    for top in WATCHED:
        top_path = Path(top)
        paths = [top_path] if top_path.is_file() else (sorted(top_path.rglob("*")) if top_path.exists() else [])
        for path in paths:
            try:
                info = path.lstat()
            except OSError:
                continue
            if str(path) not in ACCOUNT_FILES and not (path.parent == Path("/etc/sudoers.d")
                                                       and "appliance-sim" in path.name):
                listing[str(path)] = (info.st_mtime_ns, info.st_size, info.st_mode)
    listing["accounts"] = sorted(line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()
                                 if not line.startswith("appliance-sim"))
    # Loaded modules, mounts and sysctls in effect (a container may not show all of them).
    for name in ("/proc/modules", "/proc/mounts", "/proc/cmdline", "/proc/sys/vm/swappiness",
                 "/proc/sys/kernel/numa_balancing"):
        if Path(name).exists():
            text = Path(name).read_text()
            listing[name] = sorted(line.split()[0] for line in text.splitlines()) if name == "/proc/modules" else text
    return listing


def manage(state_dir: Path, *args, timeout=900) -> subprocess.CompletedProcess:
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(state_dir)}
    env.pop("DATABASE_URL", None)
    # The demo as the README's command makes it: a development appliance, no four-eyes cooling period, so its
    # story approves its models' promotions (tests/conftest.py sets a production install's day for the rest).
    env.pop("APPLIANCE_FOUR_EYES_COOLING_SECONDS", None)
    installed = INSTALLED["appliance"]
    return subprocess.run([str(installed.command), *args], cwd=installed.cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def inventory(state_dir: Path) -> dict:
    script = ("import json; from appliance.inventory.models import Node; "
              "print(json.dumps({n.name: [n.state, n.state_reason, n.role] for n in Node.objects.all()}))")
    result = manage(state_dir, "shell", "-c", script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def bmc_bios(state_dir: Path, url: str) -> dict:
    auth = ("admin", (state_dir / "simulation" / "bmc-password").read_text().strip())
    # verify per request: a session-level CA loses to REQUESTS_CA_BUNDLE from the environment.
    ca = str(state_dir / "simulation" / "ca" / "ca.pem")

    def get(path):
        response = requests.get(url + path, auth=auth, verify=ca, timeout=10)
        response.raise_for_status()
        return response.json()

    systems = get("/redfish/v1/Systems")
    system = get(systems["Members"][0]["@odata.id"])
    return get(system["Bios"]["@odata.id"])["Attributes"]


def simulation(state_dir: Path, *args) -> None:
    """`manage.py simulation ...`: the CLI over appliance.simulation.services (inject_fault, clear_faults)."""
    result = manage(state_dir, "simulation", *args, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def failures(state_dir: Path) -> dict:
    """{host: (stage, failed task, message)} of the last run's failed hosts."""
    script = ("import json; from appliance.provisioning.models import HostResult, Run; "
              "run = Run.objects.latest('id'); "
              "print(json.dumps({h.host: [h.stage_run.stage, h.failed_task, h.message] for h in "
              "HostResult.objects.filter(stage_run__run=run).exclude(failed=0, unreachable=0)}))")
    result = manage(state_dir, "shell", "-c", script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def through_the_wheel(installed_appliance):
    INSTALLED["appliance"] = installed_appliance


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo appliance bootstrapped once, in a fresh state directory, with what the host looked like
    before and after."""
    from tests.conftest import traversable

    state = traversable(tmp_path_factory.mktemp("demo")) / "state"
    state.mkdir()
    before = snapshot()
    try:
        first = manage(state, "bootstrap", "--no-input", timeout=900)
    except subprocess.TimeoutExpired:
        # Killed at its time limit, the command leaves its emulators and sshd servers running.
        manage(state, "simulation", "stop", timeout=240)
        raise
    after = snapshot()
    yield {"state": state, "first": first, "before": before, "after": after}
    manage(state, "simulation", "stop", timeout=240)


@pytest.fixture
def converged(demo):
    assert demo["first"].returncode == 0, demo["first"].stdout[-3000:] + demo["first"].stderr[-3000:]
    return demo["state"]


def test_bootstrap_the_demo_appliance(demo):
    fresh_state, first = demo["state"], demo["first"]
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert demo["after"] == demo["before"], "the simulated bootstrap changed something outside its state directory"
    assert "Acceptance: PASSED" in first.stdout
    assert "Administrator 'admin' created. Password: " in first.stdout
    assert str(fresh_state / "keys" / "admin-password") in first.stdout
    # The demo's portal listens on this state directory's own port: the one its collectors send to.
    portal_port = json.loads((fresh_state / "simulation" / "ports.json").read_text())["portal"]["portal"]
    # ... and it is running when the bootstrap ends: the last lines say where to log in and how to reach this
    # state directory from another shell (the venv's own interpreter, not `python`).
    assert f"Log in at http://127.0.0.1:{portal_port}/ as admin" in first.stdout
    assert f"APPLIANCE_STATE_DIR={fresh_state} appliance simulation status" in first.stdout
    # Installing collected the portal's static files: a production server (DEBUG off) serves them from there.
    assert (fresh_state / "static" / "css" / "appliance.css").is_file()
    for stage in ("firmware", "os", "gpu", "fabric", "gpudirect", "storage", "workloads", "monitoring", "acceptance"):
        assert any(line.strip().startswith(f"{stage} ") and " ok · " in line for line in first.stdout.splitlines()), stage

    site = yaml.safe_load((ROOT / "appliance/inventory/sites/demo.yml").read_text())
    # The emulators listen on the ports this state directory allocated (demo.yml's are placeholders).
    ports = json.loads((fresh_state / "simulation" / "ports.json").read_text())["bmc"]
    for node in site["nodes"]:
        platform = yaml.safe_load((ROOT / "firmware/platforms" / f"{node['platform']}.yaml").read_text())
        attributes = bmc_bios(fresh_state, f"https://127.0.0.1:{ports[node['name']]}")
        baseline = platform["bios"]["baseline"]
        assert {k: attributes.get(k) for k in baseline} == baseline, node["name"]
    assert set(state for state, _, _ in inventory(fresh_state).values()) == {"ready"}

    second = manage(fresh_state, "bootstrap", "--no-input", timeout=600)
    assert second.returncode == 0, second.stdout[-3000:]
    summary = [line for line in second.stdout.splitlines() if ": succeeded · " in line]
    assert summary and " 0 changed, 0 failed" in summary[-1], second.stdout[-2000:]


STORY = """
import json
from appliance.lending.models import LendingPolicy
from appliance.lifecycle.models import Deployment, ModelVersion
print(json.dumps({
    "versions": sorted([v.model.name, v.stage, v.source, v.training_job, v.registered_by.username]
                       for v in ModelVersion.objects.select_related("model", "registered_by")),
    "deployments": sorted([d.name, d.version.model.name] for d in Deployment.objects.select_related("version__model")),
    "policies": sorted([p.pool.kind, p.may_lend] for p in LendingPolicy.objects.select_related("pool")),
}))
"""


def test_the_demo_tells_one_story(demo):
    """The models the inference services serve are in the registry, promoted by two people and deployed, with
    the demo's first Slurm training job as their lineage; the pools have lending policies (issue 39)."""
    first = demo["first"]
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "The demo's story: demo models registered and promoted: chat v1, embeddings v1" in first.stdout
    result = manage(demo["state"], "shell", "-c", STORY)
    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout.strip().splitlines()[-1])
    submitted = [json.loads(line) for line in
                 (demo["state"] / "simulation" / "workload" / "jobs.jsonl").read_text().splitlines() if line.strip()]
    job = next(entry["job"] for entry in submitted if entry["job"])
    assert told["versions"] == [
        ["chat", "production", "/mnt/scratch/models/chat/v1", job, "demo-engineer"],
        ["embeddings", "production", "/mnt/scratch/models/embeddings/v1", job, "demo-engineer"]]
    assert told["deployments"] == [["chat", "chat"], ["embeddings", "embeddings"]]
    assert told["policies"] == [["inference", True], ["training", False]]


LIVE_STATE = """
import json
from appliance.inventory.models import Appliance
from appliance.simulation import collectors, slurm, workload
appliance = Appliance.objects.get()
print(json.dumps({"collectors": collectors.status(appliance), "slurm": slurm.status(appliance),
                  "workload": workload.status(appliance)}, default=str))
"""


def test_the_demo_runs_live(converged):
    """What the bootstrap leaves running (issue: telemetry, done when): the training pool's real Slurm with
    every GPU node's slurmd, a collector answering /metrics on every node, the demo workload; and a portal
    started on the demo's port shows live per-GPU use within a minute and a Slurm job's GPUs."""
    state = converged
    result = manage(state, "shell", "-c", LIVE_STATE)
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout.strip().splitlines()[-1])
    site = yaml.safe_load((ROOT / "appliance/inventory/sites/demo.yml").read_text())
    training = next(pool for pool in site["pools"] if pool["kind"] == "training")
    assert live["slurm"]["controller"]["pid"], live["slurm"]
    assert sorted(live["slurm"]["nodes"]) == sorted(training["nodes"])
    assert all(node["pid"] and node["state"] for node in live["slurm"]["nodes"].values()), live["slurm"]
    assert sorted(live["collectors"]) == sorted(node["name"] for node in site["nodes"])
    assert all(c["deployed"] and c["pid"] and c["answering"] for c in live["collectors"].values()), live["collectors"]
    assert live["workload"]["running"] and live["workload"]["profile"] == "demo", live["workload"]

    # The portal the bootstrap started, with no second command typed (`simulation status` shows it).
    port = json.loads((state / "simulation" / "ports.json").read_text())["portal"]["portal"]
    base = f"http://127.0.0.1:{port}"
    status = manage(state, "simulation", "status")
    assert status.returncode == 0, status.stderr
    assert f"portal             {base} pid " in status.stdout and " answering (gunicorn" in status.stdout, status.stdout
    session = requests.Session()

    def get(path):
        try:
            return session.get(base + path, timeout=20)
        except requests.ConnectionError:
            return None

    answer = get("/health/")
    assert answer is not None and answer.status_code == 200, (state / "simulation" / "portal.log").read_text()[-3000:]
    login = session.get(f"{base}/accounts/login/", timeout=20)
    password = (state / "keys" / "admin-password").read_text().strip()
    signed_in = session.post(f"{base}/accounts/login/", timeout=20, headers={"Referer": f"{base}/accounts/login/"},
                             data={"username": "admin", "password": password,
                                   "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert login.status_code == 200 and signed_in.status_code == 200, signed_in.text[:500]
    # Within a minute of the portal answering, every GPU of the demo shows live (the collectors' buffered
    # minutes arrive at once, the next ones as they close).
    answered = time.monotonic()
    gpus = sum(int(node.get("gpus", 8)) for node in site["nodes"] if node["role"] == "gpu")
    # Collectors of nodes without GPUs (storage, management) report on their own schedule: the GPU count can
    # be complete a poll before the last of them is, so both are waited for within the same minute and a half.
    while True:
        summary = session.get(f"{base}/api/v1/telemetry/live/", timeout=20).json()
        if summary["gpus_live"] == gpus and summary["collectors_live"] == len(site["nodes"]):
            break
        assert time.monotonic() - answered < 90, summary
        time.sleep(3)
    assert summary["util_mean"] is not None and summary["power_w"] > 0, summary
    overview = session.get(f"{base}/", timeout=20)
    assert overview.status_code == 200 and 'href="/telemetry/"' in overview.text

    # A job page shows a running Slurm job's GPUs: a job the workload submitted with sbatch.
    submitted = [json.loads(line) for line in
                 (state / "simulation" / "workload" / "jobs.jsonl").read_text().splitlines() if line.strip()]
    slurm_jobs = {entry["job"]: entry for entry in submitted if entry["job"]}
    while True:
        held = [job for job in session.get(f"{base}/api/v1/telemetry/jobs/?range=1h", timeout=20).json()["jobs"]
                if job["job"] in slurm_jobs]
        if held:
            break
        assert time.monotonic() - answered < 180, (slurm_jobs, submitted)
        time.sleep(5)
    job = held[0]
    entry = slurm_jobs[job["job"]]
    assert job["nodes"] == [entry["node"]]
    page = session.get(f"{base}/telemetry/jobs/{job['job']}/", timeout=20)
    assert page.status_code == 200 and entry["node"] in page.text
    detail = session.get(f"{base}/api/v1/telemetry/jobs/{job['job']}/", timeout=20).json()
    assert detail["gpus"], detail


NODES_AND_HEALTH = """
import json
from appliance.inventory import health
from appliance.inventory.models import HealthCheck, Node
print(json.dumps({
    "nodes": {n.name: [n.state, n.state_reason] for n in Node.objects.all()},
    "failures": {n.name: health.open_failures(n) for n in Node.objects.all()},
    "gpu02": {row.component_id: [row.status, row.evidence] for row in HealthCheck.objects.filter(
        node__name="gpu02", component_kind="gpu", name="present")},
}))
"""


def observe(state_dir: Path) -> dict:
    result = manage(state_dir, "shell", "-c", NODES_AND_HEALTH)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_missing_gpu_keeps_its_node_from_ready_until_a_stage_sees_it_again(converged):
    seen = observe(converged)
    assert {name: state for name, (state, _) in seen["nodes"].items()} == {
        "gpu01": "ready", "gpu02": "ready", "gpu03": "ready", "gpu04": "ready", "mgmt01": "ready",
        "stor01": "ready", "stor02": "ready"}
    assert {index: status for index, (status, _) in seen["gpu02"].items()} == {str(i): "ok" for i in range(8)}

    simulation(converged, "fault", "inject", "gpu02", "gpu_missing", "index=5")
    gpu = manage(converged, "bootstrap", "--no-input", "--only", "gpu")
    assert gpu.returncode != 0
    seen = observe(converged)
    assert seen["gpu02"]["5"] == ["failing", "GPU 5 (0000:ab:00.0) missing: NVML does not list it"]
    assert {index: status for index, (status, _) in seen["gpu02"].items() if index != "5"} == {
        str(i): "ok" for i in range(8) if i != 5}
    assert seen["nodes"]["gpu02"][0] == "failed"
    assert seen["failures"]["gpu02"] == ["GPU 5 (0000:ab:00.0) missing: NVML does not list it"]

    # The os stage does not look at GPUs: it cannot clear GPU 5, and gpu02 stays failed, saying why.
    os_rerun = manage(converged, "bootstrap", "--no-input", "--only", "os")
    assert os_rerun.returncode == 0, os_rerun.stdout + os_rerun.stderr
    seen = observe(converged)
    state, reason = seen["nodes"]["gpu02"]
    assert state == "failed"
    assert "GPU 5 (0000:ab:00.0) missing: NVML does not list it" in reason and len(reason) < 300
    assert {name: state for name, (state, _) in seen["nodes"].items() if name != "gpu02"} == {
        "gpu01": "ready", "gpu03": "ready", "gpu04": "ready", "mgmt01": "ready", "stor01": "ready",
        "stor02": "ready"}

    simulation(converged, "fault", "clear", "gpu02")
    again = manage(converged, "bootstrap", "--no-input", "--only", "gpu")
    assert again.returncode == 0, again.stdout + again.stderr
    seen = observe(converged)
    assert seen["gpu02"]["5"][0] == "ok" and seen["nodes"]["gpu02"][0] == "ready"
    assert seen["failures"]["gpu02"] == []


# stage -> faults injected together (node, kind, params) -> what each failed host's message must hold
FAULT_ROUNDS = [
    ("fabric", [
        ("gpu02", "port_down", ["device=mlx5_1"], ["gpu02", "mlx5_1/1", "state expected Active, measured Down"]),
        ("gpu03", "port_rate", ["device=mlx5_2", "rate_gbps=200"],
         ["gpu03", "mlx5_2/1", "rate expected 400 Gb/s, measured 200 Gb/s"]),
    ]),
    ("gpudirect", [
        ("gpu01", "module_missing", ["module=nvidia_peermem"],
         ["gpu01", "kernel module nvidia_peermem", "expected loaded, measured not loaded"]),
        ("gpu02", "module_missing", ["module=nvidia_fs"],
         ["gpu02", "kernel module nvidia_fs", "expected loaded, measured not loaded"]),
    ]),
    ("storage", [
        ("gpu01", "mount_fails", ["mount_point=/mnt/scratch"],
         ["gpu01", "unit mnt-scratch.mount", "expected active, measured failed", "Connection timed out"]),
        ("gpu02", "bandwidth_low", ["test=fio", "value=450"],
         ["gpu02", "/mnt/scratch", "read expected >= 2000 MB/s, measured 450.0 MB/s"]),
    ]),
    ("acceptance", [
        ("gpu03", "bandwidth_low", ["test=all_reduce_perf", "value=300"],
         ["gpu03", "nccl.all_reduce_busbw", "expected >= 460 GB/s", "measured 300.0"]),
        ("gpu04", "bandwidth_low", ["test=ib_write_bw", "value=200"],
         ["gpu04", "ib_write_bw.mlx5_0", "expected >= 380 Gb/s", "measured 200.0"]),
    ]),
]


@pytest.mark.parametrize("stage,faults", FAULT_ROUNDS, ids=[stage for stage, _ in FAULT_ROUNDS])
def test_an_injected_fault_fails_its_stage_naming_node_check_expected_measured(converged, stage, faults):
    for node, kind, params, _ in faults:
        simulation(converged, "fault", "inject", node, kind, *params)
    faulty = manage(converged, "bootstrap", "--no-input", "--only", stage, "--force")
    assert faulty.returncode == 1, faulty.stdout[-3000:]
    assert f"failed: stage {stage}, host " in faulty.stderr
    found = failures(converged)
    assert set(found) == {node for node, *_ in faults}, found
    for node, kind, _, expected in faults:
        failed_stage, _, message = found[node]
        assert failed_stage == stage
        for part in expected:
            assert part in message, f"{kind} on {node}: {part!r} not in {message!r}"
    assert inventory(converged)[faults[0][0]][0] == "failed"

    for node, *_ in faults:
        simulation(converged, "fault", "clear", node)
    # Without --force: the rerun continues the unfinished bootstrap from its failed stage.
    fixed = manage(converged, "bootstrap", "--no-input", "--only", stage)
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-2000:]
    assert {state for state, _, _ in inventory(converged).values()} == {"ready"}


def test_a_bmc_certificate_from_another_ca_fails_the_firmware_stage(converged):
    import certifi

    ca = converged / "simulation" / "ca" / "ca.pem"
    ours = ca.read_bytes()
    ca.write_bytes(Path(certifi.where()).read_bytes())  # trusted: the public CAs, not the BMCs' own
    try:
        faulty = manage(converged, "bootstrap", "--no-input", "--only", "firmware", "--force")
    finally:
        ca.write_bytes(ours)
    assert faulty.returncode == 1
    found = failures(converged)
    assert set(found) == {"gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"}
    assert "certificate verify failed" in found["gpu01"][2].lower(), found["gpu01"]
    fixed = manage(converged, "bootstrap", "--no-input", "--only", "firmware")
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-2000:]


def test_bmc_faults_end_with_one_clear_message_and_a_resumable_run(converged):
    fresh_state = converged
    assert manage(fresh_state, "simulation", "fault", "inject", "gpu02", "bmc_wrong_password").returncode == 0
    assert manage(fresh_state, "simulation", "fault", "inject", "stor01", "bmc_down").returncode == 0

    faulty = manage(fresh_state, "bootstrap", "--no-input", "--only", "firmware", "--force", timeout=600)
    assert faulty.returncode == 1
    error = faulty.stderr.strip().splitlines()
    assert "failed: stage firmware, host " in error[0], faulty.stderr
    assert "(and 1 more host failed)" in error[0]
    output = faulty.stdout
    assert "Failed: stage firmware, host " in output
    nodes = inventory(fresh_state)
    assert nodes["gpu02"][0] == "failed" and nodes["stor01"][0] == "failed"
    assert {nodes[n][0] for n in ("gpu01", "gpu03", "gpu04", "stor02", "mgmt01")} == {"ready"}
    assert "401" in nodes["gpu02"][1] or "auth" in nodes["gpu02"][1].lower(), nodes["gpu02"][1]

    assert manage(fresh_state, "simulation", "fault", "clear", "gpu02").returncode == 0
    assert manage(fresh_state, "simulation", "fault", "clear", "stor01").returncode == 0
    fixed = manage(fresh_state, "bootstrap", "--no-input", "--only", "firmware", timeout=600)
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-2000:]
    assert {state for state, _, _ in inventory(fresh_state).values()} == {"ready"}


KILLED_RUN = """
import json
from appliance.provisioning.models import Run
killed = Run.objects.order_by("-pk")[1]
print(json.dumps([killed.state, killed.message]))
"""


def test_kill_9_during_a_stage_then_rerun_finishes(converged):
    fresh_state = converged
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(fresh_state)}
    env.pop("DATABASE_URL", None)
    installed = INSTALLED["appliance"]
    # Two stages are enough to be killed in the second and resume it (the other stages' minutes would only
    # repeat what test_bootstrap_the_demo_appliance ran twice).
    process = subprocess.Popen([str(installed.command), "bootstrap", "--no-input", "--force", "--only", "firmware,os"],
                               cwd=installed.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + 180
    for line in process.stdout:
        seen.append(line)
        if line.strip().startswith("firmware") and " ok " in line:
            break  # the os stage is now running
        assert time.monotonic() < deadline, "".join(seen)
    time.sleep(1.5)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    rerun = manage(fresh_state, "bootstrap", "--no-input", "--only", "firmware,os", timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    # The dead run was failed by a watchdog: the bootstrap's own, which says so, or the running demo's beat (its
    # portal is also the beat), whichever came first.
    killed = manage(fresh_state, "shell", "-c", KILLED_RUN)
    assert killed.returncode == 0, killed.stderr
    state, message = json.loads(killed.stdout.strip().splitlines()[-1])
    assert (state, message.startswith("worker died: ")) == ("failed", True), (state, message)
    assert ("left running by a worker that died; marked failed" in rerun.stdout) == (
        f"marked failed ({message})" in rerun.stdout)
    assert "already completed: firmware (--force reruns them)" in rerun.stdout
    assert "stages firmware, os on appliance demo" in rerun.stdout
    nodes = inventory(fresh_state)
    assert {state for state, _, _ in nodes.values()} == {"ready"}, nodes
    verify = manage(fresh_state, "audit", "verify", "--database")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "intact" in verify.stdout
