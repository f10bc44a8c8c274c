"""The workload model of the simulated appliance: jobs and services that load its GPUs, fabric and storage,
with the ground truth of every stall, so that telemetry can be watched and analytics graded.

What runs for real and what is modelled:
- training jobs are submitted to the training pool's real Slurm (slurm.py) with `sbatch`: a job script
  that sleeps for the job's duration, holding the GPUs its node gives it (`--gres`, exclusive nodes as the
  generated partition says). Slurm decides nothing about the load: the model does.
- inference services run on the inference pool, which is Kubernetes on a real appliance. No Kubernetes
  API server can be installed here (Debian ships only kubectl; FIELD-NOTES), so the services are kept in
  the simulation's state only: each GPU's owner in the node's job map. The demo's own services (chat,
  embeddings) are background load drawn from the seed; a service the model lifecycle deployed is a
  workload of the simulated Kubernetes (kubernetes.py): on the GPUs its ready pods hold, it replaces the
  background and serves an inference load with a diurnal demand, named after the service (`services`).
  The driver reconciles the simulated Kubernetes every step; without a driver, serve() puts the deployed
  services' load and owners on the nodes once (the lifecycle calls it when it follows a rollout).
- every GPU's counters (utilization, SM/tensor/DRAM activity, memory, power, clocks, clock event reasons,
  PCIe and NVLink throughput, energy), the node's InfiniBand port counters, filesystem client statistics,
  block devices and CPU time (iowait) follow a profile per activity; the simulated NVML and the node's
  /proc and /sys views (state.py) serve them to whoever reads, pynvml included.

Profiles (`KINDS`): compute-bound training; input-bound training (GPUs stall while the filesystem's reads
saturate the node's storage bandwidth); a straggler GPU holding back its job (the others wait in
collectives: communication-bound); a thermally throttled GPU (clock event reasons HW/SW thermal slowdown,
lower SM clock; the others wait); allocated but idle GPUs (a notebook left open); inference with a diurnal
load; memory-hungry services on mostly idle GPUs. The `demo` profile mixes them over a simulated day; a
profile named after one kind runs that kind on every node it applies to.

Time: the model advances in simulated time, `speed` simulated seconds per real second (`--speed 60`: a
simulated minute per second, a day in 24 minutes). The load is constant within one interval of
INTERVAL_S simulated seconds (noise drawn per interval from the seed), so that everything is a pure
function of (profile, seed, nodes, interval): the same seed gives the same ground truth, whatever the
speed or the machine. Cumulative counters (energy, bytes, activity time) advance in real time at the
interval's rates, so rates a collector computes from two reads are the profile's.

Ground truth: SIMULATION_DIR/workload/ground-truth.jsonl, one JSON line per GPU per completed interval:
{"t": simulated seconds since the start, "interval_s": 60, "node", "gpu", "state": one of LABELS,
"activity", "kind"}; run.json maps simulated time to real time (started_at + t / speed) and jobs.jsonl
names the Slurm job of each training activity. Files are appended by the driver only.

The driver is a background process (`python -m appliance.simulation.workload run CONFIG`, pid file),
pure Python without Django like state.py: start() writes its configuration from the inventory and
launches it, stop() ends it, cancels its Slurm jobs and leaves every GPU idle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from . import state as node_state

INTERVAL_S = 60
DAY_S = 86400
MAX_TICK_S = 1.0
MIN_TICK_S = 0.1
LABELS = ("busy", "idle-unallocated", "allocated-idle", "input-bound", "communication-bound", "straggler",
          "throttled", "memory-only")
TRAINING_KINDS = ("compute-bound", "input-bound", "straggler", "thermal", "notebook", "mixed")
# The demo's day draws from these only: "mixed" came later, and the demo's ground truth (the in-sample set
# analytics was written against) stays what it was for every seed.
DEMO_TRAINING_KINDS = TRAINING_KINDS[:5]
INFERENCE_KINDS = ("inference-diurnal", "memory-hungry")
KINDS = TRAINING_KINDS + INFERENCE_KINDS
PROFILES = ("demo", *KINDS)
GIB = 2**30
USER_HZ = 100
STORAGE_READ_GBPS = 21.4  # per node, as the nominal storage benchmark of a healthy node (hardware.py)
# The demo's researchers: each training job is submitted as one of them (sbatch --uid, as the simulated Slurm's
# daemons run as root), picked from the job's name, so the ledger and the findings name distinct users. Only
# the accounts the host has are used (`useradd --no-create-home --shell /usr/sbin/nologin alice` adds one);
# with none of them, or not as root, jobs run as the user who started the driver.
DEMO_USERS = ("alice", "bob", "carol", "dave")
# Clock event reasons (nvml.h nvmlClocksEventReason*).
GPU_IDLE, SW_POWER_CAP, SW_THERMAL, HW_THERMAL = 0x1, 0x4, 0x20, 0x40
# An H100 SXM5's temperature thresholds, as NVML reports them (nvmlDeviceGetTemperatureThreshold:
# NVML_TEMPERATURE_THRESHOLD_GPU_MAX, _SLOWDOWN, _SHUTDOWN; nvidia-smi -q's GPU Max Operating, Slowdown and
# Shutdown Temp). The driver slows the clocks for heat above the first (SW thermal slowdown), the hardware
# at the second (HW thermal slowdown), and the GPU is powered off at the third: a GPU that throttles for
# heat reads between the first and the third, never at 50 C.
MAX_OPERATING_C, SLOWDOWN_C, SHUTDOWN_C = 87, 89, 92


def thermal_reasons(temperature: float) -> int:
    """The clock event reasons a GPU at this temperature reports for heat (none below MAX_OPERATING_C)."""
    return (SW_THERMAL if temperature >= MAX_OPERATING_C else 0) | (HW_THERMAL if temperature >= SLOWDOWN_C else 0)


class WorkloadError(Exception):
    """The workload model cannot start or stop; the message says why."""


@dataclass(frozen=True)
class Activity:
    """One job or service: `gpus` of `node` from `start` for `duration` simulated seconds."""

    name: str
    kind: str
    node: str
    gpus: tuple[int, ...]
    start: int
    duration: int
    special: tuple[int, ...] = ()  # the straggler or the overheating GPUs

    @property
    def end(self) -> int:
        return self.start + self.duration

    @property
    def slurm(self) -> bool:
        return self.kind in TRAINING_KINDS


@dataclass(frozen=True)
class NodeSpec:
    name: str
    pool: str  # training | inference
    gpus: int
    memory_bytes: int = 80 * GIB
    sysroot: str = ""
    storage_read_gbps: float = 0.0  # what an input-bound job's reads saturate at; 0: STORAGE_READ_GBPS


@dataclass
class Model:
    profile: str
    seed: int
    nodes: tuple[NodeSpec, ...]
    training_mount: str = "/"
    inference_mount: str = "/"
    # The day's plan (defaults: the demo's). Other values make days the attribution was not written
    # against: jobs drawn from other kinds, other lengths (in half hours, inclusive), other gaps between
    # jobs (in ten-minute steps, inclusive).
    demo_kinds: tuple[str, ...] = DEMO_TRAINING_KINDS
    job_half_hours: tuple[int, int] = (2, 6)
    gap_ten_minutes: tuple[int, int] = (1, 4)
    # The deployed services (kubernetes.serving): node -> {GPU index: service}. They take their GPUs from
    # the day's background activities. background False: nothing but them (serve(), no driver running).
    services: dict = field(default_factory=dict)
    background: bool = True
    # node -> {"<GPU index>/<GPU instance>": service} (kubernetes.instance_owners): the job map's MIG entries.
    instance_services: dict = field(default_factory=dict)
    _days: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise WorkloadError(f"--profile {self.profile}: unknown profile (known: {', '.join(PROFILES)})")

    # ---- the plan ------------------------------------------------------------------------------------

    def activities(self, day: int) -> list[Activity]:
        """The jobs and services of one simulated day (each day drawn from the seed and its number)."""
        if day not in self._days:
            self._days[day] = self._plan_day(day)
        return self._days[day]

    def _plan_day(self, day: int) -> list[Activity]:
        rng = random.Random(f"{self.seed}/{self.profile}/{day}")
        base = day * DAY_S
        result = []
        if not self.background:
            return result
        training = [node for node in self.nodes if node.pool == "training" and node.gpus]
        inference = [node for node in self.nodes if node.pool == "inference" and node.gpus]
        for position, node in enumerate(training):
            if self.profile in INFERENCE_KINDS:
                break
            demo = self.profile == "demo"
            if demo and position == 0:
                order = list(self.demo_kinds)
                rng.shuffle(order)  # the nodes start the day with different kinds (the first minutes show them)
            now, number = 0, 0
            while now < DAY_S:
                if not demo:
                    kind = self.profile
                else:
                    kind = order[position % len(order)] if number == 0 else rng.choice(self.demo_kinds)
                duration = min(DAY_S - now, rng.randint(*self.job_half_hours) * 1800 if demo
                               else rng.randint(4, 10) * 1800)
                all_gpus = tuple(range(node.gpus))
                special: tuple[int, ...] = ()
                if kind == "straggler":
                    special = (rng.randrange(node.gpus),)
                elif kind == "thermal":
                    special = tuple(sorted(rng.sample(all_gpus, min(2, node.gpus))))
                elif kind == "mixed":
                    special = tuple(rng.sample(all_gpus, min(4, node.gpus)))  # straggler, hot, then unused
                result.append(Activity(f"{kind}-{node.name}-d{day}-{number}", kind, node.name, all_gpus,
                                       base + now, duration, special))
                now += duration
                number += 1
                if demo:
                    now += rng.randint(*self.gap_ten_minutes) * 600  # the node waits for the next job
        for node in inference:
            if self.profile not in ("demo", *INFERENCE_KINDS):
                break
            half = node.gpus // 2 if self.profile == "demo" else node.gpus
            groups = []
            if self.profile in ("demo", "inference-diurnal"):
                groups.append(("inference-diurnal", "chat", tuple(range(half))))
            if self.profile == "demo":
                groups.append(("memory-hungry", "embeddings", tuple(range(half, node.gpus))))
            elif self.profile == "memory-hungry":
                groups.append(("memory-hungry", "embeddings", tuple(range(node.gpus))))
            for kind, service, gpus in groups:
                if gpus:
                    result.append(Activity(f"{service}-{node.name}", kind, node.name, gpus, base, DAY_S))
        return result

    def activity_at(self, node: str, gpu: int, t: float) -> Activity | None:
        served = self.services.get(node) or {}
        if gpu in served:
            service = served[gpu]
            return Activity(service, "inference-diurnal", node,
                            tuple(sorted(index for index, name in served.items() if name == service)),
                            int(t // DAY_S) * DAY_S, DAY_S)
        for activity in self.activities(int(t // DAY_S)):
            if activity.node == node and gpu in activity.gpus and activity.start <= t < activity.end:
                return activity
        return None

    # ---- the load of one interval --------------------------------------------------------------------

    def _rng(self, *parts) -> random.Random:
        return random.Random(hashlib.sha256("/".join(str(p) for p in (self.seed, *parts)).encode()).hexdigest())

    def gpu_load(self, node: NodeSpec, gpu: int, interval: int) -> dict:
        """The load of one GPU during one interval: its ground-truth label and its counters' rates."""
        t = interval * INTERVAL_S
        activity = self.activity_at(node.name, gpu, t)
        rng = self._rng(node.name, gpu, interval)
        kind = activity.kind if activity else None
        elapsed = (t - activity.start) if activity else 0

        def between(low, high):
            return low + (high - low) * rng.random()

        load = {"label": "idle-unallocated", "util": 0.0, "sm": 0.0, "occupancy": 0.0, "tensor": 0.0, "dram": 0.0,
                "memory": 0.0, "power_w": between(68, 75), "temperature": between(30, 34), "sm_clock": 345,
                "reasons": GPU_IDLE, "pcie_tx": 0.0, "pcie_rx": 0.0, "nvlink": 0.0}
        if kind is None:
            return load | {"activity": None, "kind": None}
        busy = {"util": between(97, 100), "sm": between(0.80, 0.92), "occupancy": between(0.45, 0.6),
                "tensor": between(0.55, 0.7), "dram": between(0.45, 0.6), "memory": between(64, 76) * GIB,
                "power_w": between(620, 690), "temperature": between(62, 72), "sm_clock": 1980, "reasons": 0,
                "pcie_tx": between(0.5, 1.5) * 1e9, "pcie_rx": between(1, 2) * 1e9, "nvlink": between(80, 120) * 1e9}
        waiting = busy | {"util": between(55, 70), "sm": between(0.3, 0.42), "tensor": between(0.2, 0.3),
                          "dram": between(0.15, 0.25), "power_w": between(330, 400), "temperature": between(48, 56),
                          "nvlink": between(20, 40) * 1e9, "label": "communication-bound"}
        if kind == "compute-bound":
            load |= busy | {"label": "busy", "reasons": SW_POWER_CAP if busy["power_w"] > 680 else 0}
        elif kind == "input-bound":
            load |= busy | {"label": "input-bound", "util": between(18, 32), "sm": between(0.1, 0.18),
                            "tensor": between(0.06, 0.12), "dram": between(0.06, 0.12), "power_w": between(160, 220),
                            "temperature": between(40, 47), "reasons": GPU_IDLE if rng.random() < 0.5 else 0,
                            "pcie_rx": between(3, 5) * 1e9, "nvlink": between(4, 8) * 1e9}
        elif kind == "straggler":
            if gpu in activity.special:
                load |= busy | {"label": "straggler", "util": 100.0, "sm": between(0.95, 0.99),
                                "tensor": between(0.7, 0.78), "power_w": between(695, 700),
                                "temperature": between(78, 83), "reasons": SW_POWER_CAP}
            else:
                load |= waiting
        elif kind == "thermal":
            # The GPUs run cool at first; the hot ones pass their slowdown temperature after half an hour.
            if gpu in activity.special and elapsed >= 1800:
                load |= busy | {"label": "throttled", "util": between(97, 100), "sm": between(0.78, 0.86),
                                "power_w": between(440, 520), "temperature": between(87.5, 91.5),
                                "sm_clock": int(between(1100, 1400))}
                load["reasons"] = thermal_reasons(round(load["temperature"]))
            elif elapsed >= 1800:
                load |= waiting
            else:
                load |= busy | {"label": "busy"}
        elif kind == "mixed":
            # Several causes at once on one job: it asked for every GPU of the node and uses all but two;
            # for its first 20 minutes it loads its dataset (input-bound); then one GPU straggles, the
            # others wait on it, and after 40 minutes another one overheats and throttles.
            # (Each load is drawn only in its branch: the other kinds' draws, and so the demo, stay as they were.)
            role = activity.special.index(gpu) if gpu in activity.special else -1
            if role >= 2:
                load |= {"label": "allocated-idle", "util": between(0, 3), "sm": between(0, 0.02),
                         "memory": between(1, 6) * GIB, "power_w": between(80, 100), "temperature": between(33, 38),
                         "reasons": GPU_IDLE}
            elif elapsed < 1200:
                load |= busy | {"label": "input-bound", "util": between(10, 40), "sm": between(0.06, 0.25),
                                "tensor": between(0.04, 0.15), "dram": between(0.05, 0.15),
                                "power_w": between(150, 260), "temperature": between(40, 50),
                                "pcie_rx": between(2, 6) * 1e9, "nvlink": between(2, 10) * 1e9}
            elif role == 0:
                load |= busy | {"label": "straggler", "util": between(98, 100), "sm": between(0.9, 0.99),
                                "tensor": between(0.65, 0.8), "power_w": between(660, 700),
                                "temperature": between(72, 84), "reasons": SW_POWER_CAP}
            elif role == 1 and elapsed >= 2400:
                load |= busy | {"label": "throttled", "util": between(95, 100), "sm": between(0.7, 0.88),
                                "power_w": between(420, 540), "temperature": between(87.5, 91.5),
                                "sm_clock": int(between(1000, 1500))}
                load["reasons"] = thermal_reasons(round(load["temperature"]))
            else:
                load |= waiting
        elif kind == "notebook":
            load |= {"label": "allocated-idle", "util": between(0, 2), "sm": between(0, 0.01),
                     "memory": between(3, 12) * GIB, "power_w": between(85, 100), "temperature": between(34, 39),
                     "reasons": GPU_IDLE}
        elif kind == "inference-diurnal":
            hour = (t % DAY_S) / 3600
            demand = 0.5 - 0.45 * math.cos(2 * math.pi * (hour - 4) / 24)  # lowest at 04:00, highest at 16:00
            demand = max(0.0, min(1.0, demand * between(0.9, 1.1)))
            load |= {"label": "busy" if demand >= 0.15 else "allocated-idle", "util": 5 + 90 * demand,
                     "sm": 0.05 + 0.7 * demand, "occupancy": 0.3 * demand, "tensor": 0.5 * demand,
                     "dram": 0.1 + 0.5 * demand, "memory": between(40, 44) * GIB, "power_w": 95 + 480 * demand,
                     "temperature": 36 + 30 * demand, "sm_clock": 1980 if demand >= 0.15 else 345,
                     "reasons": 0 if demand >= 0.15 else GPU_IDLE, "pcie_tx": demand * 0.4e9,
                     "pcie_rx": demand * 0.6e9, "nvlink": 0.0}
        elif kind == "memory-hungry":
            load |= {"label": "memory-only", "util": between(1, 6), "sm": between(0.01, 0.04),
                     "dram": between(0.01, 0.03), "memory": between(70, 78) * GIB, "power_w": between(95, 110),
                     "temperature": between(35, 40), "reasons": GPU_IDLE, "pcie_rx": between(0.01, 0.05) * 1e9}
        load["memory"] = min(load["memory"], node.memory_bytes * 0.97)
        return load | {"activity": activity.name, "kind": kind}

    def node_load(self, node: NodeSpec, interval: int) -> dict:
        """One interval of a node: every GPU's load, the filesystem, fabric and CPU load it causes."""
        gpus = [self.gpu_load(node, gpu, interval) for gpu in range(node.gpus)]
        rng = self._rng(node.name, "node", interval)
        kinds = {load["kind"] for load in gpus}
        storage = (node.storage_read_gbps or STORAGE_READ_GBPS) * 1e9
        read = write = 0.0
        iowait = 0.01
        user = 0.02
        if "input-bound" in kinds:
            read, iowait, user = storage * (0.93 + 0.06 * rng.random()), 0.25 + 0.1 * rng.random(), 0.3
        elif any(load["label"] == "input-bound" for load in gpus):  # a mixed job loading its dataset
            read, iowait, user = storage * (0.85 + 0.14 * rng.random()), 0.1 + 0.3 * rng.random(), 0.2 + 0.3 * rng.random()
        elif kinds & {"compute-bound", "straggler", "thermal", "mixed"}:
            read, user = (0.3 + 0.5 * rng.random()) * 1e9, 0.2
            # A checkpoint every half hour of the job: one interval of heavy writes.
            if interval % 30 == 0:
                write, iowait = (2 + rng.random()) * 1e9, 0.08
        if kinds & set(INFERENCE_KINDS):
            read += 0.05e9 * rng.random()
            user += 0.05
        mount = self.inference_mount if kinds & set(INFERENCE_KINDS) and not kinds & set(TRAINING_KINDS) \
            else self.training_mount
        return {"gpus": gpus, "fs_read": read, "fs_write": write, "mount": mount, "iowait": iowait, "user": user,
                "congested": read > 0.9 * storage}

    def ground_truth(self, node: NodeSpec, interval: int) -> list[dict]:
        return [{"t": interval * INTERVAL_S, "interval_s": INTERVAL_S, "node": node.name, "gpu": gpu,
                 "state": load["label"], "activity": load["activity"], "kind": load["kind"]}
                for gpu, load in enumerate(self.node_load(node, interval)["gpus"])]


