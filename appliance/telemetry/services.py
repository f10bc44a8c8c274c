"""The appliance's own telemetry, kept over time: per-minute rows folded into per-hour rows, rows and
events pruned by age, the state of every node's collector, alerts acknowledged.

Folding: an hour is folded once it is complete and SETTLE_S has passed (a collector sends a bucket when
its minute closes; a few seconds late is normal). The newest per-hour row is the fold's watermark: each
run folds the complete hours after it (at most MAX_HOURS_PER_RUN, oldest first, so an appliance that was
off catches up over a few runs). Minute rows of an hour at or before the watermark that arrive later (a
collector's buffer draining after an outage) are folded again by the ingest as they arrive
(`refold_late`), so a per-hour row never misses what came late.

Per-hour values from the per-minute rows of the hour: means weighted by samples (a partial minute
counts for its sweeps), maxima of the maxima, energy, XIDs, ECC errors and fabric errors summed, clock
event reasons OR'd, the job the one that held the GPU for the most samples.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, F, FloatField, Max, Min, Q, Sum, When
from django.db.models.functions import Cast, NullIf
from django.utils import timezone

from appliance import audit
from appliance.inventory.models import Node

from . import frames
from .models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    MINUTE,
    SIX_HOURS,
    TEN_MINUTES,
    THIRTY_MINUTES,
    TWO_HOURS,
    FleetMinuteFrame,
    FleetRollup,
    GpuMinuteFrame,
    GpuRollup,
    HardwareEvent,
    JobPlacement,
    NodeCollector,
    NodeRollup,
)

SETTLE_S = 120
MAX_HOURS_PER_RUN = 48
SUB_HOUR_LEVELS = (FIVE_MINUTES, TEN_MINUTES, THIRTY_MINUTES)
ABOVE_HOUR_LEVELS = (TWO_HOURS, SIX_HOURS, DAY)  # node rows folded from the hour rows, kept as long as they are
ABOVE_HOUR_CATCH_UP = 60  # 2-hour, 6-hour or day buckets folded in one run from hours kept before they existed
SUB_HOUR_CATCH_UP = timedelta(hours=12)  # of 5-, 10- or 30-minute buckets folded in one run
TEN_MINUTES_BACK = timedelta(days=1, hours=2)
# Each run folds the fleet's newest minutes again from this far back: a write that commits while a fold
# reads is in the next run's minutes (a later one is refolded by the ingest itself: refold_fleet).
FLEET_REFOLD = timedelta(minutes=10)
FLEET_SUMS = ("gpu_power_w", "ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps")

GPU_MEANS = ("util", "sm_active", "tensor_active", "dram_active", "fb_used_mib", "power_w", "temp_c", "sm_clock_mhz",
             "throttled_share", "pcie_tx_bps", "pcie_rx_bps", "nvlink_bps")
GPU_MAXIMA = ("util_max", "fb_used_max_mib", "fb_total_mib", "power_max_w", "temp_max_c")
GPU_SUMS = ("samples", "energy_j", "xid_count", "ecc_dbe")
NODE_MEANS = ("gpu_util", "gpu_fb_used_mib", "gpu_power_w", "ib_tx_bps", "ib_rx_bps", "ib_line_bps", "ib_xmit_wait",
              "fs_read_bps", "fs_write_bps", "disk_read_bps", "disk_write_bps", "cpu_busy", "cpu_iowait")
NODE_MAXIMA = ("gpus", "gpu_util_max")
NODE_SUMS = ("samples", "ib_errors")


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _weighted_mean(name: str):
    """Sum of value x samples over the samples of the rows that have a value (NULL when none has)."""
    weight = Case(When(**{f"{name}__isnull": False}, then=F("samples")), default=None)
    return Cast(Sum(F(name) * F("samples"), output_field=FloatField()), FloatField()) / \
        NullIf(Cast(Sum(weight), FloatField()), 0.0)


def _aggregates(means, maxima, sums) -> dict:
    values = {name: _weighted_mean(name) for name in means}
    values.update({name: Max(name) for name in maxima})
    values.update({name: Sum(name) for name in sums})
    return values


def fold_hour(hour: datetime, node_ids=None) -> tuple[int, int]:
    """Fold the per-minute rows of one hour (of the given nodes, or all) into per-hour rows (replacing
    what a previous fold made). Returns (GPU rows, node rows) written."""
    end = hour + timedelta(hours=1)
    minutes = Q(step=MINUTE, start__gte=hour, start__lt=end)
    if node_ids is not None:
        minutes &= Q(node_id__in=list(node_ids))
    key = ("node_id", "gpu", "instance")
    with transaction.atomic():
        gpus = GpuRollup.objects.filter(minutes).values(*key).annotate(
            **_aggregates(GPU_MEANS, GPU_MAXIMA, GPU_SUMS), uuid_=Max("uuid"), profile_=Max("profile"))
        # Clock event reasons OR'd: few distinct masks per GPU and hour, so read them rather than rely on
        # a BIT_OR aggregate SQLite lacks.
        reasons = defaultdict(int)
        for row in GpuRollup.objects.filter(minutes).exclude(throttle_reasons=0) \
                .values(*key, "throttle_reasons").distinct():
            reasons[(row["node_id"], row["gpu"], row["instance"])] |= row["throttle_reasons"]
        jobs = {}
        for row in GpuRollup.objects.filter(minutes).values(*key, "job").annotate(held=Sum("samples")):
            gpu_key = (row["node_id"], row["gpu"], row["instance"])
            best = jobs.get(gpu_key)
            if best is None or (row["held"], row["job"]) > best:
                jobs[gpu_key] = (row["held"], row["job"])
        gpu_rows = []
        for row in gpus:
            gpu_key = (row["node_id"], row["gpu"], row["instance"])
            values = {name: row[name] for name in (*GPU_MEANS, *GPU_MAXIMA, *GPU_SUMS)}
            values.update(xid_count=values["xid_count"] or 0, ecc_dbe=values["ecc_dbe"] or 0,
                          samples=values["samples"] or 0)
            gpu_rows.append(GpuRollup(node_id=row["node_id"], gpu=row["gpu"], instance=row["instance"], step=HOUR,
                                      start=hour, uuid=row["uuid_"] or "", profile=row["profile_"] or "",
                                      job=jobs.get(gpu_key, (0, ""))[1], throttle_reasons=reasons.get(gpu_key, 0),
                                      **values))
        GpuRollup.objects.bulk_create(
            gpu_rows, update_conflicts=True, unique_fields=["node", "gpu", "instance", "step", "start"],
            update_fields=[*GPU_MEANS, *GPU_MAXIMA, *GPU_SUMS, "uuid", "profile", "job", "throttle_reasons"],
            batch_size=500)

        node_rows = fold_nodes(hour, HOUR, node_ids)
        # and the 6-hour and day buckets that hold the hour, from the hour rows (the minutes are gone long
        # before a month is)
        for step in ABOVE_HOUR_LEVELS:
            fold_nodes(bucket_of(hour, step), step, node_ids, source=HOUR)
    return len(gpu_rows), node_rows


def fold_nodes(start: datetime, step: int, node_ids=None, source: int = MINUTE) -> int:
    """Fold the node rows of step `source` (per minute, or per hour for the levels above it) of one bucket
    (`step` seconds from `start`, of the given nodes or all) into node rows of that step (replacing what a
    previous fold made; means weighted by samples, so a level folded from hours equals one folded from
    their minutes). Returns the rows written."""
    minutes = Q(step=source, start__gte=start, start__lt=start + timedelta(seconds=step))
    if node_ids is not None:
        minutes &= Q(node_id__in=list(node_ids))
    with transaction.atomic():
        node_minutes = NodeRollup.objects.filter(minutes)
        nodes = node_minutes.values("node_id").annotate(**_aggregates(NODE_MEANS, NODE_MAXIMA, NODE_SUMS))
        mounts = _fold_mounts(node_minutes.exclude(mounts={}).values_list("node_id", "samples", "mounts"))
        node_rows = []
        for row in nodes:
            values = {name: row[name] for name in (*NODE_MEANS, *NODE_MAXIMA, *NODE_SUMS)}
            values.update(gpus=values["gpus"] or 0, ib_errors=values["ib_errors"] or 0, samples=values["samples"] or 0)
            node_rows.append(NodeRollup(node_id=row["node_id"], step=step, start=start,
                                        mounts=mounts.get(row["node_id"], {}), **values))
        NodeRollup.objects.bulk_create(
            node_rows, update_conflicts=True, unique_fields=["node", "step", "start"],
            update_fields=[*NODE_MEANS, *NODE_MAXIMA, *NODE_SUMS, "mounts"], batch_size=500)
        fold_fleet(step, start, node_ids=node_ids)
    return len(node_rows)


def fold_fleet(step: int, first: datetime, last: datetime | None = None, node_ids=None) -> int:
    """Sum the node rows of `step` whose buckets start from `first` to `last` (included; `first` alone
    when None) into each appliance's fleet rows (replacing what a previous fold made; a bucket whose node
    rows are gone loses its fleet row), with each node's GPU utilization (the heatmap's cells: node_ids,
    node_gpu_util). Only nodes with GPUs count: the fleet the Overview shows. Two queries (the sums, the
    cells) and one write. With `node_ids` (a late write of those nodes), the cells the fleet's rows hold
    already are kept and only those nodes' are read again: a node's hour drained after an outage refolds
    its buckets without reading the whole fleet's rows of each. Returns the fleet rows written."""
    last = last or first
    with transaction.atomic():
        node_rows = NodeRollup.objects.filter(step=step, start__gte=first, start__lte=last,
                                              node__in=Node.objects.filter(gpus__isnull=False)).order_by()
        sums = list(node_rows.values("node__appliance", "start")
                    .annotate(nodes_=Count("id"), util_sum=Sum("gpu_util"), util_count=Count("gpu_util"),
                              **{f"{name}_": Sum(name) for name in FLEET_SUMS}))
        cells = None
        if node_ids is not None:
            cells = _patched_cells(step, first, last, [(row["node__appliance"], row["start"]) for row in sums],
                                   node_rows, list(node_ids))
        if cells is None:
            cells = _fleet_cells(node_rows)
        rows = []
        for row in sums:
            ids, utils = cells.get((row["node__appliance"], row["start"]), ((), ()))
            rows.append(FleetRollup(
                appliance_id=row["node__appliance"], step=step, start=row["start"], nodes=row["nodes_"],
                gpu_util_sum=row["util_sum"], gpu_util_count=row["util_count"],
                node_ids=np.array(ids, dtype="<i8").tobytes(), node_gpu_util=np.array(utils, dtype="<f8").tobytes(),
                **{name: row[f"{name}_"] for name in FLEET_SUMS}))
        kept = {(row.appliance_id, row.start) for row in rows}
        stale = [pk for pk, appliance_id, start in FleetRollup.objects.filter(step=step, start__gte=first, start__lte=last)
                 .values_list("pk", "appliance", "start") if (appliance_id, start) not in kept]
        if stale:
            FleetRollup.objects.filter(pk__in=stale).delete()
        FleetRollup.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["appliance", "step", "start"],
            update_fields=["nodes", "gpu_util_sum", "gpu_util_count", *FLEET_SUMS, "node_ids", "node_gpu_util"],
            batch_size=500)
    return len(rows)


