"""GPU minute frames: every per-minute GPU row of one node and minute packed into one row
(models.GpuMinuteFrame), with what the node's own row of that minute holds of its CPUs, fabric and mounts:
what the analytics ledger reads instead of the rows themselves.

Why: attributing a day of 1,000 HGX nodes reads 11.5 million GPU rows and 1.44 million node rows. Read as
rows, every value of them becomes a Python object (SQLite's cursor) or goes through a send function on the
server (PostgreSQL): 1.7 s of the 2.3 s an hour's chunk took on SQLite here. A frame holds a node's 8 (or,
with MIG, more) GPU rows of a minute as one float64 matrix, its node row's figures as another, its mounts'
reads as a third and three short texts (jobs, MIG profiles, mount names), so an hour is 60,000 frames
whose bytes numpy takes whole.

The frames are derived, and kept true by whoever writes the rows: the ingest (ingest.store) rebuilds the
frame of every node and minute it writes, from the GPU and node rows as stored after its write (a minute
sent again, or in parts, gives the frame of what the rows now hold), in the same transaction. Rows written
another way (a test, a tool) have no frame, or a frame whose `row_count` no longer matches: the ledger
compares each minute's packed count with the rows' count and reads the rows of a minute that differs.
A value changed in place by another writer, the count unchanged, is not seen: only the ingest writes these
rows. Frames are pruned with the minute rows.

Fleet minute frames (models.FleetMinuteFrame): once a minute has settled, the fold (services.
settle_fleet_frames) packs every node frame of that minute into one row, so an hour of 1,000 nodes is 60
rows instead of 60,000 (README, "Attribution at fleet scale", has what it saves). Node frames written for a minute (a late write) delete its fleet
frame in their transaction, and the next fold packs it again; the ledger compares a fleet frame's
`row_count` with the minute's rows as it does a node frame's, and reads a minute without a fleet frame
from its node frames. On PostgreSQL the writers of node frames and the packer take the minute's advisory
lock (lock_minutes), shared and alone, so that a fleet frame never packs node frames an open transaction
is rewriting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import orjson
from django.db import connections, router, transaction

from .models import (
    FRAME_COLUMNS,
    MINUTE,
    NODE_FRAME_COLUMNS,
    FleetMinuteFrame,
    GpuMinuteFrame,
    GpuRollup,
    NodeRollup,
)

WIDTH = len(FRAME_COLUMNS)
STARTS_A_QUERY = 200  # minutes a build's query names (with the nodes, under SQLite's parameter limit)
NODES_A_QUERY = 500


class FrameError(ValueError):
    """A frame that is not what this version writes (the message names it)."""


def epoch_sql(connection, column: str) -> str:
    """`column` (a timestamp) as whole epoch seconds, in the connection's SQL."""
    if connection.vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) AS BIGINT)"
    return f"CAST(strftime('%%s', {column}) AS INTEGER)"


def pack(rows: list[tuple]) -> tuple[bytes, str, str, str]:
    """(values, jobs, profiles, holders) of one node's minute from its rows, each (gpu, instance, job,
    profile, holders, *the figures of FRAME_COLUMNS[2:]), put in order of GPU and instance. Holders are the
    empty text where no row has any (most minutes: none changed hands)."""
    rows = sorted(rows, key=lambda row: (row[0], row[1]))
    matrix = np.array([[row[0], row[1], *(np.nan if value is None else value for value in row[5:])] for row in rows],
                      dtype="<f8").reshape(len(rows), WIDTH)
    reasons = FRAME_COLUMNS.index("throttle_reasons")
    matrix[:, reasons] = np.nan_to_num(matrix[:, reasons], nan=0.0)
    holders = "\n".join(row[4] or "" for row in rows) if any(row[4] for row in rows) else ""
    return (matrix.tobytes(), "\n".join(row[2] or "" for row in rows), "\n".join(row[3] or "" for row in rows),
            holders)


