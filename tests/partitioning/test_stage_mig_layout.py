"""The partitioning stage's NVML reconciliation (module_utils/appliance_nvml.py, used by the mig_layout
module) on one simulated node: pynvml's own code against the simulated library, as on the node."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.partitioning import profiles
from appliance.simulation import services
from appliance.simulation import state as node_state
from tests.simulation.conftest import free_port, make_appliance, prepared, run_tool, sim_settings  # noqa: F401

MODULE_UTILS = (Path(__file__).resolve().parents[2]
                / "playbooks/collections/ansible_collections/appliance/hgx/plugins/module_utils")
PROFILES = {p.name: {"nvml_profile": p.nvml_profile, "compute_slices": p.compute_slices}
            for p in profiles.model("h100-80gb").profiles}

# Runs as the module does: reconcile (or, with "check", only diff) each GPU, then read the records back.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import appliance_nvml as a
request = json.loads(sys.argv[2])
out = {"diff": {}, "records": []}
with a.nvml_session() as n:
    for key, target in sorted(request["gpus"].items()):
        h = n.nvmlDeviceGetHandleByIndex(int(key))
        try:
            if request["check"]:
                out["diff"][key] = a.gpu_diff(n, h, target, request["profiles"])
            else:
                out["diff"][key] = a.reconcile_gpu(n, h, int(key), target, request["profiles"])
        except a.MigLayoutError as exc:
            out["error"] = str(exc)
        out["records"] += a.mig_records(n, h, int(key), request["profiles"])
print(json.dumps(out))
"""

MIXED = [{"profile": "2g.20gb", "start": 0}, {"profile": "1g.10gb", "start": 2},
         {"profile": "1g.10gb", "start": 3}, {"profile": "3g.40gb", "start": 4}]


def reconcile(node, gpus, check=False) -> dict:
    environment = {**os.environ, **services.node_environment(node)}
    request = json.dumps({"gpus": gpus, "profiles": PROFILES, "check": check})
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(MODULE_UTILS), request], capture_output=True,
                            text=True, env=environment, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def node(prepared, run_tool):  # noqa: F811 (the fixtures imported above)
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    return prepared


def layout_in_state(node, index: int) -> list:
    gpu = node_state.load(node.sysroot)["gpus"][index]
    if not gpu["mig"]["current"]:
        return None
    return sorted((gi["profile"], gi["placement_start"], len(gi["compute_instances"]))
                  for gi in gpu["mig"]["gpu_instances"])


def test_mixed_layout_created_with_placements_then_nothing_to_do(node):
    dry = reconcile(node, {"0": {"mig": MIXED}}, check=True)
    assert dry["diff"]["0"] == {"destroy": [], "complete": [], "mig_mode": "enable",
                                "create": [{"profile": "2g.20gb", "start": 0}, {"profile": "1g.10gb", "start": 2},
                                           {"profile": "1g.10gb", "start": 3}, {"profile": "3g.40gb", "start": 4}]}
    assert layout_in_state(node, 0) is None  # the dry run changed nothing

    applied = reconcile(node, {"0": {"mig": MIXED}})
    assert "error" not in applied
    assert layout_in_state(node, 0) == [("1g.10gb", 2, 1), ("1g.10gb", 3, 1), ("2g.20gb", 0, 1), ("3g.40gb", 4, 1)]
    records = applied["records"]
    assert [(r["gpu"], r["profile"], r["start"], r["compute_instance"]) for r in records] == [
        (0, "2g.20gb", 0, 0), (0, "1g.10gb", 2, 0), (0, "1g.10gb", 3, 0), (0, "3g.40gb", 4, 0)]
    state = node_state.load(node.sysroot)["gpus"][0]["mig"]["gpu_instances"]
    uuids = {gi["placement_start"]: gi["compute_instances"][0]["uuid"] for gi in state}
    assert [r["uuid"] for r in records] == [uuids[0], uuids[2], uuids[3], uuids[4]]
    assert all(r["uuid"].startswith("MIG-") for r in records)

    again = reconcile(node, {"0": {"mig": MIXED}})
    assert again["diff"]["0"] == {"destroy": [], "create": [], "complete": [], "mig_mode": None}
    assert again["records"] == records


def test_changed_target_destroys_only_what_differs_and_whole_gpu_turns_mig_off(node):
    reconcile(node, {"0": {"mig": MIXED}})
    kept = {r["start"]: r["gpu_instance"] for r in reconcile(node, {"0": {"mig": MIXED}})["records"]}
    target = [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]
    changed = reconcile(node, {"0": {"mig": target}})
    assert [(d["profile"], d["start"]) for d in changed["diff"]["0"]["destroy"]] == [
        ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]
    assert changed["diff"]["0"]["create"] == [{"profile": "3g.40gb", "start": 0}]
    assert layout_in_state(node, 0) == [("3g.40gb", 0, 1), ("3g.40gb", 4, 1)]
    # The instance both layouts have was kept, not recreated.
    assert {r["start"]: r["gpu_instance"] for r in changed["records"]}[4] == kept[4]

    whole = reconcile(node, {"0": {"mig": None}})
    assert whole["diff"]["0"]["mig_mode"] == "disable" and len(whole["diff"]["0"]["destroy"]) == 2
    assert layout_in_state(node, 0) is None and whole["records"] == []


def test_a_run_killed_between_gpu_and_compute_instance_is_finished_by_the_next(node, run_tool):  # noqa: F811
    # What a kill -9 after nvmlDeviceCreateGpuInstanceWithPlacement leaves: a GPU instance without its
    # compute instance (made here with the simulated nvidia-smi, as an operator would).
    run_tool("nvidia-smi", "-i", "0", "-mig", "1")
    run_tool("nvidia-smi", "mig", "-i", "0", "-cgi", "9")
    half = layout_in_state(node, 0)
    assert half == [("3g.40gb", 0, 0)]
    finished = reconcile(node, {"0": {"mig": [{"profile": "3g.40gb", "start": 0}]}})
    assert finished["diff"]["0"]["complete"] == [{"profile": "3g.40gb", "start": 0,
                                                  "gpu_instance": finished["records"][0]["gpu_instance"]}]
    assert layout_in_state(node, 0) == [("3g.40gb", 0, 1)]
