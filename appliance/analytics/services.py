"""Where the GPU-hours went: sums of the attribution ledger (CauseHour) per appliance, pool, node, GPU, job,
user, hour or day, computed by the database (one GROUP BY over the window's rows, whatever their number).

Figures of a group (hours are GPU-hours: a MIG slice counts its share of the GPU, as the ledger weighs it):
- gpu_hours: the GPU-hours of the group's GPUs over the window, wall time, measured or not (the hours with
  no line are "no data"); allocated_hours: the part a job or service held; used_hours: weighted by
  utilization (what the GPUs computed).
- by_cause: GPU-hours of each cause (rules.LABELS and "no-data"; they add up to gpu_hours);
  idle_share_by_cause: each cause other than busy over all GPU-hours of the group (the "where did the
  GPU-hours go" bar); idle_share: the causes but busy and no data; no_data_hours and no_data_share.
- memory held vs used: GiB-hours of GPU memory the holders were given and what they filled.
- skew (per job): the utilization of each of its GPUs over the window, their spread, coefficient of variation
  and the least used GPU.

A window is the hours starting in [since, until). The pages, the API and `manage.py analytics report` read
these functions only.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Max, Min, Q, Sum
from django.utils import timezone

from appliance.inventory.models import Node, Pool

from .models import CAUSE_FIELDS, AttributionCursor, CauseHour, JobTotal, PoolUserHour, SummaryState

GROUPS = ("appliance", "pool", "node", "gpu", "job", "user", "hour", "day")
HOUR_S = 3600.0
MIB_PER_GIB = 1024
MAX_WINDOW = timedelta(days=366)
DEFAULT_WINDOW = timedelta(days=7)
UNALLOCATED = "(unallocated)"
NO_POOL = "(no pool)"
NO_USER = "(no user)"

# The attribution's own accuracy against ground truth, as measured by tests/bench/bench_heldout_telemetry.py
# (docs/benchmarks.md, "Attribution on held-out telemetry"): held out, the share of the GPU-seconds received
# whose cause matched on telemetry written apart from the rules (tests/analytics/heldout.py, six seeds of
# an hour of 32 GPUs through the ingest and the ledger), with each cause's; in-sample, the share of
# GPU-hours on the workload model the thresholds were first chosen on (tests/bench/bench_attribution.py).
# A benchmark figure, not a measurement of this appliance: the pages show it as such.
ATTRIBUTION_ACCURACY = {
    "source": "tests/bench/bench_heldout_telemetry.py",
    "in_sample": {"data": "workload model, demo profile, seed 1, one day", "gpu_hours": 768, "matched": 0.9984},
    "held_out": {"data": "tests/analytics/heldout.py, seeds 1-5 and 7, 32 GPUs x 1 h each", "gpu_hours": 192,
                 "matched": 0.9827,
                 "by_cause": {"busy": 1.0, "idle-unallocated": 0.995, "allocated-idle": 0.997, "input-bound": 0.975,
                              "communication-bound": 0.970, "straggler": 0.988, "throttled": 1.0,
                              "memory-only": 1.0, "no-data": 1.0}},
}

_SUMS = {"gpu_s": Sum("gpu_seconds"), "used_s": Sum("used_seconds"),
         "allocated_s": Sum("gpu_seconds", filter=~Q(job="")),
         "held_mib_s": Sum("memory_held_mib_s"), "filled_mib_s": Sum("memory_used_mib_s")}
_SUMS.update({f"cause_{column}": Sum(column) for column in CAUSE_FIELDS.values()})
# The same sums over the summary (PoolUserHour, JobTotal), and the summary's column for each.
_SUMMARY_COLUMNS = {"gpu_s": "gpu_seconds", "used_s": "used_seconds", "allocated_s": "allocated_seconds",
                    "held_mib_s": "memory_held_mib_s", "filled_mib_s": "memory_used_mib_s"}
_SUMMARY_COLUMNS.update({f"cause_{column}": column for column in CAUSE_FIELDS.values()})
_SUMMARY_SUMS = {name: Sum(column) for name, column in _SUMMARY_COLUMNS.items()}
SUMMARY_GROUPS = ("appliance", "pool", "user", "hour", "day")
JOB_CHUNK = 500
# The columns each group is read by (day: by hour, folded here, so that no database's date functions differ).
_COLUMNS = {"appliance": (), "pool": ("pool",), "node": ("node_id",), "gpu": ("node_id", "gpu", "instance"),
            "job": ("job",), "user": ("user",), "hour": ("hour",), "day": ("hour",)}


class AnalyticsError(ValueError):
    """A request the aggregates cannot answer; the message names the parameter."""


def parse_time(value, name: str) -> datetime | None:
    """An ISO 8601 time (a date alone is its midnight UTC; no zone: UTC), in UTC, or None for a blank value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        text = str(value).strip()
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise AnalyticsError(f"{name}: {text[:40]!r} is not a time (ISO 8601, e.g. 2026-01-05 or "
                                 f"2026-01-05T10:00:00Z)") from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    # In UTC: PostgreSQL takes no offset beyond 15:59 (Python takes up to 23:59), and the stores keep UTC.
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise AnalyticsError(f"{name}: {moment.isoformat()} is out of range in UTC") from None


