"""Findings: what the attributed GPU-hours say a person should do, with the figures each rests on.

Each detector reads one window of CauseHour rows (and, for its evidence, the rollups and the inventory's
measured references) and returns `Candidate`s; `refresh` turns them into `Finding` rows, one per subject
(`key`): a subject found again while open is updated, a resolved one that comes back is opened again, one a
person accepted or dismissed keeps its decision. An open finding whose subject was measured in the window
and no longer meets its detector's threshold is resolved. A refresh that opens or resolves findings is
audited (`analytics.findings.refresh`); every decision of a person is audited too (`accept`, `dismiss`).

Thresholds are named constants below; each says what it compares. Shares are of the GPU-seconds the
subject held (a job's) or measured (a GPU's, a pool's) in the window.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from appliance import audit

from . import profiling, rules
from .models import CAUSE_FIELDS, AttributionCursor, CauseHour, Finding
from .texts import gettext as _
from .texts import in_language, joined, pgettext

# ---- thresholds -------------------------------------------------------------------------------------------
# A job (or GPU) that held (or measured) fewer GPU-hours than this in the window is not judged: too little to
# act on. Small on purpose: the demo appliance runs a simulated day in 24 minutes (its jobs last minutes),
# and the inbox orders findings by the GPU-hours at stake, so a small one never hides a large one.
MIN_SUBJECT_GPU_HOURS = 0.05
# input-bound: a job whose GPUs waited on input at least this share of the GPU-seconds it held.
INPUT_BOUND_MIN_SHARE = 0.20
# Reads at or above this share of the mount's measured (smoke test) throughput: the mount is the limit.
MOUNT_SATURATED_SHARE = 0.80
# Node CPUs busy at or above this share: the data loaders are CPU-bound. iowait at or above: reads block.
CPU_SATURATED = 0.90
IOWAIT_HIGH = 0.20
# communication-bound: a job whose GPUs waited on their peers or the fabric at least this share of its time;
# the fabric counts as saturated at or above FABRIC_SATURATED_SHARE of the ports' line rate.
COMMUNICATION_BOUND_MIN_SHARE = 0.30
FABRIC_SATURATED_SHARE = 0.80
# straggler: a GPU judged straggler at least this share of the seconds it held for its jobs, or of the seconds it
# held for one of them (a job it held at least MIN_SUBJECT_GPU_HOURS: a GPU that held back one job all along is
# a finding even when its other jobs ran well), and slower than its peers by at least STRAGGLER_MIN_SLOWER over
# the hours it straggled (its utilization against theirs in those hours only: averaged over the whole job, a
# GPU that held the others back for an hour reads "1% slower").
STRAGGLER_MIN_SHARE = 0.20
STRAGGLER_MIN_SLOWER = 0.10
# throttled: a GPU slowed by power or thermal limits at least this share of the seconds it was measured.
THROTTLED_MIN_SHARE = 0.10
# allocated-idle: a job that held GPUs idle at least this share of its GPU-seconds, and at least this much.
ALLOCATED_IDLE_MIN_SHARE = 0.50
ALLOCATED_IDLE_MIN_GPU_HOURS = 0.1
# memory-only: a job or service holding memory with compute near zero at least this share of its time.
MEMORY_ONLY_MIN_SHARE = 0.50
# pool-idle: an hour of the day in which the pool's GPUs were unallocated at least this share, on average
# over at least POOL_IDLE_MIN_DAYS days measured, in a run of at least POOL_IDLE_MIN_HOURS hours of the day.
POOL_IDLE_MIN_SHARE = 0.40
POOL_IDLE_MIN_DAYS = 3
POOL_IDLE_MIN_HOURS = 2
# The window refresh reads by default: the job-level detectors look at a day, the pool one at 14 days.
DEFAULT_WINDOW = timedelta(hours=24)
POOL_WINDOW = timedelta(days=14)

THRESHOLDS = {name: value for name, value in globals().items() if name.isupper() and isinstance(value, int | float)}

# The heat at which an H100 (and H200) SXM5 first slows its clocks: NVML's GPU max operating temperature
# (NVML_TEMPERATURE_THRESHOLD_GPU_MAX, 87 C; the hardware's own slowdown at 89 C, shutdown at 92 C), above
# which the driver reports SW thermal slowdown. A thermal reason at a lower temperature doubts the sensor.
THERMAL_SLOWDOWN_FROM_C = 87
THERMAL_BITS = rules.SLOWDOWN_REASONS["sw_thermal"] | rules.SLOWDOWN_REASONS["hw_thermal"]
SLOWDOWN_NAMES = {"sw_power_cap": "power", "hw_power_brake": "power", "sw_thermal": "thermal",
                  "hw_thermal": "thermal", "hw_slowdown": "hardware slowdown"}
DETECTED_KINDS = (Finding.Kind.INPUT_BOUND, Finding.Kind.COMMUNICATION_BOUND, Finding.Kind.STRAGGLER, Finding.Kind.ALLOCATED_IDLE,
                  Finding.Kind.MEMORY_ONLY, Finding.Kind.THROTTLED, Finding.Kind.POOL_IDLE)


class FindingError(ValueError):
    """A decision that cannot be taken; the message names the field or the state."""


@dataclass
class Candidate:
    kind: str
    subject: str
    summary: str
    proposal: str
    severity: float
    evidence: dict = field(default_factory=dict)
    node_id: int | None = None
    job: str = ""
    pool: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.subject}"[:200]


@dataclass
class Result:
    """What detectors found, and every subject they measured (an open finding of a measured subject that
    was not found again is resolved)."""

    candidates: list[Candidate] = field(default_factory=list)
    measured: set[str] = field(default_factory=set)


def _pct(value: float) -> str:
    return f"{round(value * 100):.0f}%"


def _gbps(value: float) -> str:
    return f"{value / 1e9:.1f} GB/s"


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 2)


ROW_FIELDS = ("hour", "node_id", "node__name", "gpu", "instance", "job", "pool", "user", "gpu_seconds", "used_seconds",
              "memory_held_mib_s", "memory_used_mib_s", *CAUSE_FIELDS.values())


def _sum(rows, *columns) -> dict[str, float]:
    totals = dict.fromkeys(columns, 0.0)
    for row in rows:
        for column in columns:
            totals[column] += row[column] or 0.0
    return totals


# ---- detectors --------------------------------------------------------------------------------------------

def _by_job(rows) -> dict[str, list[dict]]:
    jobs: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row["job"]:
            jobs[row["job"]].append(row)
    return jobs


def _user(rows) -> str:
    """The job's owner as the ledger has it (from the scheduler); blank if unknown."""
    return next((r["user"] for r in rows if r["user"]), "")


@dataclass
class JobMinutes:
    """A job's per-minute verdicts over some hours (the rules of rules.py on its own rows, its GPUs each
    other's peers, with the references the ledger uses): `judged` every bucket of the job, `minutes` per node
    the minutes in which one of its GPUs there got the cause asked for (where none did, judged again today:
    every minute the job held a GPU there, `of_cause` False), `references` per node."""

    judged: list
    minutes: dict[int, set[datetime]]
    references: dict
    of_cause: bool = True


def _job_minutes(job: str, hours, label: str) -> JobMinutes | None:
    """The job's own minutes of `label` in `hours`, judged again from its per-minute rows; None where it has
    none there (kept per hour only: the figures are then the hours')."""
    from . import attribution

    hours = set(hours)
    if not hours:
        return None
    judged, info = attribution.from_database(min(hours), max(hours) + timedelta(hours=1), job=job)
    judged = [a for a in judged if a.record["start"].replace(minute=0, second=0, microsecond=0) in hours]
    if not judged:
        return None
    minutes: dict[int, set[datetime]] = defaultdict(set)
    held: dict[int, set[datetime]] = defaultdict(set)
    for attributed in judged:
        held[attributed.record["node_id"]].add(attributed.record["start"])
        if attributed.label == label:
            minutes[attributed.record["node_id"]].add(attributed.record["start"])
    return JobMinutes(judged, dict(minutes or held), {pk: entry.references for pk, entry in info.items()},
                      of_cause=bool(minutes))


