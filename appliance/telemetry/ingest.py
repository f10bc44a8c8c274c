"""The appliance's ingest of its collectors' rollups: one InfluxDB v2 write (line protocol) in, database
rows out (docs: /tmp/helpers/CONTRACT.md's wire format, README "Telemetry").

A write is taken whole or not at all: every line is read and checked before anything is stored, and the
rows are stored in one transaction. A bucket sent again replaces the stored one (upsert on the rollup's
unique key), so a collector that resends after a lost answer never counts twice.

Who may write: the node whose token the request carries (its SHA-256 digest is what the appliance keeps),
and only that node's series: a line naming another Hostname refuses the whole write, so a node's token
cannot be used to forge another node's measurements. A node is trusted for its own numbers only: a GPU
line names a GPU of the node's inventory (a MIG instance: a MIG-capable one), each field lies in its
physical range (FIELD_RANGES), a bucket is at most FUTURE_SLACK ahead of the appliance's clock, string
fields carry no control or format characters, and a job id has the one pattern the portal and the API
route (queries.JOB_PATTERN), kept on a row only where a scheduler puts that job on that node
(placements.py; otherwise the row is kept with its job blank and the id in `unverified_job`). A node's
writes are limited per minute (writes and lines, `admit`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import time
import unicodedata
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.core.cache import caches
from django.db import connections, models, router, transaction
from django.utils import timezone

from appliance.inventory.models import GPU

from . import frames, holders, placements, services
from .lineprotocol import LineError, iter_lines
from .models import (
    LIVE_GPU_COLUMNS,
    LIVE_GPU_FIELDS,
    MINUTE,
    WHOLE_GPU,
    GpuRollup,
    HardwareEvent,
    NodeCollector,
    NodeRollup,
)
from .queries import JOB_PATTERN

# Limits of one write. A collector sends one closed minute of its node (about ten lines) at a time, and
# after an outage its forwarder sends at most 50,000 points a write (a few thousand lines, ~1 MiB): these
# leave room for that and refuse anything a hundred times larger.
MAX_BODY_BYTES = 16 * 2**20  # after gzip decompression; the compressed body is held to the same bound
MAX_LINES = 100_000
MAX_LINE_CHARS = 64 * 1024
MAX_TOKEN_CHARS = 512

# Writes of one node token per minute (a fixed window, counted in the default cache as DRF's throttles and
# the login limit are). A collector sends one write of about ten lines a minute, and after an outage drains
# its buffer in writes of a few thousand lines: these leave it a hundred times that, and stop a token that
# floods (one write of MAX_LINES held a worker 19.5 s). Settings TELEMETRY_INGEST_WRITES_PER_MINUTE and
# TELEMETRY_INGEST_LINES_PER_MINUTE override them.
WRITES_PER_MINUTE = 120
LINES_PER_MINUTE = 20_000
RATE_KEY = "telemetry:ingest-rate:"

# Kinds of events that are alerts (open until a person acknowledges them). Others (NVML failing on a
# GPU, the collector's own notes) are kept as information: stored already acknowledged on arrival.
ALERT_KINDS = frozenset({HardwareEvent.Kind.XID, HardwareEvent.Kind.ECC, HardwareEvent.Kind.LINK_DOWN,
                         HardwareEvent.Kind.THROTTLING})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bucket times before this are not from a collector of this product (a clock at zero, a unit mistake).
_OLDEST = datetime(2000, 1, 1, tzinfo=UTC)
# A node clock may run ahead a little (NTP keeps it within seconds); a bucket further ahead would hold
# the node's collector state (its last bucket only moves forward) and the Overview's newest minute.
FUTURE_SLACK = timedelta(minutes=5)

_GPU_INDEX = re.compile(r"\d{1,3}\Z")
_INSTANCE = re.compile(r"\d{1,3}\Z")
_PROFILE = re.compile(r"[0-9A-Za-z.+_-]{1,32}\Z")
_UUID = re.compile(r"[0-9A-Za-z-]{1,64}\Z")
_JOB = re.compile(JOB_PATTERN + r"\Z")  # the one job or service id pattern: ingest, portal routes, API
_MOUNT = re.compile(r"/[^\x00-\x1f\x7f-\x9f]{0,254}\Z")
_FSTYPE = re.compile(r"[0-9a-z_.]{1,32}\Z")
_DEVICE = re.compile(r"[0-9A-Za-z_.-]{1,56}(?:/\d{1,3})?\Z")
_VERSION = re.compile(r"[^\x00-\x1f\x7f-\x9f]{0,40}\Z")
MAX_MESSAGE_CHARS = 2000
MAX_DETAIL_CHARS = 16 * 1024
MAX_SINK_ERROR_CHARS = 2000

# Field kinds: a float (NULL when absent), a whole number >= 0 within the column's range, a string.
FLOAT, STRING = "float", "string"
COUNT32, COUNT16, COUNT64 = 2**31 - 1, 2**15 - 1, 2**63 - 1

GPU_FIELDS = {
    "step": COUNT32, "samples": COUNT32, "util": FLOAT, "util_max": FLOAT, "sm_active": FLOAT,
    "tensor_active": FLOAT, "dram_active": FLOAT, "fb_used_mib": FLOAT, "fb_used_max_mib": FLOAT,
    "fb_total_mib": FLOAT, "power_w": FLOAT, "power_max_w": FLOAT, "energy_j": FLOAT, "temp_c": FLOAT,
    "temp_max_c": FLOAT, "sm_clock_mhz": FLOAT, "throttle_reasons": COUNT64, "throttled_share": FLOAT,
    "pcie_tx_bps": FLOAT, "pcie_rx_bps": FLOAT, "nvlink_bps": FLOAT, "xid_count": COUNT32, "ecc_dbe": COUNT32,
    "holders": STRING,
}
NODE_FIELDS = {
    "step": COUNT32, "samples": COUNT32, "gpus": COUNT16, "gpu_util": FLOAT, "gpu_util_max": FLOAT,
    "gpu_fb_used_mib": FLOAT, "gpu_power_w": FLOAT, "ib_tx_bps": FLOAT, "ib_rx_bps": FLOAT, "ib_line_bps": FLOAT,
    "ib_xmit_wait": FLOAT, "ib_errors": COUNT32, "fs_read_bps": FLOAT, "fs_write_bps": FLOAT,
    "disk_read_bps": FLOAT, "disk_write_bps": FLOAT, "cpu_busy": FLOAT, "cpu_iowait": FLOAT,
}
MOUNT_FIELDS = {"step": COUNT32, "read_bps": FLOAT, "write_bps": FLOAT}
EVENT_FIELDS = {"message": STRING, "detail": STRING}
COLLECTOR_FIELDS = {
    "interval_s": FLOAT, "sweeps": COUNT64, "sweep_errors": COUNT64, "buffer_rows": COUNT64,
    "buffer_points": COUNT64, "dropped_points": COUNT64, "last_sweep_ns": COUNT64, "sink_error": STRING,
    "version": STRING,
}
TAGS = {
    "gpu_rollup": ({"Hostname", "gpu"}, {"GPU_I_ID", "GPU_I_PROFILE", "UUID", "hpc_job"}),
    "node_rollup": ({"Hostname"}, set()),
    "mount_rollup": ({"Hostname", "mount", "fstype"}, set()),
    "event": ({"Hostname", "kind"}, {"gpu", "device"}),
    "collector": ({"Hostname"}, set()),
}
FIELDS = {"gpu_rollup": GPU_FIELDS, "node_rollup": NODE_FIELDS, "mount_rollup": MOUNT_FIELDS,
          "event": EVENT_FIELDS, "collector": COLLECTOR_FIELDS}
# Each number's physical range (inclusive). Utilization is a percentage, the DCGM activities and shares are
# ratios; bytes/s are bounded far above any link of this product (PCIe 6 x16 is 1.3e11, NVLink 5 1.8e12,
# eight NDR 400 ports 4e11); power is checked against the GPU's limit (gpu_power_limit_w) in `_ranges`.
RATE_MAX = 1e13
FIELD_RANGES = {
    "util": (0, 100), "util_max": (0, 100), "gpu_util": (0, 100), "gpu_util_max": (0, 100),
    "sm_active": (0, 1), "tensor_active": (0, 1), "dram_active": (0, 1), "throttled_share": (0, 1),
    "cpu_busy": (0, 1), "cpu_iowait": (0, 1),
    "temp_c": (-40, 150), "temp_max_c": (-40, 150),
    "sm_clock_mhz": (0, 5000),
    "fb_used_mib": (0, 2**21), "fb_used_max_mib": (0, 2**21), "fb_total_mib": (0, 2**21),
    "gpu_fb_used_mib": (0, 2**26),
    "pcie_tx_bps": (0, RATE_MAX), "pcie_rx_bps": (0, RATE_MAX), "nvlink_bps": (0, RATE_MAX),
    "ib_tx_bps": (0, RATE_MAX), "ib_rx_bps": (0, RATE_MAX), "ib_line_bps": (0, RATE_MAX),
    "ib_xmit_wait": (0, RATE_MAX), "fs_read_bps": (0, RATE_MAX), "fs_write_bps": (0, RATE_MAX),
    "disk_read_bps": (0, RATE_MAX), "disk_write_bps": (0, RATE_MAX), "read_bps": (0, RATE_MAX),
    "write_bps": (0, RATE_MAX), "interval_s": (0.001, 3600),
}
# Board power limits by GPU model (W); a model not listed is held to the largest.
POWER_LIMITS_W = {"H100": 700, "H200": 700, "H20": 500, "A100": 400, "A30": 165, "A10": 150, "L40": 350,
                  "L4": 72, "B200": 1000, "B100": 700, "GB200": 1200}
POWER_SLACK = 1.5


def gpu_power_limit_w(model: str) -> float:
    """The board power limit of a GPU model as the inventory names it (e.g. H100-SXM5-80GB)."""
    name = (model or "").upper().replace("NVIDIA", "").strip(" -")
    for prefix in sorted(POWER_LIMITS_W, key=len, reverse=True):
        if name.startswith(prefix):
            return POWER_LIMITS_W[prefix]
    return max(POWER_LIMITS_W.values())


# Columns a resend rewrites: every measured column (an absent field becomes NULL again, as sent).
GPU_COLUMNS = (["samples", "job", "unverified_job", "unverified_holders", "uuid", "profile"]
               + [name for name in GPU_FIELDS if name not in ("step", "samples")])
NODE_COLUMNS = ["samples"] + [name for name in NODE_FIELDS if name not in ("step", "samples")]
_GPU_DEFAULTS = {"throttle_reasons": 0, "xid_count": 0, "ecc_dbe": 0}
_NODE_DEFAULTS = {"gpus": 0, "ib_errors": 0}


GPU_UNIQUE = ["node", "gpu", "instance", "step", "start"]
NODE_UNIQUE = ["node", "step", "start"]
_DEFAULTS = {**_GPU_DEFAULTS, **_NODE_DEFAULTS, "job": "", "unverified_job": "", "uuid": "", "profile": "", "samples": 0,
             "mounts": {}, "holders": "", "unverified_holders": ""}


def upsert(model, unique: list[str], update: list[str], rows: list[dict], insert_only: tuple[str, ...] = ()) -> None:
    """INSERT ... ON CONFLICT (unique) DO UPDATE SET the `update` columns, one executemany: what
    bulk_create(update_conflicts=True) does (SQLite and PostgreSQL alike), without its per-value
    compilation, which was most of a write's time. Absent fields go in as NULL (or the column's default);
    `insert_only` columns are written when the row is new and left as they are when it exists."""
    using = router.db_for_write(model)
    connection = connections[using]
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in [*unique, *update, *insert_only]]
    columns = ", ".join(quote(field.column) for field in fields)
    conflict = ", ".join(quote(model._meta.get_field(name).column) for name in unique)
    assignments = ", ".join(f"{quote(model._meta.get_field(name).column)} = EXCLUDED.{quote(model._meta.get_field(name).column)}"
                            for name in update)
    sql = (f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))}) "
           f"ON CONFLICT ({conflict}) DO UPDATE SET {assignments}")
    # Only dates and JSON need the backend's conversion; numbers and strings go as they are.
    prepared = [isinstance(field, models.DateTimeField | models.JSONField) for field in fields]
    names = [field.name for field in fields]
    params = []
    for row in rows:
        values = []
        for name, column, prepare in zip(names, fields, prepared, strict=True):
            value = row.get(name, _DEFAULTS.get(name))
            values.append(column.get_db_prep_save(value, connection) if prepare else value)
        params.append(values)
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


class IngestError(Exception):
    """A refused write, answered as InfluxDB answers: `status` and {"code", "message"}."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def invalid(number: int, message: str) -> IngestError:
    return IngestError(400, "invalid", f"line {number}: {message}")


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def authenticate(header: str) -> NodeCollector:
    """The collector whose token `Authorization: Token <t>` carries; IngestError 401 otherwise."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme != "Token" or not token:
        raise IngestError(401, "unauthorized", "missing token: send Authorization: Token <the node's ingest token>")
    if len(token) > MAX_TOKEN_CHARS:
        raise IngestError(401, "unauthorized", "unknown token")
    digest = token_digest(token)
    # Only what a write needs: the token itself stays unread (decrypting it would cost more than the check).
    collector = (NodeCollector.objects.select_related("node")
                 .only("token_digest", "last_bucket", "last_sweep", "node__name").filter(token_digest=digest).first())
    # The lookup is by digest (an index); the comparison that decides is constant-time all the same.
    if collector is None or not hmac.compare_digest(collector.token_digest, digest):
        raise IngestError(401, "unauthorized", "unknown token")
    return collector


def admit(collector: NodeCollector, lines: int, now_s: float | None = None) -> None:
    """Count one write of `lines` lines against its node token's minute; IngestError 429 (with
    `retry_after`, seconds) past either limit. Counted before the write is read, so a refused flood
    costs a cache round trip, not a parse."""
    writes_limit = getattr(settings, "TELEMETRY_INGEST_WRITES_PER_MINUTE", WRITES_PER_MINUTE)
    lines_limit = getattr(settings, "TELEMETRY_INGEST_LINES_PER_MINUTE", LINES_PER_MINUTE)
    now_s = time.time() if now_s is None else now_s
    minute = int(now_s // 60)
    cache = caches["default"]
    base = f"{RATE_KEY}{collector.token_digest[:32]}:{minute}:"
    cache.add(base + "writes", 0, 120)
    cache.add(base + "lines", 0, 120)
    writes = cache.incr(base + "writes")
    total = cache.incr(base + "lines", lines)
    if writes > writes_limit or total > lines_limit:
        error = IngestError(429, "too many requests",
                            f"{collector.node.name}: at most {writes_limit} writes and {lines_limit} lines a minute "
                            f"per node token (this minute: {writes} writes, {total} lines with this one of {lines}); "
                            "send fewer, larger writes or wait for the next minute")
        error.retry_after = 60 - int(now_s % 60)
        raise error


def read_body(stream, content_length: str | None, content_encoding: str | None, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, decompressed, refused past `limit` bytes (a gzip bomb stops at the limit,
    never inflates in memory)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise IngestError(415, "unsupported media type", f"Content-Encoding {encoding[:40]!r}: expected gzip or none")
    try:
        declared = int(content_length) if content_length not in (None, "") else None
    except ValueError:
        raise IngestError(400, "invalid", "Content-Length is not a number") from None
    if declared is not None and declared > limit:
        raise IngestError(413, "request too large", f"the body is {declared} bytes; at most {limit} are taken")
    raw = bytearray()
    while True:
        chunk = stream.read(min(65536, limit + 1 - len(raw)))
        if not chunk:
            break
        raw += chunk
        if len(raw) > limit:
            raise IngestError(413, "request too large", f"the body is over {limit} bytes")
    if encoding == "identity":
        return bytes(raw)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(bytes(raw), limit + 1)
        if len(body) > limit or inflater.unconsumed_tail:
            raise IngestError(413, "request too large", f"the body is over {limit} bytes once decompressed")
        body += inflater.flush()
    except zlib.error as exc:
        raise IngestError(400, "invalid", f"the gzip body is damaged: {exc}") from None
    if len(body) > limit:
        raise IngestError(413, "request too large", f"the body is over {limit} bytes once decompressed")
    if not inflater.eof:
        raise IngestError(400, "invalid", "the gzip body is cut short")
    return body


def _time(number: int, timestamp: int | None, now: datetime) -> datetime:
    if timestamp is None:
        raise invalid(number, "no timestamp (a rollup or event line carries its time in ns)")
    moment = _EPOCH + timedelta(microseconds=timestamp // 1000)
    if moment < _OLDEST or moment > now + FUTURE_SLACK:
        raise invalid(number, f"timestamp {timestamp} ({moment:%Y-%m-%d %H:%M:%S} UTC) is out of range "
                              f"(before 2000 or more than {int(FUTURE_SLACK.total_seconds() // 60)} minutes ahead "
                              f"of the appliance's clock {now:%Y-%m-%d %H:%M:%S} UTC; node clock or precision?)")
    return moment


def unprintable(text: str, allowed: str = "") -> str | None:
    """The first control character (Unicode Cc: NUL, C0, DEL, C1) or format character (Cf: the
    bidirectional overrides and isolates, zero-width joiners, ...) of `text`, as U+XXXX at its position;
    None when there is none. PostgreSQL refuses NUL in text and JSON; the others would reach a page, a
    report or a terminal and reorder or hide what is around them."""
    for position, char in enumerate(text):
        if char not in allowed and unicodedata.category(char) in ("Cc", "Cf"):
            return f"U+{ord(char):04X} at character {position + 1}"
    return None


def _printable(number: int, what: str, text: str, allowed: str = "") -> None:
    found = unprintable(text, allowed)
    if found:
        raise invalid(number, f"{what}: a control or format character ({found})")


def _bucket(number: int, timestamp: int | None, now: datetime) -> datetime:
    moment = _time(number, timestamp, now)
    if timestamp % (MINUTE * 1_000_000_000):
        raise invalid(number, f"bucket start {timestamp} is not on a minute boundary")
    return moment


def _tag(number: int, tags: dict, name: str, pattern: re.Pattern, required: bool = False) -> str:
    value = tags.get(name)
    if value is None:
        if required:
            raise invalid(number, f"no {name} tag")
        return ""
    _printable(number, f"tag {name}", value)
    if not pattern.fullmatch(value):
        raise invalid(number, f"tag {name}={value[:60]!r} does not match {pattern.pattern}")
    return value


def _fields(number: int, measurement: str, fields: dict) -> dict:
    """The line's fields checked against its measurement's: known names, numbers where numbers go,
    whole numbers within range for counts."""
    spec = FIELDS[measurement]
    values = {}
    for name, value in fields.items():
        kind = spec.get(name)
        if kind is None:
            raise invalid(number, f"unknown field {name!r} of {measurement} (known: {', '.join(spec)})")
        if kind == STRING:
            if not isinstance(value, str):
                raise invalid(number, f"field {name}: expected a quoted string")
            # a detail is JSON text (its strings are checked once decoded); whitespace between tokens is JSON's
            _printable(number, f"field {name}", value, allowed="\t\n\r" if name == "detail" else "")
        elif isinstance(value, bool | str):
            raise invalid(number, f"field {name}: expected a number")
        elif kind == FLOAT:
            value = float(value)
            # power and energy: at least 0 here, at most what the GPU's limit allows in _one
            low, high = FIELD_RANGES.get(name, (0, math.inf))
            if not low <= value <= high:  # NaN fails too
                raise invalid(number, f"field {name}: {value!r} is out of range ({low} to {high})")
        else:
            if isinstance(value, float):
                if not value.is_integer():
                    raise invalid(number, f"field {name}: expected a whole number, got {value!r}")
                value = int(value)
            if not 0 <= value <= kind:
                raise invalid(number, f"field {name}: {value} is out of range (0 to {kind})")
        values[name] = value
    step = values.pop("step", MINUTE)
    if step != MINUTE:
        raise invalid(number, f"field step: a collector sends per-minute rollups (step=60), not step={step}")
    return values


@dataclass
class Write:
    """What one write holds, checked, keyed as the database keys it (later lines win)."""

    gpus: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    mounts: dict = field(default_factory=dict)
    events: dict = field(default_factory=dict)
    report: tuple | None = None  # (time ns, fields) of the newest collector line
    lines: int = 0


def inventory_gpus(node_name: str) -> dict[int, GPU]:
    """The node's GPUs as its inventory has them, by NVML index."""
    return {gpu.index: gpu for gpu in GPU.objects.filter(node__name=node_name).only("index", "model", "mig_capable")}