def window(since=None, until=None, *, default: timedelta = DEFAULT_WINDOW, now: datetime | None = None):
    """The window asked for: `until` defaults to the start of the next hour after now, `since` to `default`
    before it. Refuses a reversed window or one longer than a year, naming the option."""
    until_at = parse_time(until, "until")
    since_at = parse_time(since, "since")
    if until_at is None:
        now = now or timezone.now()
        until_at = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if since_at is None:
        since_at = until_at - default
    if until_at <= since_at:
        raise AnalyticsError(f"until: {until_at.isoformat()} is not after since {since_at.isoformat()}")
    if until_at - since_at > MAX_WINDOW:
        raise AnalyticsError(f"since: the window from {since_at.isoformat()} to {until_at.isoformat()} is longer "
                             f"than {MAX_WINDOW.days} days")
    return since_at, until_at


def _check_pool(pool: str | None) -> str | None:
    if pool is None or pool == "":
        return None
    if not (Pool.objects.filter(name=pool).exists() or CauseHour.objects.filter(pool=pool).exists()):
        raise AnalyticsError(f"pool: no pool is named {str(pool)[:64]!r}")
    return pool


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def refresh_summary() -> dict:
    """Bring the summaries (PoolUserHour, JobTotal) up to the ledger: the hours from the one that was still
    filling at the last refresh, and every hour that has rows written since (a rebuild writes new rows),
    are summed again; the jobs seen in them are summed again over their whole life. Nothing changed: three
    small queries. Returns {"from": iso or None, "hours": n, "jobs": n}."""
    state = SummaryState.objects.filter(name="efficiency").first()
    cursor = AttributionCursor.objects.filter(name="rollups").values_list("attributed_until", flat=True).first()
    fresh = CauseHour.objects.filter(id__gt=state.last_id if state else 0).aggregate(hour=Min("hour"), id=Max("id"))
    starts = [fresh["hour"]] if fresh["id"] is not None else []
    if state and state.ledger_until is not None and cursor != state.ledger_until:
        starts.append(_floor_hour(state.ledger_until))  # its hour was still filling
    if not starts:
        if state and cursor != state.ledger_until:  # the ledger's first cursor: rows before it are summed
            SummaryState.objects.filter(pk=state.pk).update(ledger_until=cursor)
        return {"from": None, "hours": 0, "jobs": 0}
    start = _floor_hour(min(starts))
    with transaction.atomic():
        state, _ = SummaryState.objects.select_for_update().get_or_create(name="efficiency")
        last_id = CauseHour.objects.aggregate(id=Max("id"))["id"] or 0
        recent = CauseHour.objects.filter(hour__gte=start)
        PoolUserHour.objects.filter(hour__gte=start).delete()
        hours = [PoolUserHour(hour=row.pop("hour"), pool=row.pop("pool"), user=row.pop("user"),
                              **{_SUMMARY_COLUMNS[name]: value or 0.0 for name, value in row.items()})
                 for row in recent.values("hour", "pool", "user").annotate(**_SUMS).order_by()]
        PoolUserHour.objects.bulk_create(hours, batch_size=2000)
        jobs = sorted(set(recent.exclude(job="").values_list("job", flat=True).distinct()))
        for offset in range(0, len(jobs), JOB_CHUNK):
            chunk = jobs[offset:offset + JOB_CHUNK]
            JobTotal.objects.filter(job__in=chunk).delete()
            totals = CauseHour.objects.filter(job__in=chunk).values("job").annotate(
                first=Min("hour"), last=Max("hour"), pool_name=Max("pool"), user_name=Max("user"), **_SUMS).order_by()
            JobTotal.objects.bulk_create([
                JobTotal(job=row["job"], pool=row["pool_name"], user=row["user_name"], first_hour=row["first"],
                         last_hour=row["last"], idle_seconds=(row["gpu_s"] or 0.0) - (row["cause_busy_s"] or 0.0),
                         **{column: row[name] or 0.0 for name, column in _SUMMARY_COLUMNS.items()})
                for row in totals], batch_size=2000)
        state.ledger_until, state.last_id = cursor, max(last_id, state.last_id)
        state.save()
    return {"from": start.isoformat(), "hours": len({h.hour for h in hours}), "jobs": len(jobs)}


