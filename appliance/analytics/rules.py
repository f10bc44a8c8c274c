"""The rules that give every GPU (or MIG instance) bucket exactly one cause, written as data.

A bucket is judged from three things only: its own GPU rollup, its node's rollup of the same bucket, and
the rollups of the other GPUs its job held in that bucket (its peers). Records are plain mappings with
the field names of telemetry's GpuRollup and NodeRollup, so the rules run the same on rows read from the
database, on rows a benchmark derives from the workload model, and on rows a test writes by hand. Nothing
here imports Django.

The rules are tried in the order of RULES; the first that holds gives the cause, and `busy` is what is
left: a held GPU that computes with no bottleneck found. Each rule keeps its thresholds in its own
`thresholds` mapping (the documentation a user reads), and a verdict carries the evidence it rests on:
every number compared, the threshold it was compared with, and whether it held.

Why this order:
- a GPU nobody holds is idle whatever else happens on its node;
- reduced clocks explain low throughput before anything the job does: a hot GPU is the cause, and its
  peers, which then wait for it, are told apart by the later rules;
- a GPU whose job computes nothing on it is idle (or holds only memory), even on a node whose storage is
  saturated by someone else's reads;
- a GPU that computes a little while its node's reads saturate the mount waits on input; the fabric
  counters of such a node are high too (storage crosses InfiniBand), so input comes before communication;
- a GPU far busier than its job's others is the one holding them back (straggler); the others wait in
  collectives (communication-bound), as they do when the fabric runs near its line rate;
- a held GPU that does very little is idle within its allocation (a service between requests).

What "activity" means: where the GPU reports DCGM's profiling fields, SM activity
(DCGM_FI_PROF_SM_ACTIVE) alone; utilization (DCGM_FI_DEV_GPU_UTIL) only where it does not, and the
evidence names the field used. Utilization is the share of time a kernel was resident, not the share of
the SMs that worked: NCCL's collective kernels stay resident while they wait for the network, so a job
blocked on all-reduce reads 70-98% utilization at 0.2-0.4 SM activity (NVIDIA's DCGM documentation of
DCGM_FI_DEV_GPU_UTIL vs DCGM_FI_PROF_SM_ACTIVE; dcgm-exporter's profiling metrics).

Peers: only the GPUs of a collective (a training pool's job, whose ranks meet at every step) compare
themselves with each other. An inference service's replicas each serve what the load balancer sends them;
one busier than another is not holding anyone back (Context.collective).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

LABELS = ("busy", "idle-unallocated", "allocated-idle", "input-bound", "communication-bound", "straggler",
          "throttled", "memory-only")

# NVML clock event reasons that slow a busy GPU (nvml.h nvmlClocksEventReason*): SW power cap, HW
# slowdown, SW thermal, HW thermal, HW power brake.
SLOWDOWN_REASONS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40,
                    "hw_power_brake": 0x80}
# Nominal figures used where the inventory measured nothing; a verdict that rests on one says so.
NOMINAL_MAX_SM_CLOCK_MHZ = 1980          # H100/H200 SXM5 boost clock
NOMINAL_NVLINK_BPS = 900e9               # NVLink 4, 18 links, both directions
# A mount's reads are compared only with a figure measured for that mount (the storage stage's smoke test
# of the node) or stated for its type by the platform: never with another filesystem's figure (a Lustre
# benchmark of 21.4 GB/s made an NFS mount saturated at its own ~7 GB/s look a third used). A mount with
# neither is compared with its own ceiling: the rate it has sustained in its own recent history (below),
# which counts only when the node's loaders also block in the kernel; a mount with no history either is
# judged on iowait and data-loader CPUs alone, and the evidence says "no measured rate".
NO_MEASURED_RATE = "no measured rate"
# A mount's own ceiling: the CEILING_QUANTILE of its per-minute reads on the node over the CEILING_LOOKBACK_S
# before the minutes judged, learned once it has CEILING_MIN_MINUTES minutes of reads. A mount at its limit
# stays there for minutes on end (an NFS server's link, its disks), so a high quantile finds the plateau
# while a one-minute burst served from the page cache stays above it. On its own a ceiling says only that
# the mount gives no more than it used to, not that anyone waits for it (a mount read lightly all day reads
# at its own ceiling too): the loaders' iowait must say so as well (`ceiling_iowait` of waits-on-input).
CEILING_QUANTILE = 0.99
CEILING_LOOKBACK_S = 24 * 3600
CEILING_MIN_MINUTES = 30


@dataclass(frozen=True)
class Reference:
    """A figure a measurement is compared with, and where it comes from (shown in the evidence).
    `learned`: the figure is a mount's ceiling learned from its own reads, not a measurement or a stated
    figure (it counts only with the node's iowait)."""

    value: float
    source: str
    learned: bool = False


@dataclass
class Context:
    """What a rule may look at for one bucket of one GPU.

    `storage` maps a mount point to the read throughput that node's smoke test measured on it (bytes/s),
    or the figure its platform states for the mount's type; a mount not in it has no measured rate.
    `collective`: whether the GPU's job is a collective (a training pool's job), whose GPUs are each
    other's peers; an inference service's replicas are not."""

    gpu: Mapping
    node: Mapping | None = None
    peers: Sequence[Mapping] = ()
    storage: Mapping[str, Reference] = field(default_factory=dict)
    collective: bool = True
    max_sm_clock: Reference = Reference(NOMINAL_MAX_SM_CLOCK_MHZ, "nominal boost clock of the GPU")
    nvlink_line: Reference = Reference(NOMINAL_NVLINK_BPS, "nominal NVLink bandwidth of the GPU")


class Check(NamedTuple):
    """One comparison a verdict rests on: `metric` `op` `threshold` was `held`. (A named tuple: every
    bucket makes a dozen of these, and a frozen dataclass costs twice as much to build.)"""

    metric: str
    value: float | str | None
    op: str
    threshold: float | str | None
    held: bool
    note: str = ""

    def as_dict(self) -> dict:
        result = {"metric": self.metric, "value": self.value, "op": self.op, "threshold": self.threshold,
                  "held": self.held}
        return result | ({"note": self.note} if self.note else {})


@dataclass(frozen=True)
class Verdict:
    label: str
    rule: str
    evidence: tuple[Check, ...]

    def as_dict(self) -> dict:
        return {"label": self.label, "rule": self.rule, "evidence": [check.as_dict() for check in self.evidence]}


@dataclass(frozen=True)
class Rule:
    name: str
    label: str
    thresholds: Mapping[str, float]
    test: Callable[[Context, Mapping[str, float]], tuple[bool, list[Check]]]

    @property
    def doc(self) -> str:
        return (self.test.__doc__ or "").strip()


# ---- helpers ------------------------------------------------------------------------------------------

def _num(record: Mapping | None, name: str) -> float | None:
    value = (record or {}).get(name)
    return None if value is None else float(value)


def _compare(metric: str, value: float | None, op: str, threshold: float, note: str = "") -> Check:
    if value is None:
        return Check(metric, None, op, threshold, False, note or "not measured")
    held = {"<": value < threshold, "<=": value <= threshold, ">=": value >= threshold, ">": value > threshold}[op]
    return Check(metric, round(value, 6), op, threshold, held, note)


def _activity(record: Mapping) -> tuple[str, float | None]:
    """The GPU's compute activity: SM activity (0-1) where profiling metrics exist, else utilization / 100."""
    sm = _num(record, "sm_active")
    if sm is not None:
        return "sm_active", sm
    util = _num(record, "util")
    return "util", None if util is None else util / 100


def _memory_share(record: Mapping) -> float | None:
    used, total = _num(record, "fb_used_mib"), _num(record, "fb_total_mib")
    return used / total if used is not None and total else None


PROFILED = "profiling field"
UNPROFILED = "utilization: the GPU reports no profiling fields"


def _below(ctx: Context, util_threshold: float, sm_threshold: float) -> Check:
    """The GPU's activity under a level: SM activity against `sm_threshold` where the GPU has it, else
    utilization against `util_threshold` (the note says which)."""
    metric, activity = _activity(ctx.gpu)
    if metric == "sm_active":
        return _compare("sm_active", activity, "<", sm_threshold, PROFILED)
    return _compare("util", _num(ctx.gpu, "util"), "<", util_threshold, UNPROFILED)


def _stalled(ctx: Context, t: Mapping) -> list[Check]:
    return [_below(ctx, t["stalled_util"], t["stalled_sm_active"])]


# ---- the rules ----------------------------------------------------------------------------------------

def _unallocated(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """No job or service held the GPU in the bucket and it computed little (under the level a held GPU
    is "used a little" at): idle and free for anyone. A GPU without a holder that computes more falls
    through to the other rules (its job map was not seen), with this evidence kept. The causes that
    blame a holder (allocated-idle, memory-only) need one."""
    checks = [Check("job", ctx.gpu.get("job") or "", "==", "", not ctx.gpu.get("job"))]
    if _activity(ctx.gpu)[1] is None:  # nothing measured: no holder, nothing computed that anyone saw
        checks.append(Check("util", None, "<", t["util"], True, "not measured"))
    else:
        checks.append(_below(ctx, t["util"], t["sm_active"]))
    return all(c.held for c in checks), checks


def _held(ctx: Context) -> Check:
    return Check("job", ctx.gpu.get("job") or "", "!=", "", bool(ctx.gpu.get("job")))


def _throttled(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The GPU ran slowed by its power or thermal limits most of the bucket: a slowdown reason (power cap,
    thermal, hardware slowdown, power brake) in at least half of the sweeps AND the SM clock well under
    its maximum. A GPU at its power cap that keeps its full clock is not throttled (it is simply busy)."""
    reasons = int(ctx.gpu.get("throttle_reasons") or 0)
    names = [name for name, bit in SLOWDOWN_REASONS.items() if reasons & bit]
    clock = _num(ctx.gpu, "sm_clock_mhz")
    checks = [_compare("throttled_share", _num(ctx.gpu, "throttled_share"), ">=", t["throttled_share"]),
              Check("throttle_reasons", ",".join(names) or "none", "in", ",".join(SLOWDOWN_REASONS), bool(names)),
              _compare("sm_clock_ratio", None if clock is None else clock / ctx.max_sm_clock.value, "<=",
                       t["clock_ratio"], f"SM clock {clock} MHz of {ctx.max_sm_clock.value:g} MHz "
                                         f"({ctx.max_sm_clock.source})")]
    return all(c.held for c in checks), checks


def _near_zero(ctx: Context, t: Mapping) -> list[Check]:
    return [_held(ctx), _below(ctx, t["util"], t["sm_active"])]


def _memory_only(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The holder keeps a large part of the GPU's memory while computing next to nothing: a service that
    would fit a smaller slice (MIG or time-slicing)."""
    checks = _near_zero(ctx, t) + [_compare("memory_share", _memory_share(ctx.gpu), ">=", t["memory_share"],
                                            f"{_num(ctx.gpu, 'fb_used_mib')} of {_num(ctx.gpu, 'fb_total_mib')} MiB")]
    return all(c.held for c in checks), checks


def _allocated_idle(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The holder computes next to nothing on the GPU and keeps little of its memory (a notebook left
    open, GPUs a job asked for and does not use)."""
    checks = _near_zero(ctx, t)
    return all(c.held for c in checks), checks


def _input_bound(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The GPU stalls (low SM activity) while its node waits on input: a mount's reads at or near what
    that node's smoke test measured on it; or, for a mount with no measured rate, at or near its own
    ceiling (the rate it sustained in its recent history) while the node's iowait says its loaders block
    (a mount with neither is judged on the rest, and its evidence says "no measured rate"); or high
    iowait; or CPUs saturated by data loaders."""
    checks = _stalled(ctx, t)
    node = ctx.node or {}
    saturation: list[Check] = []
    mounts = node.get("mounts") or {}
    for mount, figures in sorted(mounts.items()):
        reference = ctx.storage.get(mount)
        read = _num(figures, "read_bps")
        if reference is None:
            saturation.append(Check(f"read_share {mount}", None, ">=", t["read_share"], False,
                                    f"{read} B/s, {NO_MEASURED_RATE}"))
            continue
        share = _compare(f"read_share {mount}", None if read is None else read / reference.value, ">=",
                         t["read_share"], f"{read} B/s of {reference.value:g} B/s ({reference.source})")
        if reference.learned:
            iowait = _num(node, "cpu_iowait")
            blocked = iowait is not None and iowait >= t["ceiling_iowait"]
            share = share._replace(held=share.held and blocked,
                                   note=f"{share.note}; {NO_MEASURED_RATE}: a ceiling counts with cpu_iowait >= "
                                        f"{t['ceiling_iowait']:g}, it was {iowait}")
        saturation.append(share)
    if not mounts:
        saturation.append(Check("read_share", None, ">=", t["read_share"], False,
                                f"{_num(node, 'fs_read_bps')} B/s, no per-mount figures, {NO_MEASURED_RATE}"))
    saturation += [_compare("cpu_iowait", _num(node, "cpu_iowait"), ">=", t["cpu_iowait"]),
                   _compare("cpu_busy", _num(node, "cpu_busy"), ">=", t["cpu_busy"])]
    waiting = any(c.held for c in saturation)
    return all(c.held for c in checks) and waiting, checks + saturation


def _peer_activities(ctx: Context) -> tuple[str, list[float]]:
    metric, _ = _activity(ctx.gpu)
    values = []
    for peer in ctx.peers if ctx.collective else ():
        value = _num(peer, "sm_active") if metric == "sm_active" else _num(peer, "util")
        if value is not None:
            values.append(value if metric == "sm_active" else value / 100)
    return metric, values


def _straggler(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The GPU works while the other GPUs of its job wait for it: its activity is well above the median
    of its peers' (they wait for it at every collective). A rank 10-30% slower than the others costs the
    whole job that much (synchronous data parallelism runs at the pace of its slowest rank), so the ratio
    is 1.15: above the few percent healthy ranks of one job differ by, below the mild stragglers that
    matter."""
    metric, activity = _activity(ctx.gpu)
    _, peers = _peer_activities(ctx)
    return _straggles(metric, activity, peers, t)


def _straggles(metric: str, activity: float | None, peers: list[float], t: Mapping) -> tuple[bool, list[Check]]:
    """Whether a GPU of `activity` straggles among `peers`: well above their median, and above the
    busiest of them by `ratio_to_next` (a rank that stands out, not the top of a job whose ranks spread)."""
    checks = [_compare("peers", float(len(peers)), ">=", t["peers"])]
    if peers:
        median, busiest = statistics.median(peers), max(peers)
        checks += [_compare(metric, activity, ">=", t["activity"]),
                   _compare(f"{metric} / peers' median", None if activity is None or not median else activity / median,
                            ">=", t["ratio_to_peers"], f"peers' median {median:.3f}"),
                   _compare(f"{metric} / busiest peer's", None if activity is None or not busiest else activity / busiest,
                            ">=", t["ratio_to_next"], f"busiest peer {busiest:.3f}")]
    return all(c.held for c in checks), checks


def _communication_bound(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The GPU waits in its job's collectives: its busiest peer is the job's straggler (by the straggler
    rule, among the others) and this GPU is behind it by the straggler's margin (it waits for it at every
    step, however busy it is itself); or the GPU stalls while a peer is far busier (several slow GPUs:
    none stands out, all are waited for), or while the node's InfiniBand or the GPU's NVLink runs near
    its line rate."""
    metric, activity = _activity(ctx.gpu)
    _, peers = _peer_activities(ctx)
    behind = None
    if peers and activity is not None:
        busiest = max(peers)
        others = list(peers)
        others.remove(busiest)
        straggles, _ = _straggles(metric, busiest, [*others, activity], STRAGGLER)
        behind = _compare(f"{metric} / busiest peer's", activity / busiest if busiest else None, "<=",
                          t["ratio_to_busiest_peer"], f"busiest peer {busiest:.3f}"
                          + (", the job's straggler" if straggles else ", not a straggler"))
        if straggles and behind.held and activity < busiest:
            return True, [behind]
        behind = _compare(f"{metric} / busiest peer's", activity / busiest if busiest else None, "<=",
                          t["ratio_to_far_peer"], f"busiest peer {busiest:.3f}")
    checks = _stalled(ctx, t)
    node = ctx.node or {}
    waits = [behind] if behind else []
    line = _num(node, "ib_line_bps")
    ib = max(_num(node, "ib_tx_bps") or 0.0, _num(node, "ib_rx_bps") or 0.0)
    waits.append(_compare("ib_line_share", ib / line if line else None, ">=", t["line_share"],
                          f"port_xmit_wait {node.get('ib_xmit_wait')}/s"))
    nvlink = _num(ctx.gpu, "nvlink_bps")
    waits.append(_compare("nvlink_line_share", None if nvlink is None else nvlink / ctx.nvlink_line.value, ">=",
                          t["line_share"], ctx.nvlink_line.source))
    return all(c.held for c in checks) and any(c.held for c in waits), checks + waits


def _low_use(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """The holder keeps the GPU but uses a small part of it (a service between requests): held idle."""
    checks = [_held(ctx), _below(ctx, t["util"], t["sm_active"])]
    return all(c.held for c in checks), checks


# SM activity under 0.5 (or, without profiling fields, utilization under 75%): the GPU's SMs wait more
# than they work.
STALLED = {"stalled_util": 75.0, "stalled_sm_active": 0.5}
NEAR_ZERO = {"util": 10.0, "sm_active": 0.05}
LITTLE_USE = {"util": 20.0, "sm_active": 0.15}
# A node whose loaders block in the kernel a tenth of the time while a mount reads at its own ceiling waits on
# that mount: the reads are the half of the evidence the 0.2 of iowait alone stands in for. The nodes of a
# healthy training job sit at a few percent of iowait (prefetching loaders read ahead of the step).
CEILING_IOWAIT = 0.1
STRAGGLER_RATIO = 1.15
# A straggler also leads the next busiest rank by 10%: the healthy ranks of a job spread a few percent
# (and a model drawing each rank apart, up to 15%), a rank that holds the others back stands out.
STRAGGLER = {"peers": 1, "activity": 0.3, "ratio_to_peers": STRAGGLER_RATIO, "ratio_to_next": 1.1}

RULES: tuple[Rule, ...] = (
    Rule("no-holder", "idle-unallocated", LITTLE_USE, _unallocated),
    Rule("clocks-slowed", "throttled", {"throttled_share": 0.5, "clock_ratio": 0.85}, _throttled),
    Rule("memory-held-no-compute", "memory-only", NEAR_ZERO | {"memory_share": 0.25}, _memory_only),
    Rule("held-no-compute", "allocated-idle", NEAR_ZERO, _allocated_idle),
    Rule("waits-on-input", "input-bound", STALLED | {"read_share": 0.8, "cpu_iowait": 0.2, "cpu_busy": 0.9,
                                                     "ceiling_iowait": CEILING_IOWAIT},
         _input_bound),
    Rule("holds-back-its-job", "straggler", STRAGGLER, _straggler),
    Rule("waits-on-peers-or-fabric", "communication-bound",
         STALLED | {"ratio_to_busiest_peer": round(1 / STRAGGLER_RATIO, 3), "ratio_to_far_peer": 0.6,
                    "line_share": 0.8}, _communication_bound),
    Rule("held-little-use", "allocated-idle", LITTLE_USE, _low_use),
)


def _busy(ctx: Context, t: Mapping) -> tuple[bool, list[Check]]:
    """What is left: the holder computes on the GPU and no rule above found a bottleneck."""
    metric, activity = _activity(ctx.gpu)
    return True, [_compare("util", _num(ctx.gpu, "util"), ">=", 0.0),
                  _compare(metric, activity, ">=", 0.0, "no bottleneck rule held")]


BUSY = Rule("computes", "busy", {}, _busy)


def classify(ctx: Context) -> Verdict:
    """The one cause of a bucket, with the checks of the rule that gave it."""
    for rule in RULES:
        held, checks = rule.test(ctx, rule.thresholds)
        if held:
            return Verdict(rule.label, rule.name, tuple(checks))
    return Verdict(BUSY.label, BUSY.name, tuple(BUSY.test(ctx, BUSY.thresholds)[1]))


def describe() -> list[dict]:
    """The rules as a user reads them: order, cause, thresholds and what each means."""
    return [{"rule": rule.name, "label": rule.label, "thresholds": dict(rule.thresholds), "doc": rule.doc}
            for rule in (*RULES, BUSY)]
