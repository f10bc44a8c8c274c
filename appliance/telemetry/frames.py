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
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np
import orjson
from django.db import connections, router

from .models import FRAME_COLUMNS, MINUTE, NODE_FRAME_COLUMNS, GpuMinuteFrame, GpuRollup, NodeRollup

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
    nodes = _node_rows(model_connection, starts, node_batches)
    frames = []
    for (node_id, t), rows in grouped.items():
        values, jobs, profiles = pack(rows)
        frames.append((node_id, by_epoch[t], len(rows), values, jobs, profiles, *pack_node(nodes.get((node_id, t)))))
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
    names = ["node_id", "start", "row_count", "figures", "jobs", "profiles", "node_figures", "mounts", "mount_reads"]
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


def unpack(frames: list[tuple]) -> dict[str, np.ndarray]:
    """Frames (node_id, epoch start, row_count, figures, jobs, profiles, node_figures, mounts, mount_reads)
    as columns, a value per GPU row: node_id, t, FRAME_COLUMNS (gpu, instance and throttle_reasons int64,
    the figures float64), NODE_FRAME_COLUMNS (NaN where the node had no row), `frame`
    (the row's frame) and, for each text column, `<name>_code` (an index into `<name>_values`, whose code 0
    is the empty text). And, a value per frame, `frame_node_id` and `frame_fs_read_bps` (NaN: no node row);
    a value per mount of a frame, `mount_frame`, `mount_code` (into `mount_values`) and `mount_read_bps`.
    A frame whose bytes or texts do not hold what it says is a FrameError."""
    count = len(frames)
    columns = list(zip(*frames, strict=True)) or [()] * 9  # a tuple a column: each read in one pass
    node_id = np.array(columns[0], dtype=np.int64)
    t = np.array(columns[1], dtype=np.int64)
    rows = np.array(columns[2], dtype=np.int64)
    data = b"".join(columns[3])  # bytes, or a memoryview: both join
    total = int(rows.sum())
    if len(data) != 8 * WIDTH * total:
        raise FrameError(f"GPU minute frames: {len(data)} bytes for {total} rows of {WIDTH} values")
    matrix = np.frombuffer(data, dtype="<f8").reshape(total, WIDTH)
    frame = np.repeat(np.arange(count), rows)
    result = {"node_id": node_id[frame], "t": t[frame], "frame": frame, "frame_node_id": node_id}
    for index, name in enumerate(FRAME_COLUMNS):
        column = matrix[:, index]
        result[name] = column.astype(np.int64) if name in ("gpu", "instance", "throttle_reasons") else column.copy()
    for offset, name in ((4, "job"), (5, "profile")):
        result[f"{name}_code"], result[f"{name}_values"], _ = _codes(columns[offset], rows)
    found = np.array([figures is not None for figures in columns[6]], dtype=bool)
    node_data = b"".join([figures for figures in columns[6] if figures is not None])
    if len(node_data) != 8 * len(NODE_FRAME_COLUMNS) * int(found.sum()):
        raise FrameError(f"GPU minute frames: {len(node_data)} bytes of node figures for {int(found.sum())} node rows")
    nodes = np.full((count, len(NODE_FRAME_COLUMNS)), np.nan)
    nodes[found] = np.frombuffer(node_data, dtype="<f8").reshape(-1, len(NODE_FRAME_COLUMNS))
    for index, name in enumerate(NODE_FRAME_COLUMNS):
        result[name] = nodes[frame, index]
    result["frame_fs_read_bps"] = nodes[:, NODE_FRAME_COLUMNS.index("fs_read_bps")]
    result["mount_code"], result["mount_values"], lengths = _codes(columns[7], None)
    reads = np.frombuffer(b"".join(columns[8]), dtype="<f8")
    if len(reads) != int(lengths.sum()):
        raise FrameError(f"GPU minute frames: {len(reads)} mount reads for {int(lengths.sum())} mounts")
    result["mount_frame"] = np.repeat(np.arange(count), lengths)
    result["mount_read_bps"] = reads.copy()
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