def build(starts: Iterable[datetime], node_ids: Iterable[int] | None = None) -> int:
    """Write the frames of the minutes `starts` (of the nodes given, or all) from their per-minute GPU rows
    as stored now, replacing those there; a frame whose rows are all gone is deleted. Returns the frames
    written."""
    model_connection = connections[router.db_for_write(GpuMinuteFrame)]
    starts = sorted({moment.astimezone(UTC).replace(second=0, microsecond=0) for moment in starts})
    node_ids = sorted(set(node_ids)) if node_ids is not None else None
    if not starts or node_ids == []:
        return 0
    with transaction.atomic(using=model_connection.alias):
        return _build(model_connection, starts, node_ids)


def _build(model_connection, starts: list[datetime], node_ids: list[int] | None) -> int:
    lock_minutes(model_connection, starts, shared=True)
    by_epoch = {int(moment.timestamp()): moment for moment in starts}
    figures = ", ".join(FRAME_COLUMNS[2:])
    rows_table = GpuRollup._meta.db_table
    grouped: dict[tuple[int, int], list[tuple]] = {}
    node_batches = ([node_ids[i:i + NODES_A_QUERY] for i in range(0, len(node_ids), NODES_A_QUERY)]
                    if node_ids is not None else [None])
    with model_connection.cursor() as cursor:
        for first in range(0, len(starts), STARTS_A_QUERY):
            moments = starts[first:first + STARTS_A_QUERY]
            params = [MINUTE, *(model_connection.ops.adapt_datetimefield_value(m) for m in moments)]
            for batch in node_batches:
                condition = f" AND node_id IN ({', '.join(['%s'] * len(batch))})" if batch else ""
                cursor.execute(f"SELECT node_id, {epoch_sql(model_connection, 'start')}, gpu, instance, job, profile, "
                               f"holders, {figures} FROM {rows_table} WHERE step = %s "
                               f"AND start IN ({', '.join(['%s'] * len(moments))}){condition}",
                               params + (batch or []))
                for node_id, t, *row in cursor.fetchall():
                    grouped.setdefault((node_id, t), []).append(tuple(row))
    nodes = _node_rows(model_connection, starts, node_batches)
    frames = []
    for (node_id, t), rows in grouped.items():
        values, jobs, profiles, holders = pack(rows)
        frames.append((node_id, by_epoch[t], len(rows), values, jobs, profiles, *pack_node(nodes.get((node_id, t))),
                       holders))
    _replace(model_connection, frames, starts, node_ids, set(grouped))
    return len(frames)


def _node_rows(connection, starts: list[datetime], node_batches: list) -> dict[tuple[int, int], tuple]:
    """{(node id, epoch start): (NODE_FRAME_COLUMNS figures, mounts)} of the per-minute node rows."""
    result = {}
    with connection.cursor() as cursor:
        for first in range(0, len(starts), STARTS_A_QUERY):
            moments = starts[first:first + STARTS_A_QUERY]
            params = [MINUTE, *(connection.ops.adapt_datetimefield_value(m) for m in moments)]
            for batch in node_batches:
                condition = f" AND node_id IN ({', '.join(['%s'] * len(batch))})" if batch else ""
                cursor.execute(f"SELECT node_id, {epoch_sql(connection, 'start')}, {', '.join(NODE_FRAME_COLUMNS)}, "
                               f"mounts FROM {NodeRollup._meta.db_table} WHERE step = %s "
                               f"AND start IN ({', '.join(['%s'] * len(moments))}){condition}", params + (batch or []))
                for node_id, t, *figures, mounts in cursor.fetchall():
                    if isinstance(mounts, str | bytes):
                        mounts = orjson.loads(mounts)
                    result[(node_id, t)] = (figures, mounts or {})
    return result


def _number(value) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else np.nan


def pack_node(node: tuple | None) -> tuple[bytes | None, str, bytes]:
    """(node_figures, mounts, mount_reads) of a node row's (figures, mounts); (None, "", b"") for none."""
    if node is None:
        return None, "", b""
    figures, mounts = node
    names = sorted(mounts)
    reads = [_number((mounts[name] or {}).get("read_bps")) if isinstance(mounts[name], dict) else np.nan
             for name in names]
    return (np.array([_number(value) for value in figures], dtype="<f8").tobytes(), "\n".join(names),
            np.array(reads, dtype="<f8").tobytes())


