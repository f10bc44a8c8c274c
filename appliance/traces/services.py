"""Import a utilization trace from another system and report on it.

`import_trace` reads CSV or Parquet (either one gzip-compressed, or a CSV inside a .tar.gz that holds only
it) through a column mapping (value, time, entity; optional memory and job) and stores it in one
transaction: a refused file leaves nothing behind. `source_report` gives the figures `manage.py analytics
report --source NAME` prints, computed by the database.

How a trace is read (decided per trace, from its data; README "Traces from elsewhere"):
- time: ISO 8601 text (a time without an offset is UTC), a timestamp column (Parquet), or numbers of
  seconds. Numbers from 100,000,000 up (1973-03-03 onwards) are epoch seconds; smaller ones are seconds from
  the trace's start (relative). A column holding both kinds, or epoch milliseconds, is refused.
- value: a fraction (0-1) when no value is above 1, a percent (0-100) otherwise; above 100 or below 0 is
  refused. A column of only 0 and 1 could be either (fully busy or 1%), so it is refused unless the caller
  says which (`scale`). An all-zero column is 0% either way.
- every error names the column and the row (rows count from 1, the header not counted).
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import tarfile
import tempfile
import time as clock
import zlib
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from django.conf import settings
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Avg, Count, F, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance.audit.services import record
from appliance.core import context

from .models import Sample, Trace

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
COLUMN_MAX = 200  # characters of a column name, an entity or a job
EPOCH_FROM = 100_000_000  # seconds: 1973-03-03; below it a number is seconds from the trace's start
EPOCH_UNTIL = 32_503_680_000  # seconds: 3000-01-01; above it a number is not epoch seconds (milliseconds?)
TAR_MEMBERS_MAX = 1000
CHUNK = 1 << 20
INSERT_BATCH = 50_000


class TraceError(Exception):
    """A refused import or an unknown trace; the message names the column, row, member or name."""


def max_bytes() -> int:
    """The most bytes a trace may be, on disk and decompressed."""
    return int(getattr(settings, "TRACE_IMPORT_MAX_BYTES", 2 * 2**30))


def max_rows() -> int:
    return int(getattr(settings, "TRACE_IMPORT_MAX_ROWS", 20_000_000))


# ---------------------------------------------------------------------------------------------- import


def import_trace(path, *, name: str, value: str, time: str, entity: str, memory: str | None = None,
                 job: str | None = None, format: str | None = None, scale: str | None = None,
                 replace: bool = False, actor=None) -> Trace:
    """Read the file at `path` and store it as the trace `name`, in one transaction. A name already used is
    refused unless `replace`. `format` is "csv" or "parquet" (default: from the content); `scale`
    "fraction" or "percent" (default: from the data). Raises TraceError."""
    started = clock.monotonic()
    path = Path(path)
    if not NAME.fullmatch(name or ""):
        raise TraceError(_("--name %(name)r: expected 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                           "letter or digit") % {"name": (name or "")[:80]})
    columns = {"value": value, "time": time, "entity": entity}
    columns.update({key: column for key, column in (("memory", memory), ("job", job)) if column})
    for key, column in columns.items():
        if not column or len(column) > COLUMN_MAX:
            raise TraceError(_("--%(flag)s: expected a column name of 1 to %(max)d characters")
                             % {"flag": key, "max": COLUMN_MAX})
    if format not in (None, "csv", "parquet"):
        raise TraceError(_("--format %(format)r: expected csv or parquet") % {"format": format})
    if scale not in (None, "fraction", "percent"):
        raise TraceError(_("--scale %(scale)r: expected fraction or percent") % {"scale": scale})
    if not replace and Trace.objects.filter(name=name).exists():
        raise TraceError(_("--name %(name)s: a trace of that name exists (imported %(at)s by %(by)s); "
                           "give --replace to replace it") % _existing(name))

    with tempfile.TemporaryDirectory(prefix="trace-") as scratch:
        plain, compression = _plain_file(path, Path(scratch))
        table, file_format = _read_table(plain, path.name, compression, format, columns)
    parsed = _parse(table, columns, scale)
    del table

    with transaction.atomic(using=router.db_for_write(Sample)):
        old = Trace.objects.select_for_update().filter(name=name).first()
        if old is not None and not replace:
            raise TraceError(_("--name %(name)s: a trace of that name exists (imported %(at)s by %(by)s); "
                               "give --replace to replace it") % _existing(name))
        replaced = None
        if old is not None:
            replaced = {"rows": old.rows, "file": old.source_file, "imported_by": old.imported_by,
                        "imported_at": old.imported_at.isoformat()}
            Sample.objects.filter(trace=old)._raw_delete(Sample.objects.db)
            old.delete()
        try:
            with transaction.atomic(using=router.db_for_write(Trace)):
                trace = _create(name, path, file_format, compression, columns, parsed, actor)
        except IntegrityError:
            raise TraceError(_("--name %(name)s: another import of that name finished first; give --replace to "
                               "replace it") % {"name": name}) from None
        _insert(trace.pk, parsed)
        details = {"file": trace.source_file, "format": file_format, "compression": compression,
                   "columns": columns, "rows": trace.rows, "entities": trace.entities, "time": trace.time_kind,
                   "scale": trace.scale, "duration_s": trace.duration_s}
        if replaced is not None:
            details["replaced"] = replaced
        record("traces.trace.replace" if replaced else "traces.trace.import", target=trace, details=details,
               actor=actor)
    trace.import_seconds = clock.monotonic() - started
    return trace


def _create(name, path, file_format, compression, columns, parsed, actor) -> Trace:
    return Trace.objects.create(
        name=name, source_file=path.name[:255], format=file_format, compression=compression, columns=columns,
        time_kind=parsed["time_kind"], scale=parsed["scale"], rows=parsed["rows"], entities=parsed["entities"],
        started_at=parsed["started_at"], start_s=parsed["start_s"], duration_s=parsed["duration_s"],
        imported_by=_actor_name(actor), imported_at=timezone.now())


def _existing(name: str) -> dict:
    trace = Trace.objects.get(name=name)
    return {"name": name, "at": f"{trace.imported_at:%Y-%m-%d %H:%M} UTC", "by": trace.imported_by or "?"}


def _actor_name(actor) -> str:
    if actor is not None:
        return actor.get_username()[:150]
    ctx = context.current()
    return (ctx.actor_username or context.os_user() or "")[:150]


# ------------------------------------------------------------------------------------------ containers


def _plain_file(path: Path, scratch: Path) -> tuple[Path, str]:
    """The file to read, uncompressed (into `scratch` when it was compressed), and its compression."""
    limit = max_bytes()
    try:
        if not path.is_file():
            raise TraceError(_("%(file)s: no such file") % {"file": path})
        if path.stat().st_size > limit:
            raise TraceError(_("%(file)s: larger than %(max)s bytes, the import's limit")
                             % {"file": path.name, "max": f"{limit:,}"})
        with path.open("rb") as handle:
            magic = handle.read(2)
    except OSError as exc:
        raise TraceError(_("%(file)s: cannot be read (%(error)s)") % {"file": path, "error": exc.strerror}) from None
    if magic != b"\x1f\x8b":
        return path, Trace.Compression.NONE
    try:
        with gzip.open(path, "rb") as stream:
            head = stream.read(512)
        if len(head) == 512 and head[257:262] == b"ustar":
            return _from_tar(path, scratch, limit), Trace.Compression.TAR_GZIP
        inner = scratch / (path.name[:-3] if path.name.lower().endswith(".gz") else path.name)
        with gzip.open(path, "rb") as stream:
            _copy_bounded(stream, inner, limit, path.name)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(_("%(file)s: not a readable gzip file (%(error)s)") % {"file": path.name, "error": exc}) \
            from None
    return inner, Trace.Compression.GZIP


def _copy_bounded(stream, target: Path, limit: int, label: str) -> None:
    written = 0
    with target.open("wb") as out:
        while chunk := stream.read(CHUNK):
            written += len(chunk)
            if written > limit:
                raise TraceError(_("%(file)s: decompresses to more than %(max)s bytes, the import's limit")
                                 % {"file": label, "max": f"{limit:,}"})
            out.write(chunk)


def _from_tar(path: Path, scratch: Path, limit: int) -> Path:
    """The one CSV of a .tar.gz. Directories are passed over; anything else (a second file, a link, a
    device, a name outside the archive) refuses the whole archive. Nothing is extracted by tarfile: the
    CSV's bytes are copied, bounded, to a file of our own naming."""
    try:
        with tarfile.open(path, mode="r:gz") as archive:
            found, seen = None, 0
            while (member := archive.next()) is not None:
                seen += 1
                if seen > TAR_MEMBERS_MAX:
                    raise TraceError(_("%(file)s: more than %(max)d members") % {"file": path.name,
                                                                                 "max": TAR_MEMBERS_MAX})
                label = member.name[:200]
                parts = PurePosixPath(member.name).parts
                if member.name.startswith(("/", "\\")) or ".." in parts or "\\" in member.name:
                    raise TraceError(_("%(file)s: member %(member)r points outside the archive")
                                     % {"file": path.name, "member": label})
                if member.issym() or member.islnk():
                    raise TraceError(_("%(file)s: member %(member)r is a link; a trace archive holds one CSV "
                                       "and nothing else") % {"file": path.name, "member": label})
                if member.isdir():
                    continue
                if not member.isfile():
                    raise TraceError(_("%(file)s: member %(member)r is not a regular file")
                                     % {"file": path.name, "member": label})
                if not member.name.lower().endswith(".csv"):
                    raise TraceError(_("%(file)s: member %(member)r is not a CSV; a trace archive holds one CSV "
                                       "and nothing else") % {"file": path.name, "member": label})
                if found is not None:
                    raise TraceError(_("%(file)s: holds more than one file (%(first)r, %(second)r); a trace "
                                       "archive holds one CSV") % {"file": path.name, "first": found.name[:200],
                                                                   "second": label})
                if member.size > limit:
                    raise TraceError(_("%(file)s: member %(member)r is larger than %(max)s bytes, the import's "
                                       "limit") % {"file": path.name, "member": label, "max": f"{limit:,}"})
                found = member
            if found is None:
                raise TraceError(_("%(file)s: holds no CSV") % {"file": path.name})
            target = scratch / "trace.csv"
            _copy_bounded(archive.extractfile(found), target, limit, f"{path.name}:{found.name[:200]}")
            return target
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise TraceError(_("%(file)s: not a readable .tar.gz (%(error)s)") % {"file": path.name, "error": exc}) \
            from None


