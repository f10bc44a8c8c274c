"""The workload model: deterministic ground truth from a seed, counters that move as each profile says
(through the simulated NVML as pynvml reads them, and the node's /proc and /sys views), and its driver
submitting the training jobs to the real Slurm."""

import json
import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from appliance.audit.models import AuditRecord
from appliance.simulation import services, slurm, workload
from appliance.simulation import state as node_state
from appliance.simulation.workload import Model, NodeSpec
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)

DEMO_NODES = (NodeSpec("gpu01", "training", 8), NodeSpec("gpu02", "training", 8), NodeSpec("gpu03", "training", 8),
              NodeSpec("gpu04", "inference", 8))


def day_of_truth(seed: int, intervals) -> list[dict]:
    model = Model("demo", seed, DEMO_NODES)
    return [line for interval in intervals for node in DEMO_NODES for line in model.ground_truth(node, interval)]


def test_the_ground_truth_is_the_same_for_a_seed_and_covers_every_state():
    first_hours = range(0, 240)
    assert day_of_truth(7, first_hours) == day_of_truth(7, first_hours)
    assert day_of_truth(7, first_hours) != day_of_truth(8, first_hours)
    states = {line["state"] for line in day_of_truth(7, range(0, 1440, 15))}
    assert states == {"busy", "idle-unallocated", "allocated-idle", "input-bound", "communication-bound",
                      "straggler", "throttled", "memory-only"}
    model = Model("demo", 7, DEMO_NODES)
    # The inference node: a chat service on GPUs 0-3 whose demand follows the day (busy at midnight, idle
    # at 04:00, busy at 16:00), memory-hungry services on GPUs 4-7 all day.
    assert [line["state"] for line in model.ground_truth(DEMO_NODES[3], 0)] == ["busy"] * 4 + ["memory-only"] * 4
    assert [line["state"] for line in model.ground_truth(DEMO_NODES[3], 240)][:4] == ["allocated-idle"] * 4
    assert [line["state"] for line in model.ground_truth(DEMO_NODES[3], 960)][:4] == ["busy"] * 4
    with pytest.raises(workload.WorkloadError, match="--profile nap: unknown profile"):
        Model("nap", 1, DEMO_NODES)


def test_a_straggler_holds_back_the_other_gpus_of_its_job():
    model = Model("straggler", 3, DEMO_NODES[:1])
    states = [line["state"] for line in model.ground_truth(DEMO_NODES[0], 10)]
    assert sorted(states) == ["communication-bound"] * 7 + ["straggler"]
    slow = states.index("straggler")
    loads = model.node_load(DEMO_NODES[0], 10)["gpus"]
    assert loads[slow]["util"] == 100.0 and all(load["util"] < 71 for i, load in enumerate(loads) if i != slow)


PROBE = r"""
import ctypes, json, os, time
ctypes.CDLL(os.environ["APPLIANCE_SIM_NVML"], mode=ctypes.RTLD_GLOBAL)
import pynvml as n
n.nvmlInit()
out = []
for index in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(index)
    first = n.nvmlGpmSampleAlloc(); second = n.nvmlGpmSampleAlloc()
    energy = n.nvmlDeviceGetTotalEnergyConsumption(h)
    n.nvmlGpmSampleGet(h, first)
    time.sleep(0.1)
    n.nvmlGpmSampleGet(h, second)
    energy_after = n.nvmlDeviceGetTotalEnergyConsumption(h)
    request = n.c_nvmlGpmMetricsGet_t()
    request.version = n.NVML_GPM_METRICS_GET_VERSION
    request.sample1, request.sample2 = first, second
    wanted = [n.NVML_GPM_METRIC_SM_UTIL, n.NVML_GPM_METRIC_ANY_TENSOR_UTIL, n.NVML_GPM_METRIC_DRAM_BW_UTIL,
              n.NVML_GPM_METRIC_PCIE_RX_PER_SEC, n.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC]
    request.numMetrics = len(wanted)
    for i, metric in enumerate(wanted):
        request.metrics[i].metricId = metric
    n.nvmlGpmMetricsGet(request)
    gpm = {int(request.metrics[i].metricId): round(request.metrics[i].value, 1) for i in range(len(wanted))}
    n.nvmlGpmSampleFree(first); n.nvmlGpmSampleFree(second)
    fields = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])
    out.append({
        "util": n.nvmlDeviceGetUtilizationRates(h).gpu,
        "memory_gib": n.nvmlDeviceGetMemoryInfo(h).used / 2**30,
        "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000,
        "temperature": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "sm_clock": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        "sm_clock_max": n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
        "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "pcie_rx_kbs": n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES),
        "energy_mj_per_s": (energy_after - energy) / 0.1,
        "energy_field": fields[0].value.ullVal >= energy_after,
        "ecc": n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        "remapped": list(n.nvmlDeviceGetRemappedRows(h)),
        "gpm_supported": n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice,
        "gpm": gpm,
    })
n.nvmlShutdown()
print(json.dumps(out))
"""


