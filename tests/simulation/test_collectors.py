"""The simulated nodes' telemetry collectors: one agent process per node, run with the node's own venv
and the package the monitoring stage deploys (laid out here as the telemetry contract's node layout),
writing raw points and per-minute rollups into a real VictoriaMetrics (it speaks InfluxDB's write API),
stopped with the rest of the simulation."""

import io
import json
import shutil
import subprocess
import sysconfig
import urllib.request
from pathlib import Path

import pytest
from django.core.management import call_command

from appliance.audit.models import AuditRecord
from appliance.simulation import collectors, ports, services
from tests.telemetry.simnode import make_node
from tests.telemetry.vmserver import VictoriaMetrics

# Collector agent processes and a real VictoriaMetrics are started: not the fast tier (tests/run --fast).
pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[2]
TELEMETRY = REPOSITORY / "appliance" / "telemetry"
# What the node_python role installs into a node's venv for the collector (the lock's pins, from the
# appliance's repository); copied here from the suite's environment, which holds the same versions.
NODE_PACKAGES = ("pynvml.py", "influxdb_client", "reactivex", "urllib3", "certifi", "dateutil", "six.py",
                 "typing_extensions.py", "prometheus_client")


def deploy(sysroot: Path, config: dict, token: str = "node-token") -> None:
    """The contract's node layout, as the monitoring stage leaves it."""
    package = sysroot / "opt/appliance/collector/appliance_collector"
    package.mkdir(parents=True)
    for name in ("__init__", "agent", "collector", "buffer", "sinks", "exposition", "rollup"):
        shutil.copy(TELEMETRY / f"{name}.py", package / f"{name}.py")
    venv = sysroot / "opt/appliance/python"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    target = Path(subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip())
    source = Path(sysconfig.get_paths()["purelib"])
    for name in NODE_PACKAGES:
        (shutil.copytree if (source / name).is_dir() else shutil.copy)(source / name, target / name)
    etc = sysroot / "etc/appliance"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "collector.json").write_text(json.dumps(config))
    (etc / "collector.token").write_text(token + "\n")
    (etc / "collector.token").chmod(0o600)


def node_config(name: str, sink_url: str, metrics_port: int) -> dict:
    return {"hostname": name, "interval_s": 0.5, "buffer_dir": "/var/lib/appliance/collector", "buffer_max_mib": 16,
            "appliance": {"url": sink_url, "token_file": "/etc/appliance/collector.token", "ca_file": ""},
            "influxdb": {"url": sink_url, "org": "appliance", "bucket": "telemetry", "token_file": ""},
            "metrics": {"address": "127.0.0.1", "port": metrics_port}}


@pytest.fixture
def victoria(tmp_path):
    server = VictoriaMetrics(tmp_path / "vm").start()
    yield server
    server.stop()


def test_before_the_monitoring_stage_a_node_has_no_collector_and_that_is_no_error(make_appliance):
    appliance, _ = make_appliance()
    assert services.start_collectors(appliance) == {"gpu01": "not deployed yet (the monitoring stage deploys it)"}
    assert services.collector_status(appliance)["gpu01"]["deployed"] is False
    assert not AuditRecord.objects.filter(event="simulation.collector.start").exists()


def test_without_the_node_venv_the_collector_does_not_start_on_the_suite_python(make_appliance, tmp_path):
    appliance, (node,) = make_appliance()
    etc = Path(node.sysroot) / "etc/appliance"
    etc.mkdir(parents=True)
    (etc / "collector.json").write_text(json.dumps(node_config("gpu01", "http://127.0.0.1:9", 0)))
    with pytest.raises(services.SimulationError) as raised:
        services.start_collectors(appliance)
    assert str(raised.value) == (f"gpu01: the node's Python {node.sysroot}/opt/appliance/python/bin/python is missing: "
                                 "the node_python role builds it (run the os stage, then monitoring)")
    assert collectors.running_pid("gpu01") is None