def _node_rows(node_ids, hours, minutes: dict[int, set[datetime]] | None, fields: tuple[str, ...]) -> tuple[list, int]:
    """The node rows of the given hours (the per-minute ones where there are, else the per-hour ones), or, with
    `minutes`, the per-minute rows of exactly those minutes of each node (a job's own). Returns (rows, step)."""
    from appliance.telemetry.models import NodeRollup

    first, last = min(hours), max(hours) + timedelta(hours=1)
    steps = (60,) if minutes is not None else (60, 3600)
    # the per-minute and per-hour rows only (the coarser levels the Overview reads are not needed here)
    query = NodeRollup.objects.filter(node_id__in=node_ids, step__in=steps, start__gte=first, start__lt=last)
    rows = [r for r in query.values("node_id", "step", "start", *fields)
            if r["start"].replace(minute=0, second=0, microsecond=0) in hours
            and (minutes is None or r["start"] in minutes.get(r["node_id"], ()))]
    return rows, 60 if any(r["step"] == 60 for r in rows) else 3600


def _node_io(node_ids, hours, minutes: dict[int, set[datetime]] | None = None) -> dict:
    """Per node, over the given hours (or, with `minutes`, over those minutes of each node only): mean reads
    per mount, mean CPU busy and iowait (NodeRollup, the per-minute rows where there are, else the per-hour
    ones)."""
    if not node_ids or not hours:
        return {}
    rows, step = _node_rows(node_ids, hours, minutes, ("mounts", "fs_read_bps", "cpu_busy", "cpu_iowait"))
    result: dict[int, dict] = {}
    for node_id in node_ids:
        mine = [r for r in rows if r["node_id"] == node_id and r["step"] == step]
        if not mine:
            continue
        reads: dict[str, list[float]] = defaultdict(list)
        for r in mine:
            for mount, figures in (r["mounts"] or {}).items():
                if isinstance(figures, dict) and isinstance(figures.get("read_bps"), int | float):
                    reads[mount].append(float(figures["read_bps"]))
        busy = [r["cpu_busy"] for r in mine if r["cpu_busy"] is not None]
        iowait = [r["cpu_iowait"] for r in mine if r["cpu_iowait"] is not None]
        result[node_id] = {"reads": {m: sum(v) / len(v) for m, v in reads.items()},
                           "cpu_busy": sum(busy) / len(busy) if busy else None,
                           "cpu_iowait": sum(iowait) / len(iowait) if iowait else None}
    return result


def _nodes(node_ids):
    from appliance.inventory.models import Node

    return {n.pk: n for n in Node.objects.filter(pk__in=list(node_ids)).select_related("platform")}


def _measured_mounts(node) -> dict[str, float]:
    """The read throughput (bytes/s) the node's storage smoke test measured per mount."""
    results = ((node.facts or {}).get("storage") or {}).get("results") or []
    found = {}
    for entry in results if isinstance(results, list) else []:
        if isinstance(entry, dict) and entry.get("mount_point") and isinstance(entry.get("read_mbps"), int | float) \
                and entry["read_mbps"] > 0:
            found[str(entry["mount_point"])] = float(entry["read_mbps"]) * 1e6
    return found


def _gds_verified(node) -> bool:
    return bool(((node.facts or {}).get("gds") or {}).get("verified"))


def _over(own: JobMinutes | None, minutes: dict[int, set[datetime]] | None, label: str) -> dict:
    """What a finding's node figures were averaged over, for its evidence."""
    if own is None:
        return {"over": "hours", "minutes": None}
    what = f"the job's own {label} minutes" if own.of_cause else "the job's own minutes"
    return {"over": what, "minutes": sum(len(m) for m in (minutes or {}).values())}


def detect_input_bound(rows) -> Result:
    """A job whose GPUs waited on input for INPUT_BOUND_MIN_SHARE of its GPU-seconds or more. Evidence, over
    the job's own input-bound minutes (its per-minute rows judged again; the hours it waited where only
    hours are kept): the reads on each mount of its nodes against what that mount delivered in the node's
    storage smoke test, or, with no measured rate, its own ceiling learned from its reads (never another
    mount's figure); CPU busy and iowait; whether gdscheck passed on its nodes. The proposal follows:
    reads at the mount's rate, stage the data or read it with GPUDirect Storage (more loaders cannot help);
    CPUs saturated, move preprocessing off them; neither, more loaders and prefetching."""
    result = Result()
    for job, mine in _by_job(rows).items():
        result.measured.add(f"{Finding.Kind.INPUT_BOUND}:{job}")
        totals = _sum(mine, "gpu_seconds", "input_bound_s")
        if totals["gpu_seconds"] < MIN_SUBJECT_GPU_HOURS * 3600 or not totals["gpu_seconds"]:
            continue
        share = totals["input_bound_s"] / totals["gpu_seconds"]
        if share < INPUT_BOUND_MIN_SHARE:
            continue
        node_ids = sorted({r["node_id"] for r in mine})
        hours = {r["hour"] for r in mine if r["input_bound_s"]}
        own = _job_minutes(job, hours, "input-bound")
        minutes = own.minutes if own is not None and own.minutes else None
        io = _node_io(node_ids, hours, minutes)
        nodes = _nodes(node_ids)
        mounts, cpu_busy, iowait, gds = [], [], [], []
        for node_id in node_ids:
            node, figures = nodes.get(node_id), io.get(node_id) or {}
            measured = _measured_mounts(node) if node else {}
            learned = {mount: reference for mount, reference in
                       (own.references.get(node_id).storage.items() if own and node_id in own.references else ())
                       if reference.learned}
            for mount, read in sorted((figures.get("reads") or {}).items()):
                name = node.name if node else str(node_id)
                if measured.get(mount):
                    mounts.append({"node": name, "mount": mount, "read_bps": round(read),
                                   "measured_bps": round(measured[mount]), "reference": "smoke test",
                                   "share": round(read / measured[mount], 4)})
                elif mount in learned:  # no measured rate: its own ceiling, said to be one
                    mounts.append({"node": name, "mount": mount, "read_bps": round(read), "measured_bps": None,
                                   "ceiling_bps": round(learned[mount].value), "reference": "learned ceiling",
                                   "share": round(read / learned[mount].value, 4)})
                else:  # nothing measured on it: no share to state (never another mount's figure)
                    mounts.append({"node": name, "mount": mount, "read_bps": round(read), "measured_bps": None,
                                   "reference": rules.NO_MEASURED_RATE, "share": None})
            if figures.get("cpu_busy") is not None:
                cpu_busy.append(figures["cpu_busy"])
            if figures.get("cpu_iowait") is not None:
                iowait.append(figures["cpu_iowait"])
            if node and _gds_verified(node):
                gds.append(node.name)
        busiest = max((m for m in mounts if m["share"] is not None), key=lambda m: m["share"], default=None)
        busy = max(cpu_busy) if cpu_busy else None
        wait = max(iowait) if iowait else None
        summary = _("job %(job)s was input-bound %(share)s of its time (%(hours)s of %(total)s GPU-hours)") % {
            "job": job, "share": _pct(share), "hours": _hours(totals["input_bound_s"]),
            "total": _hours(totals["gpu_seconds"])}
        if busiest and busiest["reference"] == "smoke test":
            summary += _(": reads on %(mount)s at %(read_share)s of the mount's measured %(measured)s") % {
                "mount": busiest["mount"], "read_share": _pct(busiest["share"]),
                "measured": _gbps(busiest["measured_bps"])}
        elif busiest:
            summary += _(": reads on %(mount)s at %(read_share)s of the %(ceiling)s it sustains at most (no measured "
                         "rate: its own ceiling, learned from its reads)") % {
                "mount": busiest["mount"], "read_share": _pct(busiest["share"]), "ceiling": _gbps(busiest["ceiling_bps"])}
        if busy is not None:
            summary += _(", CPU at %(busy)s, iowait %(wait)s") % {"busy": _pct(busy),
                                                                  "wait": _pct(wait or 0.0)}
        user = _user(mine)
        if user:
            summary += _(" (user %(user)s)") % {"user": user}
        proposals = []
        saturated = bool(busiest and busiest["share"] >= MOUNT_SATURATED_SHARE)
        cpu_bound = busy is not None and busy >= CPU_SATURATED
        if saturated:
            proposals.append(_("stage the dataset to local NVMe (%(mount)s delivers no more)") % {
                "mount": busiest["mount"]})
        if cpu_bound:
            proposals.append(_("move preprocessing off the CPUs or pre-process the dataset once (CPU was at "
                               "%(busy)s: more data-loader workers cannot help)") % {"busy": _pct(busy)})
        elif not saturated and (busy is not None or (wait is not None and wait >= IOWAIT_HIGH)):
            # the mount has more to give and the CPUs are free: more loaders in flight read more
            proposals.append(_("raise data-loader workers and prefetching (CPU at %(busy)s, iowait %(wait)s)") % {
                "busy": _pct(busy or 0.0), "wait": _pct(wait or 0.0)})
        if gds and (saturated or cpu_bound):  # reads straight to the GPUs: no CPU bounce buffer, fewer copies
            proposals.append(_("enable GPUDirect Storage (gdscheck passes on %(nodes)s)") % {"nodes": ", ".join(gds)})
        if not proposals:
            proposals.append(_("profile the input pipeline (the GPUs waited, no mount or CPU figure explains it)"))
        result.candidates.append(Candidate(
            Finding.Kind.INPUT_BOUND, job, summary, joined("; ", proposals), _hours(totals["input_bound_s"]),
            {"share": round(share, 4), "input_bound_gpu_hours": _hours(totals["input_bound_s"]),
             "gpu_hours": _hours(totals["gpu_seconds"]), "mounts": mounts,
             "cpu_busy": None if busy is None else round(busy, 4), "cpu_iowait": None if wait is None else round(wait, 4),
             "gds_verified_nodes": gds, "nodes": [nodes[n].name for n in node_ids if n in nodes], "user": user}
            | _over(own, minutes, "input-bound"),
            job=job, pool=mine[0]["pool"], node_id=node_ids[0] if len(node_ids) == 1 else None))
    return result