def _replace(connection, frames: list[tuple], starts: list[datetime], node_ids: list[int] | None,
             kept: set[tuple[int, int]]) -> None:
    quote = connection.ops.quote_name
    table = quote(GpuMinuteFrame._meta.db_table)
    names = list(NODE_FRAME_FIELDS)
    columns = ", ".join(quote(name) for name in names)
    update = ", ".join(f"{quote(name)} = EXCLUDED.{quote(name)}" for name in names[2:])
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        # Frames of a minute and node whose rows are gone: none can be left to disagree with them.
        condition = f" AND node_id IN ({', '.join(['%s'] * len(node_ids))})" if node_ids is not None else ""
        for first in range(0, len(starts), STARTS_A_QUERY):
            moments = starts[first:first + STARTS_A_QUERY]
            cursor.execute(f"SELECT id, node_id, {epoch_sql(connection, 'start')} FROM {table} "
                           f"WHERE start IN ({', '.join(['%s'] * len(moments))}){condition}",
                           [*(adapt(m) for m in moments), *(node_ids or [])])
            gone = [pk for pk, node_id, t in cursor.fetchall() if (node_id, t) not in kept]
            if gone:
                cursor.execute(f"DELETE FROM {table} WHERE id IN ({', '.join(['%s'] * len(gone))})", gone)
        if frames:
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(names))}) "
                               f"ON CONFLICT (node_id, start) DO UPDATE SET {update}",
                               [(node_id, adapt(start), *rest) for node_id, start, *rest in frames])
        # the fleet frames of these minutes packed what the node frames held before: gone, until the fold
        # packs the minute again (the ledger reads its node frames meanwhile)
        fleet = quote(FleetMinuteFrame._meta.db_table)
        for first in range(0, len(starts), STARTS_A_QUERY):
            moments = starts[first:first + STARTS_A_QUERY]
            cursor.execute(f"DELETE FROM {fleet} WHERE start IN ({', '.join(['%s'] * len(moments))})",
                           [adapt(m) for m in moments])


# PostgreSQL: a writer of node frames holds each minute's advisory lock shared, a builder of the minute's
# fleet frame holds it alone, so that a fleet frame never packs node frames that a transaction still open
# rewrites (and whose deletion of the fleet frame would come before the frame is there). SQLite runs one
# writing transaction at a time (IMMEDIATE): nothing to take.
FRAME_LOCK_CLASS = 0x4652  # the first key of the frames' advisory locks; the second is the minute (epoch / 60)


def lock_minutes(connection, starts: list[datetime], *, shared: bool) -> None:
    """Take the minutes' advisory locks (PostgreSQL), in ascending order, until the transaction ends."""
    if connection.vendor != "postgresql" or not starts:
        return
    if not connection.in_atomic_block:
        raise RuntimeError("frames: minute locks are taken in a transaction")
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    minutes = sorted({int(moment.timestamp()) // MINUTE for moment in starts})
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, minute) FROM unnest(%s::integer[]) WITH ORDINALITY AS m(minute, i) "
                       "ORDER BY i", [FRAME_LOCK_CLASS, minutes])


FLEET_MINUTES_A_QUERY = 30  # minutes of node frames a fleet build reads at once (30,000 frames of 1,000 nodes)