def parse(text: str, node_name: str, precision: str = "ns", now: datetime | None = None,
          gpus: dict[int, GPU] | None = None) -> Write:
    """Every line of a write, checked; IngestError 400 names the first bad line, 403 the first line
    of another node. `gpus`: the node's GPUs (inventory_gpus; read here when not given)."""
    now = now or timezone.now()
    gpus = inventory_gpus(node_name) if gpus is None else gpus
    write = Write()
    try:
        for number, line in iter_lines(text, precision, MAX_LINES, MAX_LINE_CHARS):
            write.lines += 1
            _one(write, number, line, node_name, now, gpus)
    except LineError as error:
        if getattr(error, "line", None) is None:
            raise IngestError(400, "invalid", str(error)) from None
        raise invalid(error.line, str(error)) from None
    return write


def _power_limit(number: int, name: str, value, limit_w: float, what: str, seconds: float = 1.0) -> None:
    if value is not None and value > limit_w * POWER_SLACK * seconds:
        raise invalid(number, f"field {name}: {value!r} is out of range (0 to {limit_w * POWER_SLACK * seconds:g}: "
                              f"{POWER_SLACK:g} x {what})")


def _one(write: Write, number: int, line, node_name: str, now: datetime, gpus: dict[int, GPU]) -> None:
    measurement, tags = line.measurement, line.tags
    known = TAGS.get(measurement)
    if known is None:
        raise invalid(number, f"unknown measurement {measurement[:60]!r} (expected one of {', '.join(TAGS)})")
    required, optional = known
    for name in tags:
        if name not in required and name not in optional:
            raise invalid(number, f"unknown tag {name[:60]!r} of {measurement}")
    host = tags.get("Hostname")
    if host is None:
        raise invalid(number, "no Hostname tag")
    if host != node_name:
        raise IngestError(403, "forbidden", f"line {number}: Hostname={host[:63]!r} is not this token's node "
                                            f"({node_name}): a node writes only its own series")
    values = _fields(number, measurement, line.fields)
    if measurement == "gpu_rollup":
        gpu = int(_tag(number, tags, "gpu", _GPU_INDEX, required=True))
        instance = _tag(number, tags, "GPU_I_ID", _INSTANCE)
        known = gpus.get(gpu)
        if known is None:
            raise invalid(number, f"tag gpu={gpu}: {node_name} has no GPU {gpu} in the inventory (its GPUs: "
                                  f"{', '.join(map(str, sorted(gpus))) or 'none'})")
        if instance and not known.mig_capable:
            raise invalid(number, f"tag GPU_I_ID={instance}: GPU {gpu} of {node_name} ({known.model}) is not "
                                  "MIG-capable in the inventory")
        limit = gpu_power_limit_w(known.model)
        for name in ("power_w", "power_max_w"):
            _power_limit(number, name, values.get(name), limit, f"the {known.model} limit of {limit:g} W")
        _power_limit(number, "energy_j", values.get("energy_j"), limit, f"{limit:g} W over 60 s", seconds=MINUTE)
        start = _bucket(number, line.timestamp, now)
        job = _tag(number, tags, "hpc_job", _JOB)
        row = {**_GPU_DEFAULTS, **values, "job": job, "holders": _holders(number, values.get("holders", ""), job),
               "uuid": _tag(number, tags, "UUID", _UUID), "profile": _tag(number, tags, "GPU_I_PROFILE", _PROFILE)}
        write.gpus[(gpu, int(instance) if instance else WHOLE_GPU, start)] = row
    elif measurement == "node_rollup":
        if values.get("gpus", 0) > len(gpus):
            raise invalid(number, f"field gpus: {values['gpus']} is out of range (0 to {len(gpus)}: the GPUs of "
                                  f"{node_name} in the inventory)")
        limit = sum(gpu_power_limit_w(gpu.model) for gpu in gpus.values())
        _power_limit(number, "gpu_power_w", values.get("gpu_power_w"), limit,
                     f"the {len(gpus)} GPUs' limits of {limit:g} W")
        write.nodes[_bucket(number, line.timestamp, now)] = {**_NODE_DEFAULTS, **values}
    elif measurement == "mount_rollup":
        start = _bucket(number, line.timestamp, now)
        mount = _tag(number, tags, "mount", _MOUNT, required=True)
        fstype = _tag(number, tags, "fstype", _FSTYPE, required=True)
        write.mounts.setdefault(start, {})[mount] = {"fstype": fstype, "read_bps": values.get("read_bps"),
                                                     "write_bps": values.get("write_bps")}
    elif measurement == "event":
        _event(write, number, line, tags, values, now)
    else:
        if not _VERSION.match(values.get("version", "")):
            raise invalid(number, "field version: at most 40 printable characters")
        if values.get("interval_s", 1.0) <= 0:
            raise invalid(number, f"field interval_s: {values['interval_s']} is not more than 0")
        timestamp = line.timestamp or 0
        if write.report is None or timestamp >= write.report[0]:
            write.report = (timestamp, values)