def test_a_collector_runs_on_the_node_venv_serves_metrics_sends_rollups_and_stops(make_appliance, victoria):
    appliance, (node,) = make_appliance()
    sysroot = Path(node.sysroot)
    make_node(sysroot)  # an H100 node with its driver loaded, jobs 41 (GPUs 0, 1) and chat-7b (GPU 7)
    port = ports.free_port()
    deploy(sysroot, node_config("gpu01", victoria.url, port))

    started = services.start_collectors(appliance)
    pid = started["gpu01"]
    assert isinstance(pid, int) and collectors.running_pid("gpu01") == pid
    # the node's own interpreter runs the deployed package, not the suite's
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert command[:3] == [str(sysroot / "opt/appliance/python/bin/python").encode(), b"-m",
                           b"appliance_collector.agent"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    utilization = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(utilization) == 8 and all('Hostname="gpu01"' in line for line in utilization)
    status = services.collector_status(appliance)["gpu01"]
    assert (status["deployed"], status["pid"], status["metrics"], status["answering"]) == (
        True, pid, f"127.0.0.1:{port}", True)
    assert services.start_collectors(appliance) == {"gpu01": pid}  # running: not started twice
    shown = io.StringIO()
    call_command("simulation", "status", stdout=shown)
    line = next(line for line in shown.getvalue().splitlines() if line.strip().startswith("gpu01"))
    assert line.endswith(f"collector pid {pid} /metrics 127.0.0.1:{port} answering"), line

    stopped = services.stop_collectors(appliance)
    assert stopped == {"gpu01": pid}
    assert collectors.running_pid("gpu01") is None and not Path(f"/proc/{pid}").exists()
    events = list(AuditRecord.objects.filter(event__startswith="simulation.collector.").values_list("event", "target_name"))
    assert events == [("simulation.collector.start", "gpu01"), ("simulation.collector.stop", "gpu01")]

    # what the stop drained: the minute begun as a partial rollup (per GPU, the job holding it), the raw sweeps
    # (the test's VictoriaMetrics names a series by its field alone: -influxSkipMeasurement)
    rollups = {series["metric"]["gpu"]: series for series in victoria.export('{__name__="util_max"}')}
    assert sorted(rollups, key=int) == [str(index) for index in range(8)]
    assert rollups["0"]["metric"]["hpc_job"] == "41" and rollups["7"]["metric"]["hpc_job"] == "chat-7b"
    assert "hpc_job" not in rollups["3"]["metric"]
    assert victoria.export('{__name__="gpus",Hostname="gpu01"}')[0]["values"][-1] == 8
    assert victoria.export('{__name__="sweeps",Hostname="gpu01"}')[0]["values"][-1] >= 1
    raw = victoria.export('{__name__="DCGM_FI_DEV_GPU_UTIL",Hostname="gpu01"}')
    assert len(raw) == 8
    assert (sysroot / "var/lib/appliance/collector/appliance.sqlite").is_file()


NOTHING = """
- name: Deploys nothing (the collector's files are put in place by the test)
  hosts: all
  gather_facts: false
  tasks:
    - name: Nothing to do
      ansible.builtin.meta: noop
"""


@pytest.fixture
def engine_appliance(make_appliance, tmp_path):
    from appliance.provisioning.catalogue import Catalogue, Stage

    playbook = tmp_path / "monitoring.yml"
    playbook.write_text(NOTHING)
    appliance, (node,) = make_appliance(nodes=(("mon-gpu01", "hgx-h100-8gpu"),))
    yield appliance, node, Catalogue([Stage("monitoring", str(playbook), "deploys nothing")])
    services.stop(appliance)


def test_after_the_monitoring_stage_the_run_starts_the_collectors_or_fails_naming_why(engine_appliance):
    from appliance.provisioning import services as provisioning
    from appliance.provisioning.models import Run
    from appliance.provisioning.states import RunState, StageState

    appliance, node, catalogue = engine_appliance
    sysroot = Path(node.sysroot)
    (sysroot / "etc/appliance").mkdir(parents=True)
    (sysroot / "etc/appliance/collector.json").write_text(json.dumps(node_config("mon-gpu01", "http://127.0.0.1:9", 0)))

    run = provisioning.create_run(appliance, kind=Run.Kind.STAGES, stages=["monitoring"], catalogue=catalogue)
    run = provisioning.execute_run(run.pk, catalogue=catalogue)

    assert run.state == RunState.FAILED
    stage = run.stage_runs.get()
    assert stage.state == StageState.FAILED
    assert stage.reason == (f"stage monitoring: the simulated nodes' collectors did not start: mon-gpu01: the node's "
                            f"Python {sysroot}/opt/appliance/python/bin/python is missing: the node_python role "
                            "builds it (run the os stage, then monitoring)")
    assert run.message == stage.reason

    # deployed now (as the stage would): a whole bootstrap starts the collector, then the demo workload,
    # which has no GPU node in a pool here, and the run says so
    (sysroot / "etc/appliance/collector.json").unlink()
    deploy(sysroot, node_config("mon-gpu01", "http://127.0.0.1:9/telemetry/ingest", ports.free_port()))
    run = provisioning.create_run(appliance, kind=Run.Kind.BOOTSTRAP, stages=["monitoring"], catalogue=catalogue)
    run = provisioning.execute_run(run.pk, catalogue=catalogue)

    assert run.stage_runs.get().state == StageState.SUCCEEDED, run.stage_runs.get().reason
    assert collectors.running_pid("mon-gpu01") is not None
    assert (run.state, run.message) == (RunState.FAILED, "the demo workload did not start: appliance sim: no prepared "
                                                         "GPU node in a pool (run the bootstrap first)")


def test_a_starting_agent_whose_environment_is_not_readable_yet_is_not_taken_for_one_that_exited(tmp_path, monkeypatch):
    # Right after exec the new program's /proc/<pid>/environ reads empty for a moment, so the state
    # directory's marker is not there yet: an agent started without it stands for one caught in that moment.
    monkeypatch.setattr(collectors, "collectors_dir", lambda: tmp_path)
    starting = subprocess.Popen(["sleep", "30"], env={"PATH": "/usr/bin:/bin"})
    try:
        collectors._wait_ready({"gpu01": starting.pid}, {"gpu01": {}})  # no /metrics: it outlived its start
        assert starting.poll() is None
    finally:
        starting.kill()
        starting.wait()


def test_an_agent_that_ends_at_start_is_reported_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(collectors, "collectors_dir", lambda: tmp_path)
    collectors.log_path("gpu01").write_text("ModuleNotFoundError: No module named 'appliance_collector'\n")
    ended = subprocess.Popen(["false"])
    with pytest.raises(collectors.CollectorsError, match=r"^gpu01: the collector exited at start \(log .*gpu01\.log: "
                                                         r"ModuleNotFoundError: No module named 'appliance_collector'\)$"):
        collectors._wait_ready({"gpu01": ended.pid}, {"gpu01": {}})
