"""What the portal and the API read of the telemetry: rollups and hardware events, never raw points.

Every function here answers with a bounded number of queries whatever the size of the fleet: rows are
aggregated in the database (GROUP BY node and time column) and shaped in Python afterwards, never
fetched object by object. The functions return plain dicts and lists (JSON as they are): the API sends
them unchanged, the pages draw them in the browser.

Ranges: up to a day reads the per-minute rows; 7 and 30 days read the per-hour rows the appliance folds
(per-minute rows are kept for days only: settings.TELEMETRY_RETENTION). What reads the whole fleet (the
Overview's heatmap and totals, the jobs of a range) reads a coarser level when the minutes would be too
many (`resolution`: 1,000 nodes read per-5-minute node rows over an hour, per-30-minute rows over 6 hours,
per-2-hour rows over a day, per-6-hour rows over a week, per-day rows over a month), and the part of the
range the fold has not reached yet from the finer rows; the fleet's totals read one row a bucket
(FleetRollup), not every node's. A chart has at most MAX_COLUMNS
points: a node's or a GPU's day is 144 ten-minute means of its minutes.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from django.db.models import (
    Avg,
    Count,
    F,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
)
from django.db.models.sql.constants import MULTI
from django.utils import timezone

from appliance.inventory.models import GPU, Node

from .models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    LIVE_GPU_COLUMNS,
    MINUTE,
    SIX_HOURS,
    TEN_MINUTES,
    THIRTY_MINUTES,
    TWO_HOURS,
    WHOLE_GPU,
    FleetRollup,
    GpuRollup,
    HardwareEvent,
    JobPlacement,
    NodeCollector,
    NodeRollup,
)


@dataclass(frozen=True)
class Range:
    name: str
    seconds: int
    step: int  # which rollups it reads


RANGES = {r.name: r for r in (Range("1h", 3600, MINUTE), Range("6h", 6 * 3600, MINUTE),
                              Range("24h", 24 * 3600, MINUTE), Range("7d", 7 * 24 * 3600, HOUR),
                              Range("30d", 30 * 24 * 3600, HOUR))}
DEFAULT_RANGE = "1h"
# A heatmap over time has at most this many columns: a day of minutes becomes 144 columns of 10 minutes,
# few enough to read on a screen and to send for a thousand nodes.
MAX_COLUMNS = 150
# The levels of node rows (per minute, per 5 and per 10 minutes, per hour, per 6 hours, per day) and how
# many rows one fleet-wide read may aggregate: past it a range reads the next coarser level (1,000 nodes:
# an hour of 5-minute rows, 6 hours of 10-minute rows, a day of hours, a week of 6-hour rows, a month of
# days), so the Overview answers in the same time whatever the fleet's size. The job list reads GPU rows,
# per minute or per hour, up to JOB_MAX_ROWS.
LEVELS = (MINUTE, FIVE_MINUTES, TEN_MINUTES, THIRTY_MINUTES, HOUR, TWO_HOURS, SIX_HOURS, DAY)
MAX_ROWS = 40_000
JOB_MAX_ROWS = 60_000
MAX_CELLS = 15_000  # a heatmap's nodes x columns
MIN_COLUMNS = 12
# A GPU's cell is "live" when its newest bucket started this recently (a bucket is sent when it closes,
# so the newest one is normally one to two minutes old); otherwise the cell says "no data" and how old
# its last bucket is.
LIVE_WINDOW_S = 180
ALERT_KINDS = (HardwareEvent.Kind.XID, HardwareEvent.Kind.ECC, HardwareEvent.Kind.LINK_DOWN,
               HardwareEvent.Kind.THROTTLING)
ALERT_STATES = ("open", "all")
JOB_MINUTES_S = 24 * 3600  # a job longer than this is shown from its per-hour rows
ALERTS_SHOWN = 200
JOB_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}"  # a Slurm job id (12345, 12345_7) or a service name
NODE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


class UnknownRange(ValueError):
    pass


class Epoch(Func):
    """Seconds since 1970 of a datetime column, on SQLite and PostgreSQL alike (Django has no such lookup)."""

    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        # julianday, not strftime('%s'): a % in the template would reach the driver as a placeholder.
        return self.as_sql(compiler, connection, template="CAST(ROUND((julianday(%(expressions)s) - 2440587.5) * 86400.0) AS INTEGER)",
                           **extra)

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="CAST(EXTRACT(EPOCH FROM %(expressions)s) AS BIGINT)",
                           **extra)


class StartKey(Func):
    """A bucket start as the cheapest value to read raw (_rows) and convert once per distinct value
    (_epochs): SQLite's stored text, which an expression keeps from the driver's datetime converter (a
    Python call a row), PostgreSQL's epoch seconds."""

    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="CAST(%(expressions)s AS TEXT)", **extra)

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="CAST(EXTRACT(EPOCH FROM %(expressions)s) AS BIGINT)",
                           **extra)


def range_of(name: str | None) -> Range:
    name = name or DEFAULT_RANGE
    if name not in RANGES:
        raise UnknownRange(f"range: {name!r} is not one of {', '.join(RANGES)}")
    return RANGES[name]


def column_width(span_s: int, step: int, columns: int = MAX_COLUMNS) -> int:
    """Seconds a heatmap column covers: a whole number of steps, at most `columns` columns in the span."""
    return max(1, math.ceil(span_s / step / columns)) * step


def _epoch(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment else None


def _age(moment: datetime | None, now: datetime) -> int | None:
    return int((now - moment).total_seconds()) if moment else None


def _round(value, digits=1):
    return None if value is None else round(value, digits)


def _window(rng: Range, now: datetime) -> tuple[datetime, datetime]:
    """The first and last bucket starts a range reads: the newest closed bucket (the one in progress is
    sent when it closes) and as many before it as the range holds."""
    last = datetime.fromtimestamp(now.timestamp() // rng.step * rng.step - rng.step, tz=UTC)
    return last - timedelta(seconds=rng.seconds - rng.step), last


def collector_state(collector: dict | None, now: datetime) -> dict:
    """How a node's collector looks from here: not deployed, silent (with since when) or live."""
    if collector is None:
        return {"state": "not deployed", "last_bucket": None, "age_s": None}
    return collector_states({None: collector}, now)[None]


def collector_states(collectors: dict, now: datetime) -> dict[int, dict]:
    """collector_state of each of `collectors` ({node id: collector}), a bucket's text and age made once
    for the nodes that share it (most of a fleet's collectors wrote the same bucket last)."""
    by_bucket: dict = {}

    def bucket_state(last):
        if last not in by_bucket:
            live = last is not None and (now - last).total_seconds() <= LIVE_WINDOW_S
            by_bucket[last] = ("live" if live else "silent", last.isoformat() if last else None, _age(last, now))
        return by_bucket[last]

    states = {}
    for node_id, collector in collectors.items():
        state, last, age = bucket_state(collector["last_bucket"])
        seen = collector["last_seen"]
        states[node_id] = {"state": state, "last_bucket": last, "last_seen": seen.isoformat() if seen else None,
                           "age_s": age}
    return states


class RawMoment(StartKey):
    """A datetime column as the driver gives it without Django's converter (a Python call a value, the most
    of reading 1,000 collectors' two times on SQLite): SQLite's text, as StartKey, and PostgreSQL's datetime
    (_moments converts both)."""

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="%(expressions)s", **extra)


def _moments(values) -> list[datetime | None]:
    """RawMoment's values as aware datetimes (UTC), each distinct value converted once."""
    def convert(value):
        if value is None or isinstance(value, datetime):
            return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)
        moment = datetime.fromisoformat(value)
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    converted = {value: convert(value) for value in set(values)}
    return [converted[value] for value in values]