# ---- applying a node's load to its state ---------------------------------------------------------------

def apply(state: dict, node_load: dict, seconds: float, now_ns: int, owners: dict) -> None:
    """Put one interval's load into a node's state. The cumulative counters first advance by `seconds` of
    real time at the rates the state holds (those of the previous write: the NVML library extrapolates
    from them after counters_ns), then the new rates and levels replace them."""
    by_index = {gpu["index"]: gpu for gpu in state.get("gpus", [])}
    for index, load in enumerate(node_load["gpus"]):
        gpu = by_index.get(index)
        if gpu is None:
            continue
        for key, value in node_state.idle_load().items():
            gpu.setdefault(key, value)
        counters, activity, throughput = gpu["counters"], gpu["activity"], gpu["throughput"]
        for name, counter in zip(node_state.ACTIVITIES, node_state.COUNTERS, strict=False):
            counters[counter] = counters.get(counter, 0) + round(activity.get(name, 0.0) * 1e6 * seconds)
        for name in node_state.THROUGHPUTS:
            counters[f"{name}_bytes"] = counters.get(f"{name}_bytes", 0) + round(throughput.get(name, 0) * seconds)
        counters["energy_mj"] = counters.get("energy_mj", 0) + round(gpu["power_draw_mw"] * seconds)
        gpu["activity"] = {"graphics": round(load["util"] / 100, 4), "sm": round(load["sm"], 4),
                           "sm_occupancy": round(load["occupancy"], 4), "tensor": round(load["tensor"], 4),
                           "dram": round(load["dram"], 4)}
        gpu["throughput"] = {"pcie_tx": int(load["pcie_tx"]), "pcie_rx": int(load["pcie_rx"]),
                             "nvlink_tx": int(load["nvlink"]), "nvlink_rx": int(load["nvlink"])}
        gpu["utilization_gpu"] = int(round(load["util"]))
        gpu["utilization_memory"] = int(round(load["dram"] * 100))
        gpu["memory_used_bytes"] = int(load["memory"])
        gpu["power_draw_mw"] = int(load["power_w"] * 1000)
        gpu["temperature_c"] = int(round(load["temperature"]))
        sm_clock = int(load["sm_clock"])
        gpu["clocks_mhz"] = {"graphics": sm_clock, "sm": sm_clock, "memory": gpu["max_clocks_mhz"]["memory"]}
        gpu["clock_event_reasons"] = int(load["reasons"])
    previous = state.get("node_load") or {}
    _advance_node_counters(state, previous, seconds)
    state["node_load"] = {key: node_load[key] for key in ("fs_read", "fs_write", "mount", "iowait", "user", "congested")}
    state["counters_ns"] = now_ns
    state["gpu_owners"] = owners


