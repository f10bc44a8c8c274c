"""A held-out telemetry generator: per-minute rollups of HGX nodes as a collector sends them (InfluxDB line
protocol, one node per write), with the true cause of every GPU-second.

Written apart from appliance.analytics (it imports nothing of it) and from the simulation's workload model:
its own scenarios and value distributions, chosen from what the hardware does, not from the rules'
thresholds. What it covers:

- training ranks in lockstep (a job-wide SM activity each minute, ranks within 1.5% of it), utilization
  near 100%;
- NCCL-bound jobs: the fabric at 85-97% of line rate, utilization 70-98% (NCCL's kernels stay resident while
  they wait), SM activity 0.18-0.42;
- a mild straggler (one rank 1.2-1.3x its peers) and a severe one (0.9-0.98 against 0.3-0.42); the ranks that
  wait for it are communication-bound;
- input-bound phases on a Lustre mount whose smoke test measured 12 GB/s (reads at 84-99% of it) and on an NFS
  mount nobody measured (reads at its own ~7 GB/s limit, iowait 0.12-0.45: loaders block in the kernel);
- an inference service's replicas spread by a load balancer (busy at different levels), a notebook, a
  memory-only service, a GPU slowed by its power limit (SW power cap and HW slowdown, clock 1000-1500 MHz),
  GPUs nobody holds;
- jobs that start and end inside a minute (the minute's figures are time-weighted means; as the collector's
  rollup times its sweeps, the minute's `holders` field names each job's seconds and `hpc_job` the holder of
  the most seconds, nobody included), a collector outage (no lines for a node) and about 1% of GPU lines
  lost.

`generate(minutes, seed)` returns a `Telemetry`: the writes per node and the truth, {(node, gpu, minute):
[(seconds, label), ...]} where "no-data" marks the minutes whose line was not sent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

GIB_MIB = 1024
FB_TOTAL_MIB = 81559.0
PORTS_LINE_BPS = 8 * 400e9 / 8  # 8 NDR ports, bytes/s
LUSTRE_MEASURED_BPS = 12e9
NFS_LIMIT_BPS = 7e9
IDLE_CLOCK, MAX_CLOCK = 345.0, 1980.0
SW_POWER_CAP, HW_SLOWDOWN, GPU_IDLE = 0x4, 0x8, 0x1


@dataclass
class Phase:
    """What some GPUs of a node do from `start` to `end` (seconds since the first minute)."""

    start: int
    end: int
    kind: str
    job: str
    gpus: tuple[int, ...]
    special: tuple[int, ...] = ()  # the straggler's rank


@dataclass
class NodePlan:
    name: str
    pool: str
    mount: str
    fstype: str
    phases: list[Phase]
    silent: tuple[int, int] | None = None  # minutes [a, b) the collector sent nothing


@dataclass
class Telemetry:
    start_ns: int
    minutes: int
    nodes: list[NodePlan]
    lines: dict[str, list[str]] = field(default_factory=dict)
    truth: dict[tuple[str, int, int], list[tuple[float, str]]] = field(default_factory=dict)


def plans(minutes: int, rng: random.Random) -> list[NodePlan]:
    """Four nodes: three of the training pool, one of the inference pool. Phase edges fall inside minutes."""
    m = minutes * 60
    all_gpus = tuple(range(8))

    def edge(fraction):  # a second inside a minute, never on its boundary
        return int(fraction * minutes) * 60 + rng.randint(7, 53)

    a1, a2 = edge(0.4), edge(0.75)
    b1 = edge(0.5)
    c1 = edge(0.5)
    d1 = edge(0.2)
    return [
        NodePlan("hgx01", "training", "/mnt/lustre", "lustre", [
            Phase(0, a1, "train", "5101", all_gpus), Phase(a1, a2, "input", "5101", all_gpus)]),
        NodePlan("hgx02", "training", "/mnt/nfs", "nfs", [
            Phase(0, b1, "nccl", "5102", all_gpus), Phase(b1, m, "input", "5102", all_gpus)]),
        NodePlan("hgx03", "training", "/mnt/lustre", "lustre", [
            Phase(0, c1, "mild-straggler", "5103", all_gpus, special=(3,)),
            Phase(c1, m, "severe-straggler", "5104", all_gpus, special=(5,))]),
        NodePlan("hgx04", "inference", "/mnt/nfs", "nfs", [
            Phase(0, m, "serve", "chat", (0, 1, 2, 3)), Phase(d1, m, "notebook", "5105", (4,)),
            Phase(0, m, "memory-only", "embed", (5,)), Phase(0, m, "power-capped", "vision", (6,))],
                 silent=(int(minutes * 0.6), int(minutes * 0.6) + max(2, minutes // 8))),
    ]


TRUTH = {"train": "busy", "nccl": "communication-bound", "input": "input-bound", "serve": "busy",
         "notebook": "allocated-idle", "memory-only": "memory-only", "power-capped": "throttled", None: "idle-unallocated"}


def _label(phase: Phase | None, gpu: int) -> str:
    if phase is not None and phase.kind.endswith("straggler"):
        return "straggler" if gpu in phase.special else "communication-bound"
    return TRUTH[phase.kind if phase else None]


def _gpu_draw(phase: Phase | None, gpu: int, level: float, rng: random.Random) -> dict:
    """One GPU's figures over the part of a minute `phase` held it (`level`: the job's pace this minute)."""
    idle = {"util": 0.0, "sm": 0.0, "mem": 0.0, "clock": IDLE_CLOCK, "reasons": GPU_IDLE, "throttled": 0.0,
            "power": rng.uniform(60, 80), "nvlink": 0.0}
    if phase is None:
        return idle
    kind = phase.kind
    busy = {"util": min(100.0, rng.gauss(96.5, 1.5)), "mem": rng.uniform(52, 78) * GIB_MIB,
            "clock": rng.choice((1980.0, 1965.0, 1950.0)), "reasons": 0, "throttled": 0.0,
            "power": rng.uniform(560, 700), "nvlink": rng.uniform(60, 220) * 1e9}
    jitter = 1 + rng.gauss(0, 0.015)
    if kind == "train":
        return busy | {"sm": level * jitter}
    if kind == "nccl":
        return busy | {"util": rng.uniform(70, 98), "sm": rng.uniform(0.18, 0.42), "power": rng.uniform(300, 450)}
    if kind == "input":
        return busy | {"util": rng.uniform(15, 65), "sm": rng.uniform(0.05, 0.32), "power": rng.uniform(150, 300),
                       "nvlink": rng.uniform(1, 10) * 1e9}
    if kind == "mild-straggler":
        factor = rng.uniform(1.2, 1.3) if gpu in phase.special else jitter
        return busy | {"sm": min(0.99, level * factor)}
    if kind == "severe-straggler":
        if gpu in phase.special:
            return busy | {"util": 100.0, "sm": rng.uniform(0.9, 0.98), "power": rng.uniform(680, 700)}
        return busy | {"util": rng.uniform(55, 90), "sm": rng.uniform(0.3, 0.42), "power": rng.uniform(300, 420)}
    if kind == "serve":
        load = rng.uniform(0.2, 0.75)  # a load balancer's spread: each replica its own share of requests
        return busy | {"util": min(100.0, 100 * load * rng.uniform(1.1, 1.4)), "sm": load,
                       "mem": rng.uniform(30, 42) * GIB_MIB, "power": 150 + 500 * load, "nvlink": 0.0}
    if kind == "notebook":
        return idle | {"util": rng.uniform(0, 3), "sm": rng.uniform(0, 0.02), "mem": rng.uniform(2, 10) * GIB_MIB,
                       "power": rng.uniform(80, 110)}
    if kind == "memory-only":
        return idle | {"util": rng.uniform(0, 4), "sm": rng.uniform(0, 0.03), "mem": rng.uniform(60, 76) * GIB_MIB,
                       "power": rng.uniform(90, 120)}
    if kind == "power-capped":
        return busy | {"sm": rng.uniform(0.75, 0.9), "clock": rng.uniform(1000, 1500),
                       "reasons": SW_POWER_CAP | HW_SLOWDOWN, "throttled": rng.uniform(0.7, 1.0), "power": 700.0}
    raise ValueError(kind)


def _node_draw(plan: NodePlan, kinds: dict[str, float], rng: random.Random) -> dict:
    """The node's figures: reads, CPUs and fabric, weighted by the seconds each kind ran in the minute."""
    reads = iowait = busy = ib = 0.0
    for kind, share in kinds.items():
        if kind == "input":
            limit = LUSTRE_MEASURED_BPS if plan.fstype == "lustre" else NFS_LIMIT_BPS
            reads += share * limit * rng.uniform(0.84, 0.99)
            iowait += share * (rng.uniform(0.03, 0.3) if plan.fstype == "lustre" else rng.uniform(0.12, 0.45))
            busy += share * rng.uniform(0.3, 0.7)
            ib += share * reads / PORTS_LINE_BPS
        elif kind == "nccl":
            ib += share * rng.uniform(0.85, 0.97)
            busy += share * rng.uniform(0.1, 0.3)
            iowait += share * rng.uniform(0.0, 0.03)
            reads += share * rng.uniform(0.05, 0.3) * 1e9
        elif kind in ("train", "mild-straggler", "severe-straggler"):
            ib += share * rng.uniform(0.1, 0.45)
            busy += share * rng.uniform(0.15, 0.4)
            iowait += share * rng.uniform(0.0, 0.04)
            reads += share * rng.uniform(0.1, 1.5) * 1e9
        else:
            busy += share * rng.uniform(0.02, 0.2)
            iowait += share * rng.uniform(0.0, 0.02)
            reads += share * rng.uniform(0.0, 0.2) * 1e9
    return {"reads": reads, "iowait": min(iowait, 0.95), "busy": min(busy + 0.02, 1.0),
            "ib": min(ib, 0.99) * PORTS_LINE_BPS}