def build_fleet(starts: Iterable[datetime]) -> int:
    """Write the fleet frame of each minute of `starts` from its node frames as stored now (replacing one
    there; a minute without node frames loses its fleet frame). Returns the fleet frames written."""
    connection = connections[router.db_for_write(FleetMinuteFrame)]
    starts = sorted({moment.astimezone(UTC).replace(second=0, microsecond=0) for moment in starts})
    if not starts:
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    quote = connection.ops.quote_name
    table = quote(FleetMinuteFrame._meta.db_table)
    names = list(FLEET_FIELDS)
    written = 0
    for first in range(0, len(starts), FLEET_MINUTES_A_QUERY):
        moments = starts[first:first + FLEET_MINUTES_A_QUERY]
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            lock_minutes(connection, moments, shared=False)
            fields = ", ".join(epoch_sql(connection, name) if name == "start" else name for name in NODE_FRAME_FIELDS)
            cursor.execute(f"SELECT {fields} FROM {quote(GpuMinuteFrame._meta.db_table)} "
                           f"WHERE start IN ({', '.join(['%s'] * len(moments))}) ORDER BY start, node_id",
                           [adapt(m) for m in moments])
            by_minute: dict[int, list[tuple]] = {}
            for frame in cursor.fetchall():
                by_minute.setdefault(frame[1], []).append(frame)
            rows = [_fleet_row(t, _packed_frames(found)) for t, found in by_minute.items()]
            gone = [adapt(m) for m in moments if int(m.timestamp()) not in by_minute]
            if gone:
                cursor.execute(f"DELETE FROM {table} WHERE start IN ({', '.join(['%s'] * len(gone))})", gone)
            if rows:
                update = ", ".join(f"{quote(name)} = EXCLUDED.{quote(name)}" for name in names[1:])
                cursor.executemany(f"INSERT INTO {table} ({', '.join(quote(name) for name in names)}) "
                                   f"VALUES ({', '.join(['%s'] * len(names))}) ON CONFLICT (start) DO UPDATE SET {update}",
                                   [(adapt(datetime.fromtimestamp(row[0], UTC)), *row[1:]) for row in rows])
            written += len(rows)
    return written


def _fleet_row(t: int, packed: Packed) -> tuple:
    """A fleet frame's FLEET_FIELDS (the minute as epoch seconds) of a minute's node frames, read."""
    return (t, len(packed.node_id), int(packed.rows.sum()), packed.node_id.astype("<i8").tobytes(),
            packed.rows.astype("<i4").tobytes(), np.ascontiguousarray(packed.figures, dtype="<f8").tobytes(),
            packed.job_code.astype("<i4").tobytes(), "\n".join(packed.job_values),
            packed.profile_code.astype("<i4").tobytes(), "\n".join(packed.profile_values),
            np.ascontiguousarray(packed.nodes, dtype="<f8").tobytes(), packed.mount_counts.astype("<i4").tobytes(),
            packed.mount_code.astype("<i4").tobytes(), "\n".join(packed.mount_values),
            np.ascontiguousarray(packed.mount_reads, dtype="<f8").tobytes(), packed.holder_code.astype("<i4").tobytes(),
            "\n".join(packed.holder_values))


FLEET_FRAMES_A_RUN = 180  # minutes a settle builds at most (an appliance upgraded with a day of node frames)


def settle(first: datetime, last: datetime) -> list[datetime]:
    """Build the fleet frames of the minutes from `first` to `last` (included) that have node frames and
    none, the oldest FLEET_FRAMES_A_RUN of them (the fold calls this with the settled minutes); returns
    those minutes."""
    have = set(FleetMinuteFrame.objects.filter(start__gte=first, start__lte=last).values_list("start", flat=True))
    minutes = (GpuMinuteFrame.objects.filter(start__gte=first, start__lte=last).order_by("start")
               .values_list("start", flat=True).distinct())
    wanted = []
    for minute in minutes.iterator():
        if minute not in have:
            wanted.append(minute)
            if len(wanted) == FLEET_FRAMES_A_RUN:
                break
    build_fleet(wanted)
    return wanted


@dataclass
class Packed:
    """Frames read, not yet laid out a value per GPU row: per frame (a node and minute) its node, minute,
    GPU rows, node figures and mount count; per GPU row its FRAME_COLUMNS (`figures`, a column per row of
    the array) and text codes; per mount its name's code and read_bps. Codes index the `_values` arrays,
    whose code 0 is the empty text."""

    node_id: np.ndarray
    t: np.ndarray
    rows: np.ndarray
    figures: np.ndarray  # WIDTH x rows
    job_code: np.ndarray
    job_values: list
    profile_code: np.ndarray
    profile_values: list
    nodes: np.ndarray  # frames x NODE_FRAME_COLUMNS, NaN where no node row
    mount_counts: np.ndarray
    mount_code: np.ndarray
    mount_values: list
    mount_reads: np.ndarray
    holder_code: np.ndarray
    holder_values: list