def _patched_cells(step: int, first: datetime, last: datetime, buckets: list, node_rows, node_ids: list[int]):
    """The cells of `buckets` ((appliance id, start)) as the fleet's rows hold them with the given nodes'
    read again from `node_rows`; None when a bucket's fleet row has none to start from (new, or folded
    before rows kept cells): then all are read."""
    held = {(appliance_id, start): (ids, utils) for appliance_id, start, ids, utils in
            FleetRollup.objects.filter(step=step, start__gte=first, start__lte=last)
            .values_list("appliance", "start", "node_ids", "node_gpu_util")}
    if any(held.get(bucket, (None, None))[0] is None or held[bucket][1] is None for bucket in buckets):
        return None
    fresh = _fleet_cells(node_rows.filter(node_id__in=node_ids))
    cells = {}
    for bucket in buckets:
        ids = np.frombuffer(bytes(held[bucket][0]), dtype="<i8")
        utils = np.frombuffer(bytes(held[bucket][1]), dtype="<f8")
        if len(ids) != len(utils):
            return None
        others = ~np.isin(ids, node_ids)
        new_ids, new_utils = fresh.get(bucket, ([], []))
        ids = np.concatenate([ids[others], np.array(new_ids, dtype="<i8")])
        utils = np.concatenate([utils[others], np.array(new_utils, dtype="<f8")])
        order = np.argsort(ids, kind="stable")
        cells[bucket] = (ids[order], utils[order])
    return cells


