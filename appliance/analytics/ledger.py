"""The ledger of where the GPU-hours went: per-minute rollups attributed (vector.py, the rules of rules.py
over columns) and added into CauseHour, incrementally.

`run_incremental` judges every complete minute after the attribution cursor, in chunks of at most
CHUNK_MINUTES (an empty chunk moves the cursor on to the next minute that has rows, in one step) read from
the GPU minute frames (telemetry.frames: a node's GPU rows and node row of a minute packed into one row by
the ingest; a minute whose frames do not pack each of its GPU rows is read from the rows, with raw column
queries), and adds each chunk's
GPU-seconds into CauseHour in the same transaction that moves the cursor past it: a minute is added once,
and a run that is stopped or fails adds nothing of the chunk it was in. A run of several chunks reads and
judges the next chunks in threads while it writes the one before (`_Ahead`). A minute is complete
COMPLETE_AFTER_S after its end (collectors send a closed minute within seconds; one that comes later than
that, from a buffer after an outage, is not counted unless a person asks for a rebuild of that span).

Weighting, as services.gpu_share does: a row counts `step` seconds times the share of its GPU it measures
(a MIG instance its profile's compute slices out of 7); a whole GPU's row is not counted in a bucket where
its MIG instances report. Pool is the node's pool when the chunk is attributed. The collectors do not
report a job's owner: `user` is the one the training pool's Slurm names for the job (owners.py: squeue, or
sacct where accounting is kept, asked once a job), blank for an inference service.

`rebuild` (a backfill a person asks for) deletes the ledger from an hour on, moves the cursor back and
attributes again; it is audited (analytics.attribution.rebuild). The periodic runs are not: they change
derived figures only, and a record per minute would drown the log.

`job_verdicts` gives the per-bucket verdicts of one job with their evidence, from rules.py (the documented
reference), which is what a user reads.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import numpy as np
import orjson
from django.db import connection, connections, transaction
from django.utils import timezone

from appliance.telemetry import frames, holders
from appliance.telemetry.models import FleetMinuteFrame, GpuMinuteFrame

from . import attribution, owners, rules, vector
from .models import CAUSE_FIELDS, AttributionCursor, CauseHour

STEP = 60
CHUNK_MINUTES = 60
COMPLETE_AFTER_S = 120
CURSOR = "rollups"
MIG_COMPUTE_SLICES = 7
CAUSE_COLUMNS = tuple(CAUSE_FIELDS[label] for label in rules.LABELS)
INPUT_RULE = vector.RULE_NAMES.index("waits-on-input")


class LedgerError(ValueError):
    """A request the ledger cannot carry out; the message names the parameter."""


def _epoch_sql(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) AS BIGINT)"
    return f"CAST(strftime('%%s', {column}) AS INTEGER)"


def _param(moment: datetime):
    return connection.ops.adapt_datetimefield_value(moment)


def _floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def _share(profile: str, instance: int) -> float:
    if instance == -1:
        return 1.0
    prefix = str(profile or "").split("g.", 1)[0]
    return int(prefix) / MIG_COMPUTE_SLICES if prefix.isdigit() else 1.0 / MIG_COMPUTE_SLICES


GPU_NAMES = ("node_id", "gpu", "instance", "t", "job", "profile", "util", "sm_active", "fb_used_mib", "fb_total_mib",
             "sm_clock_mhz", "throttle_reasons", "throttled_share", "nvlink_bps")
NODE_NAMES = ("node_id", "t", "cpu_iowait", "cpu_busy", "ib_tx_bps", "ib_rx_bps", "ib_line_bps", "fs_read_bps")
INTEGERS = {"node_id", "gpu", "instance", "t", "throttle_reasons"}
STRINGS = {"job", "profile"}
# and what a window's GPU rows read as rows carry besides: the seconds each holder held a minute that
# changed hands (telemetry.holders), as the frames carry them
HOLDER_NAMES = (*GPU_NAMES, "holders")
TEXTS = STRINGS | {"holders"}


def _read(table: str, names: tuple[str, ...], since: datetime, until: datetime,
          minutes: list[int] | None = None) -> dict[str, np.ndarray]:
    """One window's columns of a rollup table as numpy arrays (NULL: NaN, a NULL throttle_reasons 0; a text
    column as `<name>_code`, an index into `<name>_values`, where code 0 is the empty text, NULL included).
    PostgreSQL sends each column as one binary value (`_read_binary`); SQLite's rows go through its cursor
    (`_read_rows`)."""
    if connection.vendor == "postgresql":
        return _read_binary(table, names, since, until, minutes)
    return _read_rows(table, names, since, until, minutes)


def _window(since: datetime, until: datetime, minutes: list[int] | None = None) -> tuple[str, list]:
    """The condition (and its parameters) of a window's per-minute rows (only those of `minutes`, epoch
    seconds, when given)."""
    if minutes is not None:
        moments = [_param(datetime.fromtimestamp(t, UTC)) for t in minutes]
        return f"step = %s AND start IN ({', '.join(['%s'] * len(moments))})", [STEP, *moments]
    return "step = %s AND start >= %s AND start < %s", [STEP, _param(since), _param(until)]


def _read_rows(table: str, names: tuple[str, ...], since: datetime, until: datetime,
               minutes: list[int] | None = None) -> dict[str, np.ndarray]:
    """`_read` a row at a time through the cursor (SQLite; it works on any backend)."""
    where, params = _window(since, until, minutes)
    selected = ", ".join(_epoch_sql("start") if name == "t" else name for name in names)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {selected} FROM {table} WHERE {where}", params)
        rows = cursor.fetchall()
    table_ = np.array(rows, dtype=object).reshape(len(rows), len(names))  # None: NaN once made float
    result = {}
    for index, name in enumerate(names):
        column = table_[:, index]
        if name in TEXTS:
            codes: dict[str, int] = {"": 0}
            result[f"{name}_code"] = np.array([codes.setdefault(value or "", len(codes)) for value in column],
                                              dtype=np.int64)
            result[f"{name}_values"] = np.array(list(codes), dtype=object)
        elif name == "throttle_reasons":
            result[name] = np.where(column == None, 0, column).astype(np.int64)  # noqa: E711 (element-wise)
        else:
            result[name] = column.astype(np.int64 if name in INTEGERS else np.float64)
    return result


def _binary_cursor():
    """A cursor on Django's connection (its transaction, its query log and wrappers) that binds parameters
    on the server (%b: sent in the binary format) and receives results in the binary format. Django's own
    psycopg cursor binds on the client, which puts every value into the query as text and only receives
    text: a bytea comes as hex, twice the bytes, encoded and decoded."""
    import psycopg

    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = psycopg.Cursor(connection.connection)
    raw.format = psycopg.pq.Format.BINARY
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def _read_binary(table: str, names: tuple[str, ...], since: datetime, until: datetime,
                 minutes: list[int] | None = None) -> dict[str, np.ndarray]:
    """`_read` on PostgreSQL: one row of count(*) and, for each column, one bytea that is the
    concatenation of its values in PostgreSQL's binary (send) format, which numpy takes whole: no value
    of the window becomes a Python object.

    A number is int8send/float8send of the value cast to bigint/double precision, 8 bytes big-endian; NULL
    is made NaN first (throttle_reasons 0), so that every column is 8 bytes times count(*) long, which is
    checked: a NULL in another integer column, which string_agg leaves out, is an error, never a shifted
    column. A text is sent as its bytes, each ended by a NUL byte (which a text cannot hold; NULL is the
    empty text), and coded by pyarrow's dictionary encoding. The aggregates of one query read the same rows
    in the same order, so the columns line up. A bytea holds at most 1 GB: 134 million rows a window (an
    hour of 1,000 nodes is 480,000).

    Why: on an hour of 1,000 HGX nodes (480,000 GPU rows, 14 columns) on 2 CPUs this took 1.3 to 1.6 us a
    row, where the window as one CSV text parsed by pyarrow took 2 to 3 (the server printing every value as
    text), a binary COPY 2 to 4.5 (it arrives a row, one message, at a time: 480,000 reads in psycopg) and
    these bytea as hex (Django's cursor only receives text) 1.7. What is left is mostly the server's: a send
    function call and an aggregate step for each value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where, params = _window(since, until, minutes)
    aggregates = []
    for name in names:
        if name in TEXTS:
            aggregates.append(f"string_agg(textsend(COALESCE({name}, '')) || '\\x00'::bytea, NULL)")
        elif name == "t":
            aggregates.append(f"string_agg(int8send({_epoch_sql('start')}), NULL)")
        elif name == "throttle_reasons":
            aggregates.append(f"string_agg(int8send(COALESCE(CAST({name} AS bigint), 0)), NULL)")
        elif name in INTEGERS:
            aggregates.append(f"string_agg(int8send(CAST({name} AS bigint)), NULL)")
        else:
            aggregates.append(f"string_agg(float8send(COALESCE(CAST({name} AS double precision), 'NaN')), NULL)")
    with _binary_cursor() as cursor:
        cursor.execute(f"SELECT count(*), {', '.join(aggregates)} FROM {table} WHERE {where}", params)
        count, *columns = cursor.fetchone()
        encoding = connection.connection.info.encoding
    result = {}
    for name, data in zip(names, columns, strict=True):
        data = data or b""
        if name in TEXTS:
            ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0)
            if len(ends) != count or (count and ends[-1] != len(data) - 1):
                raise RuntimeError(f"{table}.{name}: {len(ends)} NUL-ended texts in {len(data)} bytes for "
                                   f"{count} rows")
            offsets = np.zeros(count + 1, dtype=np.int32)
            offsets[1:] = ends + 1
            texts = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            encoded = pc.dictionary_encode(texts)
            values, remap = [""], []
            for text in encoded.dictionary.to_pylist():  # each with its NUL; distinct, in order of appearance
                text = text[:-1].decode(encoding)
                remap.append(len(values) if text else 0)
                if text:
                    values.append(text)
            indices = encoded.indices.to_numpy(zero_copy_only=False)
            result[f"{name}_code"] = np.array(remap, dtype=np.int64)[indices]
            result[f"{name}_values"] = np.array(values, dtype=object)
        else:
            if len(data) != 8 * count:
                raise RuntimeError(f"{table}.{name}: {len(data)} bytes for {count} rows, not 8 a row (a NULL, "
                                  "or a changed type?)")
            kind = np.int64 if name in INTEGERS else np.float64
            result[name] = np.frombuffer(data, dtype=np.dtype(kind).newbyteorder(">")).astype(kind)
    return result