# ------------------------------------------------------------------------------------------------ read


def _read_table(plain: Path, label: str, compression: str, wanted_format: str | None, columns: dict):
    with plain.open("rb") as handle:
        is_parquet = handle.read(4) == b"PAR1"
    file_format = wanted_format or ("parquet" if is_parquet else "csv")
    if file_format == "parquet" and compression == Trace.Compression.TAR_GZIP:
        raise TraceError(_("%(file)s: a .tar.gz must hold a CSV, not Parquet") % {"file": label})
    if file_format == "csv" and is_parquet:
        raise TraceError(_("%(file)s: this is a Parquet file, not CSV (--format parquet)") % {"file": label})
    if file_format == "parquet" and not is_parquet:
        raise TraceError(_("%(file)s: not a Parquet file (it does not start with PAR1)") % {"file": label})
    wanted = list(dict.fromkeys(columns.values()))
    if file_format == "parquet":
        try:
            parquet = pq.ParquetFile(plain)
            present = parquet.schema_arrow.names
            _check_columns(columns, present, label)
            if parquet.metadata.num_rows > max_rows():
                raise TraceError(_("%(file)s: %(rows)s rows, more than the import's limit of %(max)s")
                                 % {"file": label, "rows": f"{parquet.metadata.num_rows:,}",
                                    "max": f"{max_rows():,}"})
            table = parquet.read(columns=wanted)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(_("%(file)s: not a readable Parquet file (%(error)s)") % {"file": label, "error": exc}) \
                from None
    else:
        _check_columns(columns, _csv_header(plain, label), label)
        text = {columns[key]: pa.string() for key in ("entity", "job") if key in columns}
        try:
            table = pacsv.read_csv(plain, convert_options=pacsv.ConvertOptions(include_columns=wanted,
                                                                                column_types=text))
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(_("%(file)s: not readable as CSV (%(error)s)") % {"file": label, "error": exc}) from None
        if table.num_rows > max_rows():
            raise TraceError(_("%(file)s: %(rows)s rows, more than the import's limit of %(max)s")
                             % {"file": label, "rows": f"{table.num_rows:,}", "max": f"{max_rows():,}"})
    if table.num_rows == 0:
        raise TraceError(_("%(file)s: no rows") % {"file": label})
    return table, file_format