def _advance_node_counters(state: dict, rates: dict, seconds: float) -> None:
    """InfiniBand port, filesystem, block device and CPU counters, advanced at the previous write's rates."""
    read, written = float(rates.get("fs_read", 0.0)), float(rates.get("fs_write", 0.0))
    # Storage traffic crosses the node's InfiniBand ports (4-octet words, as the kernel counts); a
    # saturated read stream waits for credits (port_xmit_wait counts those ticks).
    ports = [port for hca in state.get("hcas", []) for port in hca["ports"]]
    for port in ports:
        counters = port["counters"]
        received, sent = read * seconds / len(ports), written * seconds / len(ports)
        counters["port_rcv_data"] = counters.get("port_rcv_data", 0) + round(received / 4)
        counters["port_xmit_data"] = counters.get("port_xmit_data", 0) + round(sent / 4)
        counters["port_rcv_packets"] = counters.get("port_rcv_packets", 0) + round(received / 4096)
        counters["port_xmit_packets"] = counters.get("port_xmit_packets", 0) + round(sent / 4096) + round(received / 65536)
        counters["port_xmit_wait"] = counters.get("port_xmit_wait", 0) + (round(seconds * 250_000)
                                                                          if rates.get("congested") else 0)
    if rates.get("mount"):
        io = state.setdefault("filesystem_io", {}).setdefault(rates["mount"], {})
        for key, rate in (("read", read), ("write", written)):
            io[f"{key}_bytes"] = io.get(f"{key}_bytes", 0) + round(rate * seconds)
            io[f"{key}_ops"] = io.get(f"{key}_ops", 0) + round(rate * seconds / (4 * 2**20))
    disk = state.setdefault("disk_io", {}).setdefault("nvme0n1", {})
    disk["writes"] = disk.get("writes", 0) + round(seconds * 20)  # the node's own logs and journal
    disk["write_bytes"] = disk.get("write_bytes", 0) + round(seconds * 20 * 16384)
    disk["io_ms"] = disk.get("io_ms", 0) + round(seconds * 5)
    host = state.setdefault("host", {"cpus": 224})
    ticks = host.setdefault("cpu_ticks", {})
    total = seconds * USER_HZ * int(host.get("cpus", 224))
    iowait = float(rates.get("iowait", 0.0))
    shares = {"user": float(rates.get("user", 0.01)), "system": 0.02, "iowait": iowait}
    shares["idle"] = max(0.0, 1 - sum(shares.values()))
    for name, share in shares.items():
        ticks[name] = ticks.get(name, 0) + round(total * share)
    host["blocked"] = int(iowait * 40)