def _collectors(nodes, live: bool = False) -> dict[int, dict]:
    """{node id: {"node", "last_bucket", "last_seen"}} of the collectors of `nodes`; with `live`, also what
    each keeps of its GPUs' newest minutes ("live_gpus", "live_gpu_jobs": NodeCollector's, as read)."""
    fields = {"node_": F("node"), "bucket_": RawMoment("last_bucket"), "seen_": RawMoment("last_seen")}
    if live:
        fields |= {"live_": F("live_gpus"), "jobs_": F("live_gpu_jobs")}
    rows = list(_rows(NodeCollector.objects.filter(node__in=nodes).values(**fields), *fields))
    buckets, seen = _moments([row[1] for row in rows]), _moments([row[2] for row in rows])
    result = {row[0]: {"node": row[0], "last_bucket": bucket, "last_seen": last}
              for row, bucket, last in zip(rows, buckets, seen, strict=True)}
    if live:
        for row in rows:
            result[row[0]] |= {"live_gpus": row[3], "live_gpu_jobs": row[4] or ""}
    return result


# --- the fleet ---------------------------------------------------------------------------------------


def resolution(rng: Range, count: int, levels: tuple[int, ...] = LEVELS, max_rows: int | None = None) -> tuple[int, int]:
    """(level, width) of a fleet-wide read of `count` nodes (or GPUs) over a range: the rollup step it
    reads (the finest whose rows over the range stay within `max_rows`, never finer than the range's own
    step) and the seconds of a heatmap column (a whole number of those steps, at most MAX_COLUMNS columns
    and MAX_CELLS cells: 1,000 nodes are 15 columns, as many as 2-pixel rows can show)."""
    max_rows = MAX_ROWS if max_rows is None else max_rows
    level = next((step for step in levels if step >= rng.step and count * rng.seconds / step <= max_rows), levels[-1])
    return level, column_width(rng.seconds, level, min(MAX_COLUMNS, max(MIN_COLUMNS, MAX_CELLS // max(count, 1))))


def tiling_level(level: int, width: int, levels: tuple[int, ...] = LEVELS) -> int:
    """The coarsest level, from `level` up, whose buckets tile a heatmap column of `width` seconds: a row
    a cell where the fold has made them, not several (6 hours of 1,000 nodes: 12,000 half-hour rows instead
    of 36,000 ten-minute ones, in the same 30-minute columns)."""
    return max(step for step in levels if level <= step <= width and width % step == 0)


def _segments(rng: Range, level: int, first: datetime, last: datetime, model=NodeRollup, inside: bool = False,
              levels: tuple[int, ...] = LEVELS) -> list[tuple[int, datetime, datetime, bool]]:
    """The pieces of the window each level is read for, coarsest first: a coarser level up to the end of
    its newest bucket in the window (what the fold has covered so far), the next finer one from there; the
    range's own step to the window's last bucket. (step, from, to, to included). A query for each level
    coarser than the range's own step that the range reads (the (step, start) index finds its newest row
    at once, where one query for all of them would scan a day of 10-minute rows), none otherwise. The
    coarsest bucket may start before the
    window (a chart's first column holds it), unless `inside`: then the part of the window before the
    first whole coarse bucket is read from the range's own step."""
    steps = [step for step in levels if rng.step <= step <= level]
    coarse = [step for step in steps if step != rng.step]
    if not coarse:
        return [(rng.step, first, last, True)]
    newest = {}
    for step in coarse:
        found = (model.objects.filter(step=step, start__gte=first - timedelta(seconds=level), start__lte=last)
                 .order_by("-start").values_list("start", flat=True).first())
        if found is not None:
            newest[step] = found
    segments = []
    start = datetime.fromtimestamp(first.timestamp() // level * level, tz=UTC)
    if inside and start < first:
        start += timedelta(seconds=level)
        segments.append((rng.step, first, start, False))
    folded = False
    for step in reversed(coarse):
        end = newest[step] + timedelta(seconds=step) if step in newest else start
        if step > HOUR and HOUR in newest and end > newest[HOUR] + timedelta(seconds=HOUR):
            # A level folded from the hours holds its newest bucket's folded hours only (the 2-hour row of
            # 10:00 has 10:00 alone until 11:00 is folded): that bucket is read from the finer levels.
            end = newest[step]
        if end > start:
            segments.append((step, start, end, False))
            start, folded = end, True
    if not folded:  # nothing coarser folded in the window
        return [(rng.step, first, last, True)]
    segments.append((rng.step, start, last, True))
    return segments


ROWS_CHUNK = 5000  # rows a fetch in _rows (Django's 100 cost a driver call each for a fleet's 38,000)


def _rows(queryset, *fields):
    """The rows of a values() queryset as plain tuples in `fields` order, without the per-value converters
    Django's iterables apply (float() or int() of every aggregate and expression: a third of the time of
    the 15,000 rows of a fleet's heatmap). Only for numbers and text: a datetime column would come as
    SQLite stores it."""
    query = queryset.query
    # what Django's ValuesIterable reads the columns by
    names = list(query.selected) if query.selected else [*query.extra_select, *query.values_select,
                                                          *query.annotation_select]
    positions = [names.index(name) for name in fields]
    # the rows as they come when they are already in `fields` order (a single field is picked: a value, not
    # a tuple of one)
    pick = None if len(fields) > 1 and positions == list(range(len(names))) else operator.itemgetter(*positions)
    for chunk in query.get_compiler(using=queryset.db).execute_sql(MULTI, chunk_size=ROWS_CHUNK):
        yield from (chunk if pick is None else map(pick, chunk))


def _node_rows(nodes, step: int, start: datetime, end: datetime, included: bool):
    rows = NodeRollup.objects.filter(node__in=nodes, step=step, start__gte=start)
    return rows.filter(start__lte=end) if included else rows.filter(start__lt=end)


TOTALS = ("ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps", "gpu_power_w")


def _epochs(values) -> np.ndarray:
    """Epoch seconds of bucket starts read raw (StartKey: SQLite's text in UTC, PostgreSQL's epoch seconds),
    each distinct value converted once: a window's rows share a few dozen bucket starts."""
    def convert(value) -> int:
        if isinstance(value, int):
            return value
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
        return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())

    distinct = list(set(values))
    text = np.array(distinct) if distinct and isinstance(distinct[0], str) else None
    if text is not None and text.dtype == np.dtype("<U19"):  # SQLite's "YYYY-MM-DD HH:MM:SS" (UTC), by numpy
        epochs = dict(zip(distinct, text.astype("datetime64[s]").astype(np.int64).tolist(), strict=True))
    else:
        epochs = {value: convert(value) for value in distinct}
    return np.fromiter(map(epochs.__getitem__, values), dtype=np.int64, count=len(values))


def _fleet_cells(appliance, segments) -> tuple[list[tuple], list[list[datetime]]]:
    """The heatmap cells the fleet's rows hold over the segments (FleetRollup.node_ids and node_gpu_util:
    one row a bucket and appliance, decoded by numpy): [(node ids, utilizations, step, bucket start in
    epoch seconds)], and for each segment the bucket starts they cover (every fleet row of the bucket has
    its cells). One query."""
    parts = []
    for step, start, end, included in segments:
        part = FleetRollup.objects.filter(step=step, start__gte=start, **{"start__lte" if included else "start__lt": end})
        parts.append((part if appliance is None else part.filter(appliance=appliance)).order_by()
                     .values("node_ids", "node_gpu_util", "step", key=StartKey("start"), at=RawMoment("start")))
    query = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    rows = list(_rows(query, "node_ids", "node_gpu_util", "step", "key", "at"))
    epochs = _epochs([row[3] for row in rows]).tolist()
    moments = _moments([row[4] for row in rows])
    decoded, complete = [], {}
    for row, epoch in zip(rows, epochs, strict=True):
        key = (row[2], epoch)
        ids = np.frombuffer(row[0], dtype="<i8") if row[0] is not None and len(row[0]) % 8 == 0 else None
        utils = np.frombuffer(row[1], dtype="<f8") if row[1] is not None and len(row[1]) % 8 == 0 else None
        whole = ids is not None and utils is not None and len(ids) == len(utils)
        decoded.append((ids, utils) if whole else None)
        complete[key] = complete.get(key, True) and whole
    cells, covered = [], [[] for _ in segments]
    seen = set()
    for row, epoch, moment, found in zip(rows, epochs, moments, decoded, strict=True):
        key = (row[2], epoch)
        if not complete[key]:
            continue  # a fleet row of the bucket without its cells (or not of their shape): its node rows
        cells.append((*found, row[2], epoch))
        if key not in seen:
            seen.add(key)
            for position, (step, start, end, included) in enumerate(segments):
                if step == row[2] and start <= moment and (moment <= end if included else moment < end):
                    covered[position].append(moment)
    return cells, covered


def _heatmap(nodes, appliance, segments, width: int, node_ids: list[int], columns: list[int]) -> list[list]:
    """Mean GPU utilization of each node (`node_ids`, in that order) in each column (`columns`: starts,
    `width` seconds each), None where the node has no row: a column's value is the time-weighted mean of
    the rows in it, whatever their step (each row weighs its step, rows without a utilization nothing).
    The cells of a bucket the fleet's rows hold come from them (_fleet_cells: a row a bucket), the other
    buckets' (the newest minutes, not folded yet) from the node rows, read raw in one UNION ALL (a range of
    the (step, start, node, gpu_util) index a segment); summed with numpy. `nodes` filters the node rows
    and `appliance` the fleet's only when the Overview is of one appliance: the cells of a node not listed
    are dropped here."""
    cells, covered = _fleet_cells(appliance, segments)
    parts = []
    for (step, start, end, included), done in zip(segments, covered, strict=True):
        # the buckets of the segment (its bounds are bucket starts of its step) the fleet's rows do not hold
        buckets = range(int(start.timestamp()), int(end.timestamp()) + (1 if included else 0), step)
        missing = sorted(set(buckets) - {int(moment.timestamp()) for moment in done})
        if not missing:
            continue
        part = NodeRollup.objects.filter(step=step, start__gte=start, **{"start__lte" if included else "start__lt": end})
        if len(missing) < len(buckets):
            part = part.filter(start__in=[datetime.fromtimestamp(moment, tz=UTC) for moment in missing])
        parts.append((part if nodes is None else part.filter(node__in=nodes)).order_by()
                     .values("node", "gpu_util", "step", key=StartKey("start")))
    # an OR of the ranges would make SQLite collect the row ids of both first
    query = (parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]) if parts else None
    rows = list(_rows(query, "node", "gpu_util", "step", "key")) if query is not None else []
    heat = np.full((len(node_ids), len(columns)), np.nan)
    node_parts, util_parts, step_parts, start_parts = [], [], [], []
    if rows:
        node, util, step, start = zip(*rows, strict=True)
        node_parts.append(np.array(node, dtype=np.int64))
        util_parts.append(np.array(util, dtype=np.float64))  # None: NaN
        step_parts.append(np.array(step, dtype=np.float64))
        start_parts.append(_epochs(start))
    for ids, utils, step, start in cells:
        node_parts.append(ids)
        util_parts.append(utils)
        step_parts.append(np.full(len(ids), float(step)))
        start_parts.append(np.full(len(ids), start, dtype=np.int64))
    if node_parts and len(node_ids) and len(columns):
        node, util = np.concatenate(node_parts), np.concatenate(util_parts)
        weight = np.where(np.isnan(util), 0.0, np.concatenate(step_parts))
        starts = np.array(columns, dtype=np.int64)
        column = np.concatenate(start_parts) // width * width
        position = np.minimum(np.searchsorted(starts, column), len(starts) - 1)
        ids = np.array(node_ids, dtype=np.int64)
        order = np.argsort(ids)
        line = order[np.minimum(np.searchsorted(ids, node, sorter=order), len(ids) - 1)]
        kept = (ids[line] == node) & (starts[position] == column)
        cell = line[kept] * len(starts) + position[kept]
        total = np.bincount(cell, np.nan_to_num(util[kept]) * weight[kept], heat.size)
        weights = np.bincount(cell, weight[kept], heat.size)
        with np.errstate(invalid="ignore", divide="ignore"):
            heat = np.where(weights > 0, total / weights, np.nan).reshape(heat.shape)
    values, count = _rounded(heat.ravel(), 1), len(columns)
    return [values[first:first + count] for first in range(0, len(values), count)] if count else [[] for _ in node_ids]


def _fleet_totals(nodes, appliance, rng: Range, first: datetime, last: datetime, width: int) -> dict[int, dict]:
    """The fleet's totals ({column: {field: value}}, `width` seconds a column) at the range's own step: a
    total is the sum over the nodes of their rate, over the part of the column measured. Read from the
    fleet's rows (one a bucket: FleetRollup) as far as they are folded, from the node rows (per bucket, in
    the database) after them. Two queries at most."""
    fleet = FleetRollup.objects.filter(step=rng.step, start__gte=first, start__lte=last)
    if appliance is not None:
        fleet = fleet.filter(appliance=appliance)
    fields = ("t", "util", "util_n", *TOTALS)
    # grouped by the start as StartKey reads it: a start selected as itself would be parsed by the driver's
    # converter, a Python call a row (a day of minutes: 1,440)
    rows = list(_rows(fleet.order_by().values(t=StartKey("start")).annotate(
        util=Sum("gpu_util_sum"), util_n=Sum("gpu_util_count"), **{f: Sum(f) for f in TOTALS}), *fields))
    fleet_starts = _epochs([row[0] for row in rows])
    newest = datetime.fromtimestamp(int(fleet_starts.max()), tz=UTC) if rows else None
    if newest is None or newest < last:  # the newest minutes, not summed by the fold yet
        node_rows = _node_rows(nodes, rng.step, first if newest is None else max(first, newest + timedelta(seconds=1)),
                               last, True).order_by()
        rows += _rows(node_rows.values("start").annotate(t=StartKey("start"), util=Sum("gpu_util"),
                                                         util_n=Count("gpu_util"), **{f: Sum(f) for f in TOTALS}),
                      *fields)
    if not rows:
        return {}
    # Summed by column with numpy (a day is 1,440 buckets): a bucket weighs its step, which every bucket
    # shares, so a column's rate is the sum of its buckets' over their number (those without a value count:
    # the part of the column not measured), its utilization the sum over the GPUs measured.
    columns = dict(zip(fields, zip(*rows, strict=True), strict=True))
    starts, position = np.unique(_epochs(columns["t"]) // width * width, return_inverse=True)
    buckets = np.bincount(position, minlength=len(starts))
    util = np.array(columns["util"], dtype=np.float64)
    util_n = np.nan_to_num(np.array(columns["util_n"], dtype=np.float64))
    measured = (util_n > 0) & ~np.isnan(util)
    util_s = np.bincount(position, np.where(measured, util_n, 0.0), len(starts))
    with np.errstate(invalid="ignore", divide="ignore"):
        figures = {"gpu_util": np.where(util_s > 0, np.bincount(position, np.where(measured, util, 0.0), len(starts))
                                        / util_s, np.nan)}
        for field in TOTALS:
            values = np.array(columns[field], dtype=np.float64)  # None: NaN
            valid = ~np.isnan(values)
            total = np.bincount(position, np.where(valid, values, 0.0), len(starts))
            figures[field] = np.where(np.bincount(position, valid, len(starts)) > 0, total / buckets, np.nan)
    lists = {field: [None if value != value else value for value in values.tolist()]
             for field, values in figures.items()}
    return {column: {field: lists[field][i] for field in lists} for i, column in enumerate(starts.tolist())}


def overview(appliance=None, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """Every GPU's latest utilization, memory and power (the live cells, in columns for the fleet: LIVE_COLUMNS),
    a nodes x time heatmap of GPU utilization, and the fabric and filesystem throughput of the fleet over
    the range. At most fifteen queries, whatever the size of the fleet. The live cells are what each
    node's collector keeps of its GPUs' newest minutes (read with the collectors: _live_entries), the rows
    only for a GPU without them. The heatmap (summed here: _heatmap) reads the per-5-minute buckets for an
    hour of 1,000 nodes, per-30-minute for 6 hours, per-2-hour for a day, per-6-hour for a week (a small
    fleet reads finer ones: see resolution and tiling_level), each bucket from the fleet's row that holds
    its cells (_fleet_cells: one row a bucket, not a row a node), the newest part of the range that is not
    folded yet from the node rows; the totals from the fleet's rows at the range's own step."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    nodes = Node.objects.filter(gpus__isnull=False).distinct()
    if appliance is not None:
        nodes = nodes.filter(appliance=appliance)
    node_rows = list(nodes.order_by("name").values_list("id", "name"))
    # by node id (the cells are grouped by node below, the nodes listed by name): no join to sort by
    # every GPU is on a node with GPUs: the whole fleet's need no join
    gpus = GPU.objects.all() if appliance is None else GPU.objects.filter(node__in=nodes)
    gpu_rows = list(_rows(gpus.order_by("node", "index")
                          .values("node", "index", "memory_mib"), "node", "index", "memory_mib"))
    inventory = np.array(gpu_rows, dtype=np.float64).reshape(len(gpu_rows), 3)  # memory None: NaN
    collectors = _collectors(nodes, live=True)
    live, summary = _live_cells(inventory, _live_entries(collectors, inventory, now), int(now.timestamp()),
                                {node_id: position for position, (node_id, _) in enumerate(node_rows)})
    states = collector_states(collectors, now)
    summary = _summary(summary, len(gpu_rows), len(node_rows), collectors, states, now)

    level, width = resolution(rng, len(node_rows))
    level = tiling_level(level, width)
    columns = list(range_steps(first, last, width))
    heat = _heatmap(nodes if appliance is not None else None, appliance, _segments(rng, level, first, last), width,
                    [node_id for node_id, _ in node_rows], columns)
    totals = _fleet_totals(nodes, appliance, rng, first, last, column_width(rng.seconds, rng.step))
    first_column = columns[0] if columns else 0
    times = [column for column in totals if first_column <= column <= last.timestamp()]

    def series(fields, digits):
        return {"t": times, **{f: [_round(totals[t][f], digits) for t in times] for f in fields}}

    return {
        "range": rng.name, "step": level, "now": now.isoformat(),
        "summary": summary,
        "nodes": [{"name": name, "collector": states.get(node_id) or collector_state(None, now)}
                  for node_id, name in node_rows],
        "gpus": live,
        "heatmap": {"width_s": width, "columns": columns,
                    "nodes": [name for _, name in node_rows], "values": heat},
        "fabric": series(("ib_tx_bps", "ib_rx_bps"), 0),
        "filesystem": series(("fs_read_bps", "fs_write_bps"), 0),
        "gpu": series(("gpu_util", "gpu_power_w"), 1),
    }


LIVE_FIELDS = ("node", "gpu", "at", "util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c", "job")
# The fleet's GPUs in the Overview ("gpus"), a list each: "node" the position of the GPU's node in "nodes",
# "t" the start of its newest bucket (epoch seconds), "age_s" its age.
LIVE_COLUMNS = ("node", "index", "live", "util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c", "job", "t",
                "age_s")


def _live_entries(collectors: dict, inventory: np.ndarray, now: datetime) -> tuple[np.ndarray, np.ndarray, list]:
    """Every GPU's newest whole-GPU minute in the live window: (node ids, LIVE_GPU_COLUMNS a row, jobs).
    From what each node's collector keeps of its GPUs' newest minutes (NodeCollector.live_gpus, written by
    the ingest with the rows; `collectors` read with them): the fleet's in one numpy array. A GPU of
    `inventory` (node id, index, memory a row) without a live entry there (its node's rows came another
    way, or it stopped reporting while its node went on) is looked up in the rows, in one query over its
    nodes only."""
    since = int(now.timestamp()) - LIVE_WINDOW_S
    width = len(LIVE_GPU_COLUMNS)
    blobs, counts, node_ids, jobs = [], [], [], []
    for node_id, collector in collectors.items():
        blob = collector.get("live_gpus")
        if not blob:
            continue
        names = collector["live_gpu_jobs"].split("\n")
        if len(blob) != len(names) * 8 * width:
            continue  # not this version's shape: the rows below
        blobs.append(blob)
        counts.append(len(names))
        node_ids.append(node_id)
        jobs.extend(names)
    values = np.frombuffer(b"".join(blobs), dtype="<f8").reshape(-1, width)
    node = np.repeat(np.array(node_ids, dtype=np.int64), counts)
    live = values[:, 1] >= since
    if not live.all():
        node, values = node[live], values[live]
        jobs = [job for job, keep in zip(jobs, live.tolist(), strict=True) if keep]
    found = np.isin(_gpu_keys(inventory[:, 0], inventory[:, 1]), _gpu_keys(node, values[:, 0]))
    behind = np.unique(inventory[~found, 0].astype(np.int64)).tolist()
    if behind:
        whole = GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU).order_by()
        live_since = datetime.fromtimestamp(since, tz=UTC)
        newest = whole.filter(node=OuterRef("node"), gpu=OuterRef("gpu"), start__gte=live_since) \
            .order_by("-start").values("start")[:1]
        rows = list(_rows(whole.filter(node__in=behind, start__gte=live_since).filter(start=Subquery(newest))
                          .annotate(at=StartKey("start")).values(*LIVE_FIELDS), *LIVE_FIELDS))
        if rows:
            columns = list(zip(*rows, strict=True))
            extra = np.column_stack([np.array(columns[1], dtype=np.float64), _epochs(columns[2]).astype(np.float64),
                                     *(np.array(column, dtype=np.float64) for column in columns[3:8])])
            extra_node = np.array(columns[0], dtype=np.int64)
            new = ~np.isin(_gpu_keys(extra_node, extra[:, 0]), _gpu_keys(node, values[:, 0]))
            node, values = np.concatenate([node, extra_node[new]]), np.concatenate([values, extra[new]])
            jobs = jobs + [job for job, keep in zip(columns[8], new.tolist(), strict=True) if keep]
    return node, values, jobs


def _gpu_keys(node, index) -> np.ndarray:
    """A GPU's key from its node id and index (arrays)."""
    return np.asarray(node, dtype=np.int64) * 65536 + np.asarray(index, dtype=np.int64)


def range_steps(first: datetime, last: datetime, width: int):
    """Column starts (epoch-aligned to `width`) from the column holding `first` to the one holding `last`."""
    start = int(first.timestamp()) // width * width
    end = int(last.timestamp()) // width * width
    return range(start, end + 1, width)


def _rounded(values: np.ndarray, digits: int) -> list:
    """A float column as a list rounded to `digits`, NaN (no value) as None."""
    rounded = np.round(values, digits).tolist()
    if np.isnan(values).any():
        return [None if value != value else value for value in rounded]
    return rounded


def _live_cells(inventory: np.ndarray, entries: tuple, now_s: int, positions: dict[int, int]) -> tuple[dict, dict]:
    """Every GPU's newest minute in columns for the whole fleet (LIVE_COLUMNS, with "node": the position of
    its node in the Overview's list, `positions` by node id; None where a GPU is not live), grouped by node
    in that order and by index, and the fleet's live figures (_summary's). `inventory`: (node id, index,
    memory MiB) of each GPU the inventory knows; `entries`: _live_entries'. Matched and laid out with numpy,
    no loop over the 8,000 GPUs of a large fleet (a loop rounding each value took a third of the Overview's
    time; columns for each node, 10,000 short lists for 1,000 nodes, a fifth of the rest)."""
    entry_node, values, jobs = entries
    node = np.fromiter((positions.get(node_id, -1) for node_id in inventory[:, 0].astype(np.int64).tolist()),
                       dtype=np.int64, count=len(inventory))
    order = np.lexsort((inventory[:, 1], node))
    order = order[node[order] >= 0]  # a GPU of a node not listed: not shown
    node, gpus = node[order], inventory[order]
    keys, entry_keys = _gpu_keys(gpus[:, 0], gpus[:, 1]), _gpu_keys(entry_node, values[:, 0])
    by_key = np.argsort(entry_keys)
    at = by_key[np.minimum(np.searchsorted(entry_keys, keys, sorter=by_key), len(by_key) - 1)] if len(by_key) \
        else np.zeros(len(keys), dtype=np.int64)
    live = (entry_keys[at] == keys) if len(by_key) else np.zeros(len(keys), dtype=bool)
    picked = values[at] if len(by_key) else np.full((len(keys), len(LIVE_GPU_COLUMNS)), np.nan)
    picked[~live] = np.nan

    def column(name: str) -> np.ndarray:
        return picked[:, LIVE_GPU_COLUMNS.index(name)]

    util, fb_used, power, temp, fb_total = (column(name) for name in
                                            ("util", "fb_used_mib", "power_w", "temp_c", "fb_total_mib"))
    # no total (or 0) from the collector: the GPU's memory as the inventory knows it
    fb_total = np.where(live & (np.isnan(fb_total) | (fb_total == 0)), gpus[:, 2], fb_total)
    live_list = live.tolist()
    starts = np.where(live, column("start"), 0).astype(np.int64).tolist()
    job_of = np.array(jobs, dtype=object) if jobs else np.array([None], dtype=object)
    columns = {"node": node.tolist(), "index": gpus[:, 1].astype(np.int64).tolist(), "live": live_list,
               "util": _rounded(util, 1), "fb_used_mib": _rounded(fb_used, 0), "fb_total_mib": _rounded(fb_total, 0),
               "power_w": _rounded(power, 1), "temp_c": _rounded(temp, 1),
               "job": np.where(live, job_of[at] if jobs else None, None).tolist(),
               "t": [start if is_live else None for start, is_live in zip(starts, live_list, strict=True)],
               "age_s": [now_s - start if is_live else None for start, is_live in zip(starts, live_list, strict=True)]}
    found = int(live.sum())
    utils = util[live][~np.isnan(util[live])]
    figures = {"gpus_live": found,
               "util_mean": float(utils.mean()) if len(utils) else None,
               "gpus_busy": int((utils >= 50).sum()), "gpus_idle": int((utils < 5).sum()),
               "power_w": float(np.nansum(power[live])) if found else None,
               "fb_used_mib": float(np.nansum(fb_used[live])) if found else None,
               "fb_total_mib": float(np.nansum(fb_total[live])) if found else None}
    return columns, figures


def _summary(figures: dict, gpus: int, nodes: int, collectors: dict, states: dict, now: datetime) -> dict:
    """The fleet's live figures (_live_cells') with the counts of GPUs, nodes and collectors (`states`: each
    collector's collector_state)."""
    live_collectors = sum(1 for state in states.values() if state["state"] == "live")
    newest = max((c["last_bucket"] for c in collectors.values() if c["last_bucket"]), default=None)
    return {
        "nodes": nodes, "gpus": gpus, "gpus_live": figures["gpus_live"],
        "collectors": len(collectors), "collectors_live": live_collectors,
        "util_mean": _round(figures["util_mean"]),
        "gpus_busy": figures["gpus_busy"], "gpus_idle": figures["gpus_idle"],
        "power_w": _round(figures["power_w"]),
        "fb_used_mib": _round(figures["fb_used_mib"], 0), "fb_total_mib": _round(figures["fb_total_mib"], 0),
        "newest_bucket": newest.isoformat() if newest else None, "newest_age_s": _age(newest, now),
    }


def live_summary(now: datetime | None = None) -> dict:
    """The Overview's GPU panel: the fleet's live GPU use in a few numbers (four queries, no per-GPU rows
    leave the database)."""
    now = now or timezone.now()
    gpus = GPU.objects.count()
    collectors = {row["node"]: row for row in NodeCollector.objects.values("node", "last_bucket", "last_seen")}
    newest = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU,
                                       start__gte=now - timedelta(seconds=LIVE_WINDOW_S))
              .aggregate(newest=Max("start"))["newest"])
    figures = {}
    if newest is not None:
        # The newest complete minute across the fleet: a node a minute behind shows in the next one.
        figures = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU, start=newest)
                   .aggregate(gpus_live=Count("id"), util_mean=Avg("util"), power_w=Sum("power_w"),
                              fb_used_mib=Sum("fb_used_mib"), fb_total_mib=Sum("fb_total_mib"),
                              gpus_busy=Count("id", filter=Q(util__gte=50)),
                              gpus_idle=Count("id", filter=Q(util__lt=5))))
    live_collectors = sum(1 for c in collectors.values() if collector_state(c, now)["state"] == "live")
    last_bucket = max((c["last_bucket"] for c in collectors.values() if c["last_bucket"]), default=None)
    return {
        "gpus": gpus, "collectors": len(collectors), "collectors_live": live_collectors,
        "bucket": newest.isoformat() if newest else None, "bucket_age_s": _age(newest, now),
        "last_bucket": last_bucket.isoformat() if last_bucket else None, "last_bucket_age_s": _age(last_bucket, now),
        "gpus_live": figures.get("gpus_live", 0), "gpus_busy": figures.get("gpus_busy", 0),
        "gpus_idle": figures.get("gpus_idle", 0), "util_mean": _round(figures.get("util_mean")),
        "power_w": _round(figures.get("power_w")), "fb_used_mib": _round(figures.get("fb_used_mib"), 0),
        "fb_total_mib": _round(figures.get("fb_total_mib"), 0),
    }