def _csv_header(plain: Path, label: str) -> list[str]:
    with plain.open("rb") as handle:
        line = handle.readline(65536)
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceError(_("%(file)s: the header line is not UTF-8 text") % {"file": label}) from None
    header = next(csv.reader([text]), [])
    if not header:
        raise TraceError(_("%(file)s: empty (no header line)") % {"file": label})
    return [name.strip() for name in header]


def _check_columns(columns: dict, present: list[str], label: str) -> None:
    for key, column in columns.items():
        if column not in present:
            shown = ", ".join(repr(name[:40]) for name in present[:30]) + (", ..." if len(present) > 30 else "")
            raise TraceError(_("--%(flag)s %(column)r: %(file)s has no such column (it has %(present)s)")
                             % {"flag": key, "column": column, "file": label, "present": shown})


# ----------------------------------------------------------------------------------------------- parse


def _row_error(index: int, flag: str, column: str, message: str) -> TraceError:
    return TraceError(_("row %(row)d, --%(flag)s column %(column)r: %(message)s")
                      % {"row": index + 1, "flag": flag, "column": column, "message": message})


def _parse(table: pa.Table, columns: dict, scale: str | None) -> dict:
    rows = table.num_rows
    values = _numbers(table.column(columns["value"]), "value", columns["value"], allow_empty=False)
    seconds, time_kind = _seconds(table.column(columns["time"]), columns["time"])
    entities = _texts(table.column(columns["entity"]), "entity", columns["entity"], allow_empty=False)
    memory = None
    if "memory" in columns:
        memory = _numbers(table.column(columns["memory"]), "memory", columns["memory"], allow_empty=True)
        negative = np.flatnonzero(memory < 0)
        if negative.size:
            raise _row_error(int(negative[0]), "memory", columns["memory"],
                             _("%(value)s is negative") % {"value": _shown(memory[negative[0]])})
    jobs = _texts(table.column(columns["job"]), "job", columns["job"], allow_empty=True) if "job" in columns else None

    negative = np.flatnonzero(values < 0)
    if negative.size:
        raise _row_error(int(negative[0]), "value", columns["value"],
                         _("%(value)s is below 0 (utilization is a fraction 0-1 or a percent 0-100)")
                         % {"value": _shown(values[negative[0]])})
    above = np.flatnonzero(values > 100)
    if above.size:
        raise _row_error(int(above[0]), "value", columns["value"],
                         _("%(value)s is above 100 (utilization is a fraction 0-1 or a percent 0-100)")
                         % {"value": _shown(values[above[0]])})
    highest = float(values.max())
    if scale is None:
        if highest > 1:
            scale = Trace.Scale.PERCENT
        elif highest == 0:
            scale = Trace.Scale.PERCENT  # all zero: 0% read either way
        elif np.all((values == 0) | (values == 1)):
            raise TraceError(_("--value column %(column)r holds only 0 and 1: a fraction (0 or 100%%) or a "
                               "percent (0 or 1%%)? Give --scale fraction or --scale percent")
                             % {"column": columns["value"]})
        else:
            scale = Trace.Scale.FRACTION
    elif scale == Trace.Scale.FRACTION and highest > 1:
        index = int(np.flatnonzero(values > 1)[0])
        raise _row_error(index, "value", columns["value"],
                         _("%(value)s is above 1, yet --scale fraction was given") % {"value": _shown(values[index])})
    if scale == Trace.Scale.FRACTION:
        values = values * 100.0

    first = float(seconds.min())
    offsets = seconds - first
    return {"rows": rows, "values": values, "offsets": offsets, "entity": entities, "memory": memory, "job": jobs,
            "scale": str(scale), "time_kind": time_kind, "entities": pc.count_distinct(entities).as_py(),
            "started_at": datetime.fromtimestamp(first, UTC) if time_kind == Trace.TimeKind.ABSOLUTE else None,
            "start_s": first, "duration_s": float(offsets.max())}