def _summary_rows(since: datetime, until: datetime, columns, *, pool=None):
    refresh_summary()
    queryset = PoolUserHour.objects.filter(hour__gte=since, hour__lt=until)
    if pool:
        queryset = queryset.filter(pool=pool)
    if columns:
        return list(queryset.values(*columns).annotate(**_SUMMARY_SUMS).order_by())
    return [queryset.aggregate(**_SUMMARY_SUMS)]


def _rows(since: datetime, until: datetime, columns, *, pool=None, job=None, user=None):
    since, until = window(since, until)
    queryset = CauseHour.objects.filter(hour__gte=since, hour__lt=until)
    if pool:
        queryset = queryset.filter(pool=pool)
    if job is not None:
        queryset = queryset.filter(job=job)
    if user is not None:
        queryset = queryset.filter(user=user)
    if columns:
        return list(queryset.values(*columns).annotate(**_SUMS).order_by())
    return [queryset.aggregate(**_SUMS)]


_NAMES = tuple(_SUMS)


class _Tally:
    __slots__ = ("values",)

    def __init__(self):
        self.values = [0.0] * len(_NAMES)

    def add(self, row: dict) -> None:
        self.add_values([row.get(name) or 0.0 for name in _NAMES])

    def add_values(self, values: list[float]) -> None:
        self.values = [a + b for a, b in zip(self.values, values, strict=True)]

    @property
    def sums(self) -> dict[str, float]:
        return dict(zip(_NAMES, self.values, strict=True))

    def as_dict(self) -> dict:
        s = self.sums
        gpu_h = s["gpu_s"] / HOUR_S

        def share(value_s: float, whole_s: float) -> float:
            return round(value_s / whole_s, 4) if whole_s else 0.0

        by_cause = {label: round(s[f"cause_{column}"] / HOUR_S, 4) for label, column in CAUSE_FIELDS.items()}
        return {"gpu_hours": round(gpu_h, 4), "allocated_hours": round(s["allocated_s"] / HOUR_S, 4),
                "used_hours": round(s["used_s"] / HOUR_S, 4),
                "allocated_share": share(s["allocated_s"], s["gpu_s"]), "used_share": share(s["used_s"], s["gpu_s"]),
                "by_cause": by_cause,
                "idle_share_by_cause": {label: share(s[f"cause_{column}"], s["gpu_s"])
                                        for label, column in CAUSE_FIELDS.items() if label != "busy"},
                "idle_share": share(s["gpu_s"] - s["cause_busy_s"] - s["cause_no_data_s"], s["gpu_s"]),
                "no_data_hours": round(s["cause_no_data_s"] / HOUR_S, 4),
                "no_data_share": share(s["cause_no_data_s"], s["gpu_s"]),
                "memory_held_gib_hours": round(s["held_mib_s"] / MIB_PER_GIB / HOUR_S, 4),
                "memory_used_gib_hours": round(s["filled_mib_s"] / MIB_PER_GIB / HOUR_S, 4),
                "memory_used_share": share(s["filled_mib_s"], s["held_mib_s"])}


