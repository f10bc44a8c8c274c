"""The simulated GPU's MIG rules in Python (gpu_ops, shared by the simulated nvidia-smi and the NVML
library's writes), the profiles a platform's gpu.mig_model gives a node, the platform file's check of
that field, and nvidia-smi mig -lgip / -lgipp. Expected values are NVIDIA's (MIG user guide, H100)."""

import shutil

import pytest

from appliance.inventory.platforms import load_platform
from appliance.inventory.sitedef import SiteValidationError
from appliance.simulation import gpu_ops, hardware
from appliance.simulation import state as node_state


@pytest.fixture
def h100_state():
    state = hardware.factory_state("gpu09", "training", load_platform("hgx-h100-8gpu").spec, {})
    gpu_ops.set_mig_mode(state, 0, True)
    return state


def refusal(call, *args) -> tuple[int, str]:
    with pytest.raises(gpu_ops.GpuError) as caught:
        call(*args)
    return caught.value.code, caught.value.message


def test_profiles_of_an_h100_node_come_from_the_table():
    state = hardware.factory_state("gpu09", "training", load_platform("hgx-h100-8gpu").spec, {})
    profiles = state["gpus"][0]["mig"]["profiles"]
    assert [(p["name"], p["nvml_profile"], p["id"], p["compute_slices"], p["memory_slices"], p["max"], p["placements"],
             p["memory_mib"], p["multiprocessors"], p["media_extensions"]) for p in profiles] == [
        ("1g.10gb", 0x0, 19, 1, 1, 7, [0, 1, 2, 3, 4, 5, 6], 10194, 16, False),
        ("1g.10gb+me", 0x7, 20, 1, 1, 1, [0, 1, 2, 3, 4, 5, 6], 10194, 16, True),
        ("1g.20gb", 0x9, 15, 1, 2, 4, [0, 2, 4, 6], 20389, 16, False),
        ("2g.20gb", 0x1, 14, 2, 2, 3, [0, 2, 4], 20389, 32, False),
        ("3g.40gb", 0x2, 9, 3, 4, 2, [0, 4], 40779, 60, False),
        ("4g.40gb", 0x3, 5, 4, 4, 1, [0], 40779, 64, False),
        ("7g.80gb", 0x4, 0, 7, 8, 1, [0], 81559, 132, False),
    ]
    h200 = hardware.factory_state("gpu10", "training", load_platform("hgx-h200-8gpu").spec, {})
    assert [p["name"] for p in h200["gpus"][0]["mig"]["profiles"]] == [
        "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]


def test_gpu_ops_refuses_what_nvml_refuses(h100_state):
    state = h100_state
    assert refusal(gpu_ops.create_gpu_instance, state, 1, 19, 0)[0] == gpu_ops.NVML_ERROR_NOT_SUPPORTED  # MIG off
    code, message = refusal(gpu_ops.create_gpu_instance, state, 0, 9, 2)
    assert code == gpu_ops.NVML_ERROR_INVALID_ARGUMENT and "cannot start at memory slice 2 (allowed: [0, 4])" in message
    me = gpu_ops.create_gpu_instance(state, 0, 20, 6)
    code, message = refusal(gpu_ops.create_gpu_instance, state, 0, 20, 5)
    assert code == gpu_ops.NVML_ERROR_INSUFFICIENT_RESOURCES
    code, message = refusal(gpu_ops.create_gpu_instance, state, 0, 19, 6)
    assert code == gpu_ops.NVML_ERROR_INSUFFICIENT_RESOURCES and "overlaps" in message
    gpu_ops.create_compute_instance(state, 0, me)
    code, message = refusal(gpu_ops.destroy_gpu_instance, state, 0, me)
    assert code == gpu_ops.NVML_ERROR_IN_USE and "still has compute instances" in message
    code, message = refusal(gpu_ops.set_mig_mode, state, 0, False)
    assert code == gpu_ops.NVML_ERROR_IN_USE and "destroy them before disabling MIG mode" in message
    gpu_ops.destroy_compute_instance(state, 0, me, 0)
    gpu_ops.destroy_gpu_instance(state, 0, me)
    assert gpu_ops.set_mig_mode(state, 0, False) is True
    assert state["gpus"][0]["mig"]["gpu_instances"] == []


def test_one_media_instance_per_gpu_even_where_a_profile_allows_more(h100_state):
    # A board with two +me profiles (A30: 1g.6gb+me and 2g.12gb+me): the rule is per GPU, not per profile.
    state = h100_state
    profiles = state["gpus"][0]["mig"]["profiles"]
    me = next(p for p in profiles if p["name"] == "1g.10gb+me")
    profiles.append({**me, "name": "2g.20gb+me", "nvml_profile": 0x8, "id": 21, "compute_slices": 2,
                     "memory_slices": 2, "placements": [0, 2, 4]})
    gpu_ops.create_gpu_instance(state, 0, 20, 6)
    code, message = refusal(gpu_ops.create_gpu_instance, state, 0, 21, 0)
    assert code == gpu_ops.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert message == "GPU 0: GPU instance 1 (1g.10gb+me) already holds the media extensions; one instance per GPU may"
    assert gpu_ops.remaining_capacity(state["gpus"][0], profiles[-1]) == 0


@pytest.fixture
def firmware_copy(settings, tmp_path):
    shutil.copytree(settings.FIRMWARE_DIR, tmp_path / "firmware")
    settings.FIRMWARE_DIR = tmp_path / "firmware"
    return tmp_path / "firmware" / "platforms" / "hgx-h100-8gpu.yaml"


def test_platform_names_its_mig_model_from_the_table(firmware_copy):
    text = firmware_copy.read_text()
    firmware_copy.write_text(text.replace("mig_model: h100-80gb", "mig_model: h100-96gb"))
    with pytest.raises(SiteValidationError) as caught:
        load_platform("hgx-h100-8gpu")
    [error] = caught.value.errors
    assert str(error).endswith("hgx-h100-8gpu.yaml:24: gpu.mig_model: 'h100-96gb' is not one of: a100-40gb, "
                               "a100-80gb, h100-80gb, h100-nvl, h200, b200")
    firmware_copy.write_text(text.replace("mig_model: h100-80gb", "mig_model: h200"))
    with pytest.raises(SiteValidationError, match=r"hgx-h100-8gpu.yaml:24: gpu.mig_model: is 'h200', whose GPUs NVML "
                                                  r"names 'NVIDIA H200', 'NVIDIA H200 141GB HBM3e', but gpu.model is "
                                                  r"'NVIDIA H100 80GB HBM3'"):
        load_platform("hgx-h100-8gpu")
    firmware_copy.write_text(text.replace("  mig_model: h100-80gb", "  # no mig_model"))
    with pytest.raises(SiteValidationError, match=r"hgx-h100-8gpu.yaml:\d+: gpu: mig_capable is true but mig_model is "
                                                  r"missing \(one of: a100-40gb, "):
        load_platform("hgx-h100-8gpu")


def test_hardware_refuses_an_unknown_mig_model():
    with pytest.raises(hardware.PlatformError, match=r"^gpu.mig_model: unknown GPU model 'h100-96gb'"):
        hardware.mig_profiles({"mig_capable": True, "mig_model": "h100-96gb", "memory_mib": 81559})


def test_nvidia_smi_lists_profiles_and_placements(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    off = run_tool("nvidia-smi", "mig", "-i", "0", "-lgip", check=False)
    assert off.returncode == 6 and "No MIG-enabled devices found." in off.stderr + off.stdout
    run_tool("nvidia-smi", "-i", "0", "-mig", "1")
    assert run_tool("nvidia-smi", "mig", "-i", "0", "-lgipp").stdout.splitlines() == [
        "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2",
        "GPU  0 Profile ID 14 Placements: {0,2,4}:2",
        "GPU  0 Profile ID  9 Placements: {0,4}:4",
        "GPU  0 Profile ID  5 Placement : {0}:4",
        "GPU  0 Profile ID  0 Placement : {0}:8",
    ]
    run_tool("nvidia-smi", "mig", "-i", "0", "-cgi", "1g.10gb+me:0,3g.40gb:4", "-C")
    second = run_tool("nvidia-smi", "mig", "-i", "0", "-cgi", "20:1", check=False)
    assert second.returncode != 0
    lines = run_tool("nvidia-smi", "mig", "-i", "0", "-lgip").stdout.splitlines()
    rows = [line.split("|")[1].split() for line in lines[5::3]]
    engines = [line.split("|")[1].split() for line in lines[6::3]]
    # GPU, MIG, name, id, free/total, GiB, P2P, SMs, DEC, ENC; then CE, JPEG, OFA
    assert rows == [
        ["0", "MIG", "1g.10gb", "19", "3/7", "9.96", "No", "16", "1", "0"],
        ["0", "MIG", "1g.10gb+me", "20", "0/1", "9.96", "No", "16", "7", "0"],
        ["0", "MIG", "1g.20gb", "15", "1/4", "19.91", "No", "16", "1", "0"],
        ["0", "MIG", "2g.20gb", "14", "1/3", "19.91", "No", "32", "2", "0"],
        ["0", "MIG", "3g.40gb", "9", "0/2", "39.82", "No", "60", "3", "0"],
        ["0", "MIG", "4g.40gb", "5", "0/1", "39.82", "No", "64", "4", "0"],
        ["0", "MIG", "7g.80gb", "0", "0/1", "79.65", "No", "132", "7", "0"],
    ]
    assert engines == [["1", "1", "0"], ["1", "7", "1"], ["1", "1", "0"], ["2", "2", "0"], ["3", "3", "0"],
                       ["4", "4", "0"], ["8", "7", "1"]]
    mig = node_state.load(prepared.sysroot)["gpus"][0]["mig"]
    assert [(gi["profile"], gi["placement_start"]) for gi in mig["gpu_instances"]] == [("1g.10gb+me", 0), ("3g.40gb", 4)]