def _shown(number) -> str:
    return f"{float(number):g}"


def _numbers(column: pa.ChunkedArray, flag: str, name: str, *, allow_empty: bool) -> np.ndarray:
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        numbers = column.cast(pa.float64()).to_numpy()
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind):
        numbers = np.empty(len(column), dtype=np.float64)
        for index, text in enumerate(column.to_pylist()):
            if text is None or not text.strip():
                numbers[index] = math.nan
                continue
            try:
                numbers[index] = float(text)
            except ValueError:
                raise _row_error(index, flag, name, _("%(text)r is not a number") % {"text": text[:40]}) from None
    else:
        raise TraceError(_("--%(flag)s column %(column)r holds %(type)s, not numbers")
                         % {"flag": flag, "column": name, "type": kind})
    numbers = np.ascontiguousarray(numbers, dtype=np.float64)
    empty = np.isnan(numbers)
    if not allow_empty and empty.any():
        raise _row_error(int(np.flatnonzero(empty)[0]), flag, name, _("empty"))
    infinite = np.isinf(numbers)
    if infinite.any():
        raise _row_error(int(np.flatnonzero(infinite)[0]), flag, name, _("not a finite number"))
    return numbers


def _texts(column: pa.ChunkedArray, flag: str, name: str, *, allow_empty: bool) -> pa.ChunkedArray:
    try:
        texts = pc.utf8_trim_whitespace(column.cast(pa.string()))
    except pa.ArrowException:
        raise TraceError(_("--%(flag)s column %(column)r holds %(type)s, not text or numbers")
                         % {"flag": flag, "column": name, "type": column.type}) from None
    lengths = pc.fill_null(pc.utf8_length(texts), 0).to_numpy()
    if not allow_empty:
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            raise _row_error(int(empty[0]), flag, name, _("empty"))
    long = np.flatnonzero(lengths > COLUMN_MAX)
    if long.size:
        raise _row_error(int(long[0]), flag, name, _("longer than %(max)d characters") % {"max": COLUMN_MAX})
    return pc.fill_null(texts, "")