def _phase_at(plan: NodePlan, gpu: int, second: int) -> Phase | None:
    return next((p for p in plan.phases if gpu in p.gpus and p.start <= second < p.end), None)


def _parts(plan: NodePlan, gpu: int, minute: int) -> list[tuple[Phase | None, int]]:
    """The phases that held `gpu` in `minute` and their seconds, in order."""
    edges = sorted({minute * 60, minute * 60 + 60} | {e for p in plan.phases if gpu in p.gpus
                                                      for e in (p.start, p.end) if minute * 60 < e < minute * 60 + 60})
    return [(_phase_at(plan, gpu, a), b - a) for a, b in zip(edges, edges[1:], strict=False)]


def _field(value: float) -> str:
    return repr(round(float(value), 6))


def generate(minutes: int = 60, seed: int = 1, start_ns: int = 0, lost_share: float = 0.01) -> Telemetry:
    rng = random.Random(f"heldout/{seed}")
    telemetry = Telemetry(start_ns, minutes, plans(minutes, rng))
    for plan in telemetry.nodes:
        lines = telemetry.lines.setdefault(plan.name, [])
        for minute in range(minutes):
            t_ns = start_ns + minute * 60 * 10**9
            silent = plan.silent and plan.silent[0] <= minute < plan.silent[1]
            levels = {phase.job: rng.uniform(0.55, 0.9) if phase.kind == "train" else rng.uniform(0.5, 0.62)
                      for phase in plan.phases}
            kinds: dict[str, float] = {}
            utils = []
            gpu_lines = []
            for gpu in range(8):
                parts = _parts(plan, gpu, minute)
                truth = [(float(seconds), _label(phase, gpu)) for phase, seconds in parts]
                held: dict[str, int] = {}  # each holder's seconds ("" nobody), in the order they held the GPU
                mix: dict[str, float] = {}
                reasons = 0
                for phase, seconds in parts:
                    draw = _gpu_draw(phase, gpu, levels.get(phase.job, 0.7) if phase else 0.0, rng)
                    for name, value in draw.items():
                        if name == "reasons":
                            reasons |= int(value)
                        else:
                            mix[name] = mix.get(name, 0.0) + value * seconds / 60
                    held[phase.job if phase else ""] = held.get(phase.job if phase else "", 0) + seconds
                    if phase is not None:
                        kinds[phase.kind] = kinds.get(phase.kind, 0.0) + seconds / 60 / 8
                holder = max(held, key=held.get)
                changed = set(held) != {holder} and any(held)
                lost = silent or rng.random() < lost_share
                telemetry.truth[(plan.name, gpu, minute)] = [(60.0, "no-data")] if lost else truth
                if lost:
                    continue
                utils.append(mix["util"])
                tags = f"gpu_rollup,Hostname={plan.name},gpu={gpu},UUID=GPU-{plan.name}-{gpu}"
                tags += f",hpc_job={holder}" if holder else ""
                sm = min(mix["sm"], 1.0)
                fields = {"step": "60", "samples": "60", "util": _field(mix["util"]), "util_max": _field(min(100.0, mix["util"] * 1.05)),
                          "sm_active": _field(sm), "tensor_active": _field(sm * 0.7), "dram_active": _field(sm * 0.5),
                          "fb_used_mib": _field(mix["mem"]), "fb_used_max_mib": _field(mix["mem"]),
                          "fb_total_mib": _field(FB_TOTAL_MIB), "power_w": _field(mix["power"]),
                          "power_max_w": _field(mix["power"]), "temp_c": _field(35 + mix["power"] / 20),
                          "sm_clock_mhz": _field(mix["clock"]), "throttle_reasons": str(reasons),
                          "throttled_share": _field(mix["throttled"]), "nvlink_bps": _field(mix["nvlink"]),
                          "xid_count": "0", "ecc_dbe": "0"}
                if changed:
                    fields["holders"] = '"' + ",".join(f"{job}:{seconds}" for job, seconds in held.items() if job) + '"'
                gpu_lines.append(f"{tags} {','.join(f'{k}={v}' for k, v in fields.items())} {t_ns}")
            if silent:
                continue
            kinds[None] = max(0.0, 1 - sum(kinds.values()))
            node = _node_draw(plan, {k: v for k, v in kinds.items() if k}, rng)
            lines += gpu_lines
            fields = {"step": "60", "samples": "60", "gpus": "8", "gpu_util": _field(sum(utils) / max(len(utils), 1)),
                      "ib_tx_bps": _field(node["ib"]), "ib_rx_bps": _field(node["ib"] * 0.97),
                      "ib_line_bps": _field(PORTS_LINE_BPS), "ib_xmit_wait": _field(node["ib"] / 1e6),
                      "fs_read_bps": _field(node["reads"]), "fs_write_bps": _field(node["reads"] * 0.02),
                      "cpu_busy": _field(node["busy"]), "cpu_iowait": _field(node["iowait"])}
            lines.append(f"node_rollup,Hostname={plan.name} {','.join(f'{k}={v}' for k, v in fields.items())} {t_ns}")
            lines.append(f"mount_rollup,Hostname={plan.name},mount={plan.mount},fstype={plan.fstype} step=60,"
                         f"read_bps={_field(node['reads'])},write_bps={_field(node['reads'] * 0.02)} {t_ns}")
    return telemetry