def _fabric(node_ids, hours, minutes: dict[int, set[datetime]] | None = None) -> dict:
    """Per node, over the given hours (or, with `minutes`, those minutes of each node only): mean InfiniBand
    traffic (the larger direction) as a share of its ports' line rate, and mean port_xmit_wait per second."""
    if not node_ids or not hours:
        return {}
    rows, step = _node_rows(node_ids, hours, minutes, ("ib_tx_bps", "ib_rx_bps", "ib_line_bps", "ib_xmit_wait"))
    result = {}
    for node_id in node_ids:
        shares = [max(r["ib_tx_bps"] or 0.0, r["ib_rx_bps"] or 0.0) / r["ib_line_bps"] for r in rows
                  if r["node_id"] == node_id and r["step"] == step and r["ib_line_bps"]]
        waits = [r["ib_xmit_wait"] for r in rows if r["node_id"] == node_id and r["step"] == step
                 and r["ib_xmit_wait"] is not None]
        if shares or waits:
            result[node_id] = {"line_share": round(sum(shares) / len(shares), 4) if shares else None,
                               "xmit_wait": round(sum(waits) / len(waits), 1) if waits else None}
    return result


def detect_communication_bound(rows) -> Result:
    """A job whose GPUs waited on their peers or the fabric for COMMUNICATION_BOUND_MIN_SHARE of its
    GPU-seconds or more. When one of its GPUs straggled, that GPU is what they waited for; else the fabric's
    load (InfiniBand share of line rate, port_xmit_wait) says whether the network is the limit."""
    result = Result()
    for job, mine in _by_job(rows).items():
        result.measured.add(f"{Finding.Kind.COMMUNICATION_BOUND}:{job}")
        totals = _sum(mine, "gpu_seconds", "communication_bound_s")
        if totals["gpu_seconds"] < MIN_SUBJECT_GPU_HOURS * 3600:
            continue
        share = totals["communication_bound_s"] / totals["gpu_seconds"]
        if share < COMMUNICATION_BOUND_MIN_SHARE:
            continue
        per_gpu: dict[str, float] = defaultdict(float)
        for r in mine:
            per_gpu[f"{r['node__name']}/gpu{r['gpu']}"] += r["straggler_s"]
        culprit = max(sorted(per_gpu), key=lambda gpu: per_gpu[gpu]) if any(per_gpu.values()) else ""
        node_ids = sorted({r["node_id"] for r in mine})
        names = {r["node_id"]: r["node__name"] for r in mine}
        hours = {r["hour"] for r in mine if r["communication_bound_s"]}
        own = _job_minutes(job, hours, "communication-bound")
        minutes = own.minutes if own is not None and own.minutes else None
        fabric = _fabric(node_ids, hours, minutes)
        line = max((f["line_share"] for f in fabric.values() if f["line_share"] is not None), default=None)
        summary = _("job %(job)s waited on communication %(share)s of its time (%(hours)s of %(total)s GPU-hours)") % {
            "job": job, "share": _pct(share), "hours": _hours(totals["communication_bound_s"]),
            "total": _hours(totals["gpu_seconds"])}
        if line is not None:
            summary += _(": InfiniBand at %(line)s of line rate") % {"line": _pct(line)}
        user = _user(mine)
        if user:
            summary += _(" (user %(user)s)") % {"user": user}
        if culprit:
            gpu = culprit.rsplit("/gpu", 1)
            proposal = _("its GPUs wait for GPU %(gpu)s of %(node)s in every collective: fix that straggler first "
                         "(see its finding)") % {"gpu": gpu[1], "node": gpu[0]}
        elif line is not None and line >= FABRIC_SATURATED_SHARE:
            proposal = _("the fabric is the limit: place the job on nodes under fewer leaf switches (topology-aware "
                         "placement), overlap communication with compute (gradient bucketing), or compress "
                         "gradients")
        elif line is not None:
            proposal = _("the fabric is not saturated: check NCCL's transport (GPUDirect RDMA, NCCL_IB_HCA on the "
                         "rail HCAs) and the job's collective sizes")
        else:  # nothing says whether the fabric is the limit: say nothing about it
            proposal = _("the fabric's load was not measured in these minutes: check the collectors' InfiniBand "
                         "counters, then NCCL's transport")
        result.candidates.append(Candidate(
            Finding.Kind.COMMUNICATION_BOUND, job, summary, proposal, _hours(totals["communication_bound_s"]),
            {"share": round(share, 4), "communication_bound_gpu_hours": _hours(totals["communication_bound_s"]),
             "gpu_hours": _hours(totals["gpu_seconds"]), "straggler": culprit, "ib_line_share": line,
             "fabric": {names[k]: v for k, v in fabric.items()}, "user": user}
            | _over(own, minutes, "communication-bound"), job=job, pool=mine[0]["pool"]))
    return result


def _gpu_clocks(keys, since, until) -> dict[tuple, dict]:
    """Per GPU (node id, index): its slowdown reasons, mean SM clock, temperature and power over the window
    (per-hour rollups where there are, else per-minute); one query for all of them."""
    from appliance.telemetry.models import GpuRollup

    wanted = {(node_id, gpu) for node_id, gpu, *_rest in keys}
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    if wanted:
        for r in GpuRollup.objects.filter(node_id__in=sorted({n for n, _g in wanted}), instance=-1, start__gte=since,
                                          start__lt=until).values("node_id", "gpu", "step", "throttle_reasons",
                                                                  "sm_clock_mhz", "temp_c", "temp_max_c", "power_w"):
            if (r["node_id"], r["gpu"]) in wanted:
                grouped[(r["node_id"], r["gpu"])].append(r)
    result = {}
    for key in wanted:
        rows = grouped.get(key, [])
        step = 3600 if any(r["step"] == 3600 for r in rows) else 60
        rows = [r for r in rows if r["step"] == step]
        reasons = 0
        for r in rows:
            reasons |= int(r["throttle_reasons"] or 0)

        def mean(name, rows=rows):
            values = [r[name] for r in rows if r[name] is not None]
            return round(sum(values) / len(values), 1) if values else None

        names = sorted({SLOWDOWN_NAMES[name] for name, bit in rules.SLOWDOWN_REASONS.items() if reasons & bit})
        # The heat of the buckets that reported a thermal slowdown, not of the whole window: a GPU that
        # throttled for twenty minutes at 90 C of a day at 40 C throttled at 90 C.
        hot = [r for r in rows if int(r["throttle_reasons"] or 0) & THERMAL_BITS]
        peaks = [r["temp_max_c"] if r["temp_max_c"] is not None else r["temp_c"] for r in hot]
        peaks = [value for value in peaks if value is not None]
        result[key] = {"reasons": names, "sm_clock_mhz": mean("sm_clock_mhz"), "temp_c": mean("temp_c"),
                       "power_w": mean("power_w"), "thermal_temp_max_c": max(peaks) if peaks else None}
    return result