_UNIT = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _seconds(column: pa.ChunkedArray, name: str) -> tuple[np.ndarray, str]:
    """Seconds (epoch seconds when absolute) and whether the time stamps were absolute or relative."""
    kind = column.type
    if pa.types.is_date(kind):
        column, kind = column.cast(pa.timestamp("s")), pa.timestamp("s")
    if pa.types.is_timestamp(kind):
        if column.null_count:
            raise _row_error(_first_null(column), "time", name, _("empty"))
        ticks = column.cast(pa.int64()).to_numpy()
        return ticks.astype(np.float64) / _UNIT[kind.unit], Trace.TimeKind.ABSOLUTE
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _iso_seconds(column, name), Trace.TimeKind.ABSOLUTE
    seconds = _numbers(column, "time", name, allow_empty=False)
    epoch = seconds >= EPOCH_FROM
    if epoch.any() and not epoch.all():
        one, other = int(np.flatnonzero(epoch)[0]), int(np.flatnonzero(~epoch)[0])
        raise _row_error(max(one, other), "time", name,
                         _("the column mixes epoch seconds (row %(epoch_row)d: %(epoch)s) and seconds from the "
                           "trace's start (row %(relative_row)d: %(relative)s)")
                         % {"epoch_row": one + 1, "epoch": _shown(seconds[one]), "relative_row": other + 1,
                            "relative": _shown(seconds[other])})
    if epoch.all():
        late = np.flatnonzero(seconds > EPOCH_UNTIL)
        if late.size:
            raise _row_error(int(late[0]), "time", name,
                             _("%(value)s is past the year 3000 as epoch seconds (milliseconds? give seconds)")
                             % {"value": _shown(seconds[late[0]])})
        return seconds, Trace.TimeKind.ABSOLUTE
    negative = np.flatnonzero(seconds < 0)
    if negative.size:
        raise _row_error(int(negative[0]), "time", name,
                         _("%(value)s: seconds from the trace's start cannot be negative")
                         % {"value": _shown(seconds[negative[0]])})
    return seconds, Trace.TimeKind.RELATIVE


