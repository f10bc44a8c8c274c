"""MIG on a simulated HGX H100 node through pynvml (the maintained binding, unchanged) against the simulated
NVML library: the profiles of the one table (appliance/partitioning/profiles.py, h100-80gb), placements,
a 2g+1g+1g+3g layout with compute instances and MIG devices, and every refusal real NVML gives, with its
NVML return code. The expected values are written out from NVIDIA's MIG user guide (H100 profiles) and
nvml.h, not read from the table."""

import json
import os
import subprocess
import sys

import pytest

from appliance.simulation import services
from appliance.simulation import state as node_state

# nvml.h return codes
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, IN_USE, INSUFFICIENT_RESOURCES = 0, 2, 3, 19, 23

PROBE = r"""
import ctypes, json, os, sys
ctypes.CDLL(os.environ["APPLIANCE_SIM_NVML"], mode=ctypes.RTLD_GLOBAL)
import pynvml as n

def attempt(call, *args):
    try:
        value = call(*args)
        return {"ok": value if isinstance(value, (int, str, list, dict)) or value is None else True}
    except n.NVMLError as exc:
        return {"error": exc.value}

def placement(start, size):
    value = n.c_nvmlGpuInstancePlacement_t()
    value.start, value.size = start, size
    return ctypes.byref(value)

def create(h, profile_id, start, size):
    try:
        return n.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, placement(start, size)), SUCCESS
    except n.NVMLError as exc:
        return None, exc.value

def full_compute(gi):
    info = n.nvmlGpuInstanceGetInfo(gi)
    slices = {19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}[info.profileId]
    profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]
    ci_info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    return n.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)

SUCCESS = 0
phase = sys.argv[1]
n.nvmlInit()
out = {}
h0, h1, h2 = (n.nvmlDeviceGetHandleByIndex(i) for i in range(3))
if phase == "layout":
    # Profiles are known whatever the MIG mode; instances need it.
    infos = {}
    for profile in range(10):
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfoV(h0, profile)
            infos[profile] = [info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount, info.copyEngineCount,
                              info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount, info.memorySizeMB,
                              info.name.decode() if isinstance(info.name, bytes) else info.name]
        except n.NVMLError as exc:
            infos[profile] = exc.value
    out["infos"] = infos
    out["mig_off_create"] = create(h2, 19, 0, 1)[1]
    count = ctypes.c_uint(8)
    out["mig_off_placements"] = attempt(n.nvmlDeviceGetGpuInstancePossiblePlacements, h2, 19, None, ctypes.byref(count))

    n.nvmlDeviceSetMigMode(h0, n.NVML_DEVICE_MIG_ENABLE)
    placements = {}
    for profile_id in (19, 20, 15, 14, 9, 5, 0):
        buffer = (n.c_nvmlGpuInstancePlacement_t * 8)()
        count = ctypes.c_uint(8)
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h0, profile_id, buffer, ctypes.byref(count))
        placements[profile_id] = [[buffer[i].start, buffer[i].size] for i in range(count.value)]
    out["placements"] = placements

    # GPU 0: 2g.20gb at 0, 1g.10gb at 2 and 3, 3g.40gb at 4; a compute instance over each.
    layout = []
    for profile_id, start, size in ((14, 0, 2), (19, 2, 1), (19, 3, 1), (9, 4, 4)):
        gi, code = create(h0, profile_id, start, size)
        assert code == SUCCESS, (profile_id, start, code)
        ci = full_compute(gi)
        gi_info, ci_info = n.nvmlGpuInstanceGetInfo(gi), n.nvmlComputeInstanceGetInfo(ci)
        layout.append({"gi": gi_info.id, "profile": gi_info.profileId, "start": gi_info.placement.start,
                       "size": gi_info.placement.size, "ci": ci_info.id, "ci_profile": ci_info.profileId,
                       "ci_slices": ci_info.placement.size})
    out["layout"] = layout
    out["remaining"] = {p: n.nvmlDeviceGetGpuInstanceRemainingCapacity(h0, p) for p in (19, 20, 15, 14, 9, 5, 0)}
    out["overlap"] = create(h0, 19, 2, 1)[1]
    devices = []
    for index in range(n.nvmlDeviceGetMaxMigDeviceCount(h0)):
        try:
            mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h0, index)
        except n.NVMLError as exc:
            devices.append(exc.value)
            continue
        devices.append({"uuid": n.nvmlDeviceGetUUID(mig), "gi": n.nvmlDeviceGetGpuInstanceId(mig),
                        "ci": n.nvmlDeviceGetComputeInstanceId(mig), "is_mig": n.nvmlDeviceIsMigDeviceHandle(mig).value,
                        "memory_mib": n.nvmlDeviceGetMemoryInfo(mig).total // 2**20,
                        "parent": n.nvmlDeviceGetUUID(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig))})
    out["devices"] = devices

if phase == "refusals":
    # GPU 1: the refusals.
    n.nvmlDeviceSetMigMode(h1, n.NVML_DEVICE_MIG_ENABLE)
    out["bad_placement"] = create(h1, 9, 2, 4)[1]                  # 3g.40gb starts at 0 or 4 only
    me, out["first_me"] = create(h1, 20, 0, 1)
    out["second_me"] = create(h1, 20, 1, 1)[1]                     # one +me instance per GPU
    out["me_remaining"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h1, 20)
    out["one_g_remaining"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h1, 19)
    out["over_me"] = create(h1, 19, 0, 1)[1]                       # overlaps the +me instance
    me_ci = full_compute(me)
    out["destroy_gi_with_ci"] = attempt(n.nvmlGpuInstanceDestroy, me)
    out["disable_with_instances"] = attempt(n.nvmlDeviceSetMigMode, h1, n.NVML_DEVICE_MIG_DISABLE)
    out["destroy_ci"] = attempt(n.nvmlComputeInstanceDestroy, me_ci)
    out["destroy_gi"] = attempt(n.nvmlGpuInstanceDestroy, me)
    out["disable"] = attempt(n.nvmlDeviceSetMigMode, h1, n.NVML_DEVICE_MIG_DISABLE)
    out["mig_mode_1"] = list(n.nvmlDeviceGetMigMode(h1))

if phase == "library-only":
    # GPU 1 holds a 1g.10gb+me instance at 0 with a compute instance; the state's writer is unreachable.
    me = n.nvmlDeviceGetGpuInstanceById(h1, 1)
    out["bad_placement"] = create(h1, 9, 2, 4)[1]
    out["second_me"] = create(h1, 20, 1, 1)[1]
    out["overlap"] = create(h1, 19, 0, 1)[1]
    out["destroy_gi_with_ci"] = attempt(n.nvmlGpuInstanceDestroy, me)
    out["disable_with_instances"] = attempt(n.nvmlDeviceSetMigMode, h1, n.NVML_DEVICE_MIG_DISABLE)
    out["mig_off"] = create(h2, 19, 0, 1)[1]
    out["allowed"] = create(h1, 19, 1, 1)[1]

if phase == "teardown":
    # GPU 0 back to nothing: compute instances first, then GPU instances.
    for profile_id in (14, 19, 9):
        gis = (n.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(8)
        n.nvmlDeviceGetGpuInstances(h0, profile_id, gis, ctypes.byref(count))
        for g in range(count.value):
            cis = (n.c_nvmlComputeInstance_t * 8)()
            ci_count = ctypes.c_uint(8)
            for ci_profile in range(5):
                n.nvmlGpuInstanceGetComputeInstances(gis[g], ci_profile, cis, ctypes.byref(ci_count))
                for c in range(ci_count.value):
                    n.nvmlComputeInstanceDestroy(cis[c])
            n.nvmlGpuInstanceDestroy(gis[g])
n.nvmlShutdown()
print(json.dumps(out))
"""