def _heat_text(clocks: dict) -> str:
    """The temperature a thermal slowdown was reported at, against the GPU's: "up to 90 °C, above the 87 °C
    at which an H100 slows for heat", or the sensor doubted where it read cooler than that."""
    peak = clocks.get("thermal_temp_max_c")
    if "thermal" not in clocks["reasons"] or peak is None:
        return ""
    figures = {"temp": f"{peak:.0f}", "limit": THERMAL_SLOWDOWN_FROM_C}
    if peak >= THERMAL_SLOWDOWN_FROM_C:
        return _("; up to %(temp)s °C, at or above the %(limit)s °C at which an H100 slows for heat") % figures
    return _("; a thermal slowdown reported at no more than %(temp)s °C, below the %(limit)s °C at which an H100 "
             "slows for heat: its temperature sensor or board is suspect") % figures


def _reasons_text(reasons: list[str]):
    """The slowdown reasons (SLOWDOWN_NAMES' values) as a reader's words: "thermal/power"."""
    words = {"power": pgettext("GPU slowdown reason", "power"), "thermal": pgettext("GPU slowdown reason", "thermal"),
             "hardware slowdown": pgettext("GPU slowdown reason", "hardware slowdown")}
    return joined("/", [words.get(reason, reason) for reason in reasons])


def _cause_proposal(reasons: list[str], clocks: dict | None = None) -> str:
    peak = (clocks or {}).get("thermal_temp_max_c")
    if "thermal" in reasons and peak is not None and peak < THERMAL_SLOWDOWN_FROM_C:
        return _("check the GPU's temperature sensor and board (dcgmi diag -r 2): it reports a thermal slowdown "
                 "at %(temp)s °C, far from the heat that slows an H100") % {"temp": f"{peak:.0f}"}
    if "thermal" in reasons:
        return _("check cooling: airflow, fans, inlet temperature and the heatsink of this GPU")
    if "power" in reasons:
        return _("check power: the power cap, the PSUs and the power brake of this node")
    if reasons:
        return _("check the board: a hardware slowdown is reported (power supply or thermal sensor)")
    return _("check cooling and power of this GPU")


def _local_span(hours) -> str:
    """The hours given (UTC starts) as a span of local time (settings.TIME_ZONE), with the zone's name:
    "2026-01-07 10:00 to 12:00 UTC" (an hour's end: one hour after the last start)."""
    zone = timezone.get_default_timezone()
    first = min(hours).astimezone(zone)
    last = (max(hours) + timedelta(hours=1)).astimezone(zone)
    end = f"{last:%H:%M}" if last.date() == first.date() else f"{last:%Y-%m-%d %H:%M}"
    return _("%(start)s to %(end)s %(zone)s") % {"start": f"{first:%Y-%m-%d %H:%M}", "end": end,
                                                 "zone": _zone_name()}


def _zone_name() -> str:
    return str(settings.TIME_ZONE)


def _straggled_enough(held_s: float, straggler_s: float) -> bool:
    """Seconds held (by a GPU for its jobs, or for one job) worth judging, straggled STRAGGLER_MIN_SHARE or more."""
    return held_s >= MIN_SUBJECT_GPU_HOURS * 3600 and straggler_s / held_s >= STRAGGLER_MIN_SHARE


def _worst_straggled_job(rows) -> tuple[str, float] | None:
    """The job a GPU straggled the largest share of the seconds it held for it, among those it held at least
    MIN_SUBJECT_GPU_HOURS and straggled STRAGGLER_MIN_SHARE or more: (job, share), or None."""
    held: dict[str, float] = defaultdict(float)
    straggled: dict[str, float] = defaultdict(float)
    for row in rows:
        held[row["job"]] += row["gpu_seconds"]
        straggled[row["job"]] += row["straggler_s"]
    shares = [(straggled[job] / held[job], job) for job in sorted(held) if _straggled_enough(held[job], straggled[job])]
    if not shares:
        return None
    share, job = max(shares, key=lambda item: item[0])
    return job, share


def _straggled_activity(key: tuple, jobs, hours) -> tuple[str, float, float] | None:
    """The GPU's SM activity (the field its verdicts compared; utilization where it reports none) and its
    peers' over the minutes it was judged straggler, from its jobs' per-minute rows; None where they are
    kept per hour only."""
    own: list[float] = []
    peers: list[float] = []
    metric = "sm_active"
    for job in jobs:
        found = _job_minutes(job, hours, "straggler")
        if found is None:
            continue
        mine = {a.record["start"] for a in found.judged if a.label == "straggler"
                and (a.record["node_id"], a.record["gpu"], a.record["instance"]) == key}
        for attributed in found.judged:
            record = attributed.record
            if record["start"] not in mine:
                continue
            value = record.get("sm_active")
            if value is None:
                metric = "utilization"
                value = None if record.get("util") is None else record["util"] / 100
            if value is not None:
                (own if (record["node_id"], record["gpu"], record["instance"]) == key else peers).append(value)
    if not own or not peers:
        return None
    return metric, sum(own) / len(own), sum(peers) / len(peers)