def unpack(frames: list[tuple]) -> dict[str, np.ndarray]:
    """Frames (node_id, epoch start, row_count, figures, jobs, profiles, node_figures, mounts, mount_reads,
    holders) as columns, a value per GPU row: node_id, t, FRAME_COLUMNS (gpu, instance and throttle_reasons int64,
    the figures float64), NODE_FRAME_COLUMNS (NaN where the node had no row), `frame`
    (the row's frame) and, for each text column, `<name>_code` (an index into `<name>_values`, whose code 0
    is the empty text). And, a value per frame, `frame_node_id` and `frame_fs_read_bps` (NaN: no node row);
    a value per mount of a frame, `mount_frame`, `mount_code` (into `mount_values`) and `mount_read_bps`.
    A frame whose bytes or texts do not hold what it says is a FrameError."""
    return _expand(_packed_frames(frames))


def unpack_fleet(fleet_frames: list[tuple], node_frames: list[tuple] = ()) -> dict[str, np.ndarray]:
    """`unpack`'s columns of fleet frames (FLEET_FIELDS, the minute as epoch seconds) and of node frames
    (as `unpack` takes them) together: the fleet frames' frames first, in their order."""
    parts = [_packed_fleet(frame) for frame in fleet_frames]
    if node_frames or not parts:
        parts.append(_packed_frames(list(node_frames)))
    return _expand(_joined(parts))


def _packed_frames(frames: list[tuple]) -> Packed:
    """Node frames (as `unpack` takes them) read."""
    count = len(frames)
    columns = list(zip(*frames, strict=True)) or [()] * len(NODE_FRAME_FIELDS)  # a tuple a column: each read in one pass
    rows = np.array(columns[2], dtype=np.int64)
    data = b"".join(columns[3])  # bytes, or a memoryview: both join
    total = int(rows.sum())
    if len(data) != 8 * WIDTH * total:
        raise FrameError(f"GPU minute frames: {len(data)} bytes for {total} rows of {WIDTH} values")
    job_code, job_values, _ = _codes(columns[4], rows)
    profile_code, profile_values, _ = _codes(columns[5], rows)
    found = np.array([figures is not None for figures in columns[6]], dtype=bool)
    node_data = b"".join([figures for figures in columns[6] if figures is not None])
    if len(node_data) != 8 * len(NODE_FRAME_COLUMNS) * int(found.sum()):
        raise FrameError(f"GPU minute frames: {len(node_data)} bytes of node figures for {int(found.sum())} node rows")
    nodes = np.full((count, len(NODE_FRAME_COLUMNS)), np.nan)
    nodes[found] = np.frombuffer(node_data, dtype="<f8").reshape(-1, len(NODE_FRAME_COLUMNS))
    mount_code, mount_values, lengths = _codes(columns[7], None)
    reads = np.frombuffer(b"".join(columns[8]), dtype="<f8")
    if len(reads) != int(lengths.sum()):
        raise FrameError(f"GPU minute frames: {len(reads)} mount reads for {int(lengths.sum())} mounts")
    # a frame whose rows have no holders (written before holders were kept, or none changed hands) holds none
    if any(columns[9]):
        holder_code, holder_values, _ = _codes([text or "\n" * (int(count) - 1) for text, count in
                                                zip(columns[9], rows.tolist(), strict=True)], rows)
    else:  # most windows: no minute changed hands
        holder_code, holder_values = np.zeros(total, dtype=np.int64), np.array([""], dtype=object)
    return Packed(node_id=np.array(columns[0], dtype=np.int64), t=np.array(columns[1], dtype=np.int64), rows=rows,
                  figures=np.frombuffer(data, dtype="<f8").reshape(total, WIDTH).T, job_code=job_code,
                  job_values=list(job_values), profile_code=profile_code, profile_values=list(profile_values),
                  nodes=nodes, mount_counts=lengths, mount_code=mount_code, mount_values=list(mount_values),
                  mount_reads=reads, holder_code=holder_code, holder_values=list(holder_values))