def make_idle(state: dict, now_ns: int) -> None:
    """The node after its workload ended: every GPU idle, no owner, counters kept."""
    idle = {"label": "idle-unallocated", "util": 0.0, "sm": 0.0, "occupancy": 0.0, "tensor": 0.0, "dram": 0.0,
            "memory": 0.0, "power_w": 70.0, "temperature": 32.0, "sm_clock": 345, "reasons": GPU_IDLE,
            "pcie_tx": 0.0, "pcie_rx": 0.0, "nvlink": 0.0}
    seconds = max(0.0, (now_ns - int(state.get("counters_ns") or now_ns)) / 1e9)
    apply(state, {"gpus": [idle] * len(state.get("gpus", [])), "fs_read": 0.0, "fs_write": 0.0, "mount": "/",
                  "iowait": 0.0, "user": 0.01, "congested": False}, seconds, now_ns, {})


# ---- the driver process (no Django) --------------------------------------------------------------------

# What the load views add to a sysroot (state.py _write_load_views), beside files that exist before.
LOAD_VIEWS = ("proc/stat", "proc/self", "proc/diskstats", "sys/kernel", "run/appliance")


def instance_owner_entries(instances: dict | None) -> dict:
    """The job map's entries for MIG instances that serve a service: "<GPU>/<GPU instance>" -> owner."""
    return {key: {"kind": "inference", "service": service} for key, service in sorted((instances or {}).items())}