def _fetch(sql: str, params: list) -> list[tuple]:
    """Rows of a query whose blobs come as bytes (PostgreSQL: in the binary format, not as hex text)."""
    if connection.vendor == "postgresql":
        with _binary_cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _frames(since: datetime, until: datetime) -> dict[str, np.ndarray] | None:
    """The window's GPU rows from their frames (telemetry.frames.unpack's columns, which carry their node
    rows' figures too): a minute's fleet frame where its GPU rows are the ones it packs, else the minute's
    node frames where they pack every GPU row of the minute, else (written other than by the ingest, or
    before frames were kept) the minute's rows as `_read` gives them (`frame` -1, node figures still to be
    joined). None when no minute has frames."""
    epoch = _epoch_sql("start")
    fleet_fields = ", ".join(epoch if name == "start" else name for name in frames.FLEET_FIELDS)
    window = "start >= %s AND start < %s"
    fleet = _fetch(f"SELECT {fleet_fields} FROM {FleetMinuteFrame._meta.db_table} WHERE {window}",
                   [_param(since), _param(until)])
    node_fields = ", ".join(epoch if name == "start" else name for name in frames.NODE_FRAME_FIELDS)
    found = []
    read_by_window = not fleet  # every node frame of the window read already
    if read_by_window:
        found = _fetch(f"SELECT {node_fields} FROM {GpuMinuteFrame._meta.db_table} WHERE {window}",
                       [_param(since), _param(until)])
        if not found:
            return None
    where, params = _window(since, until)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {epoch}, count(*) FROM telemetry_gpurollup WHERE {where} GROUP BY start", params)
        stored = dict(cursor.fetchall())
    fleet = [frame for frame in fleet if stored.get(frame[0]) == frame[2]]
    rest = sorted(set(stored) - {frame[0] for frame in fleet})
    if rest and not read_by_window:  # minutes without a fleet frame (or whose rows changed since it was packed)
        moments = [_param(datetime.fromtimestamp(t, UTC)) for t in rest]
        found = _fetch(f"SELECT {node_fields} FROM {GpuMinuteFrame._meta.db_table} "
                       f"WHERE start IN ({', '.join(['%s'] * len(moments))})", moments)
    packed: dict[int, int] = {}
    for frame in found:
        packed[frame[1]] = packed.get(frame[1], 0) + frame[2]
    missing = [t for t in rest if packed.get(t) != stored[t]]
    wanted = set(rest) - set(missing)  # not a minute whose rows are gone, nor one read as rows
    found = [frame for frame in found if frame[1] in wanted]
    columns = frames.unpack_fleet(fleet, found)
    if missing:
        rows = _read_gpu_rows(since, until, missing)
        columns = _joined_columns(columns, rows | _unframed(len(rows["t"])))
    return columns


