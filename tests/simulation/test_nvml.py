"""pynvml's own code runs on the simulated NVML library and sees the node's state."""

import json
import os
import subprocess
import sys

import pytest

from appliance.simulation import services
from appliance.simulation import state as node_state

PROBE = r"""
import ctypes, json, os, sys
ctypes.CDLL(os.environ["APPLIANCE_SIM_NVML"], mode=ctypes.RTLD_GLOBAL)
import pynvml as n
try:
    n.nvmlInit()
except n.NVMLError as exc:
    print(json.dumps({"init_error": exc.value})); sys.exit(0)
count = n.nvmlDeviceGetCount()
handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
h = handles[0]
out = {
    "count": count,
    "driver": n.nvmlSystemGetDriverVersion(),
    "cuda": n.nvmlSystemGetCudaDriverVersion(),
    "names": [n.nvmlDeviceGetName(x) for x in handles],
    "uuids": [n.nvmlDeviceGetUUID(x) for x in handles],
    "memory_mib": n.nvmlDeviceGetMemoryInfo(h).total // 2**20,
    "memory_v2_mib": n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2).total // 2**20,
    "bus_id": n.nvmlDeviceGetPciInfo(h).busId,
    "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(handles[3]))),
    "power_mw": n.nvmlDeviceGetPowerUsage(h),
    "limit_mw": n.nvmlDeviceGetPowerManagementLimit(h),
    "temperature": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    "utilization": n.nvmlDeviceGetUtilizationRates(h).gpu,
    "serial": n.nvmlDeviceGetSerial(h),
    "pcie": [n.nvmlDeviceGetCurrPcieLinkWidth(h), n.nvmlDeviceGetMaxPcieLinkGeneration(h)],
    "nvlink": [n.nvmlDeviceGetNvLinkState(h, link) for link in range(18)],
    "retired": len(n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
    "persistence_before": n.nvmlDeviceGetPersistenceMode(h),
}
n.nvmlDeviceSetPersistenceMode(h, n.NVML_FEATURE_ENABLED)
out["persistence_after"] = n.nvmlDeviceGetPersistenceMode(h)
n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
out["mig_mode"] = n.nvmlDeviceGetMigMode(h)
info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, n.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
out["profile"] = [info.id, info.sliceCount, info.instanceCount, info.memorySizeMB]
placements = (n.c_nvmlGpuInstancePlacement_t * 8)()
count_ref = ctypes.c_uint(8)
n.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, placements, ctypes.byref(count_ref))
out["placements"] = [(placements[i].start, placements[i].size) for i in range(count_ref.value)]
placement = n.c_nvmlGpuInstancePlacement_t(); placement.start = 4; placement.size = 4
# The C function takes a pointer to the placement (nvml.h): pynvml passes the argument through as given.
gi = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.byref(placement))
ci_info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                         n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
n.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
try:
    n.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.byref(placement))
    out["overlap"] = "accepted"
except n.NVMLError as exc:
    out["overlap"] = exc.value
instances = (n.c_nvmlGpuInstance_t * 8)()
gi_count = ctypes.c_uint(8)
n.nvmlDeviceGetGpuInstances(h, info.id, instances, ctypes.byref(gi_count))
out["gi_count"] = gi_count.value
mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
out["mig_uuid"] = n.nvmlDeviceGetUUID(mig)
out["mig_memory_mib"] = n.nvmlDeviceGetMemoryInfo(mig).total // 2**20
n.nvmlShutdown()
print(json.dumps(out))
"""


def probe(node) -> dict:
    environment = {**os.environ, **services.node_environment(node)}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment, check=False,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_nvml_fails_until_the_driver_is_loaded(prepared):
    assert probe(prepared) == {"init_error": 9}  # NVML_ERROR_DRIVER_NOT_LOADED


@pytest.fixture
def driver_loaded(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    return prepared


def test_pynvml_reads_the_profile_and_changes_mig(driver_loaded):
    result = probe(driver_loaded)
    state = node_state.load(driver_loaded.sysroot)
    assert result["count"] == 8
    assert result["names"] == ["NVIDIA H100 80GB HBM3"] * 8
    assert result["uuids"] == [gpu["uuid"] for gpu in state["gpus"]]
    assert result["memory_mib"] == result["memory_v2_mib"] == 81559
    assert result["driver"] == "550.90.07" and result["cuda"] == 12040
    assert result["bus_id"] == state["gpus"][0]["pci_bus_id"] and result["by_uuid"] == 3
    assert result["pcie"] == [16, 5] and result["nvlink"] == [1] * 18 and result["retired"] == 0
    assert (result["persistence_before"], result["persistence_after"]) == (0, 1)
    assert result["mig_mode"] == [1, 1]
    assert result["profile"][:3] == [9, 3, 2]
    assert result["placements"] == [[0, 4], [4, 4]]
    assert result["overlap"] == 23  # NVML_ERROR_INSUFFICIENT_RESOURCES
    assert result["gi_count"] == 1
    gpu0 = node_state.load(driver_loaded.sysroot)["gpus"][0]
    assert gpu0["persistence_mode"] and gpu0["mig"]["current"]
    [instance] = gpu0["mig"]["gpu_instances"]
    assert (instance["profile"], instance["placement_start"]) == ("3g.40gb", 4)
    assert result["mig_uuid"] == instance["compute_instances"][0]["uuid"]
    assert result["mig_memory_mib"] == 81559 // 2


def test_missing_gpu_fault_hides_it_from_nvml(driver_loaded):
    services.inject_fault(driver_loaded, "gpu_missing", index=5)
    result = probe(driver_loaded)
    assert result["count"] == 7
    assert node_state.load(driver_loaded.sysroot)["gpus"][5]["uuid"] not in result["uuids"]


def test_node_is_chosen_at_init_not_at_load(make_appliance, run_tool):
    appliance, (first, second) = make_appliance(nodes=(("gpu01", "hgx-h100-8gpu"), ("gpu02", "hgx-h100-8gpu")))
    services.prepare_appliance(appliance)
    for node in (first, second):
        run_tool("apt-get", "install", "-y", "nvidia-driver-550-server", node=node)
        run_tool("modprobe", "-r", "nouveau", node=node)
        run_tool("modprobe", "nvidia", node=node)
    script = r"""
import ctypes, json, os, sys
ctypes.CDLL(os.environ["APPLIANCE_SIM_NVML"], mode=ctypes.RTLD_GLOBAL)
import pynvml as n
seen = []
for root in sys.argv[1:]:
    os.environ["APPLIANCE_SIM_SYSROOT"] = root
    n.nvmlInit()
    seen.append(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(0)))
    n.nvmlShutdown()
print(json.dumps(seen))
"""
    environment = {**os.environ, **services.node_environment(first)}
    result = subprocess.run([sys.executable, "-c", script, first.sysroot, second.sysroot, first.sysroot],
                            capture_output=True, text=True, env=environment, check=True)
    uuids = [node_state.load(node.sysroot)["gpus"][0]["uuid"] for node in (first, second)]
    assert json.loads(result.stdout) == [uuids[0], uuids[1], uuids[0]]
    assert uuids[0] != uuids[1]