# A node frame as `unpack` takes it: its columns in this order, `start` as epoch seconds.
NODE_FRAME_FIELDS = ("node_id", "start", "row_count", "figures", "jobs", "profiles", "node_figures", "mounts",
                     "mount_reads", "holders")
# A fleet frame as read: its columns in this order, `start` as epoch seconds.
FLEET_FIELDS = ("start", "frame_count", "row_count", "node_ids", "frame_rows", "figures", "job_codes", "jobs",
                "profile_codes", "profiles", "node_figures", "mount_counts", "mount_codes", "mounts", "mount_reads",
                "holder_codes", "holders")


def _array(data, kind: str, count: int, what: str, t: int) -> np.ndarray:
    array = np.frombuffer(data or b"", dtype=kind)
    if len(array) != count:
        raise FrameError(f"fleet minute frame {datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M}: {len(array)} {what} "
                         f"for {count}")
    return array


def _packed_fleet(frame: tuple) -> Packed:
    """A fleet frame (FLEET_FIELDS) read, its sizes checked against its counts."""
    (t, count, total, node_ids, frame_rows, figures, job_codes, jobs, profile_codes, profiles, node_figures,
     mount_counts, mount_codes, mounts, mount_reads, holder_codes, holders) = frame
    rows = _array(frame_rows, "<i4", count, "frame row counts", t).astype(np.int64)
    mount_counts = _array(mount_counts, "<i4", count, "frame mount counts", t).astype(np.int64)
    if int(rows.sum()) != total:
        raise FrameError(f"fleet minute frame {datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M}: its frames hold "
                         f"{int(rows.sum())} rows, not {total}")
    mounts_total = int(mount_counts.sum())
    values = {name: text.split("\n") for name, text in (("jobs", jobs), ("profiles", profiles), ("mounts", mounts),
                                                        ("holders", holders or ""))}
    codes = {"jobs": _array(job_codes, "<i4", total, "job codes", t),
             "profiles": _array(profile_codes, "<i4", total, "profile codes", t),
             "mounts": _array(mount_codes, "<i4", mounts_total, "mount codes", t),
             # a fleet frame packed before holders were kept has none
             "holders": (_array(holder_codes, "<i4", total, "holder codes", t) if holder_codes
                         else np.zeros(total, dtype="<i4"))}
    for name, array in codes.items():
        if values[name][0] != "" or (len(array) and (array.min() < 0 or array.max() >= len(values[name]))):
            raise FrameError(f"fleet minute frame {datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M}: {name} codes "
                             "outside their values")
    return Packed(node_id=_array(node_ids, "<i8", count, "node ids", t).astype(np.int64),
                  t=np.full(count, t, dtype=np.int64), rows=rows,
                  figures=_array(figures, "<f8", WIDTH * total, "figures", t).reshape(WIDTH, total),
                  job_code=codes["jobs"], job_values=values["jobs"], profile_code=codes["profiles"],
                  profile_values=values["profiles"],
                  nodes=_array(node_figures, "<f8", count * len(NODE_FRAME_COLUMNS), "node figures",
                               t).reshape(count, len(NODE_FRAME_COLUMNS)),
                  mount_counts=mount_counts, mount_code=codes["mounts"], mount_values=values["mounts"],
                  mount_reads=_array(mount_reads, "<f8", mounts_total, "mount reads", t),
                  holder_code=codes["holders"], holder_values=values["holders"])