def _fleet_cells(node_rows) -> dict[tuple[int, datetime], tuple[list[int], list]]:
    """{(appliance id, bucket start): (node ids ascending, their GPU utilization, None where none)} of node
    rows, read in that order."""
    cells: dict[tuple[int, datetime], tuple[list[int], list]] = {}
    for appliance_id, start, node_id, util in (node_rows.order_by("node__appliance", "start", "node")
                                               .values_list("node__appliance", "start", "node", "gpu_util")
                                               .iterator(chunk_size=5000)):
        ids, utils = cells.setdefault((appliance_id, start), ([], []))
        ids.append(node_id)
        utils.append(util)
    return cells


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def fold_fleet_minutes(now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """Fold the fleet's settled minutes (SETTLE_S after they closed): those after the newest fleet minute
    and FLEET_REFOLD before it, never further back than TEN_MINUTES_BACK (the per-minute fleet rows serve
    ranges of a day at most). Returns the (first, last) minute folded, or None."""
    now = now or timezone.now()
    last = minute_of(now - timedelta(seconds=SETTLE_S)) - timedelta(seconds=MINUTE)
    newest = FleetRollup.objects.filter(step=MINUTE).aggregate(newest=Max("start"))["newest"]
    first = last - TEN_MINUTES_BACK if newest is None else max(newest - FLEET_REFOLD, last - TEN_MINUTES_BACK)
    first = NodeRollup.objects.filter(step=MINUTE, start__gte=first, start__lte=last).aggregate(
        oldest=Min("start"))["oldest"]
    if first is None:
        return None
    fold_fleet(MINUTE, first, last)
    return first, last


def settle_fleet_frames(now: datetime | None = None) -> list[datetime]:
    """Pack the settled minutes' node frames into fleet frames (frames.settle; what the ledger reads of
    them): the minutes without one from FLEET_REFOLD before the newest fleet frame (a minute a late write
    emptied of its fleet frame, packed again), never further back than TEN_MINUTES_BACK. Returns the
    minutes packed."""
    now = now or timezone.now()
    last = minute_of(now - timedelta(seconds=SETTLE_S)) - timedelta(seconds=MINUTE)
    newest = FleetMinuteFrame.objects.aggregate(newest=Max("start"))["newest"]
    first = last - TEN_MINUTES_BACK if newest is None else max(newest - FLEET_REFOLD, last - TEN_MINUTES_BACK)
    return frames.settle(first, last)


def refold_fleet(starts, node_ids=None) -> list[datetime]:
    """Called by the ingest with the minutes a write brought (of `node_ids`): fold again the fleet minutes
    among them that the periodic fold has made already (a late write), so a fleet row never misses a
    node's minute."""
    starts = sorted(set(starts))
    if not starts:
        return []
    newest = FleetRollup.objects.filter(step=MINUTE, start__lte=starts[-1]).aggregate(newest=Max("start"))["newest"]
    late = [start for start in starts if newest is not None and start <= newest]
    if late:
        fold_fleet(MINUTE, late[0], late[-1], node_ids=node_ids)
    return late


def _fold_mounts(rows) -> dict:
    """Per node and mount: read and write rates weighted by the samples of the minutes that name it."""
    totals = defaultdict(lambda: defaultdict(lambda: {"fstype": "", "read": 0.0, "read_w": 0, "write": 0.0,
                                                      "write_w": 0}))
    for node_id, samples, mounts in rows:
        for path, mount in mounts.items():
            total = totals[node_id][path]
            total["fstype"] = mount.get("fstype") or total["fstype"]
            for side in ("read", "write"):
                value = mount.get(f"{side}_bps")
                if value is not None:
                    total[side] += value * samples
                    total[f"{side}_w"] += samples
    return {node_id: {path: {"fstype": total["fstype"],
                             "read_bps": total["read"] / total["read_w"] if total["read_w"] else None,
                             "write_bps": total["write"] / total["write_w"] if total["write_w"] else None}
                      for path, total in paths.items()}
            for node_id, paths in totals.items()}


def fold_watermark() -> datetime | None:
    """The newest hour folded (the start of the newest per-hour row)."""
    newest = [model.objects.filter(step=HOUR).aggregate(newest=Max("start"))["newest"] for model in (NodeRollup, GpuRollup)]
    return max((moment for moment in newest if moment is not None), default=None)


def _first_unfolded(watermark: datetime | None) -> datetime | None:
    """The hour of the oldest per-minute row after the watermark (hours without rows are skipped)."""
    oldest = []
    for model in (NodeRollup, GpuRollup):
        rows = model.objects.filter(step=MINUTE)
        if watermark is not None:
            rows = rows.filter(start__gte=watermark + timedelta(hours=1))
        oldest.append(rows.aggregate(oldest=Min("start"))["oldest"])
    found = [moment for moment in oldest if moment is not None]
    return hour_of(min(found)) if found else None


def fold(now: datetime | None = None) -> list[datetime]:
    """Fold the complete hours after the watermark that have rows (at most MAX_HOURS_PER_RUN, oldest
    first); returns the hours folded."""
    now = now or timezone.now()
    last_complete = hour_of(now - timedelta(seconds=SETTLE_S)) - timedelta(hours=1)
    folded = []
    while len(folded) < MAX_HOURS_PER_RUN:
        hour = _first_unfolded(folded[-1] if folded else fold_watermark())
        if hour is None or hour > last_complete:
            break
        fold_hour(hour)
        folded.append(hour)
    for step in SUB_HOUR_LEVELS:
        fold_sub_hour(step, now)
    fold_above_hour_backlog()
    fold_fleet_minutes(now)
    settle_fleet_frames(now)
    return folded


def fold_above_hour_backlog() -> list[tuple[int, datetime]]:
    """Fold the 6-hour and day buckets that have hour rows but no row of their level: the hours kept
    before these levels existed (an upgrade), at most ABOVE_HOUR_CATCH_UP buckets a run, newest first.
    Which buckets have rows is read from the fleet's rows (one a bucket), not from every node's. (Each
    hour folded from now on folds its buckets itself: fold_hour.) Returns the (step, bucket) folded."""
    hours = set(FleetRollup.objects.filter(step=HOUR).values_list("start", flat=True).distinct())
    folded = []
    for step in ABOVE_HOUR_LEVELS:
        have = set(FleetRollup.objects.filter(step=step).values_list("start", flat=True).distinct())
        for bucket in sorted({bucket_of(hour, step) for hour in hours} - have, reverse=True):
            if len(folded) >= ABOVE_HOUR_CATCH_UP:
                return folded
            fold_nodes(bucket, step, source=HOUR)
            folded.append((step, bucket))
    return folded


def bucket_of(moment: datetime, step: int) -> datetime:
    """The start of the `step`-second bucket (a divisor of an hour or of a day, UTC) that holds `moment`."""
    if step > HOUR:
        return datetime.fromtimestamp(moment.timestamp() // step * step, tz=UTC)
    return moment.replace(minute=moment.minute // (step // 60) * (step // 60), second=0, microsecond=0)


def fold_sub_hour(step: int, now: datetime | None = None) -> list[datetime]:
    """Fold the nodes' per-minute rows of each complete `step` bucket (5 or 10 minutes) into node rows of
    that step (what the fleet's heatmap reads for an hour or a few hours of a large fleet). Each run folds
    again the newest folded bucket and the one before it (a write that committed while the last run read),
    then the new complete ones, at most SUB_HOUR_CATCH_UP of them, never further back than TEN_MINUTES_BACK
    (the levels serve ranges of a day at most; an appliance that was off catches up on its newest day).
    Minutes that come later than that are folded again by the ingest (refold_late). Returns the buckets
    folded."""
    now = now or timezone.now()
    last_complete = bucket_of(now - timedelta(seconds=SETTLE_S), step) - timedelta(seconds=step)
    newest = NodeRollup.objects.filter(step=step).aggregate(newest=Max("start"))["newest"]
    oldest = NodeRollup.objects.filter(step=MINUTE, start__gte=last_complete - TEN_MINUTES_BACK) \
        .aggregate(oldest=Min("start"))["oldest"]
    if oldest is None:
        return []
    bucket = bucket_of(oldest, step)
    if newest is not None:
        bucket = max(bucket, newest - timedelta(seconds=step))
    folded = []
    while bucket <= last_complete and len(folded) < SUB_HOUR_CATCH_UP / timedelta(seconds=step):
        fold_nodes(bucket, step)
        folded.append(bucket)
        bucket += timedelta(seconds=step)
    return folded


def fold_ten_minutes(now: datetime | None = None) -> list[datetime]:
    return fold_sub_hour(TEN_MINUTES, now)


def fold_five_minutes(now: datetime | None = None) -> list[datetime]:
    return fold_sub_hour(FIVE_MINUTES, now)


def refold_late(node_id: int, starts, now: datetime | None = None) -> list[datetime]:
    """Called by the ingest with the bucket starts of a write: fold again this node's hours that the
    periodic fold has already passed (late minutes after an outage), and its 5- and 10-minute buckets
    the fold has made already (minutes a few minutes late, in the current hour too). Returns the hours.
    With `now`, a write of the current hour only (every on-time write) skips the watermark's queries: the
    hour fold never passes the current hour."""
    starts = list(starts)
    hours = sorted({hour_of(start) for start in starts})
    if not hours:
        return []
    late = []
    if now is None or hours[0] < hour_of(now):
        watermark = fold_watermark()
        late = [hour for hour in hours if watermark is not None and hour <= watermark]
    for hour in late:
        fold_hour(hour, node_ids=[node_id])
    for step in SUB_HOUR_LEVELS:
        newest = NodeRollup.objects.filter(step=step, start__lte=max(starts)).aggregate(newest=Max("start"))["newest"]
        for bucket in sorted({bucket_of(start, step) for start in starts}):
            if newest is not None and bucket <= newest:
                fold_nodes(bucket, step, node_ids=[node_id])
    return late


def prune(now: datetime | None = None) -> dict:
    """Delete per-minute rows older than TELEMETRY_RETENTION["minute_days"] (never before their hour is
    folded), per-hour rows, events and the placements of jobs that ended (placements.py) older than
    ["hour_days"]. Whole hours only, so a prune deletes
    something at most once an hour. Audited with the counts when anything was deleted."""
    now = now or timezone.now()
    retention = settings.TELEMETRY_RETENTION
    minute_cutoff = hour_of(now - timedelta(days=retention["minute_days"]))
    watermark = fold_watermark()
    # minute rows of an hour not folded yet stay until it is (their hour row is all that is left of them)
    minute_cutoff = min(minute_cutoff, watermark + timedelta(hours=1)) if watermark is not None else None
    hour_cutoff = hour_of(now - timedelta(days=retention["hour_days"]))
    counts = {"minute_gpu_rows": 0, "minute_gpu_frames": 0, "minute_fleet_frames": 0,
              "minute_node_rows": 0, "minute_fleet_rows": 0, "hour_gpu_rows": 0,
              "hour_node_rows": 0, "hour_fleet_rows": 0, "events": 0, "job_placements": 0}
    # _raw_delete: one DELETE statement; QuerySet.delete() would first load the rows whenever any delete
    # signal receiver exists, and a day of a large fleet is millions of rows.
    with transaction.atomic():
        if minute_cutoff is not None:
            counts["minute_gpu_rows"] = GpuRollup.objects.filter(step=MINUTE, start__lt=minute_cutoff)._raw_delete("default")
            counts["minute_gpu_frames"] = GpuMinuteFrame.objects.filter(start__lt=minute_cutoff)._raw_delete("default")
            counts["minute_fleet_frames"] = FleetMinuteFrame.objects.filter(start__lt=minute_cutoff)._raw_delete("default")
            # the per-10-minute node rows (a finer view of the same hours) go with the minutes
            counts["minute_node_rows"] = NodeRollup.objects.filter(step__in=(MINUTE, *SUB_HOUR_LEVELS),
                                                                   start__lt=minute_cutoff)._raw_delete("default")
            counts["minute_fleet_rows"] = FleetRollup.objects.filter(step__in=(MINUTE, *SUB_HOUR_LEVELS),
                                                                     start__lt=minute_cutoff)._raw_delete("default")
        counts["hour_gpu_rows"] = GpuRollup.objects.filter(step=HOUR, start__lt=hour_cutoff)._raw_delete("default")
        # and the 6-hour and day rows folded from them, whose bucket ended before the cut-off
        counts["hour_node_rows"] = NodeRollup.objects.filter(step=HOUR, start__lt=hour_cutoff)._raw_delete("default")
        counts["hour_fleet_rows"] = FleetRollup.objects.filter(step=HOUR, start__lt=hour_cutoff)._raw_delete("default")
        for step in ABOVE_HOUR_LEVELS:
            ended = Q(step=step, start__lte=hour_cutoff - timedelta(seconds=step))
            counts["hour_node_rows"] += NodeRollup.objects.filter(ended)._raw_delete("default")
            counts["hour_fleet_rows"] += FleetRollup.objects.filter(ended)._raw_delete("default")
        counts["events"] = HardwareEvent.objects.filter(time__lt=hour_cutoff)._raw_delete("default")
        # where schedulers put jobs that ended before any row kept (placements.py)
        counts["job_placements"] = JobPlacement.objects.filter(end__lt=hour_cutoff)._raw_delete("default")
        if any(counts.values()):
            audit.record("telemetry.rollup.prune", target_type="telemetry", target_name="rollups and events",
                         details={**counts, "minute_rows_before": minute_cutoff.isoformat() if minute_cutoff else None,
                                  "hour_rows_and_events_before": hour_cutoff.isoformat(),
                                  "minute_days": retention["minute_days"], "hour_days": retention["hour_days"]})
    return counts


# A collector sends each minute's bucket when the minute closes, so its newest bucket is normally one to
# two minutes old. Past OK_LAG_S it is behind (a bucket or more missing: sink errors, a backlog); with no
# write at all for SILENT_AFTER_S it is silent (the process, the node or the network is down).
OK_LAG_S = 180
SILENT_AFTER_S = 300


class State:
    OK = "ok"
    LATE = "late"
    SILENT = "silent"
    NOT_DEPLOYED = "not deployed"


def collector_status(now: datetime | None = None, nodes=None) -> list[dict]:
    """Every node's collector: registered?, when it last wrote, its lag, buffer, drops, sink error,
    open alerts, and a state (ok | late | silent | not deployed). Two queries whatever the fleet size."""
    now = now or timezone.now()
    queryset = (nodes if nodes is not None else Node.objects.all()).select_related("collector").order_by("name")
    alerts = dict(HardwareEvent.objects.filter(acknowledged_at__isnull=True).values("node_id")
                  .annotate(n=Count("id")).values_list("node_id", "n"))
    result = []
    for node in queryset:
        collector = getattr(node, "collector", None)
        entry = {"node": node.name, "registered": collector is not None, "state": State.NOT_DEPLOYED,
                 "issued_at": None, "last_seen": None, "last_bucket": None, "last_sweep": None, "lag_s": None,
                 "silent_s": None, "interval_s": None, "buffer_rows": None, "buffer_points": None,
                 "dropped_points": None, "sweep_errors": None, "sink_error": "", "version": "",
                 "open_alerts": alerts.get(node.pk, 0)}
        if collector is not None:
            lag = (now - collector.last_bucket).total_seconds() if collector.last_bucket else None
            silent = (now - (collector.last_seen or collector.issued_at)).total_seconds()
            if collector.last_seen is None or silent > SILENT_AFTER_S:
                state = State.SILENT
            elif lag is None or lag > OK_LAG_S:
                state = State.LATE
            else:
                state = State.OK
            entry.update(state=state, issued_at=collector.issued_at, last_seen=collector.last_seen,
                         last_bucket=collector.last_bucket, last_sweep=collector.last_sweep, lag_s=lag,
                         silent_s=silent, interval_s=collector.interval_s, buffer_rows=collector.buffer_rows,
                         buffer_points=collector.buffer_points, dropped_points=collector.dropped_points,
                         sweep_errors=collector.sweep_errors, sink_error=collector.sink_error,
                         version=collector.version)
        result.append(entry)
    return result


def acknowledge(event: HardwareEvent, user) -> bool:
    """Acknowledge an alert (audited); False when it was acknowledged already (nothing changes, no second
    record). The event passed in shows its acknowledgement afterwards either way."""
    with transaction.atomic():
        current = HardwareEvent.objects.select_for_update().select_related("node").get(pk=event.pk)
        changed = current.acknowledged_at is None
        if changed:
            current.acknowledged_at = timezone.now()
            current.acknowledged_by = user.get_username()
            current.save(update_fields=["acknowledged_at", "acknowledged_by"])
            audit.record("telemetry.alert.acknowledge", target=current, actor=user,
                         details={"node": current.node.name, "kind": current.kind, "gpu": current.gpu,
                                  "device": current.device, "time": current.time.isoformat(),
                                  "message": current.message})
    event.acknowledged_at, event.acknowledged_by = current.acknowledged_at, current.acknowledged_by
    return changed


def open_alerts() -> int:
    return HardwareEvent.objects.filter(acknowledged_at__isnull=True).count()


def collectors_registered() -> int:
    return NodeCollector.objects.count()