def _read_gpu_rows(since: datetime, until: datetime, minutes: list[int] | None = None) -> dict[str, np.ndarray]:
    """`_read` of the GPU rows with their holders, named as the frames name them (`holder_code`)."""
    rows = _read("telemetry_gpurollup", HOLDER_NAMES, since, until, minutes)
    rows["holder_code"], rows["holder_values"] = rows.pop("holders_code"), rows.pop("holders_values")
    return rows


PER_FRAME = ("frame_node_id", "frame_fs_read_bps", "mount_frame", "mount_code", "mount_values",
             "mount_read_bps")  # unpack's columns of a frame or a mount, not of a GPU row


def _unframed(count: int) -> dict[str, np.ndarray]:
    """What rows read as rows carry in place of unpack's frame columns: no frame, no node figures yet."""
    result = {name: np.full(count, np.nan) for name in frames.NODE_FRAME_COLUMNS}
    result |= {"frame": np.full(count, -1, dtype=np.int64),
               "frame_node_id": np.zeros(0, dtype=np.int64),
               "frame_fs_read_bps": np.zeros(0), "mount_frame": np.zeros(0, dtype=np.int64),
               "mount_code": np.zeros(0, dtype=np.int64), "mount_values": np.array([""], dtype=object),
               "mount_read_bps": np.zeros(0)}
    return result