# --- one node, one GPU -------------------------------------------------------------------------------

NODE_FIELDS = ("gpu_util", "gpu_util_max", "gpu_fb_used_mib", "gpu_power_w", "ib_tx_bps", "ib_rx_bps",
               "ib_line_bps", "ib_xmit_wait", "fs_read_bps", "fs_write_bps", "disk_read_bps", "disk_write_bps",
               "cpu_busy", "cpu_iowait")
GPU_FIELDS = ("util", "util_max", "sm_active", "tensor_active", "dram_active", "fb_used_mib", "fb_used_max_mib",
              "fb_total_mib", "power_w", "power_max_w", "energy_j", "temp_c", "temp_max_c", "sm_clock_mhz",
              "throttled_share", "pcie_tx_bps", "pcie_rx_bps", "nvlink_bps")
RATIOS = ("cpu_busy", "cpu_iowait", "sm_active", "tensor_active", "dram_active", "throttled_share")


def _digits(field: str) -> int:
    return 3 if field in RATIOS else 1


NODE_MAXIMA = ("gpu_util_max",)
GPU_MAXIMA = ("util_max", "fb_used_max_mib", "fb_total_mib", "power_max_w", "temp_max_c")
GPU_SUMS = ("energy_j",)


def _time_columns(rng: Range, now: datetime):
    """The window of a range, the seconds of a chart's point (a whole number of its steps, at most
    MAX_COLUMNS points) and the expression of the point a row falls in."""
    first, last = _window(rng, now)
    width = column_width(rng.seconds, rng.step)
    return first, last, width, Epoch("start") / width * width