def read_through_pynvml(node) -> list[dict]:
    from appliance.simulation import nvml

    environment = {**os.environ, "APPLIANCE_SIM_SYSROOT": node.sysroot, "APPLIANCE_SIM_NVML": str(nvml.library_path())}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def load_driver(node) -> None:
    """The NVIDIA driver installed and loaded on the node, through its simulated commands (as the gpu stage)."""
    runner = Path(workload.__file__).with_name("tools") / "runner.py"
    for argv in (("apt-get", "install", "-y", "nvidia-driver-550-server"), ("modprobe", "-r", "nouveau"),
                 ("modprobe", "nvidia")):
        done = subprocess.run([sys.executable, "-I", str(runner), *argv], capture_output=True, text=True, check=False,
                              env={**os.environ, "APPLIANCE_SIM_SYSROOT": node.sysroot}, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def load_interval(node, profile: str, interval: int, seconds: float = 10.0, mount: str = "/") -> dict:
    """Two writes as the driver makes them, `seconds` apart (the second advances the counters)."""
    spec = NodeSpec(node.name, "training", 8, sysroot=node.sysroot)
    load = Model(profile, 11, (spec,), training_mount=mount).node_load(spec, interval)
    now = time.time_ns()
    with node_state.update(node.sysroot) as current:
        workload.apply(current, load, 0.0, now - int(seconds * 1e9), {})
    with node_state.update(node.sysroot) as current:
        workload.apply(current, load, seconds, now, {"0": {"kind": "slurm", "job": "41", "user": "root",
                                                             "name": load["gpus"][0]["activity"]}})
    return load


def test_input_bound_and_throttled_gpus_as_pynvml_and_the_node_see_them(demo_appliance):  # noqa: F811
    gpu01, gpu02 = demo_appliance.nodes.get(name="gpu01"), demo_appliance.nodes.get(name="gpu02")
    load_driver(gpu01)
    load_driver(gpu02)
    with node_state.update(gpu01.sysroot) as current:  # as the storage stage leaves it: the Lustre client mounted
        current["mounts"].append({"source": "10.10.1.1@o2ib:/scratch", "target": "/mnt/scratch", "fstype": "lustre",
                                  "options": ["rw", "flock"]})
    load_interval(gpu01, "input-bound", 5, mount="/mnt/scratch")
    load = load_interval(gpu02, "thermal", 40)  # 40 minutes into the job: its hot GPUs have passed 87 C
    hot = [index for index, gpu in enumerate(load["gpus"]) if gpu["label"] == "throttled"]
    assert len(hot) == 2

    seen = read_through_pynvml(gpu01)
    assert len(seen) == 8
    for gpu in seen:
        # GPUs stalled on input: low utilization and SM activity, idle power, the batches' PCIe copies.
        assert gpu["util"] < 35 and gpu["gpm"]["2"] < 20 and gpu["gpm"]["5"] < 15, gpu
        assert 150 < gpu["power_w"] < 230 and 140 < gpu["energy_mj_per_s"] / 1000 < 240, gpu
        assert 2800 < gpu["gpm"]["21"] < 4800, gpu  # PCIe RX, MiB/s
        assert gpu["sm_clock"] == 1980 and gpu["sm_clock_max"] == 1980 and gpu["reasons"] in (0, 1), gpu
        assert 2_900_000 < gpu["pcie_rx_kbs"] < 4_900_000 and 55 < gpu["memory_gib"] < 80, gpu
        assert gpu["ecc"] == 0 and gpu["remapped"] == [0, 0, 0, 0] and gpu["gpm_supported"] == 1 and gpu["energy_field"]
    # ... while the node reads its filesystem at the storage's full rate and waits for it.
    sysroot = Path(gpu01.sysroot)
    [stats] = list((sysroot / "sys/kernel/debug/lustre/llite").glob("scratch-*/stats"))
    read_bytes = [line.split() for line in stats.read_text().splitlines() if line.startswith("read_bytes")][0]
    assert read_bytes[2:4] == ["samples", "[bytes]"] and int(read_bytes[-1]) > 10 * 19e9
    cpu = [int(value) for value in (sysroot / "proc/stat").read_text().splitlines()[0].split()[1:]]
    assert cpu[4] / sum(cpu) > 0.24  # iowait
    port = sysroot / "sys/class/infiniband/mlx5_0/ports/1/counters"
    assert int((port / "port_rcv_data").read_text()) > 10 * 19e9 / 4 / 8 * 0.9
    assert int((port / "port_xmit_wait").read_text()) > 0
    owners = json.loads((sysroot / "run/appliance/gpu-owners.json").read_text())
    assert owners["gpus"] == {"0": {"kind": "slurm", "job": "41", "user": "root", "name": "input-bound-d0-0"}} \
        or owners["gpus"]["0"]["job"] == "41"

    # The driver runs as root; the node's login account owns the sysroot and must be able to rewrite these views.
    os.chown(sysroot, 65534, 65534)
    workload.hand_over(sysroot)
    assert {path.stat().st_uid for path in [sysroot / "proc/self/mountstats", stats, stats.parent,
                                            sysroot / "run/appliance/gpu-owners.json"]} == {65534}

    throttled = read_through_pynvml(gpu02)
    for index, gpu in enumerate(throttled):
        if index in hot:
            # SW thermal slowdown from the H100's max operating temperature (87 C), HW from its slowdown (89 C),
            # below its shutdown (92 C).
            assert gpu["reasons"] & 0x20 and gpu["sm_clock"] < 1400 and 87 <= gpu["temperature"] < 92, gpu
            assert bool(gpu["reasons"] & 0x40) == (gpu["temperature"] >= 89), gpu
        else:
            assert gpu["reasons"] & 0x60 == 0 and gpu["sm_clock"] == 1980, gpu


@pytest.mark.slow
def test_the_driver_runs_training_jobs_on_slurm_and_stops_clean(demo_appliance):  # noqa: F811
    write_stage_files(demo_appliance)
    with pytest.raises(workload.WorkloadError, match="the simulated Slurm is not running"):
        workload.start(demo_appliance, profile="demo", speed=600, seed=5)
    try:
        slurm.start(demo_appliance)
        started = workload.start(demo_appliance, profile="demo", speed=600, seed=5)
        assert started["nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
        truth = workload.workload_dir() / "ground-truth.jsonl"
        deadline = time.monotonic() + 30
        queue: list[list[str]] = []
        while time.monotonic() < deadline:
            squeue = slurm.client("squeue", "--noheader", "--format=%j|%N|%T").stdout
            queue = [line.split("|") for line in squeue.splitlines()]
            lines = truth.read_text().splitlines() if truth.exists() else []
            if len(lines) >= 32 * 6 and sorted(row[2] for row in queue) == ["RUNNING"] * 3:
                break
            time.sleep(0.3)
        model = Model("demo", 5, DEMO_NODES)
        first_jobs = sorted(activity.name for activity in model.activities(0) if activity.start == 0 and activity.slurm)
        assert sorted(row[0] for row in queue) == first_jobs and sorted(row[1] for row in queue) == [
            "gpu01", "gpu02", "gpu03"]
        # The driver's ground truth is the model's: the same lines for the same seed.
        written = [json.loads(line) for line in truth.read_text().splitlines()[:32 * 6]]
        assert written == [line for interval in range(6) for node in DEMO_NODES
                           for line in model.ground_truth(node, interval)]
        jobs = {json.loads(line)["activity"]: json.loads(line)["job"]
                for line in (workload.workload_dir() / "jobs.jsonl").read_text().splitlines()}
        owners = json.loads((Path(demo_appliance.nodes.get(name="gpu01").sysroot) / "run/appliance/gpu-owners.json")
                            .read_text())["gpus"]
        assert owners["0"]["kind"] == "slurm" and owners["0"]["job"] == jobs[owners["0"]["name"]]
        status = workload.status(demo_appliance)
        assert status["running"] and status["profile"] == "demo" and status["simulated_seconds"] >= 360
        out = StringIO()
        call_command("simulation", "status", stdout=out)
        call_command("simulation", "workload", "status", stdout=out)
        lines = out.getvalue().splitlines()
        [cluster] = [line for line in lines if line.startswith("  Slurm ")]
        assert cluster.startswith("  Slurm              mgmt01 slurmctld pid ") and cluster.endswith(
            "; gpu01 allocated, gpu02 allocated, gpu03 allocated")
        [model_line] = [line for line in lines if line.startswith("  workload ")]
        assert model_line == f"  workload           demo pid {started['pid']} speed 600"
        assert any(line.startswith("demo: workload demo running") for line in lines)
    finally:
        stopped = services.stop(demo_appliance)  # the workload, Slurm, then the rest of the simulation
    assert stopped["workload"]["jobs_cancelled"] == 3 and not workload.status(demo_appliance)["running"]
    assert stopped["slurm"]["stopped"] == ["gpu01", "gpu02", "gpu03", "slurmctld"]
    after = node_state.load(demo_appliance.nodes.get(name="gpu01").sysroot)
    assert [gpu["utilization_gpu"] for gpu in after["gpus"]] == [0] * 8 and after["gpu_owners"] == {}
    assert list(AuditRecord.objects.filter(event__startswith="simulation.workload.").values_list("event", flat=True)
                .order_by("sequence")) == ["simulation.workload.start", "simulation.workload.stop"]


def test_the_command_starts_shows_and_stops_an_inference_workload(demo_appliance):  # noqa: F811
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="--speed 0: must be above 0"):
        call_command("simulation_workload", "start", "--speed", "0")
    out = StringIO()
    try:
        call_command("simulation_workload", "start", "--profile", "memory-hungry", "--speed", "600", "--seed", "3",
                     stdout=out)
        assert "demo: workload memory-hungry running" in out.getvalue()
        with pytest.raises(CommandError, match="the workload model already runs"):
            call_command("simulation_workload", "start")
        gpu04 = Path(demo_appliance.nodes.get(name="gpu04").sysroot)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "gpu_owners" not in node_state.load(gpu04):
            time.sleep(0.1)
        owners = json.loads((gpu04 / "run/appliance/gpu-owners.json").read_text())["gpus"]
        assert owners == {str(gpu): {"kind": "inference", "service": "embeddings-gpu04"} for gpu in range(8)}
        assert all(gpu["memory_used_bytes"] > 60 * 2**30 and gpu["utilization_gpu"] < 10
                   for gpu in node_state.load(gpu04)["gpus"])
        call_command("simulation_workload", "status", stdout=out)
        assert "workload memory-hungry running" in out.getvalue().splitlines()[-3]
        assert out.getvalue().splitlines()[-2].split() == [
            "gpu04", "GPUs", "0,1,2,3,4,5,6,7", "memory-hungry", "embeddings-gpu04:", "inference", "service",
            "(simulation", "state)"]
    finally:
        call_command("simulation_workload", "stop", stdout=out)
    assert "workload stopped" in out.getvalue().splitlines()[-1]
    assert node_state.load(gpu04)["gpu_owners"] == {}