def detect_stragglers(rows, since, until, only: set[tuple] | None = None, clocks: dict | None = None) -> Result:
    """A GPU judged a straggler for STRAGGLER_MIN_SHARE or more of the seconds it held for its jobs, or for
    one of them (_worst_straggled_job): how much slower than its peers over the hours it straggled (the share
    of each step its peers wait: 1 - peers' utilization / its own, both over those hours only), in how many
    jobs, and the slowdown reason its rollups report. A GPU less than STRAGGLER_MIN_SLOWER slower than its
    peers in those hours is not a finding."""
    result = Result()
    per_gpu: dict[tuple, list[dict]] = defaultdict(list)
    per_job_hour: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row["job"]:
            per_gpu[(row["node_id"], row["node__name"], row["gpu"], row["instance"])].append(row)
            per_job_hour[(row["job"], row["hour"])].append(row)
    for (node_id, node_name, gpu, instance), mine in sorted(per_gpu.items(), key=lambda item: item[0][1:]):
        subject = f"{node_name}/gpu{gpu}" + (f"/gi{instance}" if instance != -1 else "")
        if only is not None and (node_id, gpu, instance) not in only:
            continue  # judged on part of its rows only (read as a peer): not a subject here
        result.measured.add(f"{Finding.Kind.STRAGGLER}:{subject}")
        totals = _sum(mine, "gpu_seconds", "straggler_s", "used_seconds")
        if totals["gpu_seconds"] < MIN_SUBJECT_GPU_HOURS * 3600:
            continue
        share = totals["straggler_s"] / totals["gpu_seconds"]
        worst = _worst_straggled_job(mine)
        if share < STRAGGLER_MIN_SHARE and worst is None:
            continue
        jobs = sorted({r["job"] for r in mine})
        straggled_rows = [r for r in mine if r["straggler_s"]]
        straggled = sorted({r["job"] for r in straggled_rows})
        hours = sorted({r["hour"] for r in straggled_rows})
        own_used = sum(r["used_seconds"] for r in straggled_rows)
        own_seconds = sum(r["gpu_seconds"] for r in straggled_rows)
        peers_used = peers_seconds = 0.0
        for r in straggled_rows:
            for peer in per_job_hour[(r["job"], r["hour"])]:
                if (peer["node_id"], peer["gpu"], peer["instance"]) != (node_id, gpu, instance):
                    peers_used += peer["used_seconds"]
                    peers_seconds += peer["gpu_seconds"]
        own = own_used / own_seconds if own_seconds else None
        peers = peers_used / peers_seconds if peers_seconds else None
        metric = "utilization"
        activity = _straggled_activity((node_id, gpu, instance), straggled, hours)
        if activity is not None:  # the field the verdicts used, over the minutes it straggled
            metric, own, peers = activity
        slower = 1 - peers / own if peers is not None and own else None
        if slower is not None and slower < STRAGGLER_MIN_SLOWER:
            continue  # a slowdown too small to act on
        measured_clocks = (clocks if clocks is not None and (node_id, gpu) in clocks else _gpu_clocks(
            {(node_id, gpu)}, since, until))[(node_id, gpu)]
        cause = _reasons_text(measured_clocks["reasons"]) or _("no slowdown reason reported")
        figures = {"gpu": gpu, "node": node_name, "jobs": len(straggled), "all": len(jobs), "share": _pct(share)}
        if share >= STRAGGLER_MIN_SHARE:
            summary = _("GPU %(gpu)s of %(node)s held back %(jobs)s of its %(all)s jobs (straggler %(share)s of its "
                        "time)") % figures
        else:  # the finding rests on one job: say which
            summary = _("GPU %(gpu)s of %(node)s held back %(jobs)s of its %(all)s jobs (straggler %(share)s of its "
                        "time, %(job_share)s of its time in job %(job)s)") % (
                figures | {"job_share": _pct(worst[1]), "job": worst[0]})
        if slower is not None:
            if metric == "sm_active":
                summary += _(": in the %(hours)s hour(s) it straggled (%(span)s) it ran %(slower)s slower than its "
                             "peers (SM activity %(own)s vs %(peers)s in the minutes it straggled)") % {
                    "hours": len(hours), "span": _local_span(hours), "slower": _pct(slower), "own": _pct(own),
                    "peers": _pct(peers)}
            else:
                summary += _(": in the %(hours)s hour(s) it straggled (%(span)s) it ran %(slower)s slower than its "
                             "peers (utilization %(own)s vs %(peers)s)") % {
                    "hours": len(hours), "span": _local_span(hours), "slower": _pct(slower), "own": _pct(own),
                    "peers": _pct(peers)}
        summary += _(" (throttled: %(cause)s)") % {"cause": cause}
        result.candidates.append(Candidate(
            Finding.Kind.STRAGGLER, subject, summary, _cause_proposal(measured_clocks["reasons"], measured_clocks),
            _hours(totals["straggler_s"]),
            {"share": round(share, 4), "straggler_gpu_hours": _hours(totals["straggler_s"]), "jobs": jobs,
             "jobs_held_back": straggled, "hours_straggled": [h.isoformat() for h in hours],
             "worst_job": None if worst is None else {"job": worst[0], "share": round(worst[1], 4)},
             "metric": metric, "utilization": None if own is None else round(own, 4),
             "peers_utilization": None if peers is None else round(peers, 4),
             "slower": None if slower is None else round(slower, 4)} | measured_clocks,
            node_id=node_id, pool=mine[0]["pool"]))
    return result


def detect_throttled(rows, since, until, clocks: dict | None = None) -> Result:
    """A GPU slowed by power or thermal limits for THROTTLED_MIN_SHARE or more of the seconds it was measured,
    with the reasons, mean SM clock and temperature its rollups report."""
    result = Result()
    per_gpu: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        per_gpu[(row["node_id"], row["node__name"], row["gpu"], row["instance"])].append(row)
    for (node_id, node_name, gpu, instance), mine in sorted(per_gpu.items(), key=lambda item: item[0][1:]):
        subject = f"{node_name}/gpu{gpu}" + (f"/gi{instance}" if instance != -1 else "")
        result.measured.add(f"{Finding.Kind.THROTTLED}:{subject}")
        totals = _sum(mine, "gpu_seconds", "throttled_s")
        if totals["gpu_seconds"] < MIN_SUBJECT_GPU_HOURS * 3600:
            continue
        share = totals["throttled_s"] / totals["gpu_seconds"]
        if share < THROTTLED_MIN_SHARE:
            continue
        measured_clocks = (clocks if clocks is not None and (node_id, gpu) in clocks else _gpu_clocks(
            {(node_id, gpu)}, since, until))[(node_id, gpu)]
        summary = _("GPU %(gpu)s of %(node)s was throttled %(share)s of its time (%(hours)s GPU-hours; reason: "
                    "%(cause)s; SM clock %(clock)s MHz of %(max)s%(heat)s)") % {
            "gpu": gpu, "node": node_name, "share": _pct(share), "hours": _hours(totals["throttled_s"]),
            "cause": _reasons_text(measured_clocks["reasons"]) or "-", "clock": measured_clocks["sm_clock_mhz"] or "-",
            "max": rules.NOMINAL_MAX_SM_CLOCK_MHZ, "heat": _heat_text(measured_clocks)}
        result.candidates.append(Candidate(
            Finding.Kind.THROTTLED, subject, summary, _cause_proposal(measured_clocks["reasons"], measured_clocks),
            _hours(totals["throttled_s"]),
            {"share": round(share, 4), "throttled_gpu_hours": _hours(totals["throttled_s"]),
             "gpu_hours": _hours(totals["gpu_seconds"])} | measured_clocks, node_id=node_id, pool=mine[0]["pool"]))
    return result


def detect_allocated_idle(rows) -> Result:
    """A job that held its GPUs idle ALLOCATED_IDLE_MIN_SHARE or more of its GPU-seconds, and at least
    ALLOCATED_IDLE_MIN_GPU_HOURS GPU-hours: release them, or give such jobs a time limit."""
    result = Result()
    for job, mine in _by_job(rows).items():
        result.measured.add(f"{Finding.Kind.ALLOCATED_IDLE}:{job}")
        totals = _sum(mine, "gpu_seconds", "allocated_idle_s")
        if not totals["gpu_seconds"]:
            continue
        share = totals["allocated_idle_s"] / totals["gpu_seconds"]
        if share < ALLOCATED_IDLE_MIN_SHARE or totals["allocated_idle_s"] < ALLOCATED_IDLE_MIN_GPU_HOURS * 3600:
            continue
        gpus = sorted({f"{r['node__name']}/gpu{r['gpu']}" for r in mine})
        user = _user(mine)
        summary = _("job %(job)s held %(gpus)s GPU(s) idle %(share)s of its time: %(hours)s GPU-hours held "
                    "doing nothing") % {"job": job, "gpus": len(gpus), "share": _pct(share),
                                        "hours": _hours(totals["allocated_idle_s"])}
        if user:
            summary += _(" (user %(user)s)") % {"user": user}
        proposal = _("release the GPUs (end the job or session), and give interactive jobs a time limit "
                     "(Slurm --time, or the partition's DefaultTime/MaxTime) so idle allocations end by themselves")
        result.candidates.append(Candidate(
            Finding.Kind.ALLOCATED_IDLE, job, summary, proposal, _hours(totals["allocated_idle_s"]),
            {"share": round(share, 4), "idle_gpu_hours": _hours(totals["allocated_idle_s"]),
             "gpu_hours": _hours(totals["gpu_seconds"]), "gpus": gpus, "user": user},
            job=job, pool=mine[0]["pool"]))
    return result


def _is_service(rows) -> bool:
    """Whether a holder's rows are an inference pool's (a service), not a training pool's job."""
    from appliance.inventory.models import Pool

    pools = {r["pool"] for r in rows}
    return Pool.objects.filter(name__in=pools, kind=Pool.Kind.INFERENCE).exists()


