"""A simulated HGX H100 node with its NVIDIA driver loaded and the workload model's load on it: what a
collector reads in the telemetry tests and benchmarks (no database: the node's sysroot and state only)."""

from __future__ import annotations

import time
from pathlib import Path

from appliance.inventory.platforms import load_platform
from appliance.simulation import hardware, workload
from appliance.simulation import state as node_state
from appliance.simulation.workload import Model, NodeSpec

OWNERS = {"0": {"kind": "slurm", "job": "41", "user": "alice", "name": "llm-pretrain"},
          "1": {"kind": "slurm", "job": "41", "user": "alice", "name": "llm-pretrain"},
          "7": {"kind": "inference", "service": "chat-7b"}}


def make_node(sysroot: Path, name: str = "gpu01", profile: str = "input-bound", interval: int = 5) -> dict:
    """Create the node's state, load the driver (as the gpu stage leaves it) and apply two intervals of
    `profile` ten seconds apart, as the workload driver writes them. Returns the last interval's load."""
    spec = load_platform("hgx-h100-8gpu").spec
    state = hardware.factory_state(name, "training", spec, {})
    state["modules"] = [module for module in state["modules"] if module not in ("drm", "nouveau")] + ["nvidia"]
    state["driver"] = {"version": "550.127.08", "cuda_version": "12.4", "cuda_version_int": 12040}
    state["mounts"].append({"source": "10.10.1.1@o2ib:/scratch", "target": "/mnt/scratch", "fstype": "lustre",
                            "options": ["rw", "flock"]})
    sysroot.mkdir(parents=True, exist_ok=True)
    node_state.create(sysroot, state)
    node = NodeSpec(name, "training", 8, sysroot=str(sysroot))
    load = Model(profile, 11, (node,), training_mount="/mnt/scratch").node_load(node, interval)
    now = time.time_ns()
    with node_state.update(sysroot) as current:
        workload.apply(current, load, 0.0, now - 10 * 10**9, {})
    with node_state.update(sysroot) as current:
        workload.apply(current, load, 10.0, now, OWNERS)
    return load