def _node_names(rows) -> dict[int, str]:
    ids = {row["node_id"] for row in rows if "node_id" in row}
    return dict(Node.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}


def _key(group: str, row: dict, names: dict[int, str]) -> str:
    if group == "appliance":
        return "appliance"
    if group == "pool":
        return row["pool"] or NO_POOL
    if group == "user":
        return row["user"] or NO_USER
    if group == "job":
        return row["job"] or UNALLOCATED
    if group in ("node", "gpu"):
        name = names.get(row["node_id"], str(row["node_id"]))
        if group == "node":
            return name
        return f"{name}/gpu{row['gpu']}" + (f"/gi{row['instance']}" if row["instance"] != -1 else "")
    hour = row["hour"].astimezone(UTC)
    return hour.strftime("%Y-%m-%dT%H:00Z" if group == "hour" else "%Y-%m-%d")


def _fold(rows, group: str, names: dict[int, str]) -> dict[str, _Tally]:
    groups: dict[str, _Tally] = defaultdict(_Tally)
    keys: dict = {}  # rows of one hour (or node) share their key: computed once
    for row in rows:
        values = [row.get(name) or 0.0 for name in _NAMES]
        if group in ("hour", "day"):
            hour = row["hour"]
            key = keys.get(hour)
            if key is None:
                key = keys[hour] = _key(group, row, names)
        else:
            key = _key(group, row, names)
        groups[key].add_values(values)
    return groups


def efficiency(*, since, until, pool: str | None = None, group: str = "pool", job: str | None = None) -> dict:
    """GPU-hours allocated vs used, by cause and idle share by cause, memory held vs used, per `group` (one of
    GROUPS) over the hours starting in [since, until), of one pool (or all) and one job (or all). Per job
    (group "job"), the skew across its GPUs too."""
    if group not in GROUPS:
        raise AnalyticsError(f"group: {str(group)[:32]!r} is not one of {', '.join(GROUPS)}")
    since, until = window(since, until)
    pool = _check_pool(pool)
    if job is not None and len(job) > 100:
        raise AnalyticsError("job: longer than 100 characters (a Slurm job id or a service's name)")
    if group in SUMMARY_GROUPS and job is None:
        rows = _summary_rows(since, until, _COLUMNS[group], pool=pool)
    else:
        rows = _rows(since, until, _COLUMNS[group], pool=pool, job=job)
    names = _node_names(rows)
    groups = _fold(rows, group, names)
    total = _fold(rows, "appliance", names).get("appliance") or _Tally()
    entries = [{"key": key} | groups[key].as_dict() for key in sorted(groups) if groups[key].values[0]]
    if group == "job":
        skews = {entry["job"]: entry for entry in job_skew(since=since, until=until, pool=pool, job=job)}
        for entry in entries:
            entry["skew"] = skews.get(entry["key"])
    return {"since": since.isoformat(), "until": until.isoformat(), "group": group, "pool": pool or "",
            "job": job, "groups": entries, "total": total.as_dict()}


def job_skew(*, since, until, pool: str | None = None, job: str | None = None) -> list[dict]:
    """Per job (or the one named): the utilization of each of its GPUs over the window (used over measured
    GPU-seconds, percent), the spread between the most and the least used, the coefficient of variation
    and the least used GPU (the one its peers waited for, or the one it did not need)."""
    since, until = window(since, until)
    queryset = CauseHour.objects.filter(hour__gte=since, hour__lt=until).exclude(job="")
    if pool:
        queryset = queryset.filter(pool=pool)
    if job is not None:
        queryset = queryset.filter(job=job)
    rows = list(queryset.values("job", "node_id", "gpu", "instance")
                .annotate(gpu_s=Sum("gpu_seconds"), used_s=Sum("used_seconds")).order_by())
    names = _node_names(rows)
    per_job: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["gpu_s"]:
            per_job[row["job"]][_key("gpu", row, names)] = 100.0 * (row["used_s"] or 0.0) / row["gpu_s"]
    result = []
    for name in sorted(per_job):
        gpus = dict(sorted(per_job[name].items()))
        values = list(gpus.values())
        mean = statistics.fmean(values)
        least = min(gpus, key=lambda gpu: (gpus[gpu], gpu))
        result.append({"job": name, "gpus": [{"gpu": gpu, "util_mean": round(value, 2)} for gpu, value in gpus.items()],
                       "util_mean": round(mean, 2), "spread": round(max(values) - min(values), 2),
                       "cv": round(statistics.pstdev(values) / mean, 4) if mean else 0.0,
                       "least_used": least if len(gpus) > 1 else ""})
    return result