def _holders(number: int, text: str, job: str) -> str:
    """A minute's holders as stored (holders.py): each job with the one job pattern, seconds from 0 to 60
    adding up to 60 at most, and the line's hpc_job among them."""
    try:
        found = holders.parse(text, MINUTE)
    except holders.HoldersError as exc:
        raise invalid(number, f"field holders: {exc}") from None
    if found and job and job not in {name for name, _ in found}:
        raise invalid(number, f"field holders: hpc_job={job} is not one of them (the holder of the most seconds)")
    return holders.as_text(found)


def _event(write: Write, number: int, line, tags: dict, values: dict, now: datetime) -> None:
    kind = tags["kind"]
    if kind not in HardwareEvent.Kind.values:
        raise invalid(number, f"tag kind={kind[:40]!r}: expected one of {', '.join(HardwareEvent.Kind.values)}")
    gpu = _tag(number, tags, "gpu", _GPU_INDEX)
    device = _tag(number, tags, "device", _DEVICE)
    message = values.get("message", "")
    if len(message) > MAX_MESSAGE_CHARS or "\n" in message:
        raise invalid(number, f"field message: one line of at most {MAX_MESSAGE_CHARS} characters")
    detail_text = values.get("detail", "")
    if len(detail_text) > MAX_DETAIL_CHARS:
        raise invalid(number, f"field detail: at most {MAX_DETAIL_CHARS} characters")
    try:
        detail = json.loads(detail_text) if detail_text else {}
    except ValueError as exc:
        raise invalid(number, f"field detail: not JSON ({exc})") from None
    if not isinstance(detail, dict):
        raise invalid(number, "field detail: expected a JSON object")
    for text in _strings(detail):
        _printable(number, "field detail", text, allowed="\t\n")
    moment = _time(number, line.timestamp, now)
    write.events[(kind, int(gpu) if gpu else None, device, moment)] = {"message": message, "detail": detail}