def _joined_columns(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two sets of GPU rows' columns end to end (the codes of b's texts mapped into a's; the columns of
    frames and mounts are a's)."""
    result = {name: a[name] for name in PER_FRAME if name in a}
    for name in a:
        if name.endswith("_values") or name in PER_FRAME:
            continue
        if name.endswith("_code"):
            text = name[:-len("_code")]
            values = {value: code for code, value in enumerate(a[f"{text}_values"].tolist())}
            remap = np.array([values.setdefault(value, len(values)) for value in b[f"{text}_values"].tolist()],
                             dtype=np.int64)
            result[name] = np.concatenate([a[name], remap[b[name]] if len(b[name]) else b[name]])
            result[f"{text}_values"] = np.array(list(values), dtype=object)
        else:
            result[name] = np.concatenate([a[name], b[name].astype(a[name].dtype)])
    return result


def _gpu_columns(since: datetime, until: datetime) -> dict[str, np.ndarray]:
    result = _frames(since, until)
    if result is None:
        result = _read_gpu_rows(since, until)
        result |= _unframed(len(result["t"]))
    if not len(result["t"]):
        return {}
    result["job_code"], result["jobs"] = result.pop("job_code"), result.pop("job_values")
    shares = np.array([_share(profile, 0) for profile in result["profile_values"]])
    result["share"] = np.where(result["instance"] == -1, 1.0, shares[result.pop("profile_code")])
    result.pop("profile_values")
    return _split_by_holders(result)


def _split_by_holders(gpu: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each GPU row with the `seconds` of its minute it stands for: a minute that changed hands (a row with
    holders) becomes a row per holder, its job and seconds, and a row of the seconds nobody held (job none);
    the rules judge each part (a holder's with its job's peers of that minute), so the minute's 60 s are
    split between them and no more. Any other row is its job's (or nobody's) whole minute. Parts of no
    second are left out.

    The parts' figures are those of attribution.split_by_holders (the reference's records, split alike):
    the unheld seconds computed and kept nothing, each holder's part carries the minute's activity, memory
    and NVLink traffic over the seconds held (attribution.HELD_FIGURES)."""
    codes, texts = gpu.pop("holder_code"), gpu.pop("holder_values")
    count = len(gpu["t"])
    seconds = np.full(count, float(STEP))
    split = np.flatnonzero(codes > 0)
    if not len(split):
        gpu["seconds"] = seconds
        return gpu
    jobs = {str(job): code for code, job in enumerate(gpu["jobs"].tolist())}
    parsed = {code: holders.parse(str(texts[code]), STEP) for code in np.unique(codes[split]).tolist()}
    source, job_codes, held = [], [], []
    job_code = gpu["job_code"].copy()
    for row, code in zip(split.tolist(), codes[split].tolist(), strict=True):
        parts = parsed[code]
        for job, part in parts:
            source.append(row)
            job_codes.append(jobs.setdefault(job, len(jobs)))
            held.append(float(part))
        job_code[row] = 0
        seconds[row] = STEP - sum(part for _, part in parts)
    source = np.array(source, dtype=np.int64)
    result = {}
    for name, column in gpu.items():
        if name in PER_FRAME or name == "jobs" or not isinstance(column, np.ndarray) or len(column) != count:
            result[name] = column
        else:
            result[name] = np.concatenate([column, column[source]])
    result["job_code"] = np.concatenate([job_code, np.array(job_codes, dtype=np.int64)])
    result["jobs"] = np.array(list(jobs), dtype=object)
    result["seconds"] = np.concatenate([seconds, np.array(held)])
    held_total = STEP - seconds[source]
    scale = np.where(held_total > 0, STEP / np.maximum(held_total, 1.0), 0.0)
    for name, full in attribution.HELD_FIGURES.items():
        column = result[name]
        column[split] = np.where(np.isnan(column[split]), np.nan, 0.0)
        parts = column[count:] * scale
        bound = result[full][count:] if isinstance(full, str) else full
        column[count:] = np.where(np.isnan(parts), np.nan, np.fmin(parts, bound))  # a NaN bound bounds nothing
    kept = result["seconds"] > 0
    if not kept.all():
        for name, column in list(result.items()):
            if name not in PER_FRAME and name != "jobs" and isinstance(column, np.ndarray) and len(column) == len(kept):
                result[name] = column[kept]
    return result


COMBINED_KEY_LIMIT = 2.0**62  # the ledger rows' keys as one int64 below this many values (else five keys)
BATCH_TABLE = "analytics_ledger_batch"  # PostgreSQL: the session's temporary table of an upsert's rows
MOUNT_NODES_A_QUERY = 500  # node ids a _mounts query names (with the minutes, under SQLite's 32,766 parameters)


def _mounts(pairs: list[tuple[int, int]]) -> dict[tuple[int, int], dict | None]:
    """The per-mount figures of the node rows named (node id, epoch seconds): read only where a verdict
    depends on them (a stalled GPU that no earlier rule explained). One query for them all (a batch of
    MOUNT_NODES_A_QUERY nodes each), where a query a minute cost 60 an hour: it reads every named node at
    every named minute, and only the pairs asked for have their mounts parsed."""
    result: dict[tuple[int, int], dict | None] = {}
    if not pairs:
        return result
    wanted = set(pairs)
    nodes = sorted({node_id for node_id, _ in wanted})
    moments = [_param(datetime.fromtimestamp(t, UTC)) for t in sorted({t for _, t in wanted})]
    with connection.cursor() as cursor:
        for first in range(0, len(nodes), MOUNT_NODES_A_QUERY):
            batch = nodes[first:first + MOUNT_NODES_A_QUERY]
            cursor.execute(f"SELECT node_id, {_epoch_sql('start')}, mounts, fs_read_bps FROM telemetry_noderollup "
                           f"WHERE step = %s AND start IN ({', '.join(['%s'] * len(moments))}) "
                           f"AND node_id IN ({', '.join(['%s'] * len(batch))})", [STEP, *moments, *batch])
            for node_id, t, mounts, fs_read in cursor.fetchall():
                if (node_id, t) not in wanted:
                    continue
                if isinstance(mounts, str | bytes):
                    mounts = orjson.loads(mounts)  # most of the time here: a mount text a pair (17,000 an hour)
                result[(node_id, t)] = {"mounts": mounts or {}, "fs_read_bps": fs_read}
    return result


def attribute_window(since: datetime, until: datetime, known: dict | None = None,
                     columns: dict[str, np.ndarray] | None = None) -> dict | None:
    """Every per-minute GPU bucket starting in [since, until) judged: the GPU columns with `rule` (index
    in vector.RULE_NAMES) and `label` (index in rules.LABELS) added, and the nodes' info (read for the nodes
    not in `known`, which keeps them for the next window of a run); None if no row. `columns`: the window's
    GPU columns read already (`_gpu_columns`)."""
    gpu = _gpu_columns(since, until) if columns is None else columns
    if not gpu:
        return None
    info = known if known is not None else {}
    unique_nodes, node_index = vector.unique(gpu["node_id"], return_inverse=True)
    missing = set(unique_nodes.tolist()) - set(info)
    if missing:
        info.update(attribution.nodes_info(sorted(missing)))
    base = int(since.timestamp())
    width = int((until - since).total_seconds()) // STEP + 1
    node_ids = gpu["node_id"]
    # Rows from frames carry their node row's figures; rows read as rows are joined with the node rows of
    # their minutes.
    unframed = gpu["frame"] < 0
    found = np.zeros(len(node_ids), dtype=bool)  # of the rows read as rows: a node row joined
    node_values = {name: gpu[name] for name in vector.NODE_COLUMNS}
    if unframed.any():
        node_values = {name: column.copy() for name, column in node_values.items()}
        minutes = None if unframed.all() else np.unique(gpu["t"][unframed]).tolist()
        node = _read("telemetry_noderollup", NODE_NAMES, since, until, minutes)
        gpu_key = node_ids[unframed] * width + (gpu["t"][unframed] - base) // STEP
        node_key = node["node_id"] * width + (node["t"] - base) // STEP
        order = np.argsort(node_key, kind="stable")
        if len(order):
            position = np.minimum(np.searchsorted(node_key[order], gpu_key), len(order) - 1)
            hit = node_key[order][position] == gpu_key
            row = order[position]
            found[unframed] = hit
            for name in vector.NODE_COLUMNS:
                node_values[name][unframed] = np.where(hit, node[name][row], np.nan)

    default = attribution.NodeReferences()
    references = {pk: entry.references for pk, entry in info.items()}
    clocks = np.array([references.get(int(pk), default).max_sm_clock.value for pk in unique_nodes])
    collective = np.array([references.get(int(pk), default).collective for pk in unique_nodes], dtype=bool)
    lines = np.array([references.get(int(pk), default).nvlink_line.value for pk in unique_nodes])
    # The reads of a frame's node row, judged for every frame at once (mounts and their references).
    saturated = vector.read_saturation_columns(
        gpu["frame_node_id"], gpu["frame_fs_read_bps"], gpu["mount_frame"],
        gpu["mount_code"], gpu["mount_values"], gpu["mount_read_bps"],
        lambda pk: references.get(pk, default).storage)
    read_saturated = np.where(unframed, False, saturated[np.maximum(gpu["frame"], 0)] if len(saturated) else False)
    columns = {name: gpu[name] for name in vector.GPU_COLUMNS} | node_values
    has_job = gpu["job_code"] > 0
    columns |= {"has_job": has_job, "group": np.where(has_job, gpu["job_code"] * width + (gpu["t"] - base) // STEP, -1),
                "throttle_reasons": gpu["throttle_reasons"], "max_sm_clock": clocks[node_index],
                "nvlink_line": lines[node_index], "read_saturated": np.asarray(read_saturated, dtype=bool),
                "collective": collective[node_index]}
    without = vector.classify(columns)
    decided = without
    # A mount without a measured rate is compared with its own ceiling (learned from its history: a query
    # of the node's day) only where the verdict depends on it: a stalled GPU that no rule before the
    # input-bound one explained, on a node whose iowait reaches `ceiling_iowait` (vector.classify with a
    # `read_at_ceiling` column gives the same labels; this reads the history of those nodes only).
    blocked = vector._ge(columns["cpu_iowait"], rules.RULES[INPUT_RULE].thresholds["ceiling_iowait"])
    may_wait = (without > INPUT_RULE) & vector.stalled_for_input(columns) & blocked
    framed = may_wait & ~unframed
    if framed.any() and len(gpu["mount_frame"]):
        wanted_frames = np.unique(gpu["frame"][framed])
        mounts_of = np.isin(gpu["mount_frame"], wanted_frames)
        named: dict[int, set[str]] = {}
        for pk, code in set(zip(gpu["frame_node_id"][gpu["mount_frame"][mounts_of]].tolist(),
                                gpu["mount_code"][mounts_of].tolist(), strict=True)):
            named.setdefault(pk, set()).add(str(gpu["mount_values"][code]))
        attribution.learn_ceilings(references, named, until)
        at_ceiling = vector.read_saturation_columns(
            gpu["frame_node_id"], gpu["frame_fs_read_bps"], gpu["mount_frame"],
            gpu["mount_code"], gpu["mount_values"], gpu["mount_read_bps"],
            lambda pk: references.get(pk, default).storage, learned=True)
        rows = np.flatnonzero(framed)
        decided = decided.copy()
        decided[rows[at_ceiling[gpu["frame"][rows]]]] = INPUT_RULE
    # Rows read as rows: their reads only matter to a stalled GPU that no rule before the input-bound one
    # explained, so the rows are judged first, then those GPUs' node rows' mounts are read and checked.
    undecided = unframed & (without > INPUT_RULE) & found & vector.stalled_for_input(columns)
    if undecided.any():
        # a (node, minute) pair as one number, so that the GPUs' pairs are found with numpy, not a loop
        key = node_ids[undecided] * width + (gpu["t"][undecided] - base) // STEP
        wanted = np.unique(key)
        pairs = [(int(k // width), base + int(k % width) * STEP) for k in wanted.tolist()]
        figures = _mounts(pairs)
        ceiling_keys = set(np.unique(key[blocked[undecided]]).tolist())
        named = {}
        for (pk, t), figure in figures.items():
            if pk * width + (t - base) // STEP in ceiling_keys:
                named.setdefault(pk, set()).update(figure["mounts"] or {})
        attribution.learn_ceilings(references, named, until)
        saturated, at_ceiling = (np.array([pair in figures and vector.read_saturation(
            figures[pair], references.get(pair[0], default).storage, learned=learned) for pair in pairs], dtype=bool)
            for learned in (False, True))
        position = np.searchsorted(wanted, key)
        flags = saturated[position] | (at_ceiling[position] & blocked[undecided])
        decided = decided.copy()
        decided[np.flatnonzero(undecided)[flags]] = INPUT_RULE
    for name in (*frames.NODE_FRAME_COLUMNS, "frame", *PER_FRAME):
        gpu.pop(name, None)
    gpu["rule"] = decided
    gpu["label"] = vector.RULE_LABEL[decided]
    return {"gpu": gpu, "info": info}


def _upsert(rows: list[tuple]) -> None:
    table = CauseHour._meta.db_table
    names = ["hour", "node_id", "gpu", "instance", "job", "pool", "user", "gpu_seconds", "used_seconds",
             *CAUSE_COLUMNS, "memory_held_mib_s", "memory_used_mib_s", "no_data_s"]
    added = names[7:]
    quoted = [connection.ops.quote_name(name) for name in names]
    one = f"({', '.join(['%s'] * len(names))})"
    update = (" ON CONFLICT (hour, node_id, gpu, instance, job) DO UPDATE SET "
              + ", ".join(f"{connection.ops.quote_name(name)} = {table}.{connection.ops.quote_name(name)} + "
                          f"excluded.{connection.ops.quote_name(name)}" for name in added))
    if connection.vendor == "postgresql":
        # The rows go into a temporary table by a binary COPY (psycopg writes each row in C), and one
        # statement adds them in: 8,000 rows in 0.04 s, where arrays unnested by the server (their values
        # dumped by psycopg in Python) took 0.075 to 0.095 s and VALUES quoted by Django's cursor 0.2.
        if not rows:
            return
        types = ["timestamptz", "bigint", "smallint", "smallint", "text", "text", "text"]
        types += ["double precision"] * (len(names) - len(types))
        with _binary_cursor() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {BATCH_TABLE} "
                           f"({', '.join(f'{name} {kind}' for name, kind in zip(quoted, types, strict=True))}) "
                           "ON COMMIT DELETE ROWS")
            with cursor.copy(f"COPY {BATCH_TABLE} ({', '.join(quoted)}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
            cursor.execute(f"INSERT INTO {table} ({', '.join(quoted)}) SELECT {', '.join(quoted)} FROM {BATCH_TABLE}"
                           f"{update}")
            cursor.execute(f"TRUNCATE {BATCH_TABLE}")  # the transaction may go on (a test's, a caller's)
        return
    with connection.cursor() as cursor:
        # SQLite: one short statement, prepared once, run for each row (executemany, in C). A statement of a
        # thousand rows' VALUES cost more to turn into SQLite's placeholders (Django's regular expression
        # over 21,000 of them) and to prepare than to run: 8,000 rows took 1.6 to 4 s, now 0.5 to 0.6 s.
        cursor.executemany(f"INSERT INTO {table} ({', '.join(quoted)}) VALUES {one}{update}", rows)


def _ledger_rows(window: dict) -> tuple[list[tuple], float]:
    """The window's GPU-seconds per hour, node, GPU, instance and job, by cause."""
    gpu, info = window["gpu"], window["info"]
    node_id, gpu_index, instance, t = gpu["node_id"], gpu["gpu"], gpu["instance"], gpu["t"]
    # A whole GPU's row is not counted in a bucket where its MIG instances report.
    mig = instance != -1
    counted = np.ones(len(t), dtype=bool)
    if mig.any():
        bucket = (node_id * 1024 + gpu_index) * 10**10 + t
        counted = ~(~mig & np.isin(bucket, bucket[mig]))
    seconds = gpu["seconds"] * gpu["share"]
    hour = t // 3600 * 3600
    if not counted.any():
        return [], 0.0
    # The rows of one ledger row (hour, node, GPU, instance, job) share a number made of the five, so one
    # sort of it groups them (a sort of five keys cost twice as much); five keys where it would not fit.
    parts = [(hour - hour.min()) // 3600, node_id - node_id.min(), gpu_index, instance + 1, gpu["job_code"]]
    spans = [int(part.max()) + 1 for part in parts]
    if all(part.min() >= 0 for part in parts) and np.prod([float(span) for span in spans]) < COMBINED_KEY_LIMIT:
        combined = parts[0].astype(np.int64)
        for part, span in zip(parts[1:], spans[1:], strict=True):
            combined = combined * span + part
        order = np.argsort(combined, kind="stable")  # runs of sorted keys, a minute each: a merge, 10x quicker
        order = order[counted[order]]
        combined = combined[order]
        boundary = np.r_[True, combined[1:] != combined[:-1]]
    else:
        keys = (gpu["job_code"], instance, gpu_index, node_id, hour)
        order = np.lexsort(keys)
        order = order[counted[order]]
        boundary = np.zeros(len(order), dtype=bool)
        boundary[0] = True
        for key in keys:
            boundary[1:] |= key[order][1:] != key[order][:-1]
    group = np.cumsum(boundary) - 1
    groups = int(group[-1]) + 1
    s = seconds[order]
    util = np.nan_to_num(np.minimum(gpu["util"][order], 100.0), nan=0.0)
    held = gpu["job_code"][order] > 0
    labels = gpu["label"][order]
    sums = {"gpu_seconds": np.bincount(group, s, groups),
            "used_seconds": np.bincount(group, s * util / 100, groups),
            "memory_held_mib_s": np.bincount(group, np.where(held, s * np.nan_to_num(gpu["fb_total_mib"][order]), 0),
                                             groups),
            "memory_used_mib_s": np.bincount(group, np.where(held, s * np.nan_to_num(gpu["fb_used_mib"][order]), 0),
                                             groups)}
    for code, column in enumerate(CAUSE_COLUMNS):
        sums[column] = np.bincount(group, np.where(labels == code, s, 0.0), groups)
    positions = order[np.flatnonzero(boundary)]
    hours = {int(h): _param(datetime.fromtimestamp(int(h), UTC)) for h in np.unique(hour[positions])}
    pools = {pk: entry.pool for pk, entry in info.items()}
    codes = np.unique(gpu["job_code"][positions])
    users = owners.users_of({str(gpu["jobs"][code]) for code in codes.tolist() if code > 0},
                            np.unique(node_id[positions]).tolist())
    keys = zip(hour[positions].tolist(), node_id[positions].tolist(), gpu_index[positions].tolist(),
               instance[positions].tolist(), gpu["jobs"][gpu["job_code"][positions]].tolist(), strict=True)
    figures = np.column_stack([sums[name] for name in ("gpu_seconds", "used_seconds", *CAUSE_COLUMNS,
                                                       "memory_held_mib_s", "memory_used_mib_s")]).tolist()
    rows = [(hours[h], n, g, i, job, pools.get(n, ""), users.get(job, ""), *values, 0.0)
            for (h, n, g, i, job), values in zip(keys, figures, strict=True)]
    return rows, float(sums["gpu_seconds"].sum())


def _merged(rows: list[tuple], silent: list[tuple]) -> list[tuple]:
    """The chunk's ledger rows with its no-data rows added in: a GPU that sent some minutes of an hour and not
    others has one row of that hour with no holder (one statement may not name a key twice: PostgreSQL's
    ON CONFLICT refuses to update a row twice)."""
    if not silent:
        return rows
    position = {row[:5]: index for index, row in enumerate(rows)}
    merged = list(rows)
    for row in silent:
        index = position.get(row[:5])
        if index is None:
            position[row[:5]] = len(merged)
            merged.append(row)
        else:
            first = merged[index]
            merged[index] = (*first[:7], *(a + b for a, b in zip(first[7:], row[7:], strict=True)))
    return merged


def _listed_gpus() -> np.ndarray:
    """The inventory's GPUs as (node id, index, epoch seconds it was listed), one row each."""
    from appliance.inventory.models import GPU

    rows = [(node_id, index, int(created.timestamp()))
            for node_id, index, created in GPU.objects.values_list("node_id", "index", "created")]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _no_data_rows(since: datetime, until: datetime, window: dict | None, listed: np.ndarray,
                  known: dict) -> tuple[list[tuple], float]:
    """The seconds of [since, until) in which a GPU the inventory lists sent no line, whole GPU or MIG
    instance ("no data": the collector silent, the line lost), per hour and GPU, as ledger rows with no
    holder. A GPU is expected where it was listed before the span, or where its node sent a line in it (a
    collector that ran before the inventory knew its GPUs); a minute is 60 s of its GPU."""
    base, end = int(since.timestamp()), int(until.timestamp())
    width = (end - base) // STEP
    if not len(listed) or width <= 0:
        return [], 0.0
    sent_nodes = np.unique(window["gpu"]["node_id"]) if window else np.zeros(0, dtype=np.int64)
    expected = listed[(listed[:, 2] <= base) | np.isin(listed[:, 0], sent_nodes)]
    if not len(expected):
        return [], 0.0
    hours = (base + np.arange(width) * STEP) // 3600 * 3600
    distinct_hours, per_hour = np.unique(hours, return_counts=True)
    if not window:  # a span with no line at all (skipped in one step, up to a month): every minute of every GPU
        counts = np.broadcast_to(per_hour, (len(expected), len(per_hour)))
        return _silent_rows(expected, distinct_hours, counts, known), float(counts.sum() * STEP)
    missing = np.ones((len(expected), width), dtype=bool)  # a chunk's minutes (an hour at most)
    gpu = window["gpu"]
    span = int(max(expected[:, 1].max(), gpu["gpu"].max())) + 1
    keys = expected[:, 0] * span + expected[:, 1]
    order = np.argsort(keys)
    row_keys = gpu["node_id"] * span + gpu["gpu"]
    position = np.minimum(np.searchsorted(keys[order], row_keys), len(order) - 1)
    hit = keys[order][position] == row_keys
    minute = (gpu["t"] - base) // STEP
    inside = hit & (minute >= 0) & (minute < width)
    missing[order[position[inside]], minute[inside]] = False
    counts = np.stack([missing[:, hours == hour].sum(axis=1) for hour in distinct_hours], axis=1)
    return _silent_rows(expected, distinct_hours, counts, known), float(counts.sum() * STEP)


def _silent_rows(expected: np.ndarray, distinct_hours: np.ndarray, counts: np.ndarray, known: dict) -> list[tuple]:
    """Ledger rows of the minutes with no data: `counts[i, j]` minutes of GPU `expected[i]` in hour j."""
    new_nodes = set(expected[:, 0].tolist()) - set(known)
    if new_nodes:
        known.update(attribution.nodes_info(sorted(new_nodes)))
    rows = []
    zeros = [0.0] * (1 + len(CAUSE_COLUMNS) + 2)  # used, the rules' causes, memory held and used
    for (node_id, index, _), per_hour in zip(expected.tolist(), counts.tolist(), strict=True):
        pool = known[node_id].pool if node_id in known else ""
        for hour, count in zip(distinct_hours.tolist(), per_hour, strict=True):
            if count:
                seconds = float(count * STEP)
                rows.append((_param(datetime.fromtimestamp(hour, UTC)), node_id, index, -1, "", pool, "", seconds,
                             *zeros, seconds))
    return rows


def _first_minute(condition: str = "", params: list | None = None) -> datetime | None:
    """The minute of the first per-minute GPU row (that meets `condition`), None if there is none."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN(start) FROM telemetry_gpurollup WHERE step = %s{condition}", [STEP, *(params or [])])
        (first,) = cursor.fetchone()
    if first is None:
        return None
    if isinstance(first, str):  # SQLite returns an aggregate's datetime as text
        first = datetime.fromisoformat(first)
    if timezone.is_naive(first):
        first = first.replace(tzinfo=UTC)
    return _floor_minute(first)


def _start() -> datetime | None:
    return _first_minute()


def _next_start(since: datetime, until: datetime) -> datetime | None:
    """The minute of the first per-minute GPU row in [since, until), None if there is none: an attribution
    run skips the empty minutes before it in one step, where walking them a chunk at a time cost a query
    each (a month without telemetry is 720 of them)."""
    return _first_minute(" AND start >= %s AND start < %s", [_param(since), _param(until)])


NOT_AHEAD = object()  # _Ahead.take: no judging of that span was under way


class _Ahead:
    """The next chunks read and judged (attribute_window) ahead of the run, each stage in a thread of its own
    on its own database connection, while the run makes the ledger rows of the chunk before them and writes
    them: a pipeline of three (read chunk h+2, judge h+1, write h). The reads wait on the database (on disk
    where the frames have left the page cache) and numpy's copies, the judging and the ledger rows on numpy,
    and most of that leaves Python's lock free, so a day of the fleet's chunks overlap instead of queueing
    (tests/bench/bench_attribution_fleet.py). The judging thread keeps its own cache of the nodes' info; a
    window carries a copy of it, as it was when the window was judged. Only for a run outside a transaction:
    a caller's uncommitted rows are not seen by another connection. The chunk's own transaction (the
    cursor's lock) is not needed for the judging: it reads rollups, frames and nodes, which a run does not
    write; what a late write adds after the read is what it adds after any read (COMPLETE_AFTER_S)."""

    THREAD_NAME = "ledger-ahead"
    DEPTH = 2  # chunks under way ahead of the one the run writes: one read, one judged

    def __init__(self):
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.THREAD_NAME}-read")
        self._judging = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.THREAD_NAME}-judge")
        self._pending: deque = deque()  # ((since, until), read future, judged future), in the run's order
        self._known: dict = {}  # the nodes' info, read once a run by the judging thread

    def start(self, since: datetime, until: datetime) -> None:
        read = self._reads.submit(_gpu_columns, since, until)
        self._pending.append(((since, until), read, self._judging.submit(self._judge, since, until, read)))

    def fill(self, since: datetime, until: datetime, chunk: timedelta) -> None:
        """Keep DEPTH chunks of [since, until) under way: the chunks after those already pending."""
        start = self._pending[-1][0][1] if self._pending else since
        while len(self._pending) < self.DEPTH and start < until:
            end = min(until, start + chunk)
            self.start(start, end)
            start = end

    def _judge(self, since: datetime, until: datetime, read) -> dict | None:
        window = attribute_window(since, until, self._known, read.result())
        if window is not None:
            window["info"] = dict(window["info"])  # the run reads it while this thread adds the next chunk's nodes
        return window

    def take(self, since: datetime, until: datetime):
        """The window judged ahead for [since, until) (None for a chunk without rows; an error of its
        reading or judging raised here), NOT_AHEAD where the next chunk under way is not that span (another
        run moved the cursor, or an empty chunk skipped ahead): everything under way is dropped then."""
        if not self._pending or self._pending[0][0] != (since, until):
            self._drop()
            return NOT_AHEAD
        return self._pending.popleft()[2].result()

    def _drop(self) -> None:
        while self._pending:
            _, read, judged = self._pending.popleft()
            for future in (judged, read):
                if not future.cancel():
                    future.exception()  # waited for; the span is read and judged again by whoever needs it

    def close(self) -> None:
        self._drop()
        for pool in (self._reads, self._judging):
            pool.submit(lambda: connections.close_all()).result()  # the thread's own connection
            pool.shutdown(wait=True)


def run_incremental(*, until: datetime | None = None, max_minutes: int | None = None) -> dict:
    """Attribute every complete minute after the cursor into CauseHour (at most `max_minutes` of them);
    returns {"minutes", "buckets" (GPU rows judged), "seconds" (GPU-seconds added), "attributed_until"}."""
    began = time.perf_counter()
    if until is not None and until.tzinfo is None:
        raise LedgerError("until: give a time with a time zone (UTC)")
    if max_minutes is not None and (not isinstance(max_minutes, int) or max_minutes < 1):
        raise LedgerError("max_minutes: must be a whole number of minutes, 1 or more")
    complete = _floor_minute(timezone.now() - timedelta(seconds=COMPLETE_AFTER_S))
    until = min(_floor_minute(until), complete) if until is not None else complete
    cursor_row, _ = AttributionCursor.objects.get_or_create(name=CURSOR)
    since, first = cursor_row.attributed_until, _start()
    if first is not None and (since is None or since < first):
        since = first  # nothing before the oldest per-minute row (pruned, or never sent)
    totals = {"minutes": 0, "buckets": 0, "seconds": 0.0}
    known: dict = {}  # the nodes' name, pool and references, read once a run
    listed = None  # the inventory's GPUs, read once a run (where a chunk is written)
    if since is not None and max_minutes is not None:
        until = min(until, since + timedelta(minutes=max_minutes))
    chunk = timedelta(minutes=CHUNK_MINUTES)
    ahead = _Ahead() if since is not None and until - since > chunk and not connection.in_atomic_block else None
    try:
        while since is not None and since < until:
            end = min(until, since + chunk)
            with transaction.atomic():
                current = AttributionCursor.objects.select_for_update().get(name=CURSOR)
                if current.attributed_until is not None and current.attributed_until > since:  # another run went first
                    since = current.attributed_until
                    continue
                window = ahead.take(since, end) if ahead else NOT_AHEAD
                columns = _gpu_columns(since, end) if window is NOT_AHEAD else None
                if ahead and (bool(columns) if window is NOT_AHEAD else window is not None):
                    ahead.fill(end, until, chunk)
                if window is NOT_AHEAD:
                    window = attribute_window(since, end, known, columns)
                if window is None:  # an empty chunk: skip every empty minute up to the next row (or the end)
                    end = _next_start(end, until) or until
                rows, seconds = _ledger_rows(window) if window else ([], 0.0)
                if listed is None:
                    listed = _listed_gpus()
                silent, silent_seconds = _no_data_rows(since, end, window, listed, known)
                _upsert(_merged(rows, silent))
                seconds += silent_seconds
                buckets = len(window["gpu"]["t"]) if window else 0
                current.attributed_until = end
                current.last_run_buckets = buckets
                current.last_run_seconds = time.perf_counter() - began
                current.save(update_fields=["attributed_until", "last_run_buckets", "last_run_seconds",
                                            "updated_at"])
            totals["minutes"] += int((end - since).total_seconds()) // STEP
            totals["buckets"] += buckets
            totals["seconds"] += seconds
            since = end
    finally:
        if ahead:
            ahead.close()
    done = AttributionCursor.objects.get(name=CURSOR).attributed_until
    return totals | {"seconds": round(totals["seconds"], 3), "attributed_until": done.isoformat() if done else None,
                     "elapsed_s": round(time.perf_counter() - began, 3)}


def rebuild(*, since: datetime, actor=None, until: datetime | None = None) -> dict:
    """Attribute again from the hour of `since` on (a backfill after late data, or after a change of the
    rules): deletes the ledger's rows from that hour, moves the cursor back to it and runs. Audited."""
    from appliance import audit

    if not isinstance(since, datetime) or since.tzinfo is None:
        raise LedgerError("since: give a time with a time zone (UTC)")
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    with transaction.atomic():
        cursor_row, _ = AttributionCursor.objects.select_for_update().get_or_create(name=CURSOR)
        deleted, _ = CauseHour.objects.filter(hour__gte=hour).delete()
        previous = cursor_row.attributed_until
        if previous is None or previous > hour:
            cursor_row.attributed_until = hour
            cursor_row.save(update_fields=["attributed_until", "updated_at"])
    result = run_incremental(until=until)
    audit.record("analytics.attribution.rebuild", target_type="analytics.attributioncursor", target_id=CURSOR,
                 target_name=CURSOR, actor=actor,
                 details={"since": hour.isoformat(), "rows_deleted": deleted, "minutes": result["minutes"],
                          "buckets": result["buckets"], "attributed_until": result["attributed_until"]})
    return result | {"rows_deleted": deleted, "since": hour.isoformat()}


def job_verdicts(job: str, since: datetime, until: datetime) -> list[dict]:
    """Per GPU and minute of `job` in [since, until): node, gpu, instance, start, label, rule and the
    evidence of rules.py (what the job page shows)."""
    if not job or not isinstance(job, str):
        raise LedgerError("job: name a job")
    for name, value in (("since", since), ("until", until)):
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise LedgerError(f"{name}: give a time with a time zone (UTC)")
    if until <= since:
        raise LedgerError(f"until {until.isoformat()} is not after since {since.isoformat()}")
    attributed, info = attribution.from_database(since, until, step=STEP, job=job)
    result = []
    for item in attributed:
        record = item.record
        node = info.get(record["node"])
        result.append({"node": node.name if node else str(record["node"]), "gpu": record["gpu"],
                       "instance": record.get("instance", -1), "start": record["start"].isoformat(),
                       "label": item.verdict.label, "rule": item.verdict.rule,
                       "evidence": [check.as_dict() for check in item.verdict.evidence]})
    result.sort(key=lambda v: (v["start"], v["node"], v["gpu"], v["instance"]))
    return result
