"""InfluxDB line protocol, read strictly: what a collector writes to the appliance's ingest endpoint.

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

Escapes as InfluxDB's: in a measurement `\\,` and `\\ `; in tag keys, tag values and field keys also `\\=`;
`\\\\` is a backslash; a backslash before any other character is kept as it is. String field values
are double-quoted with `\\"` and `\\\\` escaped. Numbers: floats (`1`, `-1.5`, `1e3`), integers (`1i`),
unsigned integers (`1u`), booleans (t/T/true/True/TRUE, f/F/false/False/FALSE). Empty lines and lines
starting with `#` are skipped. No package of the lock parses line protocol, so this one is ours; its
cases are in tests/telemetry/test_lineprotocol.py.

Most lines a collector sends carry neither a backslash nor a quote: those are split with str.split,
the rest go through a scanner that honours escapes and quoted strings. Both give the same result.
"""

from __future__ import annotations

import math
import re

PRECISIONS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_INTEGER = re.compile(r"[+-]?\d+\Z")
_UNSIGNED = re.compile(r"\d+\Z")
_TRUE = frozenset(("t", "T", "true", "True", "TRUE"))
_FALSE = frozenset(("f", "F", "false", "False", "FALSE"))
_KEY_ESCAPES = frozenset(", =\\")
_MEASUREMENT_ESCAPES = frozenset(", \\")


class LineError(ValueError):
    """What is wrong with one line (without its number: the caller knows it)."""


class Line:
    __slots__ = ("measurement", "tags", "fields", "timestamp")

    def __init__(self, measurement: str, tags: dict[str, str], fields: dict, timestamp: int | None):
        self.measurement, self.tags, self.fields, self.timestamp = measurement, tags, fields, timestamp

    def __repr__(self):
        return f"Line({self.measurement!r}, {self.tags!r}, {self.fields!r}, {self.timestamp!r})"