def probe(node, phase: str) -> dict:
    environment = {**os.environ, **services.node_environment(node)}
    result = subprocess.run([sys.executable, "-c", PROBE, phase], capture_output=True, text=True, env=environment, check=False,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def driver_loaded(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    return prepared


# NVML_GPU_INSTANCE_PROFILE_* -> [id, slices, instances, SMs, copy engines, decoders, encoders, JPEG, OFA,
# memory MiB (81559 MiB * memory slices / 8), name]: H100 80GB HBM3 (MIG user guide, H100 profiles).
H100_PROFILES = {
    "0": [19, 1, 7, 16, 1, 1, 0, 1, 0, 10194, "MIG 1g.10gb"],
    "1": [14, 2, 3, 32, 2, 2, 0, 2, 0, 20389, "MIG 2g.20gb"],
    "2": [9, 3, 2, 60, 3, 3, 0, 3, 0, 40779, "MIG 3g.40gb"],
    "3": [5, 4, 1, 64, 4, 4, 0, 4, 0, 40779, "MIG 4g.40gb"],
    "4": [0, 7, 1, 132, 8, 7, 0, 7, 1, 81559, "MIG 7g.80gb"],
    "5": NOT_SUPPORTED,  # NVML_GPU_INSTANCE_PROFILE_6_SLICE: not on H100
    "6": NOT_SUPPORTED,  # NVML_GPU_INSTANCE_PROFILE_8_SLICE: not on H100
    "7": [20, 1, 1, 16, 1, 7, 0, 7, 1, 10194, "MIG 1g.10gb+me"],  # media extensions: every decoder and JPEG, the OFA
    "8": NOT_SUPPORTED,  # NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 (2g+me, A30): not on H100
    "9": [15, 1, 4, 16, 1, 1, 0, 1, 0, 20389, "MIG 1g.20gb"],
}


def test_pynvml_sees_the_h100_profiles_and_makes_a_mig_layout(driver_loaded):
    result = probe(driver_loaded, "layout")
    assert result["infos"] == H100_PROFILES
    assert result["mig_off_create"] == NOT_SUPPORTED
    assert result["mig_off_placements"] == {"error": NOT_SUPPORTED}
    assert result["placements"] == {
        "19": [[0, 1], [1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [6, 1]],
        "20": [[0, 1], [1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [6, 1]],
        "15": [[0, 2], [2, 2], [4, 2], [6, 2]],
        "14": [[0, 2], [2, 2], [4, 2]],
        "9": [[0, 4], [4, 4]],
        "5": [[0, 4]],
        "0": [[0, 8]],
    }
    # GPU instance ids in creation order; each compute instance takes its GPU instance's compute slices
    # (NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE is 0, _2_SLICE 1, _3_SLICE 2).
    assert result["layout"] == [
        {"gi": 1, "profile": 14, "start": 0, "size": 2, "ci": 0, "ci_profile": 1, "ci_slices": 2},
        {"gi": 2, "profile": 19, "start": 2, "size": 1, "ci": 0, "ci_profile": 0, "ci_slices": 1},
        {"gi": 3, "profile": 19, "start": 3, "size": 1, "ci": 0, "ci_profile": 0, "ci_slices": 1},
        {"gi": 4, "profile": 9, "start": 4, "size": 4, "ci": 0, "ci_profile": 2, "ci_slices": 3},
    ]
    # Every memory slice is taken: nothing more fits, and a 1g.10gb over the first one is refused.
    assert result["remaining"] == {"19": 0, "20": 0, "15": 0, "14": 0, "9": 0, "5": 0, "0": 0}
    assert result["overlap"] == INSUFFICIENT_RESOURCES

    gpu0 = node_state.load(driver_loaded.sysroot)["gpus"][0]
    assert gpu0["mig"]["current"] is True
    assert [(gi["id"], gi["profile"], gi["placement_start"], gi["placement_size"]) for gi in gpu0["mig"]["gpu_instances"]] == [
        (1, "2g.20gb", 0, 2), (2, "1g.10gb", 2, 1), (3, "1g.10gb", 3, 1), (4, "3g.40gb", 4, 4)]
    uuids = {(gi["id"], ci["id"]): ci["uuid"] for gi in gpu0["mig"]["gpu_instances"] for ci in gi["compute_instances"]}
    assert len(set(uuids.values())) == 4 and all(uuid.startswith("MIG-") for uuid in uuids.values())
    devices, missing = result["devices"][:4], result["devices"][4:]
    assert [(d["gi"], d["ci"], d["is_mig"], d["memory_mib"]) for d in devices] == [
        (1, 0, 1, 20389), (2, 0, 1, 10194), (3, 0, 1, 10194), (4, 0, 1, 40779)]
    assert [d["uuid"] for d in devices] == [uuids[1, 0], uuids[2, 0], uuids[3, 0], uuids[4, 0]]
    assert {d["parent"] for d in devices} == {gpu0["uuid"]}
    assert missing == [6, 6, 6]  # NVML_ERROR_NOT_FOUND past the last MIG device (7 at most on H100)

    # Destroyed again, compute instances first: no instance left, MIG mode stays on.
    assert probe(driver_loaded, "teardown") == {}
    gpu0 = node_state.load(driver_loaded.sysroot)["gpus"][0]
    assert gpu0["mig"]["gpu_instances"] == [] and gpu0["mig"]["current"] is True


def test_pynvml_gets_the_refusals_real_nvml_gives(driver_loaded):
    result = probe(driver_loaded, "refusals")
    assert result["bad_placement"] == INVALID_ARGUMENT
    assert result["first_me"] == SUCCESS
    assert result["second_me"] == INSUFFICIENT_RESOURCES
    assert (result["me_remaining"], result["one_g_remaining"]) == (0, 6)
    assert result["over_me"] == INSUFFICIENT_RESOURCES
    assert result["destroy_gi_with_ci"] == {"error": IN_USE}
    assert result["disable_with_instances"] == {"error": IN_USE}
    assert result["destroy_ci"] == result["destroy_gi"] == result["disable"] == {"ok": SUCCESS}
    assert result["mig_mode_1"] == [0, 0]
    gpu1 = node_state.load(driver_loaded.sysroot)["gpus"][1]
    assert (gpu1["mig"]["current"], gpu1["mig"]["pending"], gpu1["mig"]["gpu_instances"]) == (False, False, [])


def test_the_library_refuses_before_it_writes(driver_loaded, run_tool, sim_settings):
    """simnvml.c checks what real NVML refuses itself, before it runs the simulation's writer: with the
    writer (nvml_apply.py in the node's copy of the simulated commands) gone, the refusals keep their codes
    and only an allowed request reaches the writer, and fails."""
    run_tool("nvidia-smi", "-i", "1", "-mig", "1")
    run_tool("nvidia-smi", "mig", "-i", "1", "-cgi", "1g.10gb+me:0", "-C")
    writer = sim_settings.SIMULATION_DIR / "tools" / "appliance" / "simulation" / "nvml_apply.py"
    writer.rename(writer.with_suffix(".away"))
    try:
        result = probe(driver_loaded, "library-only")
    finally:
        writer.with_suffix(".away").rename(writer)
    assert result == {"bad_placement": INVALID_ARGUMENT, "second_me": INSUFFICIENT_RESOURCES,
                      "overlap": INSUFFICIENT_RESOURCES, "destroy_gi_with_ci": {"error": IN_USE},
                      "disable_with_instances": {"error": IN_USE}, "mig_off": NOT_SUPPORTED,
                      "allowed": 999}  # NVML_ERROR_UNKNOWN: the writer could not run