def node_series(node: Node, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """A node over the range: its GPUs together, fabric, filesystems (per mount), disks, CPU, and each
    GPU's utilization and memory; at most MAX_COLUMNS points (a day: 10-minute means of the per-minute
    rows, aggregated in the database). Five queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last, width, column = _time_columns(rng, now)
    rows = NodeRollup.objects.filter(node=node, step=rng.step, start__gte=first, start__lte=last).order_by()
    points = list(rows.annotate(t=column).values("t")
                  .annotate(**{f: Max(f) if f in NODE_MAXIMA else Avg(f) for f in NODE_FIELDS},
                            ib_errors=Sum("ib_errors"))
                  .order_by("t"))
    times = [row["t"] for row in points]
    position = {t: i for i, t in enumerate(times)}
    mounts: dict[str, dict] = {}
    sums: dict[tuple[str, str, int], list] = {}
    for t, values in rows.exclude(mounts={}).annotate(t=column).values_list("t", "mounts"):
        for path, mount in (values or {}).items():
            mounts.setdefault(path, {"fstype": mount.get("fstype", ""), "read_bps": [None] * len(times),
                                     "write_bps": [None] * len(times)})
            for side in ("read_bps", "write_bps"):
                if mount.get(side) is not None:
                    total = sums.setdefault((path, side, t), [0.0, 0])
                    total[0] += mount[side]
                    total[1] += 1
    for (path, side, t), (total, count) in sums.items():
        if t in position:
            mounts[path][side][position[t]] = _round(total / count, 0)
    gpus: dict[int, dict] = {}
    indexes = list(node.gpus.order_by("index").values_list("index", flat=True))
    # gpu__in: the (node, gpu, instance, step, start) index then reads the node's GPUs' rows alone
    gpu_rows = GpuRollup.objects.filter(node=node, gpu__in=indexes, step=rng.step, instance=WHOLE_GPU,
                                        start__gte=first, start__lte=last).order_by()
    # One query for the GPUs' points and their jobs, grouped by GPU, point and job (the node's own rows by
    # its (node, gpu, ...) index; a DISTINCT of the jobs alone made SQLite scan the fleet's index instead):
    # a point's mean is its jobs' sums over their counts.
    jobs: dict[int, set] = {}
    points_of: dict[tuple[int, int], list] = {}
    for index, t, job_id, *figures in (
            gpu_rows.annotate(t=column).values("gpu", "t", "job")
            .annotate(util_s=Sum("util"), util_n=Count("util"), fb_s=Sum("fb_used_mib"), fb_n=Count("fb_used_mib"),
                      power_s=Sum("power_w"), power_n=Count("power_w"))
            .values_list("gpu", "t", "job", "util_s", "util_n", "fb_s", "fb_n", "power_s", "power_n")):
        if job_id:
            jobs.setdefault(index, set()).add(job_id)
        total = points_of.setdefault((index, t), [0.0, 0, 0.0, 0, 0.0, 0])
        for k, value in enumerate(figures):
            total[k] += value or 0
    for (index, t), (util_s, util_n, fb_s, fb_n, power_s, power_n) in sorted(points_of.items()):
        gpu = gpus.setdefault(index, {"util": [None] * len(times), "fb_used_mib": [None] * len(times),
                                      "power_w": [None] * len(times)})
        i = position.get(t)
        if i is None:  # a GPU row without its node's row: kept out of the shared time axis
            continue
        gpu["util"][i] = _round(util_s / util_n) if util_n else None
        gpu["fb_used_mib"][i] = _round(fb_s / fb_n, 0) if fb_n else None
        gpu["power_w"][i] = _round(power_s / power_n) if power_n else None
    collector = NodeCollector.objects.filter(node=node).values("node", "last_bucket", "last_seen").first()
    series = {"t": times, **{f: [_round(row[f], _digits(f)) for row in points] for f in NODE_FIELDS},
              "ib_errors": [row["ib_errors"] for row in points]}
    return {
        "node": node.name, "range": rng.name, "step": rng.step, "width_s": width, "now": now.isoformat(),
        "collector": collector_state(collector, now), "series": series, "mounts": mounts,
        "gpus": [{"index": index, **gpus.get(index, {}), "jobs": sorted(jobs.get(index, ()))}
                 for index in sorted(set(indexes) | set(gpus))],
    }


def gpu_series(node: Node, gpu: int, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """One GPU over the range, every field of its rollups, and its MIG instances' utilization and memory;
    at most MAX_COLUMNS points (means, maxima of the maxima, energy and error counts summed). Three
    queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last, width, column = _time_columns(rng, now)
    aggregates = {f"{f}_": Max(f) if f in GPU_MAXIMA else Sum(f) if f in GPU_SUMS else Avg(f) for f in GPU_FIELDS}
    # The step compared as an expression (step + 0): no index on it qualifies, so the GPU's rows are found
    # by the (node, gpu, instance, step, start) index. Its instance is not known (the whole GPU and any
    # MIG instance), and without statistics SQLite otherwise takes the fleet's (step, instance, start, ...)
    # index and reads every GPU's rows of the range (66 ms for an hour of 1,000 nodes, seconds for a day).
    rows = list(GpuRollup.objects.alias(step_=F("step") + 0)
                .filter(node=node, gpu=gpu, step_=rng.step, start__gte=first, start__lte=last)
                .order_by().annotate(t=column).values("instance", "t")
                .annotate(profile_=Max("profile"), job_=Max("job"), throttle_reasons_=Max("throttle_reasons"),
                          xid_count_=Sum("xid_count"), ecc_dbe_=Sum("ecc_dbe"), **aggregates)
                .order_by("instance", "t"))
    whole = [row for row in rows if row["instance"] == WHOLE_GPU]
    instances: dict[int, dict] = {}
    for row in rows:
        if row["instance"] == WHOLE_GPU:
            continue
        entry = instances.setdefault(row["instance"], {"instance": row["instance"], "profile": row["profile_"],
                                                       "t": [], "util": [], "fb_used_mib": [], "sm_active": []})
        entry["t"].append(row["t"])
        entry["util"].append(_round(row["util_"]))
        entry["fb_used_mib"].append(_round(row["fb_used_mib_"], 0))
        entry["sm_active"].append(_round(row["sm_active_"], 3))
    inventory = GPU.objects.filter(node=node, index=gpu).values("uuid", "model", "memory_mib", "mig_mode").first()
    collector = NodeCollector.objects.filter(node=node).values("node", "last_bucket", "last_seen").first()
    series = {"t": [row["t"] for row in whole],
              **{f: [_round(row[f"{f}_"], _digits(f)) for row in whole] for f in GPU_FIELDS}}
    series.update(job=[row["job_"] for row in whole], throttle_reasons=[row["throttle_reasons_"] for row in whole],
                  xid_count=[row["xid_count_"] for row in whole], ecc_dbe=[row["ecc_dbe_"] for row in whole])
    return {
        "node": node.name, "gpu": gpu, "range": rng.name, "step": rng.step, "width_s": width, "now": now.isoformat(),
        "inventory": inventory, "collector": collector_state(collector, now),
        "series": series, "instances": list(instances.values()),
        "jobs": sorted({row["job_"] for row in whole if row["job_"]}),
    }


# --- jobs ---------------------------------------------------------------------------------------------


# A minute that changed hands (GpuRollup.holders, holders.py: "41:35,chat-7b:20", the holders the
# scheduler placed there; those it did not are in unverified_holders and are nobody's here, as an unverified
# `job` is) is each holder's for its seconds. Its figures are one mean of the minute: a holder's part
# carries those below over the seconds held (the minute's mean times 60 over them, at most the full scale),
# as the attribution's reference and the ledger split it (analytics.attribution.HELD_FIGURES, which this
# layer may not import): nobody computes on a GPU nobody holds. Other figures are the minute's, weighed by
# the seconds held; energy is the holder's share of the minute's.
HELD_FIGURES = {"util": 100.0, "sm_active": 1.0, "fb_used_mib": "fb_total_mib"}


def _holders(text: str) -> dict[str, int]:
    """{job: seconds} of a stored holders text (checked by the ingest: holders.parse), the jobs of no
    second left out. A plain split: this runs for every minute that changed hands a page reads."""
    held = {}
    for part in text.split(","):
        job, _, seconds = part.rpartition(":")
        if job and seconds.isdigit() and int(seconds) > 0:
            held[job] = int(seconds)
    return held


def _over_held(name: str, value, held: int, bound=None, step: int = MINUTE):
    """A figure of a minute that changed hands over the `held` seconds its holders held it (HELD_FIGURES)."""
    if value is None or name not in HELD_FIGURES or not held:
        return value
    full = HELD_FIGURES[name]
    limit = bound if isinstance(full, str) else full
    scaled = value * step / held
    return min(scaled, limit) if limit is not None else scaled


def jobs(range: str | None = None, now: datetime | None = None) -> list[dict]:  # noqa: A002
    """Jobs (Slurm job ids, inference services) that held a GPU in the range, newest first, aggregated in
    the database per job and GPU. A job is listed for every minute it held any seconds of: the minutes it
    held most of (`job`, read from the fleet's covering index) and, read apart, the minutes that changed
    hands (`holders`: few rows, each holder's part weighed by its seconds). `gpu_hours` is the GPU time it
    held, `util_mean` the mean over its GPUs of each one's utilization over the seconds it held it. A large
    fleet reads the per-hour rows of the folded hours of the range (there, the job of a GPU-hour is the one
    that held it longest, and only it) and the per-minute rows after them (see resolution). At most seven
    queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    level, _ = resolution(rng, GPU.objects.count(), levels=(MINUTE, HOUR), max_rows=JOB_MAX_ROWS)
    found: dict[str, dict] = {}

    def gpu_of(job_id, node_id, index, first_at, last_at):
        job = found.setdefault(job_id, {"job": job_id, "gpus": {}, "first": first_at, "last": last_at})
        job["first"], job["last"] = min(job["first"], first_at), max(job["last"], last_at)
        # [utilization x seconds, seconds with a utilization, seconds held]
        return job["gpus"].setdefault((node_id, index), [0.0, 0, 0])

    for step, start, end, included in _segments(rng, level, first, last, model=GpuRollup, inside=True,
                                                levels=(MINUTE, HOUR)):
        rows = GpuRollup.objects.filter(step=step, instance=WHOLE_GPU, start__gte=start)
        rows = rows.filter(start__lte=end) if included else rows.filter(start__lt=end)
        for job_id, node_id, index, first_at, last_at, total, count, buckets in (
                rows.exclude(job="").order_by().values("job", "node", "gpu")
                .annotate(first_=Min("start"), last_=Max("start"), total=Sum("util"), count=Count("util"),
                          buckets=Count("job"))
                .values_list("job", "node", "gpu", "first_", "last_", "total", "count", "buckets")):
            gpu = gpu_of(job_id, node_id, index, first_at, last_at)
            gpu[2] += buckets * step
            if count:
                gpu[0] += total * step
                gpu[1] += count * step
        if step != MINUTE:
            continue  # the fold keeps an hour's longest holder only
        # The minutes that changed hands, counted whole for their `job` above: each holder's seconds instead.
        for job_id, node_id, index, start_at, util, text in (
                rows.exclude(holders="").order_by().values_list("job", "node", "gpu", "start", "util", "holders")):
            held = _holders(text)
            total_held = sum(held.values())
            counted = found.get(job_id, {}).get("gpus", {}).get((node_id, index))
            if job_id in held and counted is not None:  # (None: a row written between the two queries)
                gpu = counted
                gpu[2] -= step
                if util is not None:
                    gpu[0] -= util * step
                    gpu[1] -= step
            for holder, seconds in held.items():
                gpu = gpu_of(holder, node_id, index, start_at, start_at)
                gpu[2] += seconds
                if util is not None:
                    gpu[0] += _over_held("util", util, total_held, step=step) * seconds
                    gpu[1] += seconds
    names = dict(Node.objects.filter(pk__in={node_id for job in found.values() for node_id, _ in job["gpus"]})
                 .values_list("pk", "name")) if found else {}
    out = []
    for job in sorted(found.values(), key=lambda j: (j["last"], j["job"]), reverse=True):
        utils = [total / weight for total, weight, _ in job["gpus"].values() if weight > 0]
        out.append({"job": job["job"], "nodes": sorted({names[node_id] for node_id, _ in job["gpus"]}),
                    "gpus": len(job["gpus"]), "first": job["first"].isoformat(), "last": job["last"].isoformat(),
                    "gpu_hours": round(sum(held for _, _, held in job["gpus"].values()) / 3600, 3),
                    "util_mean": _round(sum(utils) / len(utils)) if utils else None})
    return out


class UnknownJob(LookupError):
    pass


# What a job's page reads of each minute it held: means over the minutes (weighed by the seconds held),
# maxima, and sums (its share of a minute it held a part of).
JOB_MEANS = ("util", "sm_active", "fb_used_mib", "power_w", "throttled_share")
JOB_MAXIMA = ("util_max", "fb_used_max_mib")
PART_FIELDS = ("id", "node", "node__name", "gpu", "start", "job", "holders", "fb_total_mib", "energy_j",
               *JOB_MEANS, *JOB_MAXIMA)


def _part_rows(job_id: str, spans: dict[int, list]) -> list[dict]:
    """The per-minute rows of the minutes that changed hands and that `job_id` held seconds of, the minutes
    it held most of among them, on the nodes of `spans` ({node id: [first, last]}, None: open) and in
    their span: each with its `seconds` (held) and `held` (all holders together). One query, each node's
    rows through the (node, gpu, instance, step, start) index (its GPUs by the inventory: one more)."""
    if not spans:
        return []
    indexes: dict[int, list[int]] = {}
    for node_id, index in GPU.objects.filter(node__in=list(spans)).values_list("node", "index"):
        indexes.setdefault(node_id, []).append(index)
    where = Q(pk__in=[])
    for node_id, (lo, hi) in spans.items():
        if node_id not in indexes:
            continue
        part = Q(node=node_id, gpu__in=sorted(indexes[node_id]))
        if lo is not None:
            part &= Q(start__gte=lo)
        if hi is not None:
            part &= Q(start__lte=hi)
        where |= part
    # holders__contains narrows the rows in the database; "41:35" contains "1:" too, hence the parse
    # the step compared as an expression, as in gpu_series: else SQLite takes the fleet's (step, ...) indexes
    rows = (GpuRollup.objects.alias(step_=F("step") + 0)
            .filter(where, step_=MINUTE, instance=WHOLE_GPU, holders__contains=f"{job_id}:")
            .order_by().values(*PART_FIELDS))
    found = []
    for row in rows:
        held = _holders(row["holders"])
        if job_id in held:
            found.append({**row, "seconds": held[job_id], "held": sum(held.values())})
    return found


def _job_spans(job_id: str, held: dict) -> dict[int, list]:
    """{node id: [first, last]} where a minute `job_id` held a part of may be: a minute either side of the
    minutes it held most of on a node (`held`: {node id: (first, last)}; a job that starts or ends inside a
    minute), and on the other nodes where a scheduler placed it (a job that never held most of a minute
    there), over the placement's span, its open start or end bounded by the job's minutes elsewhere (None:
    none, no bound). One query."""
    margin = timedelta(seconds=MINUTE)
    spans = {node_id: [first - margin, last + margin] for node_id, (first, last) in held.items()}
    lo_all = min(first for first, _ in held.values()) - margin if held else None
    hi_all = max(last for _, last in held.values()) + margin if held else None
    placed: dict[int, list] = {}
    for node_id, first, last in JobPlacement.objects.filter(job=job_id).values_list("node", "start", "end"):
        if node_id in spans:
            continue
        lo = lo_all if first is None else first - margin
        hi = hi_all if last is None else last + margin
        known = placed.get(node_id)
        if known is not None:  # placed by two providers: both spans
            lo = None if lo is None or known[0] is None else min(lo, known[0])
            hi = None if hi is None or known[1] is None else max(hi, known[1])
        placed[node_id] = [lo, hi]
    return spans | placed


def job_bounds(job_id: str) -> tuple[datetime, datetime, list[str]] | None:
    """The first and last minute the job held a GPU (most of it, or seconds of a minute that changed
    hands), and its nodes; None when it held none. Four queries at most."""
    held = {}
    moments, nodes = [], set()
    for node_id, name, step, first, last in (GpuRollup.objects.filter(job=job_id, instance=WHOLE_GPU).order_by()
                                             .values("node", "node__name", "step")
                                             .annotate(first=Min("start"), last=Max("start"))
                                             .values_list("node", "node__name", "step", "first", "last")):
        moments += [first, last]
        nodes.add(name)
        if step == MINUTE:
            held[node_id] = (first, last)
    for row in _part_rows(job_id, _job_spans(job_id, held)):
        moments.append(row["start"])
        nodes.add(row["node__name"])
    if not moments:
        return None
    return min(moments), max(moments), sorted(nodes)


def job(job_id: str) -> dict:
    """A job's GPUs, their use over the job's span, and the fabric and filesystem I/O of its nodes over that
    span: every minute it held any seconds of (the minutes it held most of, named by `job`, and those that
    changed hands where it held a part: `holders`), its figures over the seconds it held each (HELD_FIGURES;
    a GPU's `held_s` and the job's `gpu_hours` the time it held). Per-minute rows for a job of a day or less
    while they are kept, per-hour rows otherwise (an hour's longest holder only: the fold keeps no
    holders). Eight queries at most."""
    held = GpuRollup.objects.filter(job=job_id, instance=WHOLE_GPU)
    minutes = held.filter(step=MINUTE).aggregate(first=Min("start"), last=Max("start"))
    # Per-minute rows for a job of a day or less; a longer job reads its per-hour rows, so that a week on
    # 64 GPUs is 10 thousand rows, not 650 thousand (and the minutes pruned by then are not missed).
    long_job = minutes["first"] is None or (minutes["last"] - minutes["first"]).total_seconds() > JOB_MINUTES_S
    step = HOUR if long_job and held.filter(step=HOUR).exists() else MINUTE
    held = held.filter(step=step)
    sums = {f"{name}_s": Sum(name) for name in JOB_MEANS} | {f"{name}_n": Count(name) for name in JOB_MEANS}
    per_gpu = {(row["node"], row["gpu"]): row for row in
               held.order_by().values("node", "node__name", "gpu")
               .annotate(first=Min("start"), last=Max("start"), buckets=Count("id"), energy_j=Sum("energy_j"),
                         **{name: Max(name) for name in JOB_MAXIMA}, **sums)}
    for row in per_gpu.values():
        row["held_s"] = row["buckets"] * step
    parts = []
    if step == MINUTE:
        bounds: dict[int, tuple] = {}
        for row in per_gpu.values():
            first, last = bounds.get(row["node"], (row["first"], row["last"]))
            bounds[row["node"]] = (min(first, row["first"]), max(last, row["last"]))
        parts = _part_rows(job_id, _job_spans(job_id, bounds))
    # The minutes that changed hands: counted whole above where the job held most of them, its seconds instead.
    shared = {}
    for row in parts:
        key = (row["node"], row["gpu"])
        shared[(*key, row["start"])] = row
        weight = row["seconds"] / step
        gpu = per_gpu.get(key)
        counted = gpu is not None  # (not: a row written between the two queries)
        if gpu is None:
            gpu = per_gpu[key] = {"node": row["node"], "node__name": row["node__name"], "gpu": row["gpu"],
                                  "first": row["start"], "last": row["start"], "buckets": 0, "energy_j": None,
                                  "held_s": 0, **{name: None for name in JOB_MAXIMA},
                                  **{name: 0.0 for name in sums}}
        if row["job"] == job_id and counted:
            gpu["held_s"] -= step
            gpu["energy_j"] = None if gpu["energy_j"] is None else gpu["energy_j"] - (row["energy_j"] or 0)
            for name in JOB_MEANS:
                if row[name] is not None:
                    gpu[f"{name}_s"] -= row[name]
                    gpu[f"{name}_n"] -= 1
        else:
            gpu["buckets"] += 1
            gpu["first"], gpu["last"] = min(gpu["first"], row["start"]), max(gpu["last"], row["start"])
        gpu["held_s"] += row["seconds"]
        if row["energy_j"] is not None:
            gpu["energy_j"] = (gpu["energy_j"] or 0) + row["energy_j"] * weight
        for name in JOB_MEANS:
            value = _over_held(name, row[name], row["held"], row["fb_total_mib"], step)
            if value is not None:
                gpu[f"{name}_s"] += value * weight
                gpu[f"{name}_n"] += weight
        for name in JOB_MAXIMA:
            if row[name] is not None:
                gpu[name] = row[name] if gpu[name] is None else max(gpu[name], row[name])
    if not per_gpu:
        raise UnknownJob(f"no GPU rollup names the job {job_id!r}")
    for gpu in per_gpu.values():
        for name in JOB_MEANS:
            count = gpu.pop(f"{name}_n")
            total = gpu.pop(f"{name}_s")
            gpu[name] = total / count if count and count > 1e-9 else None
    per_gpu = sorted(per_gpu.values(), key=lambda row: (row["node__name"], row["gpu"]))
    first = min(row["first"] for row in per_gpu)
    last = max(row["last"] for row in per_gpu)
    # Epoch seconds rather than datetimes, node ids rather than a join: the rows of a job of a day on 64
    # GPUs are many, and the names are known from per_gpu.
    names = {row["node"]: row["node__name"] for row in per_gpu}
    gpu_rows = [(node_id, index, int(start.timestamp()), util, fb_used) for (node_id, index, start), (util, fb_used)
                in ((key, (_over_held("util", row["util"], row["held"], step=step),
                           _over_held("fb_used_mib", row["fb_used_mib"], row["held"], row["fb_total_mib"], step)))
                    for key, row in shared.items())]
    rows = held.order_by().annotate(t=Epoch("start")).values_list("node", "gpu", "t", "util", "fb_used_mib")
    if shared:  # those minutes as above, not whole
        taken = {(node_id, index, int(start.timestamp())) for node_id, index, start in shared}
        gpu_rows += [row for row in rows if row[:3] not in taken]
    else:
        gpu_rows += rows
    io_fields = ("ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps", "cpu_iowait")
    node_rows = list(NodeRollup.objects.filter(node__in=list(names), step=step, start__gte=first, start__lte=last)
                     .order_by().annotate(t=Epoch("start")).values_list("node", "t", *io_fields))
    times = sorted({row[2] for row in gpu_rows})
    position = {t: i for i, t in enumerate(times)}
    series: dict[str, dict] = {}
    for node_id, index, t, util, fb_used in gpu_rows:
        entry = series.setdefault(f"{names[node_id]}/{index}", {"util": [None] * len(times),
                                                                "fb_used_mib": [None] * len(times)})
        i = position[t]
        entry["util"][i] = _round(util)
        entry["fb_used_mib"][i] = _round(fb_used, 0)
    nodes: dict[str, dict] = {}
    for node_id, t, *values in node_rows:
        entry = nodes.setdefault(names[node_id], {f: [None] * len(times) for f in io_fields})
        i = position.get(t)
        if i is None:
            continue
        for field, value in zip(io_fields, values, strict=True):
            entry[field][i] = _round(value, _digits(field) if field in RATIOS else 0)
    series = dict(sorted(series.items()))
    nodes = dict(sorted(nodes.items()))
    utils = [row["util"] for row in per_gpu if row["util"] is not None]
    return {
        "job": job_id, "step": step, "first": first.isoformat(), "last": last.isoformat(),
        "end": (last + timedelta(seconds=step)).isoformat(),
        "duration_s": int((last - first).total_seconds()) + step,
        "nodes": sorted({row["node__name"] for row in per_gpu}),
        "gpu_count": len(per_gpu),
        "gpu_hours": round(sum(row["held_s"] for row in per_gpu) / 3600, 3),
        "util_mean": _round(sum(utils) / len(utils)) if utils else None,
        "energy_j": _round(sum(row["energy_j"] or 0 for row in per_gpu), 0),
        "gpus": [{"node": row["node__name"], "gpu": row["gpu"], "first": row["first"].isoformat(),
                  "last": row["last"].isoformat(), "buckets": row["buckets"], "held_s": round(row["held_s"]),
                  "util": _round(row["util"]),
                  "util_max": _round(row["util_max"]), "sm_active": _round(row["sm_active"], 3),
                  "fb_used_mib": _round(row["fb_used_mib"], 0), "fb_used_max_mib": _round(row["fb_used_max_mib"], 0),
                  "power_w": _round(row["power_w"]), "energy_j": _round(row["energy_j"], 0),
                  "throttled_share": _round(row["throttled_share"], 3)} for row in per_gpu],
        "t": times, "gpu_series": series, "node_series": nodes,
    }


# --- alerts -------------------------------------------------------------------------------------------


def alerts(state: str = "open", limit: int = ALERTS_SHOWN) -> dict:
    """Hardware alerts (XID, uncorrectable ECC, link down, throttling), newest first: the open ones
    (not acknowledged) or all. Two queries."""
    if state not in ALERT_STATES:
        raise ValueError(f"state: {state!r} is not one of {', '.join(ALERT_STATES)}")
    events = HardwareEvent.objects.filter(kind__in=ALERT_KINDS)
    counts = events.aggregate(open=Count("id", filter=Q(acknowledged_at__isnull=True)), all=Count("id"))
    if state == "open":
        events = events.filter(acknowledged_at__isnull=True)
    rows = events.order_by("-time", "-id").values("id", "node__name", "kind", "gpu", "device", "time", "message",
                                                  "detail", "acknowledged_at", "acknowledged_by")[:limit]
    return {
        "state": state, "open": counts["open"], "total": counts["all"],
        "alerts": [{"id": row["id"], "node": row["node__name"], "kind": row["kind"],
                    "kind_label": str(HardwareEvent.Kind(row["kind"]).label), "gpu": row["gpu"],
                    "device": row["device"], "time": row["time"].isoformat(), "message": row["message"],
                    "detail": row["detail"],
                    "acknowledged_at": row["acknowledged_at"].isoformat() if row["acknowledged_at"] else None,
                    "acknowledged_by": row["acknowledged_by"]} for row in rows],
    }

