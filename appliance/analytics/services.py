"""Where the GPU-hours went: aggregates of the attributed rollups by GPU, node, pool, job and time.

Every figure is computed from one window of rollups read in a constant number of queries
(attribution.from_database), whatever the number of rows:
- GPU-hours: each row counts its bucket (`step` seconds). A MIG instance counts the share of its GPU
  its profile's compute slices give (1g.10gb: 1/7); a GPU whose instances report does not count its
  whole-GPU row again in the same bucket.
- allocated: GPU-hours a job or service held; used: GPU-hours weighted by utilization (what the GPUs
  computed); by cause: GPU-hours of each verdict; idle share by cause: each cause other than busy over
  all GPU-hours of the group.
- memory held vs used: GiB-hours of the GPU memory the holders were given vs what they filled.
- skew: per job, the mean utilization of each of its GPUs and how far apart they are.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from . import attribution, rules

GROUPS = ("appliance", "pool", "node", "gpu", "job", "hour", "day")
MIG_COMPUTE_SLICES = 7
MIB_PER_GIB = 1024


class AnalyticsError(ValueError):
    """A request the aggregates cannot answer; the message names the parameter."""


@dataclass
class Tally:
    gpu_hours: float = 0.0
    allocated_hours: float = 0.0
    used_hours: float = 0.0
    memory_held_gib_hours: float = 0.0
    memory_used_gib_hours: float = 0.0
    by_cause: dict[str, float] = field(default_factory=lambda: dict.fromkeys(rules.LABELS, 0.0))

    def as_dict(self) -> dict:
        hours = self.gpu_hours

        def share(value: float) -> float:
            return round(value / hours, 4) if hours else 0.0

        return {"gpu_hours": round(hours, 4), "allocated_hours": round(self.allocated_hours, 4),
                "used_hours": round(self.used_hours, 4),
                "by_cause": {label: round(value, 4) for label, value in self.by_cause.items()},
                "idle_share_by_cause": {label: share(value) for label, value in self.by_cause.items()
                                        if label != "busy"},
                "memory_held_gib_hours": round(self.memory_held_gib_hours, 4),
                "memory_used_gib_hours": round(self.memory_used_gib_hours, 4),
                "memory_used_share": round(self.memory_used_gib_hours / self.memory_held_gib_hours, 4)
                if self.memory_held_gib_hours else 0.0}


def gpu_share(record) -> float:
    """The part of a whole GPU a row measures: 1, or a MIG instance's compute slices out of 7."""
    if record.get("instance", -1) == -1:
        return 1.0
    prefix = str(record.get("profile") or "").split("g.", 1)[0]
    return int(prefix) / MIG_COMPUTE_SLICES if prefix.isdigit() else 1.0 / MIG_COMPUTE_SLICES


def _counted(attributed: list[attribution.Attributed]) -> list[tuple[attribution.Attributed, float]]:
    with_instances = {(a.record["node"], a.record["gpu"], a.record["start"]) for a in attributed
                      if a.record.get("instance", -1) != -1}
    result = []
    for item in attributed:
        record = item.record
        whole = record.get("instance", -1) == -1
        if whole and (record["node"], record["gpu"], record["start"]) in with_instances:
            continue
        result.append((item, record.get("step", 60) / 3600 * gpu_share(record)))
    return result


def _key(group: str, record, info: dict) -> str:
    node = info.get(record["node"])
    name = node.name if node else str(record["node"])
    if group == "appliance":
        return "appliance"
    if group == "pool":
        return (node.pool if node else "") or "(no pool)"
    if group == "node":
        return name
    if group == "gpu":
        instance = record.get("instance", -1)
        return f"{name}/gpu{record['gpu']}" + (f"/gi{instance}" if instance != -1 else "")
    if group == "job":
        return record.get("job") or "(unallocated)"
    start: datetime = record["start"]
    return start.strftime("%Y-%m-%dT%H:00Z" if group == "hour" else "%Y-%m-%d")