def overview(*, since, until, pool: str | None = None) -> dict:
    """What the Efficiency page shows, from the summary (PoolUserHour), summed by the database: the
    appliance, each pool, each user, and each day."""
    since, until = window(since, until)
    pool = _check_pool(pool)
    refresh_summary()
    queryset = PoolUserHour.objects.filter(hour__gte=since, hour__lt=until)
    if pool:
        queryset = queryset.filter(pool=pool)

    def summed(column):  # the database sums; a few dozen rows come back
        return list(queryset.values(column).annotate(**_SUMMARY_SUMS).order_by())

    total = _Tally()
    total.add(queryset.aggregate(**_SUMMARY_SUMS))
    pools = _fold(summed("pool"), "pool", {})
    by_pool_user = list(queryset.values("pool", "user").annotate(**_SUMMARY_SUMS).order_by())
    users = _fold(by_pool_user, "user", {})
    days = _fold(summed("hour"), "day", {})

    def folded(groups):
        return [{"key": key} | groups[key].as_dict() for key in sorted(groups) if groups[key].values[0]]

    return {"since": since.isoformat(), "until": until.isoformat(), "pool": pool or "", "total": total.as_dict(),
            "pools": folded(pools), "users": folded(users), "holders": holders(by_pool_user),
            "days": folded(days), "accuracy": ATTRIBUTION_ACCURACY}


# The causes of a GPU-second nobody held: a blank user's hours are these and the hours of holders Slurm
# names no owner for (an inference service, a job Slurm forgot).
_UNHELD = tuple(f"cause_{CAUSE_FIELDS[label]}" for label in ("idle-unallocated", "no-data"))


def holders(rows) -> list[dict]:
    """Who held the GPU-hours, from rows summed by pool and user: each user; a blank user split into the
    hours nobody held ("unallocated") and those of holders without an owner: an inference pool's services
    ("services", with the pool) or a training job Slurm named no user for ("no-user"). Each entry has its
    "holder" kind, "pool" ("" but for services) and the figures of as_dict(); the users first by name."""
    kinds = dict(Pool.objects.values_list("name", "kind"))
    groups: dict[tuple, _Tally] = defaultdict(_Tally)
    for row in rows:
        values = {name: row.get(name) or 0.0 for name in _NAMES}
        if row["user"]:
            groups[("user", row["user"], "")].add(values)
            continue
        unheld = {name: 0.0 for name in _NAMES} | {name: values[name] for name in _UNHELD}
        unheld["gpu_s"] = sum(values[name] for name in _UNHELD)
        held = {name: values[name] - unheld[name] for name in _NAMES}
        groups[("unallocated", UNALLOCATED, "")].add(unheld)
        if kinds.get(row["pool"]) == Pool.Kind.INFERENCE:
            groups[("services", row["pool"], row["pool"])].add(held)
        else:
            groups[("no-user", NO_USER, "")].add(held)
    order = {"user": 0, "services": 1, "no-user": 2, "unallocated": 3}
    return [{"key": key, "holder": holder, "pool": pool} | groups[(holder, key, pool)].as_dict()
            for holder, key, pool in sorted(groups, key=lambda g: (order[g[0]], g[1]))
            if groups[(holder, key, pool)].values[0] > 1e-9]