def _strings(value):
    """Every string of a decoded JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@dataclass
class Stored:
    gpu_rows: int = 0
    node_rows: int = 0
    events: int = 0
    new_events: int = 0
    lines: int = 0
    refolded: list = field(default_factory=list)
    unverified: dict = field(default_factory=dict)  # job ids no scheduler puts on the node: {job: rows}
    unavailable: list = field(default_factory=list)  # placement providers that could not answer


def store(collector: NodeCollector, write: Write, now: datetime | None = None) -> Stored:
    """Everything of one write, in one transaction."""
    now = now or timezone.now()
    node = collector.node
    stored = Stored(lines=write.lines)
    # Before the transaction: the question to a scheduler (when one is needed) holds no lock.
    verdict = placements.verify(node, write.gpus, now)
    stored.unverified, stored.unavailable = verdict.unverified, verdict.unavailable
    with transaction.atomic():
        if write.gpus:
            rows = [{"node": node.pk, "gpu": gpu, "instance": instance, "step": MINUTE, "start": start, **values}
                    for (gpu, instance, start), values in write.gpus.items()]
            upsert(GpuRollup, GPU_UNIQUE, GPU_COLUMNS, rows)
            stored.gpu_rows = len(rows)
        _store_nodes(node, write)
        # and the node's frame of each minute written, from its GPU and node rows as stored now (what the
        # ledger reads): a minute's node row may come in a later write than its GPU rows
        frames.build(_starts(write), [node.pk])
        stored.node_rows = len(write.nodes.keys() | write.mounts.keys())
        stored.events, stored.new_events = len(write.events), _store_events(node, write.events, now)
        _store_report(collector, write, now)
        # Minutes of an hour the periodic fold has passed already (a buffer draining after an outage):
        # that hour's per-hour row is folded again with them, and so are the 5- and 10-minute buckets the
        # fold has made, and the fleet's minutes it has summed (the Overview's totals).
        stored.refolded = services.refold_late(node.pk, _starts(write), now=now)
        services.refold_fleet([*write.nodes, *write.mounts], node_ids=[node.pk])
    return stored


def _starts(write: Write) -> list[datetime]:
    return [start for _, _, start in write.gpus] + list(write.nodes) + list(write.mounts)


def _store_nodes(node, write: Write) -> None:
    with_mounts, without_mounts = [], []
    for start, values in write.nodes.items():
        mounts = write.mounts.get(start)
        row = {"node": node.pk, "step": MINUTE, "start": start, "mounts": mounts or {}, **values}
        (with_mounts if mounts is not None else without_mounts).append(row)
    if with_mounts:
        upsert(NodeRollup, NODE_UNIQUE, NODE_COLUMNS + ["mounts"], with_mounts)
    if without_mounts:
        # Mounts a write does not carry stay as stored: they may have come in another write.
        upsert(NodeRollup, NODE_UNIQUE, NODE_COLUMNS, without_mounts, insert_only=("mounts",))
    only_mounts = [start for start in write.mounts if start not in write.nodes]
    if only_mounts:
        existing = {row.start: row for row in NodeRollup.objects.filter(node=node, step=MINUTE, start__in=only_mounts)}
        for start in only_mounts:
            row = existing.get(start)
            if row is None:
                NodeRollup.objects.create(node=node, step=MINUTE, start=start, mounts=write.mounts[start])
            else:
                row.mounts = {**row.mounts, **write.mounts[start]}
                row.save(update_fields=["mounts"])


def _store_events(node, events: dict, now: datetime) -> int:
    """Events new to the database are added; one sent again keeps its acknowledgement. The unique key
    holds NULL (a GPU-less event), which no database treats as equal, so duplicates are found here."""
    if not events:
        return 0
    times = sorted({key[3] for key in events})
    existing = {}
    for offset in range(0, len(times), 500):
        for event in HardwareEvent.objects.filter(node=node, time__in=times[offset:offset + 500]):
            existing[(event.kind, event.gpu, event.device, event.time)] = event
    new, changed = [], []
    for (kind, gpu, device, moment), values in events.items():
        event = existing.get((kind, gpu, device, moment))
        if event is None:
            alert = kind in ALERT_KINDS
            new.append(HardwareEvent(node=node, kind=kind, gpu=gpu, device=device, time=moment,
                                     acknowledged_at=None if alert else now, **values))
        elif (event.message, event.detail) != (values["message"], values["detail"]):
            event.message, event.detail = values["message"], values["detail"]
            changed.append(event)
    HardwareEvent.objects.bulk_create(new, batch_size=500)
    if changed:
        HardwareEvent.objects.bulk_update(changed, ["message", "detail"], batch_size=500)
    return len(new)


def live_gpu_rows(blob, jobs: str) -> dict[int, tuple[list[float], str]]:
    """NodeCollector.live_gpus and live_gpu_jobs read back: {GPU index: (its LIVE_GPU_COLUMNS, its job)};
    empty when there are none or they do not have the shape this version writes."""
    if not blob:
        return {}
    values = np.frombuffer(bytes(blob), dtype="<f8")
    width = len(LIVE_GPU_COLUMNS)
    names = (jobs or "").split("\n")
    if len(values) % width or len(names) != len(values) // width:
        return {}
    rows = values.reshape(-1, width).tolist()
    return {int(row[0]): (row, job) for row, job in zip(rows, names, strict=True)}


def _live_gpus(collector: NodeCollector, write: Write) -> tuple[bytes, str] | None:
    """The collector's live_gpus and live_gpu_jobs with the write's whole-GPU minutes merged in (a GPU's row
    is replaced by a minute as new or newer: a minute sent again with other values is what its rollup row
    now holds); None when the write carries no whole-GPU minute. Read under the row's lock, in the write's
    transaction: two writes of one node cannot lose each other's GPUs."""
    newest: dict[int, tuple[list, str]] = {}
    for (gpu, instance, start), values in write.gpus.items():
        if instance != WHOLE_GPU:
            continue
        row = [float(gpu), float(int(start.timestamp())),
               *(np.nan if values.get(name) is None else float(values[name]) for name in LIVE_GPU_FIELDS)]
        if gpu not in newest or row[1] >= newest[gpu][0][1]:
            newest[gpu] = (row, values.get("job") or "")
    if not newest:
        return None
    # Raw SQL: the ORM's compilation of this one-row read cost more than the rest of the merge.
    connection = connections[router.db_for_write(NodeCollector)]
    meta, quote = NodeCollector._meta, connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(name).column) for name in ("live_gpus", "live_gpu_jobs"))
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""  # SQLite: the write lock is held
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} = %s{lock}",
                       [collector.pk])
        stored = cursor.fetchone() or (None, "")
    kept = live_gpu_rows(*stored)
    for gpu, entry in newest.items():
        if gpu not in kept or entry[0][1] >= kept[gpu][0][1]:
            kept[gpu] = entry
    order = sorted(kept)
    return (np.array([kept[gpu][0] for gpu in order], dtype="<f8").tobytes(),
            "\n".join(kept[gpu][1] for gpu in order))