def tally(counted, group: str, info: dict) -> dict[str, Tally]:
    groups: dict[str, Tally] = defaultdict(Tally)
    for item, hours in counted:
        record = item.record
        entry = groups[_key(group, record, info)]
        entry.gpu_hours += hours
        entry.by_cause[item.label] += hours
        entry.used_hours += hours * min(100.0, float(record.get("util") or 0.0)) / 100
        if record.get("job"):
            entry.allocated_hours += hours
            entry.memory_held_gib_hours += hours * float(record.get("fb_total_mib") or 0.0) / MIB_PER_GIB
            entry.memory_used_gib_hours += hours * float(record.get("fb_used_mib") or 0.0) / MIB_PER_GIB
    return groups


def _window(since: datetime, until: datetime, step: int) -> None:
    if since.tzinfo is None or until.tzinfo is None:
        raise AnalyticsError("since/until: give times with a time zone (UTC)")
    if until <= since:
        raise AnalyticsError(f"until {until.isoformat()} is not after since {since.isoformat()}")
    if step not in (60, 3600):
        raise AnalyticsError(f"step {step}: must be 60 (per-minute rollups) or 3600 (per-hour rollups)")


def efficiency(since: datetime, until: datetime, *, group: str = "appliance", step: int = 60,
               node_ids=None, job: str | None = None) -> dict:
    """GPU-hours allocated vs used, by cause and idle share by cause, memory held vs used, per `group`
    (one of GROUPS), over the buckets starting in [since, until)."""
    if group not in GROUPS:
        raise AnalyticsError(f"group {group!r}: must be one of {', '.join(GROUPS)}")
    _window(since, until, step)
    attributed, info = attribution.from_database(since, until, step=step, node_ids=node_ids, job=job)
    counted = _counted(attributed)
    groups = tally(counted, group, info)
    total = tally(counted, "appliance", info).get("appliance", Tally())
    return {"since": since.isoformat(), "until": until.isoformat(), "step": step, "group": group,
            "groups": [{"key": key} | groups[key].as_dict() for key in sorted(groups)], "total": total.as_dict()}


def job_skew(since: datetime, until: datetime, *, step: int = 60, job: str | None = None) -> list[dict]:
    """Per job (or the one named): the mean utilization of each of its GPUs over the window, the
    spread between the busiest and the least busy, and the coefficient of variation; the GPU that most
    often held the job back (straggler or throttled verdicts) when there is one."""
    _window(since, until, step)
    attributed, info = attribution.from_database(since, until, step=step, job=job)
    per_gpu: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    holding_back: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for item in attributed:
        record = item.record
        if not record.get("job") or record.get("util") is None:
            continue
        gpu = _key("gpu", record, info)
        per_gpu[record["job"]][gpu].append(float(record["util"]))
        if item.label in ("straggler", "throttled"):
            holding_back[record["job"]][gpu] += 1
    result = []
    for name in sorted(per_gpu):
        means = {gpu: statistics.fmean(values) for gpu, values in sorted(per_gpu[name].items())}
        values = list(means.values())
        mean = statistics.fmean(values)
        culprits = holding_back.get(name) or {}
        result.append({"job": name, "gpus": [{"gpu": gpu, "util_mean": round(value, 2)} for gpu, value in means.items()],
                       "util_mean": round(mean, 2), "spread": round(max(values) - min(values), 2),
                       "cv": round(statistics.pstdev(values) / mean, 4) if mean else 0.0,
                       "holding_back": max(culprits, key=lambda g: (culprits[g], g)) if culprits else ""})
    return result


def verdicts(since: datetime, until: datetime, *, step: int = 60, node_ids=None, job: str | None = None) -> list[dict]:
    """Each bucket's cause with its evidence, as a user reads why (job page, API)."""
    _window(since, until, step)
    attributed, info = attribution.from_database(since, until, step=step, node_ids=node_ids, job=job)
    return [{"gpu": _key("gpu", item.record, info), "start": item.record["start"].isoformat(),
             "step": item.record.get("step", 60), "job": item.record.get("job") or ""} | item.verdict.as_dict()
            for item in attributed]