def _unescape(text: str, escapable: frozenset) -> str:
    if "\\" not in text:
        return text
    out, i, end = [], 0, len(text)
    while i < end:
        char = text[i]
        if char == "\\" and i + 1 < end and text[i + 1] in escapable:
            out.append(text[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _split_escaped(text: str, separator: str) -> list[str]:
    """Split at the separators not preceded by a backslash (pieces still escaped)."""
    pieces, start, i, end = [], 0, 0, len(text)
    while i < end:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == separator:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return pieces


def _unquoted(text: str, i: int, separator: str) -> int:
    """Index of the next unescaped `separator` from i that is outside a quoted string field value (a quote
    opens one only right after an unescaped `=`), or len(text)."""
    end, quoted, after_equals = len(text), False, False
    while i < end:
        char = text[i]
        if quoted:
            if char == "\\":
                i += 2
                continue
            if char == '"':
                quoted = False
            i += 1
            continue
        if char == "\\":
            i += 2
            after_equals = False
            continue
        if char == '"' and after_equals:
            quoted = True
        elif char == separator:
            return i
        after_equals = char == "="
        i += 1
    if quoted:
        raise LineError("a string field value has no closing quote")
    return end


def _split_fields(text: str) -> list[str]:
    """Split the field set at commas outside quoted string values (pieces still escaped)."""
    pieces, start = [], 0
    while True:
        i = _unquoted(text, start, ",")
        pieces.append(text[start:i])
        if i >= len(text):
            return pieces
        start = i + 1


def _sections(line: str) -> tuple[str, str, str | None]:
    """The line's measurement-and-tags, field set and timestamp, split at unescaped spaces outside
    quoted field values."""
    i, end = 0, len(line)
    while i < end:
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char == " ":
            break
        i += 1
    if i >= end:
        raise LineError("no field set (expected a space after the measurement and tags)")
    key, start = line[:i], i + 1
    i = _unquoted(line, start, " ")
    fields = line[start:i]
    timestamp = line[i + 1:] if i < end else None
    return key, fields, timestamp


def _pair(piece: str, what: str) -> tuple[str, str]:
    i, end = 0, len(piece)
    while i < end:
        char = piece[i]
        if char == "\\":
            i += 2
            continue
        if char == "=":
            return piece[:i], piece[i + 1:]
        i += 1
    raise LineError(f"{what} {piece[:60]!r} has no '='")


def field_value(raw: str, name: str):
    """A field value as Python: float, int, bool or str."""
    if not raw:
        raise LineError(f"field {name} has no value")
    first, last = raw[0], raw[-1]
    if first == '"':
        if len(raw) < 2 or last != '"':
            raise LineError(f"field {name}: a string value must end with a double quote")
        body = raw[1:-1]
        if "\\" in body:
            body = _unescape(body, frozenset('"\\'))
        return body
    if last == "i" and _INTEGER.match(raw, 0, len(raw) - 1) and len(raw) > 1:
        value = int(raw[:-1])
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise LineError(f"field {name}: integer {raw} is out of the 64-bit range")
        return value
    if last == "u" and len(raw) > 1 and _UNSIGNED.match(raw, 0, len(raw) - 1):
        value = int(raw[:-1])
        if value > UINT64_MAX:
            raise LineError(f"field {name}: unsigned integer {raw} is out of the 64-bit range")
        return value
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if not _FLOAT.match(raw):
        raise LineError(f"field {name}: {raw[:40]!r} is not a number, a boolean or a quoted string")
    value = float(raw)
    if not math.isfinite(value):
        raise LineError(f"field {name}: {raw[:40]} is not a finite number")
    return value


def parse_line(line: str, precision: str = "ns") -> Line:
    """One line (without its newline) as a Line; LineError says what is wrong."""
    if "\\" not in line and '"' not in line:
        sections = line.split(" ")
        if len(sections) < 2:
            raise LineError("no field set (expected a space after the measurement and tags)")
        if len(sections) > 3:
            raise LineError("unexpected text after the timestamp (an unescaped space?)")
        key_pieces = sections[0].split(",")
        field_pieces = sections[1].split(",")
        timestamp_text = sections[2] if len(sections) == 3 else None
        escaped = False
    else:
        key, fields_text, timestamp_text = _sections(line)
        if timestamp_text is not None and " " in timestamp_text:
            raise LineError("unexpected text after the timestamp (an unescaped space?)")
        key_pieces = _split_escaped(key, ",")
        field_pieces = _split_fields(fields_text)
        escaped = True

    measurement = _unescape(key_pieces[0], _MEASUREMENT_ESCAPES) if escaped else key_pieces[0]
    if not measurement:
        raise LineError("no measurement name")
    tags: dict[str, str] = {}
    for piece in key_pieces[1:]:
        name, value = _pair(piece, "tag") if escaped else _plain_pair(piece, "tag")
        if escaped:
            name, value = _unescape(name, _KEY_ESCAPES), _unescape(value, _KEY_ESCAPES)
        if not name or not value:
            raise LineError(f"tag {piece[:60]!r}: empty key or value")
        if name in tags:
            raise LineError(f"tag {name} appears twice")
        tags[name] = value
    fields: dict = {}
    for piece in field_pieces:
        if not piece:
            raise LineError("empty field (two commas, or a comma at the end of the field set)")
        name, raw = _pair(piece, "field") if escaped else _plain_pair(piece, "field")
        if escaped:
            name = _unescape(name, _KEY_ESCAPES)
        if not name:
            raise LineError(f"field {piece[:60]!r} has no name")
        if name in fields:
            raise LineError(f"field {name} appears twice")
        fields[name] = field_value(raw, name)
    timestamp = None
    if timestamp_text is not None:
        if not _INTEGER.match(timestamp_text):
            raise LineError(f"timestamp {timestamp_text[:40]!r} is not an integer")
        timestamp = int(timestamp_text) * PRECISIONS[precision]
        if not -INT64_MAX - 1 <= timestamp <= INT64_MAX:
            raise LineError(f"timestamp {timestamp_text[:40]} is out of range")
    return Line(measurement, tags, fields, timestamp)


def _plain_pair(piece: str, what: str) -> tuple[str, str]:
    name, equals, value = piece.partition("=")
    if not equals:
        raise LineError(f"{what} {piece[:60]!r} has no '='")
    return name, value


def iter_lines(text: str, precision: str = "ns", max_lines: int | None = None, max_line_chars: int | None = None):
    """(line number, Line) for every line that is not empty or a comment; LineError carries the number
    in its `line` attribute."""
    if precision not in PRECISIONS:
        raise LineError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    count = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r").lstrip(" \t")
        if not line or line[0] == "#":
            continue
        count += 1
        if max_lines is not None and count > max_lines:
            error = LineError(f"more than {max_lines} lines in one write")
            error.line = number
            raise error
        if max_line_chars is not None and len(line) > max_line_chars:
            error = LineError(f"longer than {max_line_chars} characters")
            error.line = number
            raise error
        try:
            yield number, parse_line(line, precision)
        except LineError as error:
            error.line = number
            raise