def serve(nodes: list[NodeSpec], services: dict, now: float | None = None, instances: dict | None = None) -> None:
    """Without a driver: put the deployed services' inference load (and their owners in the job map) on
    the nodes for the interval of wall-clock time `now`, every other GPU idle. `services`: node -> {GPU
    index: service} (kubernetes.serving); `instances`: node -> {"<GPU>/<instance>": service}
    (kubernetes.instance_owners)."""
    now = time.time() if now is None else now
    instances = instances or {}
    model = Model("inference-diurnal", 1, tuple(nodes), services=services, background=False)
    interval, now_ns = int(now // INTERVAL_S), int(now * 1e9)
    for node in nodes:
        if not node.sysroot or not node_state.exists(node.sysroot):
            continue
        owners = {str(gpu): {"kind": "inference", "service": service}
                  for gpu, service in sorted((services.get(node.name) or {}).items())}
        owners |= instance_owner_entries(instances.get(node.name))
        with node_state.update(node.sysroot) as current:
            last = int(current.get("counters_ns") or now_ns)
            apply(current, model.node_load(node, interval), max(0.0, (now_ns - last) / 1e9), now_ns, owners)
        hand_over(Path(node.sysroot))


def hand_over(sysroot: Path) -> None:
    """Give what the driver (root) created under the sysroot to the sysroot's owner: the node's login
    account rewrites these views when a simulated command changes the state (mount a filesystem, ...)."""
    if os.geteuid() != 0:
        return
    owner = sysroot.stat()
    if owner.st_uid == 0:
        return
    for relative in LOAD_VIEWS:
        top = sysroot / relative
        if not top.exists() or top.is_symlink():
            continue
        paths = [top] + (sorted(top.rglob("*")) if top.is_dir() else [])
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                current = path.lstat()
                if current.st_uid != owner.st_uid and not path.is_symlink():
                    os.chown(path, owner.st_uid, owner.st_gid)


class Driver:
    def __init__(self, config: dict):
        self.config = config
        self.directory = Path(config["directory"])
        self.model = Model(config["profile"], int(config["seed"]), tuple(NodeSpec(**node) for node in config["nodes"]),
                           config.get("training_mount", "/"), config.get("inference_mount", "/"))
        self.speed = float(config["speed"])
        self.started_at = float(config["started_at"])
        self.tick = max(MIN_TICK_S, min(MAX_TICK_S, INTERVAL_S / self.speed))
        self.jobs: dict[str, str] = {}
        self.truth_written = -1
        self.stopping = False
        self.last_write_ns: dict[str, int] = {}

    def log(self, text: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}", flush=True)

    def simulated_now(self, now: float | None = None) -> float:
        return max(0.0, ((now if now is not None else time.time()) - self.started_at) * self.speed)

    def _submit(self, activity: Activity, t: float) -> None:
        remaining = max(1.0, (activity.end - t) / self.speed)
        user = self.user_of(activity)
        argv = ["sbatch", "--parsable", f"--job-name={activity.name}", f"--nodelist={activity.node}", "--nodes=1",
                "--exclusive", f"--gres=gpu:{len(activity.gpus)}", f"--time={max(1, math.ceil(remaining / 60) + 1)}",
                "--output=/dev/null", *([f"--uid={user}"] if user != self.config["user"] else []),
                "--wrap", f"sleep {remaining:.1f}"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                                env={**os.environ, "SLURM_CONF": self.config["slurm_conf"]})
        if result.returncode != 0:
            self.jobs[activity.name] = ""
            self.log(f"sbatch for {activity.name} failed: {(result.stderr or result.stdout).strip()}")
            return
        job = result.stdout.strip().split(";")[0]
        self.jobs[activity.name] = job
        with open(self.directory / "jobs.jsonl", "a") as handle:
            handle.write(json.dumps({"activity": activity.name, "job": job, "node": activity.node, "user": user,
                                     "gpus": list(activity.gpus), "submitted_at": round(time.time(), 3)}) + "\n")

    def user_of(self, activity: Activity) -> str:
        """The user a training job runs as: one of the configured users (DEMO_USERS the host has), by the
        job's name; the driver's own user where there is none."""
        users = self.config.get("users") or []
        if not users:
            return self.config["user"]
        return users[int(hashlib.sha256(activity.name.encode()).hexdigest(), 16) % len(users)]

    def _owners(self, node: NodeSpec, t: float) -> dict:
        owners = {}
        for gpu in range(node.gpus):
            activity = self.model.activity_at(node.name, gpu, t)
            if activity is None:
                continue
            if activity.slurm:
                owners[str(gpu)] = {"kind": "slurm", "job": self.jobs.get(activity.name, ""), "user": self.user_of(activity),
                                    "name": activity.name}
            else:
                owners[str(gpu)] = {"kind": "inference", "service": activity.name}
        return owners | instance_owner_entries(self.model.instance_services.get(node.name))

    def reconcile_kubernetes(self) -> None:
        """The simulated Kubernetes' scheduler and kubelets, then the services its ready pods serve."""
        from . import kubernetes

        path = self.config.get("kubernetes")
        if not path:
            return
        kubernetes.reconcile(path, {node.name: node.sysroot for node in self.model.nodes if node.pool == "inference"})
        self.model.services = kubernetes.serving(path)
        self.model.instance_services = kubernetes.instance_owners(path)

    def step(self, now: float) -> None:
        t = self.simulated_now(now)
        self.reconcile_kubernetes()
        interval = int(t // INTERVAL_S)
        if self.config.get("slurm_conf"):
            for activity in self.model.activities(int(t // DAY_S)):
                if activity.slurm and activity.start <= t < activity.end and activity.name not in self.jobs:
                    self._submit(activity, t)
        if interval > self.truth_written + 1:
            with open(self.directory / "ground-truth.jsonl", "a") as handle:
                for done in range(self.truth_written + 1, interval):
                    for node in self.model.nodes:
                        for line in self.model.ground_truth(node, done):
                            handle.write(json.dumps(line, sort_keys=True) + "\n")
            self.truth_written = interval - 1
        now_ns = int(now * 1e9)
        for node in self.model.nodes:
            load = self.model.node_load(node, interval)
            with node_state.update(node.sysroot) as current:
                last = int(current.get("counters_ns") or now_ns)
                apply(current, load, max(0.0, (now_ns - last) / 1e9), now_ns, self._owners(node, t))
            hand_over(Path(node.sysroot))

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
        self.log(f"profile {self.model.profile} seed {self.model.seed} speed {self.speed:g} tick {self.tick:g} s")
        while not self.stopping:
            began = time.time()
            try:
                self.step(began)
            except (OSError, node_state.StateError, subprocess.SubprocessError) as exc:
                self.log(f"step failed: {exc}")
            time.sleep(max(0.0, self.tick - (time.time() - began)))
        now_ns = time.time_ns()
        for node in self.model.nodes:
            with contextlib.suppress(OSError, node_state.StateError), node_state.update(node.sysroot) as current:
                make_idle(current, now_ns)
            with contextlib.suppress(OSError):
                hand_over(Path(node.sysroot))
        self.log("stopped: every GPU idle")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != "run":
        print("usage: python -m appliance.simulation.workload run CONFIG.json", file=sys.stderr)
        return 2
    Driver(json.loads(Path(argv[2]).read_text())).run()
    return 0


# ---- the suite's side: start, stop, status (Django) ----------------------------------------------------

def workload_dir() -> Path:
    from django.conf import settings

    return Path(settings.SIMULATION_DIR) / "workload"


EXEC_WAIT_S = 30  # how long start() waits for the driver's process to show its own command line


def _pid() -> int | None:
    try:
        pid = int((workload_dir() / "driver.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, ValueError):
        return None
    config = str(workload_dir() / "config.json").encode()
    return pid if config in cmdline and status not in ("Z", "X") else None


def driver_pid() -> int | None:
    """The driver's pid while it runs (it reconciles the simulated Kubernetes and serves its services)."""
    return _pid()


def node_specs(appliance) -> tuple[list[dict], str, str]:
    """The nodes the model loads (GPU nodes of the training and inference pools) and the mount points
    their jobs read from (the first Lustre-like and the first NFS filesystem of the appliance)."""
    nodes = []
    for node in appliance.nodes.select_related("platform", "pool_membership__pool").order_by("name"):
        membership = getattr(node, "pool_membership", None)
        if membership is None or not node.sysroot or not node_state.exists(node.sysroot):
            continue
        state = node_state.load(node.sysroot)
        gpus = state.get("gpus", [])
        if not gpus:
            continue
        nodes.append(asdict(NodeSpec(node.name, membership.pool.kind, len(gpus),
                                     int(gpus[0].get("memory_total_bytes", 80 * GIB)), str(node.sysroot))))
    filesystems = list(appliance.filesystems.order_by("name"))
    training = next((fs.mount_point for fs in filesystems if fs.type in ("lustre", "beegfs")), "/")
    inference = next((fs.mount_point for fs in filesystems if fs.type.startswith("nfs")), training)
    return nodes, training, inference


def host_users() -> list[str]:
    """The DEMO_USERS this host has an account for (Slurm resolves a job's user on the host)."""
    import pwd

    found = []
    for name in DEMO_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        found.append(name)
    return found


def start(appliance, *, profile: str = "demo", speed: float = 60.0, seed: int = 1) -> dict:
    """Start the driver in the background (one per state directory). Training jobs need the simulated
    Slurm running (slurm.start)."""
    import getpass

    from django.conf import settings

    from appliance import audit

    from . import kubernetes, slurm

    if not appliance.simulated:
        raise WorkloadError(f"appliance {appliance.name} is not simulated: its GPUs run real work")
    if profile not in PROFILES:
        raise WorkloadError(f"--profile {profile}: unknown profile (known: {', '.join(PROFILES)})")
    if not 0 < speed <= 86400:
        raise WorkloadError(f"--speed {speed:g}: must be above 0 and at most 86400 (simulated seconds per second)")
    if _pid():
        raise WorkloadError(f"the workload model already runs (pid {_pid()}): stop it first")
    nodes, training_mount, inference_mount = node_specs(appliance)
    if not nodes:
        raise WorkloadError(f"appliance {appliance.name}: no prepared GPU node in a pool (run the bootstrap first)")
    needs_slurm = profile in ("demo", *TRAINING_KINDS) and any(node["pool"] == "training" for node in nodes)
    slurm_status = slurm.status(appliance)
    if needs_slurm and not (slurm_status["configured"] and slurm_status["controller"]
                            and slurm_status["controller"]["pid"]):
        raise WorkloadError("the simulated Slurm is not running: training jobs are submitted to it "
                            "(manage.py simulation start, after the workloads stage)")
    directory = workload_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ground-truth.jsonl", "jobs.jsonl"):
        (directory / name).unlink(missing_ok=True)
    config = {"directory": str(directory), "profile": profile, "speed": speed, "seed": seed, "nodes": nodes,
              "training_mount": training_mount, "inference_mount": inference_mount, "started_at": time.time(),
              "slurm_conf": str(slurm.conf_path()) if needs_slurm else "", "user": getpass.getuser(),
              "kubernetes": str(kubernetes.state_file(settings.SIMULATION_DIR, appliance.name)),
              "users": host_users() if os.geteuid() == 0 else []}
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (directory / "run.json").write_text(json.dumps(
        {key: config[key] for key in ("profile", "speed", "seed", "started_at")} | {"interval_s": INTERVAL_S},
        indent=1) + "\n")
    with open(directory / "driver.log", "a") as log:
        process = subprocess.Popen([sys.executable, "-m", "appliance.simulation.workload", "run",
                                    str(directory / "config.json")], cwd=str(settings.BASE_DIR), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    (directory / "driver.pid").write_text(f"{process.pid}\n")
    # Until the child has exec'd, /proc shows the parent's command line and _pid() would not know it (a second
    # start then passed the "already runs" check on a loaded machine): wait for it, or for its death.
    deadline = time.monotonic() + EXEC_WAIT_S
    while _pid() is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if _pid() is None:
        process.kill()
        process.wait()
        (directory / "driver.pid").unlink(missing_ok=True)
        tail = (directory / "driver.log").read_text(errors="replace")[-1500:]
        raise WorkloadError(f"the workload driver did not start (exit status {process.returncode}); "
                            f"{directory / 'driver.log'} ends: {tail}")
    audit.record("simulation.workload.start", target=appliance,
                 details={"profile": profile, "speed": speed, "seed": seed, "pid": process.pid,
                          "nodes": [node["name"] for node in nodes]})
    return {"pid": process.pid, "profile": profile, "speed": speed, "seed": seed, "directory": directory,
            "nodes": [node["name"] for node in nodes]}


def stop(appliance) -> dict:
    """Stop the driver (it leaves every GPU idle) and cancel the Slurm jobs it submitted."""
    from appliance import audit

    from . import slurm

    pid = _pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _pid():
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        if _pid():
            os.kill(pid, signal.SIGKILL)
    (workload_dir() / "driver.pid").unlink(missing_ok=True)
    jobs = []
    jobs_file = workload_dir() / "jobs.jsonl"
    if jobs_file.exists():
        jobs = [json.loads(line)["job"] for line in jobs_file.read_text().splitlines() if line.strip()]
    cancelled = [job for job in jobs if job]
    if cancelled and slurm.conf_path().is_file():
        slurm.client("scancel", *cancelled, check=False, timeout=20)
    if pid:
        audit.record("simulation.workload.stop", target=appliance, details={"pid": pid, "jobs_cancelled": len(cancelled)})
    return {"pid": pid, "jobs_cancelled": len(cancelled)}


def status(appliance) -> dict:
    """Whether the driver runs, its configuration, and how far the simulated time has gone."""
    pid = _pid()
    run_file = workload_dir() / "run.json"
    run = json.loads(run_file.read_text()) if run_file.exists() else {}
    result = {"running": pid is not None, "pid": pid, **run}
    config_file = workload_dir() / "config.json"
    if run and pid and config_file.exists():
        config = json.loads(config_file.read_text())
        t = max(0.0, (time.time() - run["started_at"]) * run["speed"])
        result["simulated_seconds"] = round(t)
        model = Model(config["profile"], int(config["seed"]), tuple(NodeSpec(**node) for node in config["nodes"]))
        # What runs now: Slurm jobs, and the inference services kept in the simulation's state only.
        result["activities"] = [{"name": a.name, "kind": a.kind, "node": a.node, "gpus": list(a.gpus),
                                 "slurm": a.slurm} for a in model.activities(int(t // DAY_S)) if a.start <= t < a.end]
    truth = workload_dir() / "ground-truth.jsonl"
    result["ground_truth"] = str(truth) if truth.exists() else ""
    return result


def node_placements(node):
    """The workload model's own inference services on `node` while the driver runs (telemetry.placements'
    provider): they stand for the services a real inference pool runs that the registry did not deploy,
    which no placement of the registry names; the registry's deployments and the Slurm jobs have providers
    of their own. None for a node of an appliance that is not simulated."""
    from appliance.telemetry.placements import Placement, Unavailable  # here: the driver runs without Django

    if not node.appliance.simulated:
        return None
    config_file = workload_dir() / "config.json"
    if _pid() is None or not config_file.exists():
        return []
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:  # rewritten by a start at this moment
        raise Unavailable(f"{config_file}: {exc}") from None
    model = Model(config["profile"], int(config["seed"]), tuple(NodeSpec(**spec) for spec in config["nodes"]))
    t = max(0.0, (time.time() - float(config["started_at"])) * float(config["speed"]))
    started = datetime.fromtimestamp(float(config["started_at"]), UTC)
    return [Placement(activity.name, started, None) for activity in model.activities(int(t // DAY_S))
            if activity.node == node.name and not activity.slurm and activity.start <= t < activity.end]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
