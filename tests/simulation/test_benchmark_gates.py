"""The NCCL and ib_write_bw acceptance gates at their thresholds: just below fails, at and just above
pass. The thresholds are the platform files' (firmware/platforms/), written here literally: NCCL
all_reduce bus bandwidth >= 460 GB/s on HGX H100 and >= 480 GB/s on HGX H200, ib_write_bw >= 380 Gb/s
per NDR port. The measurements come from the simulated node's nccl-tests and perftest, reached through
the PATH as on a real node, with a `bandwidth_low` fault setting the figure."""

import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from appliance.simulation import services

sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))

import appliance_fabric_acceptance as fabric  # noqa: E402

NCCL_GATES = {"hgx-h100-8gpu": 460, "hgx-h200-8gpu": 480}
IB_WRITE_BW_GATE = 380


@pytest.fixture(params=sorted(NCCL_GATES))
def gpu_node(request, make_appliance, run_tool, monkeypatch):
    """A simulated HGX node of each platform with its GPU and fabric stack up; this process acts on it."""
    appliance, (node,) = make_appliance(nodes=(("gpu01", request.param),))
    services.prepare_appliance(appliance)
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server", "nvidia-fabricmanager-550", "nccl-tests",
             "infiniband-diags", "perftest", node=node)
    run_tool("modprobe", "-r", "nouveau", node=node)
    for module in ("nvidia", "nvidia-peermem"):
        run_tool("modprobe", module, node=node)
    run_tool("systemctl", "enable", "--now", "nvidia-fabricmanager", node=node)
    for name, value in services.node_environment(node).items():
        monkeypatch.setenv(name, value)
    platform = yaml.safe_load((Path(settings.FIRMWARE_DIR) / "platforms" / f"{request.param}.yaml").read_text())
    return node, request.param, platform


def measured_at(node, test, value):
    services.clear_faults(node, "bandwidth_low")
    services.inject_fault(node, "bandwidth_low", test=test, value=value)


def test_the_platform_files_hold_the_gates_written_here():
    for slug, minimum in NCCL_GATES.items():
        acceptance = yaml.safe_load((Path(settings.FIRMWARE_DIR) / "platforms" / f"{slug}.yaml").read_text())["acceptance"]
        assert acceptance["nccl_all_reduce_busbw_gbs"]["min"] == minimum
        assert acceptance["ib_write_bw_gbps"]["min"] == IB_WRITE_BW_GATE


def test_nccl_gate_just_below_at_and_just_above(gpu_node):
    node, slug, platform = gpu_node
    gate = NCCL_GATES[slug]
    ctx = fabric.FabricContext(node.name, sysroot=node.sysroot, platform=platform, tools=fabric.Tools())
    for value, passed in [(gate - 0.01, False), (gate, True), (gate + 0.01, True)]:
        measured_at(node, "all_reduce_perf", value)
        (record,) = fabric.nccl_checks(ctx)
        assert (record["check"], record["expected"], record["measured"], record["passed"]) == (
            "nccl.all_reduce_busbw", f">= {gate} GB/s", value, passed), record
        assert record["message"].endswith(f", below {gate} GB/s") is not passed, record["message"]


def test_ib_write_bw_gate_just_below_at_and_just_above(gpu_node):
    node, _, platform = gpu_node
    ctx = fabric.FabricContext(node.name, sysroot=node.sysroot, platform=platform, tools=fabric.Tools(),
                               ports=[{"device": "mlx5_3", "port": 1}])
    for value, passed in [(379.99, False), (380.0, True), (380.01, True)]:
        measured_at(node, "ib_write_bw", value)
        (record,) = fabric.ib_write_bw_checks(ctx)
        assert (record["check"], record["expected"], record["measured"], record["passed"]) == (
            "ib_write_bw.mlx5_3", ">= 380 Gb/s", value, passed), record
        assert record["message"].startswith(f"mlx5_3/1: {value} Gb/s average"), record["message"]