def detect_memory_only(rows) -> Result:
    """A job or service holding memory while computing near zero MEMORY_ONLY_MIN_SHARE or more of its time:
    the memory it fills against the GPU's, its compute share, the smallest MIG profile that fits it and the
    compute slices that frees (profiling.mig_fit)."""
    from appliance.inventory.models import GPU

    result = Result()
    for job, mine in _by_job(rows).items():
        result.measured.add(f"{Finding.Kind.MEMORY_ONLY}:{job}")
        totals = _sum(mine, "gpu_seconds", "memory_only_s", "used_seconds", "memory_used_mib_s", "memory_held_mib_s")
        if totals["gpu_seconds"] < MIN_SUBJECT_GPU_HOURS * 3600:
            continue
        share = totals["memory_only_s"] / totals["gpu_seconds"]
        if share < MEMORY_ONLY_MIN_SHARE:
            continue
        whole = {(r["node_id"], r["gpu"]) for r in mine}
        used_mib = totals["memory_used_mib_s"] / totals["gpu_seconds"]
        held_mib = totals["memory_held_mib_s"] / totals["gpu_seconds"]
        sizes = GPU.objects.filter(node_id__in={n for n, _g in whole}).values_list("node_id", "index", "memory_mib")
        sizes = [m for n, g, m in sizes if (n, g) in whole and m]
        gpu_mib = max(sizes) if sizes else held_mib
        compute = totals["used_seconds"] / totals["gpu_seconds"]
        fit = profiling.mig_fit(used_mib, gpu_mib)
        figures = {"job": job, "used": round(used_mib / 1024, 1), "compute": _pct(compute),
                   "total": round(gpu_mib / 1024), "share": _pct(share)}
        if _is_service(mine):
            summary = _("service %(job)s uses %(used)s GB and %(compute)s of a %(total)s GB GPU (memory only "
                        "%(share)s of its time)") % figures
        else:  # a training pool's (Slurm) job is not a service
            summary = _("job %(job)s uses %(used)s GB and %(compute)s of a %(total)s GB GPU (memory only "
                        "%(share)s of its time)") % figures
        if fit:
            proposal = _("a %(profile)s MIG slice would serve it, freeing %(freed)s slices") % {
                "profile": fit["profile"], "freed": fit["freed_slices"] * len(whole)}
        else:
            proposal = _("share the GPU by time-slicing: it needs more memory than the largest MIG slice gives")
        result.candidates.append(Candidate(
            Finding.Kind.MEMORY_ONLY, job, summary, proposal, _hours(totals["memory_only_s"]),
            {"share": round(share, 4), "memory_used_mib": round(used_mib), "memory_held_mib": round(held_mib),
             "gpu_memory_mib": round(gpu_mib), "compute_share": round(compute, 4), "gpus": len(whole),
             "mig": fit}, job=job, pool=mine[0]["pool"]))
    return result


def _runs(hours: list[int]) -> list[list[int]]:
    """Runs of consecutive hours of the day, wrapping at midnight (22, 23, 0 .. 6 is one run)."""
    chosen = set(hours)
    if len(chosen) == 24:
        return [list(range(24))]
    runs = []
    for hour in range(24):
        if hour in chosen and (hour - 1) % 24 not in chosen:
            run, h = [], hour
            while h in chosen:
                run.append(h)
                h = (h + 1) % 24
            runs.append(run)
    return runs


def detect_pool_idle(since: datetime, until: datetime) -> Result:
    """A pool whose GPUs were unallocated POOL_IDLE_MIN_SHARE or more in the same hours of the day (the
    appliance's local time, settings.TIME_ZONE, as lending policies' windows are), on
    average over POOL_IDLE_MIN_DAYS days or more: lend the nodes that stay idle through that window (the
    fewest idle GPUs of any hour in it, in whole nodes) to a pool of the other kind in that window. Summed in
    the database (per pool and hour, then per node for a pool found idle): 14 days of a fleet stay small."""
    from django.db.models import Sum
    from django.db.models.functions import ExtractHour

    from appliance.inventory.models import Pool, PoolMembership

    result = Result()
    zone = timezone.get_default_timezone()
    window = CauseHour.objects.filter(hour__gte=since, hour__lt=until).exclude(pool="")
    per_pool: dict[str, list[dict]] = defaultdict(list)
    for slot in window.values("pool", "hour").annotate(gpu_s=Sum("gpu_seconds"), idle_s=Sum("idle_unallocated_s")):
        per_pool[slot["pool"]].append(slot)
    pools = {p.name: p for p in Pool.objects.all()}
    members: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for pool_id, name, gpus in PoolMembership.objects.values_list("pool_id", "node__name", "node__platform__gpu_count"):
        members[pool_id].append((name, gpus or 0))
    for pool_name, slots in sorted(per_pool.items()):
        result.measured.add(f"{Finding.Kind.POOL_IDLE}:{pool_name}")
        pool = pools.get(pool_name)
        if pool is None:
            continue
        by_hour: dict[int, dict] = defaultdict(lambda: {"days": set(), "gpu_s": 0.0, "idle_s": 0.0})
        for slot in slots:
            moment = slot["hour"].astimezone(zone)
            entry = by_hour[moment.hour]
            entry["days"].add(moment.date())
            entry["gpu_s"] += slot["gpu_s"] or 0.0
            entry["idle_s"] += slot["idle_s"] or 0.0
        idle_hours = [h for h, e in by_hour.items() if e["gpu_s"] and e["idle_s"] / e["gpu_s"] >= POOL_IDLE_MIN_SHARE
                      and len(e["days"]) >= POOL_IDLE_MIN_DAYS]
        runs = [run for run in _runs(sorted(idle_hours)) if len(run) >= POOL_IDLE_MIN_HOURS]
        if not runs:
            continue
        run = max(runs, key=len)
        days = min(len(by_hour[h]["days"]) for h in run)
        share = sum(by_hour[h]["idle_s"] for h in run) / sum(by_hour[h]["gpu_s"] for h in run)
        # The fewest GPUs idle in any hour of the window on any day measured: what can go for the whole window.
        fewest = min((slot["idle_s"] or 0.0) for slot in slots if slot["hour"].astimezone(zone).hour in run) / 3600
        per_node_gpus = max([gpus for _name, gpus in members[pool.pk]] + [1])
        lendable = min(int(math.floor(fewest / per_node_gpus + 1e-9)), max(len(members[pool.pk]) - 1, 0))
        if lendable < 1:
            continue
        per_node = (window.filter(pool=pool_name).annotate(hour_of_day=ExtractHour("hour", tzinfo=zone))
                    .filter(hour_of_day__in=run).values("node__name").annotate(idle_s=Sum("idle_unallocated_s")))
        idlest = [r["node__name"] for r in sorted(per_node, key=lambda r: (-(r["idle_s"] or 0.0), r["node__name"]))]
        idlest = idlest[:lendable]
        other = Pool.Kind.INFERENCE if pool.kind == Pool.Kind.TRAINING else Pool.Kind.TRAINING
        target = next((p for p in pools.values() if p.kind == other and p.appliance_id == pool.appliance_id), None)
        start, end = run[0], (run[-1] + 1) % 24
        summary = _("%(pool)s pool idle %(share)s between %(start)02d:00 and %(end)02d:00 (%(zone)s) for %(days)s "
                    "days") % {"pool": pool_name, "share": _pct(share), "start": start, "end": end, "days": days,
                               "zone": _zone_name()}
        proposal = _("lend %(count)s node(s) (%(nodes)s) to the %(target)s pool in that window") % {
            "count": lendable, "nodes": ", ".join(idlest), "target": target.name if target else other}
        result.candidates.append(Candidate(
            Finding.Kind.POOL_IDLE, pool_name, summary, proposal,
            round(sum(by_hour[h]["idle_s"] for h in run) / 3600 / max(days, 1), 2),
            {"share": round(share, 4), "window_hours": [start, end], "time_zone": _zone_name(), "days": days, "fewest_idle_gpus": round(fewest, 2),
             "gpus_per_node": per_node_gpus, "nodes": idlest, "from_pool": pool_name,
             "to_pool": target.name if target else "",
             "hours": {f"{h:02d}": round(by_hour[h]["idle_s"] / by_hour[h]["gpu_s"], 4) for h in sorted(by_hour)}},
            pool=pool_name))
    return result


