"""GPU minute frames: every per-minute GPU row of one node and minute packed into one row
(models.GpuMinuteFrame), what the analytics ledger reads instead of the rows themselves.

Why: attributing a day of 1,000 HGX nodes reads 11.5 million GPU rows. Read as rows, every value of them
becomes a Python object (SQLite's cursor) or goes through a send function on the server (PostgreSQL):
1.7 s of the 2.3 s an hour's chunk took on SQLite here. A frame holds a node's 8 (or, with MIG, more) rows
of a minute as one float64 matrix and two short texts, so an hour is 60,000 frames whose bytes numpy
takes whole.

The frames are derived, and kept true by whoever writes the rows: the ingest (ingest.store) rebuilds the
frame of every node and minute it writes, from the rows as stored after its write (a minute sent again,
or in parts, gives the frame of what the rows now hold), in the same transaction. Rows written another way
(a test, a tool) have no frame, or a frame whose `row_count` no longer matches: a reader compares each minute's
packed count with the rows' count and reads the rows of a minute that differs (`minutes_to_read`).
Frames are pruned with the minute rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np
from django.db import connections, router

from .models import FRAME_COLUMNS, MINUTE, GpuMinuteFrame, GpuRollup

WIDTH = len(FRAME_COLUMNS)
TEXT_COLUMNS = ("job", "profile")
STARTS_A_QUERY = 200  # minutes a build's query names (with the nodes, under SQLite's parameter limit)
NODES_A_QUERY = 500


class FrameError(ValueError):
    """A frame that is not what this version writes (the message names it)."""


def epoch_sql(connection, column: str) -> str:
    """`column` (a timestamp) as whole epoch seconds, in the connection's SQL."""
    if connection.vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) AS BIGINT)"
    return f"CAST(strftime('%%s', {column}) AS INTEGER)"


def pack(rows: list[tuple]) -> tuple[bytes, str, str]:
    """(values, jobs, profiles) of one node's minute from its rows, each (gpu, instance, job, profile, *the
    figures of FRAME_COLUMNS[2:]), put in order of GPU and instance."""
    rows = sorted(rows, key=lambda row: (row[0], row[1]))
    matrix = np.array([[row[0], row[1], *(np.nan if value is None else value for value in row[4:])] for row in rows],
                      dtype="<f8").reshape(len(rows), WIDTH)
    reasons = FRAME_COLUMNS.index("throttle_reasons")
    matrix[:, reasons] = np.nan_to_num(matrix[:, reasons], nan=0.0)
    return matrix.tobytes(), "\n".join(row[2] or "" for row in rows), "\n".join(row[3] or "" for row in rows)


def build(starts: Iterable[datetime], node_ids: Iterable[int] | None = None) -> int:
    """Write the frames of the minutes `starts` (of the nodes given, or all) from their per-minute GPU rows
    as stored now, replacing those there; a frame whose rows are all gone is deleted. Returns the frames
    written."""
    model_connection = connections[router.db_for_write(GpuMinuteFrame)]
    starts = sorted({moment.astimezone(UTC).replace(second=0, microsecond=0) for moment in starts})
    node_ids = sorted(set(node_ids)) if node_ids is not None else None
    if not starts or node_ids == []:
        return 0
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
                               f"{figures} FROM {rows_table} WHERE step = %s "
                               f"AND start IN ({', '.join(['%s'] * len(moments))}){condition}",
                               params + (batch or []))
                for node_id, t, *row in cursor.fetchall():
                    grouped.setdefault((node_id, t), []).append(tuple(row))
    frames = []
    for (node_id, t), rows in grouped.items():
        values, jobs, profiles = pack(rows)
        frames.append((node_id, by_epoch[t], len(rows), values, jobs, profiles))
    _replace(model_connection, frames, starts, node_ids, set(grouped))
    return len(frames)


def _replace(connection, frames: list[tuple], starts: list[datetime], node_ids: list[int] | None,
             kept: set[tuple[int, int]]) -> None:
    quote = connection.ops.quote_name
    table = quote(GpuMinuteFrame._meta.db_table)
    names = ["node_id", "start", "row_count", "figures", "jobs", "profiles"]
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
                               [(node_id, adapt(start), rows, values, jobs, profiles)
                                for node_id, start, rows, values, jobs, profiles in frames])


def unpack(frames: list[tuple]) -> dict[str, np.ndarray]:
    """Frames (node_id, epoch start, rows, values, jobs, profiles) as columns: node_id, t and FRAME_COLUMNS
    (gpu, instance and throttle_reasons int64, the figures float64) and, for each text column,
    `<name>_code` (an index into `<name>_values`, whose code 0 is the empty text). A frame whose bytes or
    texts do not hold `rows` rows is a FrameError."""
    count = len(frames)
    node_id = np.fromiter((frame[0] for frame in frames), dtype=np.int64, count=count)
    t = np.fromiter((frame[1] for frame in frames), dtype=np.int64, count=count)
    rows = np.fromiter((frame[2] for frame in frames), dtype=np.int64, count=count)
    data = b"".join(bytes(frame[3]) if not isinstance(frame[3], bytes) else frame[3] for frame in frames)
    total = int(rows.sum())
    if len(data) != 8 * WIDTH * total:
        raise FrameError(f"GPU minute frames: {len(data)} bytes for {total} rows of {WIDTH} values")
    matrix = np.frombuffer(data, dtype="<f8").reshape(total, WIDTH)
    result = {"node_id": np.repeat(node_id, rows), "t": np.repeat(t, rows)}
    for index, name in enumerate(FRAME_COLUMNS):
        column = matrix[:, index]
        result[name] = column.astype(np.int64) if name in ("gpu", "instance", "throttle_reasons") else column.copy()
    for offset, name in ((4, "job"), (5, "profile")):
        result[f"{name}_code"], result[f"{name}_values"] = _codes([frame[offset] for frame in frames], rows)
    return result


def _codes(texts: list[str], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's text (a value per row, one per line) as codes of its rows, end to end. The texts of a
    node's frames repeat minute after minute (the same jobs on the same GPUs): each distinct text is split
    once, and the frames' codes are gathered with numpy."""
    distinct: dict[str, int] = {}
    which = np.fromiter((distinct.setdefault(text or "", len(distinct)) for text in texts), dtype=np.int64,
                        count=len(texts))
    values: dict[str, int] = {"": 0}
    parts, lengths = [], []
    for text in distinct:
        names = text.split("\n")
        parts.append(np.array([values.setdefault(name, len(values)) for name in names], dtype=np.int64))
        lengths.append(len(names))
    lengths = np.array(lengths, dtype=np.int64)
    if np.any(lengths[which] != rows):
        bad = int(np.flatnonzero(lengths[which] != rows)[0])
        raise FrameError(f"GPU minute frame {bad}: {int(lengths[which][bad])} lines of text for {int(rows[bad])} rows")
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, dtype=np.int64)
    # row k of frame f is flat[offsets[which[f]] + k]
    first_row = np.repeat(np.cumsum(rows) - rows, rows)
    positions = np.repeat(offsets[which], rows) + (np.arange(int(rows.sum())) - first_row)
    return flat[positions], np.array(list(values), dtype=object)