def _matched(truth: list[tuple[float, str]], got: list[tuple[float, str]]) -> dict[tuple[str, str], float]:
    """One minute's seconds by (true, attributed) cause: each cause's seconds in both right, the rest of
    each true cause spread over the rest of the attributed ones by their seconds."""
    true_left: dict[str, float] = {}
    got_left: dict[str, float] = {}
    for seconds, label in truth:
        true_left[label] = true_left.get(label, 0.0) + seconds
    for seconds, label in got:
        got_left[label] = got_left.get(label, 0.0) + seconds
    pairs: dict[tuple[str, str], float] = {}
    for label in true_left:
        right = min(true_left[label], got_left.get(label, 0.0))
        if right:
            pairs[(label, label)] = right
            true_left[label] -= right
            got_left[label] -= right
    rest = sum(got_left.values())
    for label, seconds in true_left.items():
        for other, share in got_left.items():
            if seconds and share:
                pairs[(label, other)] = pairs.get((label, other), 0.0) + seconds * share / rest
    return pairs


def grade(telemetry: Telemetry, attributed: dict[tuple[str, int, int], object]) -> dict:
    """GPU-seconds by (true, attributed) cause; a minute with no line is attributed "no-data" unless the
    caller says otherwise. `attributed`: each minute's cause, or its parts [(seconds, cause)] where the
    minute changed hands (within a minute the seconds are matched cause by cause). Returns {"confusion":
    {(true, got): seconds}, "recall": {true: share}, "accuracy": share of all seconds,
    "received_accuracy": share of the seconds whose line was sent, "changed_hands": (seconds right, seconds)
    of the minutes whose truth has more than one cause (a job started or ended inside them)}."""
    confusion: dict[tuple[str, str], float] = {}
    changed = [0.0, 0.0]
    for key, parts in telemetry.truth.items():
        got = attributed.get(key, "no-data")
        for pair, seconds in _matched(parts, [(60.0, got)] if isinstance(got, str) else got).items():
            confusion[pair] = confusion.get(pair, 0.0) + seconds
            if len({label for _, label in parts}) > 1:
                changed[0] += seconds if pair[0] == pair[1] else 0.0
                changed[1] += seconds
    totals: dict[str, float] = {}
    right: dict[str, float] = {}
    for (label, got), seconds in confusion.items():
        totals[label] = totals.get(label, 0.0) + seconds
        right[label] = right.get(label, 0.0) + (seconds if label == got else 0.0)
    received = {label: totals[label] for label in totals if label != "no-data"}
    return {"confusion": confusion, "recall": {label: right[label] / totals[label] for label in totals},
            "accuracy": sum(right.values()) / sum(totals.values()),
            "received_accuracy": sum(right[label] for label in received) / sum(received.values()),
            "changed_hands": tuple(changed)}


def table(result: dict) -> str:
    """The confusion matrix in GPU-minutes, with each true cause's recall."""
    labels = sorted({label for pair in result["confusion"] for label in pair})
    width = 10
    lines = ["true \\ attributed".rjust(22) + "".join(label[:9].rjust(width) for label in labels) + "   recall"]
    for true in labels:
        row = [result["confusion"].get((true, got), 0.0) / 60 for got in labels]
        if not sum(row):
            continue
        lines.append(true.rjust(22) + "".join(f"{value:{width}.1f}" for value in row)
                     + f"  {100 * result['recall'][true]:6.1f}%")
    return "\n".join(lines)