def _flagged(since: datetime, until: datetime) -> tuple[set[str], set[tuple], set[tuple], set[str]]:
    """Which jobs and GPUs a detector could flag, from sums in the database (a constant number of queries
    whatever the fleet), so that only their rows are read: (jobs, straggler GPUs, throttled GPUs, every
    subject measured)."""
    from django.db.models import Sum

    window = CauseHour.objects.filter(hour__gte=since, hour__lt=until)
    minimum = MIN_SUBJECT_GPU_HOURS * 3600
    jobs, stragglers, throttled, measured = set(), set(), set(), set()
    for row in window.exclude(job="").values("job").annotate(
            gpu_s=Sum("gpu_seconds"), input_s=Sum("input_bound_s"), comm_s=Sum("communication_bound_s"),
            idle_s=Sum("allocated_idle_s"), memory_s=Sum("memory_only_s")):
        job, total = row["job"], row["gpu_s"] or 0.0
        measured |= {f"{kind}:{job}" for kind in (Finding.Kind.INPUT_BOUND, Finding.Kind.COMMUNICATION_BOUND,
                                                    Finding.Kind.ALLOCATED_IDLE, Finding.Kind.MEMORY_ONLY)}
        if not total:
            continue
        if total >= minimum and (row["input_s"] / total >= INPUT_BOUND_MIN_SHARE
                                 or row["comm_s"] / total >= COMMUNICATION_BOUND_MIN_SHARE
                                 or row["memory_s"] / total >= MEMORY_ONLY_MIN_SHARE) \
                or (row["idle_s"] / total >= ALLOCATED_IDLE_MIN_SHARE
                    and row["idle_s"] >= ALLOCATED_IDLE_MIN_GPU_HOURS * 3600):
            jobs.add(job)

    def subject(row):
        return f"{row['node__name']}/gpu{row['gpu']}" + (f"/gi{row['instance']}" if row["instance"] != -1 else "")

    # Per GPU and job: a GPU is worth a look when it straggled enough of its jobs' seconds or of one job's.
    per_gpu: dict[tuple, list[float]] = {}
    for row in window.exclude(job="").values("node_id", "node__name", "gpu", "instance", "job").annotate(
            gpu_s=Sum("gpu_seconds"), straggler_s=Sum("straggler_s")):
        measured.add(f"{Finding.Kind.STRAGGLER}:{subject(row)}")
        key = (row["node_id"], row["gpu"], row["instance"])
        sums = per_gpu.setdefault(key, [0.0, 0.0])
        sums[0] += row["gpu_s"] or 0.0
        sums[1] += row["straggler_s"] or 0.0
        if row["gpu_s"] and _straggled_enough(row["gpu_s"], row["straggler_s"] or 0.0):
            stragglers.add(key)
    stragglers |= {key for key, (gpu_s, straggler_s) in per_gpu.items()
                   if gpu_s and _straggled_enough(gpu_s, straggler_s)}
    for row in window.values("node_id", "node__name", "gpu", "instance").annotate(
            gpu_s=Sum("gpu_seconds"), throttled_s=Sum("throttled_s")):
        measured.add(f"{Finding.Kind.THROTTLED}:{subject(row)}")
        if row["gpu_s"] and row["gpu_s"] >= minimum and row["throttled_s"] / row["gpu_s"] >= THROTTLED_MIN_SHARE:
            throttled.add((row["node_id"], row["gpu"], row["instance"]))
    return jobs, stragglers, throttled, measured


def _rows_of(since, until, jobs: set[str], gpus: set[tuple]) -> list[dict]:
    from django.db.models import Q

    if not jobs and not gpus:
        return []
    # Jobs by name, GPUs by their nodes (then exactly): one flat condition whatever their number.
    where = Q(job__in=sorted(jobs)) | Q(node_id__in=sorted({node_id for node_id, _gpu, _instance in gpus}))
    rows = CauseHour.objects.filter(where, hour__gte=since, hour__lt=until).values(*ROW_FIELDS)
    return [row for row in rows if row["job"] in jobs or (row["node_id"], row["gpu"], row["instance"]) in gpus]


def detect(since: datetime, until: datetime, *, pool_since: datetime | None = None) -> Result:
    """Every detector over the window (the pool-idle one over [pool_since, until), 14 days by default).
    Sums in the database pick the jobs and GPUs worth a look; only their rows are read."""
    jobs, stragglers, throttled, measured = _flagged(since, until)
    if stragglers:  # a straggler is judged against its peers: read every row of its jobs
        jobs_of = CauseHour.objects.filter(hour__gte=since, hour__lt=until).exclude(job="")
        for node_id, gpu, instance in stragglers:
            jobs |= set(jobs_of.filter(node_id=node_id, gpu=gpu, instance=instance)
                        .values_list("job", flat=True).distinct())
    rows = _rows_of(since, until, jobs, throttled)
    clocks = _gpu_clocks(stragglers | throttled, since, until)
    flagged_jobs = [row for row in rows if row["job"] in jobs]
    combined = Result(measured=measured)
    parts = (detect_input_bound(flagged_jobs), detect_communication_bound(flagged_jobs),
             detect_stragglers(flagged_jobs, since, until, only=stragglers, clocks=clocks),
             detect_throttled([row for row in rows if (row["node_id"], row["gpu"], row["instance"]) in throttled],
                              since, until, clocks),
             detect_allocated_idle(flagged_jobs), detect_memory_only(flagged_jobs),
             detect_pool_idle(pool_since if pool_since is not None and pool_since < since else since, until))
    for part in parts:
        combined.candidates += part.candidates
        combined.measured |= part.measured
    return combined


# ---- refresh and decisions --------------------------------------------------------------------------------

def _check_window(since, until) -> None:
    if since.tzinfo is None or until.tzinfo is None:
        raise FindingError("since/until: give times with a time zone (UTC)")
    if until <= since:
        raise FindingError(f"until {until.isoformat()} is not after since {since.isoformat()}")


# The periodic refresh's interval (celery.py's "analytics-findings" entry) and the cursor that keeps when the
# detectors last ran and up to when they looked (AttributionCursor's row of that name).
REFRESH_EVERY_S = 900
REFRESH_CURSOR = "findings"
# A refresh this many intervals overdue: no worker runs the detectors, no next run is promised.
REFRESH_STALLED_RUNS = 3