def _store_report(collector: NodeCollector, write: Write, now: datetime) -> None:
    changes = {"last_seen": now}
    starts = _starts(write)
    if starts:
        newest = max(starts)
        if collector.last_bucket is None or newest > collector.last_bucket:
            changes["last_bucket"] = newest
    live = _live_gpus(collector, write)
    if live is not None:
        changes["live_gpus"], changes["live_gpu_jobs"] = live
    if write.report is not None:
        values = write.report[1]
        last_sweep = values.get("last_sweep_ns")
        last_sweep = _EPOCH + timedelta(microseconds=last_sweep // 1000) if last_sweep else None
        # A report older than the one stored (a resend after an outage) does not move the state back.
        if last_sweep is None or collector.last_sweep is None or last_sweep >= collector.last_sweep:
            if last_sweep is not None:
                changes["last_sweep"] = last_sweep
            for name in ("interval_s", "sweeps", "sweep_errors", "buffer_rows", "buffer_points", "dropped_points"):
                if name in values:
                    changes[name] = values[name]
            if "sink_error" in values:
                changes["sink_error"] = values["sink_error"][:MAX_SINK_ERROR_CHARS]
            if "version" in values:
                changes["version"] = values["version"][:40]
    NodeCollector.objects.filter(pk=collector.pk).update(**changes)
    for name, value in changes.items():
        setattr(collector, name, value)