def _first_null(column: pa.ChunkedArray) -> int:
    return int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])


def _iso_seconds(column: pa.ChunkedArray, name: str) -> np.ndarray:
    """ISO 8601 text to epoch seconds; a time without an offset is UTC. Traces repeat each time stamp for
    every entity, so each distinct text is parsed once."""
    seen: dict[str, float] = {}
    seconds = np.empty(len(column), dtype=np.float64)
    for index, text in enumerate(column.to_pylist()):
        found = seen.get(text)
        if found is None:
            if text is None or not text.strip():
                raise _row_error(index, "time", name, _("empty"))
            try:
                moment = datetime.fromisoformat(text.strip())
            except ValueError:
                raise _row_error(index, "time", name, _("%(text)r is neither an ISO 8601 time nor a number of "
                                                        "seconds") % {"text": text[:40]}) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            found = seen[text] = moment.timestamp()
        seconds[index] = found
    return seconds


# ---------------------------------------------------------------------------------------------- insert


def _insert(trace_id: int, parsed: dict) -> None:
    """All rows in, as fast as the database takes them: on PostgreSQL one COPY of CSV that Arrow writes
    (no Python object per value); elsewhere one executemany on the driver's own connection."""
    using = router.db_for_write(Sample)
    connection = connections[using]
    rows = parsed["rows"]
    if parsed["memory"] is not None:
        memory = pa.array(parsed["memory"], mask=np.isnan(parsed["memory"]))  # NaN: no memory given
    else:
        memory = pa.nulls(rows, pa.float64())
    jobs = parsed["job"] if parsed["job"] is not None else pa.repeat(pa.scalar("", pa.string()), rows)
    names = ["trace_id", "entity", "offset_s", "value", "memory", "job"]
    data = pa.table([pa.repeat(pa.scalar(trace_id, pa.int64()), rows), parsed["entity"], pa.array(parsed["offsets"]),
                     pa.array(parsed["values"]), memory, jobs], names=names)
    table = connection.ops.quote_name(Sample._meta.db_table)
    quoted = ", ".join(connection.ops.quote_name(column) for column in names)
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        # Arrow quotes every string and leaves a null unquoted and empty: COPY's CSV reads "" as an empty
        # string and an empty field as NULL.
        options = pacsv.WriteOptions(include_header=False)
        with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({quoted}) FROM STDIN "
                                                               "WITH (FORMAT csv)") as copy:
            for batch in data.to_batches(max_chunksize=INSERT_BATCH):
                buffer = pa.BufferOutputStream()
                pacsv.write_csv(batch, buffer, write_options=options)
                copy.write(buffer.getvalue().to_pybytes())
        return
    placeholders = ", ".join(["%s" if connection.vendor != "sqlite" else "?"] * len(names))
    sql = f"INSERT INTO {table} ({quoted}) VALUES ({placeholders})"
    raw = connection.connection
    for batch in data.to_batches(max_chunksize=INSERT_BATCH):
        columns = [column.to_pylist() for column in batch.columns]
        if connection.vendor == "sqlite":
            raw.executemany(sql, zip(*columns, strict=True))
        else:
            with connection.cursor() as cursor:
                cursor.executemany(sql, list(zip(*columns, strict=True)))


# ---------------------------------------------------------------------------------------------- report