def _joined(parts: list[Packed]) -> Packed:
    """Packed frames end to end, the codes of each mapped into one set of values (code 0 the empty text).
    A fleet's frames of an hour mostly hold the same texts: each distinct list of values is mapped once."""
    if len(parts) == 1:
        return parts[0]

    def union(name: str) -> tuple[np.ndarray, list]:
        values: dict[str, int] = {"": 0}
        seen: dict[tuple, np.ndarray | None] = {}  # None: the codes stand as they are
        codes = []
        for part in parts:
            names = tuple(getattr(part, f"{name}_values"))
            if names not in seen:
                remap = np.array([values.setdefault(value, len(values)) for value in names], dtype=np.int64)
                seen[names] = None if np.array_equal(remap, np.arange(len(remap))) else remap
            remap = seen[names]
            code = getattr(part, f"{name}_code")
            codes.append(code if remap is None else remap[code])
        return np.concatenate(codes).astype(np.int64, copy=False), list(values)

    job_code, job_values = union("job")
    profile_code, profile_values = union("profile")
    mount_code, mount_values = union("mount")
    holder_code, holder_values = union("holder")
    return Packed(node_id=np.concatenate([p.node_id for p in parts]), t=np.concatenate([p.t for p in parts]),
                  rows=np.concatenate([p.rows for p in parts]),
                  figures=np.concatenate([p.figures for p in parts], axis=1), job_code=job_code,
                  job_values=job_values, profile_code=profile_code, profile_values=profile_values,
                  nodes=np.concatenate([p.nodes for p in parts]),
                  mount_counts=np.concatenate([p.mount_counts for p in parts]), mount_code=mount_code,
                  mount_values=mount_values, mount_reads=np.concatenate([p.mount_reads for p in parts]),
                  holder_code=holder_code, holder_values=holder_values)


def _expand(packed: Packed) -> dict[str, np.ndarray]:
    """`unpack`'s columns of packed frames."""
    count = len(packed.node_id)
    frame = np.repeat(np.arange(count), packed.rows)
    result = {"node_id": packed.node_id[frame], "t": packed.t[frame], "frame": frame, "frame_node_id": packed.node_id}
    figures = packed.figures
    for index, name in enumerate(FRAME_COLUMNS):
        column = figures[index]
        if name in ("gpu", "instance", "throttle_reasons"):
            result[name] = column.astype(np.int64)
        else:  # a view of the frames' bytes is read-only, a column of a node frame strided: a copy of its own
            result[name] = column if column.flags.c_contiguous and column.flags.writeable else column.copy()
    for name in ("job", "profile", "mount", "holder"):
        result[f"{name}_code"] = np.asarray(getattr(packed, f"{name}_code"), dtype=np.int64)
        result[f"{name}_values"] = np.array(getattr(packed, f"{name}_values"), dtype=object)
    for index, name in enumerate(NODE_FRAME_COLUMNS):
        result[name] = packed.nodes[frame, index]
    result["frame_fs_read_bps"] = packed.nodes[:, NODE_FRAME_COLUMNS.index("fs_read_bps")].copy()
    result["mount_frame"] = np.repeat(np.arange(count), packed.mount_counts)
    result["mount_read_bps"] = np.array(packed.mount_reads, dtype=np.float64)
    return result


def _codes(texts, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each frame's text (a value per row, one per line) as codes of its rows, end to end, with the
    texts' values (code 0 is the empty text) and how many each frame holds. With `rows` (GPU rows a frame),
    an empty text is one empty value and each frame must hold its rows; without, an empty text holds none
    (a node without mounts). The texts of a node's frames repeat minute after minute (the same jobs on
    the same GPUs): each distinct text is split once, and the frames' codes are gathered with numpy."""
    distinct = {text: index for index, text in enumerate(dict.fromkeys(texts))}
    which = np.fromiter(map(distinct.__getitem__, texts), dtype=np.int64, count=len(texts))
    values: dict[str, int] = {"": 0}
    parts, lengths = [], []
    for text in distinct:
        names = text.split("\n") if text or rows is not None else []
        parts.append(np.array([values.setdefault(name, len(values)) for name in names], dtype=np.int64))
        lengths.append(len(names))
    lengths = np.array(lengths, dtype=np.int64)
    held = lengths[which] if len(which) else np.zeros(0, dtype=np.int64)
    if rows is not None and np.any(held != rows):
        bad = int(np.flatnonzero(held != rows)[0])
        raise FrameError(f"GPU minute frame {bad}: {int(held[bad])} lines of text for {int(rows[bad])} rows")
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    # value k of frame f is flat[offsets[which[f]] + k]
    first = np.repeat(np.cumsum(held) - held, held)
    positions = np.repeat(offsets[which] if len(which) else held, held) + (np.arange(int(held.sum())) - first)
    return flat[positions], np.array(list(values), dtype=object), held