def refresh_schedule(now: datetime | None = None) -> dict:
    """When the detectors ran last and run next: {"last", "next", "stalled_since", "every_minutes"}; "next"
    is None before a first run (it comes within REFRESH_EVERY_S of the worker's start) and when stalled."""
    now = now or timezone.now()
    every = timedelta(seconds=REFRESH_EVERY_S)
    last = AttributionCursor.objects.filter(name=REFRESH_CURSOR).values_list("updated_at", flat=True).first()
    schedule = {"last": last, "next": None, "stalled_since": None, "every_minutes": REFRESH_EVERY_S // 60}
    if last is None:
        return schedule
    if now - last > REFRESH_STALLED_RUNS * every:
        schedule["stalled_since"] = last
        return schedule
    runs = max(1, math.ceil((now - last) / every))
    schedule["next"] = last + runs * every
    return schedule


# The evidence's key that holds a finding's summary and proposal in each other language of the portal.
TRANSLATIONS = "translations"


def translations(candidate: Candidate) -> dict:
    """{language: {"summary", "proposal"}} for each language of the portal but the appliance's own."""
    return {language: {"summary": in_language(candidate.summary, language),
                       "proposal": in_language(candidate.proposal, language)}
            for language, _name in settings.LANGUAGES if language != settings.LANGUAGE_CODE}


def _stored(value):
    """Evidence as stored: any generated text in it in the appliance's language, whoever ran the detectors."""
    if isinstance(value, dict):
        return {key: _stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_stored(item) for item in value]
    return in_language(value, settings.LANGUAGE_CODE) if isinstance(value, str) else value


def read_in(finding: Finding, part: str, language: str | None) -> str:
    """A finding's summary or proposal in `language` where the detectors wrote it in that language too, else
    as stored (a finding written before they did)."""
    text = ((finding.evidence or {}).get(TRANSLATIONS) or {}).get(language or "", {}).get(part)
    return text if isinstance(text, str) and text else getattr(finding, part)


def refresh(since: datetime | None = None, until: datetime | None = None) -> dict:
    """Run the detectors over [since, until) (the last day by default; pool idleness over 14 days) and
    bring the findings up to date. Returns the counts and the keys opened and resolved."""
    until = until or timezone.now()  # the current hour's row holds what is attributed of it so far
    since = since or until - DEFAULT_WINDOW
    _check_window(since, until)
    found = detect(since, until, pool_since=min(since, until - POOL_WINDOW))
    now = timezone.now()
    opened, updated, resolved, reopened = [], [], [], []
    with transaction.atomic():
        existing = {f.key: f for f in Finding.objects.select_for_update().filter(
            key__in=[c.key for c in found.candidates])}
        for candidate in found.candidates:
            values = {"kind": candidate.kind, "subject": candidate.subject,
                      "summary": in_language(candidate.summary, settings.LANGUAGE_CODE),
                      "proposal": in_language(candidate.proposal, settings.LANGUAGE_CODE),
                      "severity": candidate.severity, "evidence": _stored(candidate.evidence) | {TRANSLATIONS: translations(candidate)},
                      "node_id": candidate.node_id, "job": candidate.job, "pool": candidate.pool,
                      "window_start": since, "window_end": until, "last_seen": now}
            finding = existing.get(candidate.key)
            if finding is None:
                Finding.objects.create(key=candidate.key, first_seen=now, **values)
                opened.append(candidate.key)
                continue
            if finding.state == Finding.State.RESOLVED:
                values |= {"state": Finding.State.OPEN, "decided_by": "", "decided_at": None, "reason": ""}
                reopened.append(candidate.key)
            elif finding.state != Finding.State.OPEN:
                continue  # a person decided: the decision stands, with the figures it was taken on
            for name, value in values.items():
                setattr(finding, name, value)
            finding.save()
            if finding.state == Finding.State.OPEN and candidate.key not in reopened:
                updated.append(candidate.key)
        keys = {c.key for c in found.candidates}
        stale = Finding.objects.select_for_update().filter(state=Finding.State.OPEN, kind__in=DETECTED_KINDS,
                                                           key__in=list(found.measured - keys))
        for finding in stale:
            finding.state = Finding.State.RESOLVED
            finding.last_seen = now
            finding.save(update_fields=["state", "last_seen"])
            resolved.append(finding.key)
        AttributionCursor.objects.update_or_create(name=REFRESH_CURSOR, defaults={"attributed_until": until})
        summary = {"since": since.isoformat(), "until": until.isoformat(), "found": len(found.candidates),
                   "opened": sorted(opened + reopened), "updated": len(updated), "resolved": sorted(resolved)}
        if opened or reopened or resolved:
            audit.record("analytics.findings.refresh", target_type="analytics.finding", target_name="findings",
                         details={"since": summary["since"], "until": summary["until"],
                                  "opened": summary["opened"][:50], "resolved": summary["resolved"][:50],
                                  "opened_count": len(summary["opened"]), "resolved_count": len(resolved),
                                  "updated_count": len(updated)})
    return summary


def _decidable(finding: Finding) -> Finding:
    current = Finding.objects.select_for_update().get(pk=finding.pk)
    if current.state != Finding.State.OPEN:
        raise FindingError(_("finding %(id)s is %(state)s already: only an open finding can be decided") % {
            "id": current.pk, "state": current.state})
    return current


def _next_window(hours: list[int], now: datetime) -> tuple[datetime, datetime]:
    """The next occurrence of the daily window [start:00, end:00) of local time (settings.TIME_ZONE, the
    zone pool-idle findings count hours in), or the current one if inside it; returned in UTC."""
    start_hour, end_hour = hours
    zone = timezone.get_default_timezone()
    local = now.astimezone(zone)
    hours_long = (end_hour - start_hour) % 24 or 24
    for offset in (-1, 0, 1, 2):
        day = local.date() + timedelta(days=offset)
        start = datetime(day.year, day.month, day.day, start_hour, tzinfo=zone).astimezone(UTC)
        end_day = datetime(day.year, day.month, day.day, tzinfo=zone) + timedelta(hours=start_hour + hours_long)
        end = datetime(end_day.year, end_day.month, end_day.day, end_day.hour, tzinfo=zone).astimezone(UTC)
        if now < end:
            return max(start, now.astimezone(UTC).replace(second=0, microsecond=0)), end
    raise FindingError("window_hours: no next occurrence")  # pragma: no cover (a day later always comes)


def accept(finding: Finding, user, *, note: str = "") -> dict:
    """Accept an open finding (audited). A pool-idle finding proposes its lending plan (lending.services
    .propose) for the next occurrence of its window, and the plan is linked in the result and the record."""
    note = (note or "").strip()
    if len(note) > 2000:
        raise FindingError("reason: at most 2000 characters")
    plan = None
    with transaction.atomic():
        current = _decidable(finding)
        if current.kind == Finding.Kind.POOL_IDLE:
            from appliance.lending import services as lending

            evidence = current.evidence or {}
            if not evidence.get("to_pool"):
                raise FindingError(_("pool %(pool)s: no pool of the other kind to lend to") % {"pool": current.pool})
            start, end = _next_window(evidence["window_hours"], timezone.now())
            try:
                plan = lending.propose(nodes=list(evidence["nodes"]), from_pool=evidence["from_pool"],
                                       to_pool=evidence["to_pool"], window_start=start, window_end=end,
                                       reason=note or current.summary, actor=user, finding=current)
            except lending.LendingError as exc:
                raise FindingError(str(exc)) from exc
        current.state = Finding.State.ACCEPTED
        current.decided_by = user.get_username()
        current.decided_at = timezone.now()
        current.reason = note
        current.save(update_fields=["state", "decided_by", "decided_at", "reason"])
        details = {"kind": current.kind, "subject": current.subject, "note": note}
        if plan is not None:
            details["plan"] = plan.pk
        audit.record("analytics.finding.accept", target=current, actor=user, details=details)
    finding.refresh_from_db()
    return {"id": current.pk, "state": current.state, "plan": plan.pk if plan is not None else None}


def dismiss(finding: Finding, user, *, reason: str) -> dict:
    """Dismiss an open finding; the reason is required (and audited)."""
    reason = (reason or "").strip()
    if not reason:
        raise FindingError(_("reason: say why the finding is dismissed"))
    if len(reason) > 2000:
        raise FindingError("reason: at most 2000 characters")
    with transaction.atomic():
        current = _decidable(finding)
        current.state = Finding.State.DISMISSED
        current.decided_by = user.get_username()
        current.decided_at = timezone.now()
        current.reason = reason
        current.save(update_fields=["state", "decided_by", "decided_at", "reason"])
        audit.record("analytics.finding.dismiss", target=current, actor=user, reason=reason,
                     details={"kind": current.kind, "subject": current.subject})
    finding.refresh_from_db()
    return {"id": current.pk, "state": current.state}


def as_dict(finding: Finding) -> dict:
    return {"id": finding.pk, "key": finding.key, "kind": finding.kind, "state": finding.state,
            "subject": finding.subject, "node": finding.node.name if finding.node_id and finding.node else "",
            "job": finding.job, "pool": finding.pool, "severity_gpu_hours": finding.severity,
            "summary": finding.summary, "proposal": finding.proposal, "evidence": finding.evidence,
            "window_start": finding.window_start.isoformat(), "window_end": finding.window_end.isoformat(),
            "first_seen": finding.first_seen.isoformat(), "last_seen": finding.last_seen.isoformat(),
            "decided_by": finding.decided_by,
            "decided_at": finding.decided_at.isoformat() if finding.decided_at else None, "reason": finding.reason}