def top_jobs(*, since, until, pool: str | None = None, limit: int = 10) -> list[dict]:
    """The jobs that ran in the window and left the most GPU-hours idle (every cause but busy) over their
    whole life, most first (JobTotal: one row per job, whatever the number of its GPUs and hours)."""
    since, until = window(since, until)
    refresh_summary()
    queryset = JobTotal.objects.filter(last_hour__gte=_floor_hour(since), first_hour__lt=until, idle_seconds__gt=0)
    if pool:
        queryset = queryset.filter(pool=pool)
    entries = []
    for job in queryset.order_by("-idle_seconds", "job")[:limit]:
        tally = _Tally()
        tally.add({name: getattr(job, column) for name, column in _SUMMARY_COLUMNS.items()})
        entries.append({"job": job.job, "user": job.user, "pool": job.pool,
                        "idle_hours": round(job.idle_seconds / HOUR_S, 4),
                        "first_hour": job.first_hour.isoformat(), "last_hour": job.last_hour.isoformat()}
                       | tally.as_dict())
    return entries


def report(*, since=None, until=None, pool: str | None = None, now: datetime | None = None) -> dict:
    """The weekly report (or any window's): the appliance's GPU-hours by cause, each pool, user and day, the
    jobs that left the most idle, and the attribution's accuracy. Without `since`/`until`: the last seven
    whole days (UTC) before today."""
    if since is None and until is None:
        today = (now or timezone.now()).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        since, until = today - timedelta(days=7), today
    since, until = window(since, until, now=now)
    data = overview(since=since, until=until, pool=pool)
    data["top_jobs"] = top_jobs(since=since, until=until, pool=data["pool"] or None)
    return data


def job_span(job: str) -> tuple[datetime, datetime] | None:
    """The hours in which the ledger saw the job: (first hour, end of its last hour), or None."""
    bounds = CauseHour.objects.filter(job=job).aggregate(first=Min("hour"), last=Max("hour"))
    if bounds["first"] is None:
        return None
    return bounds["first"], bounds["last"] + timedelta(hours=1)


JOB_WINDOW_DEFAULT = timedelta(hours=6)
JOB_WINDOW_MAX = timedelta(hours=24)


def job_window(span: tuple[datetime, datetime], since=None, until=None) -> tuple[datetime, datetime]:
    """The window of a job's verdicts: by default the last 6 hours of its span in the ledger; at most 24 hours
    (the verdicts are judged again from the per-minute rollups, minute by minute)."""
    first, end = span
    until_at = parse_time(until, "until") or end
    since_at = parse_time(since, "since") or max(first, until_at - JOB_WINDOW_DEFAULT)
    if until_at <= since_at:
        raise AnalyticsError(f"until: {until_at.isoformat()} is not after since {since_at.isoformat()}")
    if until_at - since_at > JOB_WINDOW_MAX:
        raise AnalyticsError(f"since: a job's verdicts are read at most {int(JOB_WINDOW_MAX.total_seconds() // 3600)} hours "
                             f"at a time ({since_at.isoformat()} to {until_at.isoformat()} asked)")
    return since_at, until_at


def job_intervals(job: str, since: datetime, until: datetime) -> list[dict]:
    """The job's verdicts (ledger.job_verdicts: per GPU and minute, with evidence) merged into intervals: the
    consecutive minutes of one GPU with the same cause and rule, each with the evidence of its first minute."""
    from . import ledger

    intervals: list[dict] = []
    current: dict[tuple, dict] = {}
    for verdict in sorted(ledger.job_verdicts(job, since, until),
                          key=lambda v: (str(v["node"]), v["gpu"], v.get("instance", -1), str(v["start"]))):
        gpu_key = (verdict["node"], verdict["gpu"], verdict.get("instance", -1))
        start = parse_time(verdict["start"], "start")
        end = start + timedelta(seconds=verdict.get("step", 60))
        last = current.get(gpu_key)
        if last and last["label"] == verdict["label"] and last["rule"] == verdict["rule"] and last["end_at"] == start:
            last["end_at"] = end
            last["minutes"] += 1
            continue
        entry = {"node": verdict["node"], "gpu": verdict["gpu"], "instance": verdict.get("instance", -1),
                 "start_at": start, "end_at": end, "minutes": 1, "label": verdict["label"], "rule": verdict["rule"],
                 "evidence": verdict.get("evidence") or []}
        current[gpu_key] = entry
        intervals.append(entry)
    for entry in intervals:
        entry["start"], entry["end"] = entry["start_at"].isoformat(), entry["end_at"].isoformat()
    return intervals