def source_report(name: str) -> dict:
    """The figures of an imported trace: utilization (percent 0-100; shares 0-1) over every sample, and its
    entities (GPUs or containers), `idle_majority_share` being the share of entities at 0% in more than half
    of their samples. p50 and p90 interpolate linearly between neighbouring samples (PostgreSQL's
    percentile_cont, numpy's default). Raises TraceError for an unknown name."""
    trace = Trace.objects.filter(name=name).first()
    if trace is None:
        known = list(Trace.objects.order_by("name").values_list("name", flat=True)[:20])
        raise TraceError(_("no imported trace named %(name)r (imported: %(known)s)")
                         % {"name": str(name)[:80], "known": ", ".join(known) or _("none")})
    samples = Sample.objects.filter(trace=trace)
    utilization = _utilization(trace.pk, samples)
    per_entity = samples.values("entity").annotate(n=Count("id"), zeros=Count("id", filter=Q(value=0)),
                                                   twice=F("zeros") * 2)
    entity_counts = per_entity.aggregate(count=Count("entity"), idle=Count("entity", filter=Q(twice__gt=F("n"))))
    entities, idle = entity_counts["count"], entity_counts["idle"]
    report = {
        "source": trace.name,
        "trace": {"file": trace.source_file, "format": trace.format, "compression": trace.compression,
                  "columns": trace.columns, "time": trace.time_kind, "scale": trace.scale, "rows": trace.rows,
                  "start": trace.started_at.isoformat() if trace.started_at else None, "start_s": trace.start_s,
                  "duration_s": trace.duration_s, "imported_by": trace.imported_by,
                  "imported_at": trace.imported_at.isoformat()},
        "utilization": utilization,
        "entities": {"count": entities, "idle_majority": idle,
                     "idle_majority_share": _round(idle / entities if entities else None)},
    }
    if "memory" in trace.columns:
        memory = samples.aggregate(samples=Count("memory"), mean=Avg("memory"))
        report["memory"] = {"samples": memory["samples"], "mean": _round(memory["mean"])}
    if "job" in trace.columns:
        report["jobs"] = {"count": samples.exclude(job="").values("job").distinct().count()}
    return report


def _round(number):
    return None if number is None else round(float(number), 4)


def _utilization(trace_id: int, samples) -> dict:
    """Samples, zero share, mean, p50 and p90 of the values. PostgreSQL computes them outright
    (percentile_cont); elsewhere the database counts each distinct value (one pass; a trace's values repeat:
    0% most of all) and the quantiles are read off the running count."""
    connection = connections[samples.db]
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(Sample._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*), COUNT(*) FILTER (WHERE value = 0), AVG(value), "
                           f"percentile_cont(ARRAY[0.5, 0.9]) WITHIN GROUP (ORDER BY value) FROM {table} "
                           "WHERE trace_id = %s", [trace_id])
            count, zeros, mean, quantiles = cursor.fetchone()
        p50, p90 = quantiles or (None, None)
    else:
        histogram = list(samples.order_by("value").values("value").annotate(n=Count("id"))
                         .values_list("value", "n"))
        count = sum(n for _, n in histogram)
        zeros = sum(n for value, n in histogram if value == 0)
        mean = sum(value * n for value, n in histogram) / count if count else None
        p50, p90 = _quantiles(histogram, count, (0.5, 0.9))
    return {"samples": count, "zero_share": _round(zeros / count if count else None), "mean": _round(mean),
            "p50": _round(p50), "p90": _round(p90)}


def _quantiles(histogram: list[tuple[float, int]], count: int, quantiles: tuple[float, ...]) -> list:
    """Linear interpolation between the sorted samples at floor(q (n - 1)) and the one after, as
    percentile_cont does, read from (value, how many) pairs in ascending order."""
    if not count:
        return [None] * len(quantiles)
    answers = []
    for quantile in quantiles:
        position = quantile * (count - 1)
        below = math.floor(position)
        answers.append(_nth(histogram, below) + (_nth(histogram, min(below + 1, count - 1))
                                                 - _nth(histogram, below)) * (position - below))
    return answers


def _nth(histogram: list[tuple[float, int]], index: int) -> float:
    seen = 0
    for value, n in histogram:
        seen += n
        if index < seen:
            return value
    raise IndexError(index)
