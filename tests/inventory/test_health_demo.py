"""Node health on the simulated demo appliance, with the product's playbooks, as an operator meets it:
GPU 5 of gpu02 taken off the bus, the gpu stage marks it missing (the other seven ok) and gpu02 is not
Ready; rerunning only the `os` stage (which does not look at GPUs) leaves it failed with a short reason
naming GPU 5, while every other node returns to Ready; once the GPU is back, the gpu stage clears it.

The stages run through `manage.py bootstrap --only` in a process of its own on the embedded SQLite
database, as tests/provisioning/test_bootstrap_demo.py runs them, so this runs once, in the SQLite pass.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

ROOT = Path(settings.BASE_DIR)

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


def manage(state_dir: Path, *args, timeout=900) -> subprocess.CompletedProcess:
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(state_dir)}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def observe(state_dir: Path) -> dict:
    result = manage(state_dir, "shell", "-c", NODES_AND_HEALTH)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def demo(tmp_path):
    state = tmp_path / "state"
    first = manage(state, "bootstrap", "--no-input", "--only", "os,gpu", timeout=400)
    assert first.returncode == 0, first.stdout + first.stderr
    yield state
    manage(state, "simulation", "stop", timeout=60)


def test_a_missing_gpu_keeps_its_node_from_ready_until_a_stage_sees_it_again(demo):
    seen = observe(demo)
    assert {name: state for name, (state, _) in seen["nodes"].items()} == {
        "gpu01": "ready", "gpu02": "ready", "gpu03": "ready", "gpu04": "ready", "mgmt01": "ready",
        "stor01": "ready", "stor02": "ready"}
    assert {index: status for index, (status, _) in seen["gpu02"].items()} == {str(i): "ok" for i in range(8)}

    injected = manage(demo, "simulation", "fault", "inject", "gpu02", "gpu_missing", "index=5")
    assert injected.returncode == 0, injected.stderr
    gpu = manage(demo, "bootstrap", "--no-input", "--only", "gpu")
    assert gpu.returncode != 0
    seen = observe(demo)
    assert seen["gpu02"]["5"] == ["failing", "GPU 5 (0000:ab:00.0) missing: NVML does not list it"]
    assert {index: status for index, (status, _) in seen["gpu02"].items() if index != "5"} == {
        str(i): "ok" for i in range(8) if i != 5}
    assert seen["nodes"]["gpu02"][0] == "failed"
    assert seen["failures"]["gpu02"] == ["GPU 5 (0000:ab:00.0) missing: NVML does not list it"]

    # The os stage does not look at GPUs: it cannot clear GPU 5, and gpu02 stays failed, saying why.
    os_rerun = manage(demo, "bootstrap", "--no-input", "--only", "os")
    assert os_rerun.returncode == 0, os_rerun.stdout + os_rerun.stderr
    seen = observe(demo)
    state, reason = seen["nodes"]["gpu02"]
    assert state == "failed"
    assert "GPU 5 (0000:ab:00.0) missing: NVML does not list it" in reason and len(reason) < 300
    assert {name: state for name, (state, _) in seen["nodes"].items() if name != "gpu02"} == {
        "gpu01": "ready", "gpu03": "ready", "gpu04": "ready", "mgmt01": "ready", "stor01": "ready",
        "stor02": "ready"}

    cleared = manage(demo, "simulation", "fault", "clear", "gpu02")
    assert cleared.returncode == 0, cleared.stderr
    again = manage(demo, "bootstrap", "--no-input", "--only", "gpu")
    assert again.returncode == 0, again.stdout + again.stderr
    seen = observe(demo)
    assert seen["gpu02"]["5"][0] == "ok" and seen["nodes"]["gpu02"][0] == "ready"
    assert seen["failures"]["gpu02"] == []
