"""Verification of an exported bundle (offline: no database, no network, no Django settings) and of
the live log.

What is checked: every record's hash against its exact bytes, the chain links, sequence continuity,
the Merkle tree (range root, the tree head at every signed checkpoint inside the range, the
consistency proof to the checkpoint after it), the signatures of the manifest, checkpoints and
tombstones. The first problem found is reported with its sequence number and one of the damage
kinds below, told apart this way:

- modified: a record whose bytes no longer match its hash, or a record whose hash was recomputed
  (the next record's link breaks, or the signed tree head disagrees);
- deleted: a gap in the sequence whose missing record appears nowhere;
- inserted: a line that is not the record expected there while the expected one follows, a record
  whose sequence number occurs twice, or one past the end of the range;
- reordered: a gap whose missing record appears later;
- truncated: fewer records than the manifest or a checkpoint says, or a last line cut short;
- bad signature / unknown key: a signed statement that does not verify, or one signed by a key that
  is not the one trusted, or by a key past its end (its handover, from the bundle or from the key list).

Trust comes from outside the bundle: a public key obtained independently (--public-key) or the
appliance's published key list (--key-list, signing.read_key_list), which also says when each key was
handed over, so a bundle that leaves a handover out is still judged by it. A bundle checked only
against its own public-key.pem proves nothing about who made it: the result is "unverified: no trusted
key" (`trusted` False), whatever the bundle holds.

A selection bundle (the records an audit filter chose, scattered through the chain) has no chain to
follow: each record is checked against its hash and its inclusion proof (proofs.jsonl) against the
signed checkpoint the manifest names, the sequence numbers must rise, the count match the signed
manifest, and every record must match the filter the manifest states. That the selection is
complete (holds every record the filter matches) only the live log can show; the summary says so.

A bundle is checked on a fast path first: hashing the stored line bytes, reading the sequence and
the link at known places, without parsing JSON. Any doubt sends it to the careful path, which
parses every line and classifies.
"""

import binascii
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from ..core.files import sha256_file
from . import chain, merkle, signing

MODIFIED = "modified"
DELETED = "deleted"
INSERTED = "inserted"
REORDERED = "reordered"
TRUNCATED = "truncated"
BAD_SIGNATURE = "bad signature"
UNKNOWN_KEY = "unknown key"
DAMAGE_KINDS = (MODIFIED, DELETED, INSERTED, REORDERED, TRUNCATED, BAD_SIGNATURE, UNKNOWN_KEY)

MANIFEST_NAME = "manifest.json"
PUBLIC_KEY_NAME = "public-key.pem"
RECORDS_NAME = "records.jsonl"
PROOFS_NAME = "proofs.jsonl"


@dataclass
class Finding:
    kind: str
    sequence: int | None
    message: str
    where: str = ""

    def __str__(self):
        at = f" at #{self.sequence}" if self.sequence is not None else ""
        place = f" ({self.where})" if self.where else ""
        return f"{self.kind}{at}: {self.message}{place}"


@dataclass
class VerificationResult:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    first_sequence: int | None = None
    last_sequence: int | None = None
    checkpoints: int = 0
    tombstones: int = 0
    key_id: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # The filter the manifest states ({} for the whole log), and whether the bundle is a selection
    # proven record by record (not a contiguous range).
    filter: dict = field(default_factory=dict)
    selection: bool = False
    checkpoint_tree_size: int | None = None
    # Whether the signatures were checked against a key (or key list) obtained outside the bundle.
    trusted: bool = True

    @property
    def ok(self) -> bool:
        """No damage found (against whichever key was used: see `verified`)."""
        return not self.findings

    @property
    def verified(self) -> bool:
        """No damage, against a key obtained outside the bundle."""
        return self.ok and self.trusted

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def summary(self) -> str:
        if self.ok and not self.trusted:
            consistent = self.checked_summary().removeprefix("intact: ")
            return (f"unverified: no trusted key: {consistent}, consistent only with the bundle's own "
                    "public-key.pem, which whoever made it chose; check it with --key-list (the appliance's "
                    "published key list) or --public-key (a key obtained independently)")
        return self.checked_summary()

    def checked_summary(self) -> str:
        if self.ok:
            span = f"#{self.first_sequence}..#{self.last_sequence}" if self.records else "no records"
            stated = ", ".join(f"{name}={value}" for name, value in self.filter.items())
            if self.selection:
                return (f"intact: a selection of {self.records} records ({span}) matching {stated}, each proven "
                        f"included in signed checkpoint #{self.checkpoint_tree_size}, key {self.key_id}; "
                        "that it holds every matching record only the live log can show")
            where = f" matching {stated}" if stated else ""
            return (f"intact: {self.records} records ({span}){where}, {self.checkpoints} signed checkpoints, "
                    f"{self.tombstones} tombstones, key {self.key_id}")
        return f"DAMAGED: {self.first}"


class Stop(Exception):
    """Ends a verification at its first finding."""

    def __init__(self, finding: Finding):
        self.finding = finding


# -- signed statements -----------------------------------------------------------------------------

class TrustedKeys(dict):
    """The trusted keys by id, with when each retired key was handed over (signing.retirements)."""

    def __init__(self, keys: dict, retired: dict | None = None):
        super().__init__(keys)
        self.retired = retired or {}


def check_statement(statement: dict, keys: dict, what: str, sequence: int | None) -> Finding | None:
    """Whether `statement` carries a good signature by one of the trusted `keys` (id -> public key),
    and, if that key was handed over, speaks only for the log before its handover."""
    if not isinstance(statement, dict) or "signature" not in statement:
        return Finding(BAD_SIGNATURE, sequence, f"{what} carries no signature")
    public_key = keys.get(statement.get("key_id"))
    if public_key is None:
        return Finding(UNKNOWN_KEY, sequence, f"{what} is signed by key {statement.get('key_id')!r}, "
                                              f"the trusted key{'s are' if len(keys) > 1 else ' is'} "
                                              f"{', '.join(keys)}")
    signature = statement["signature"]
    try:
        message = chain.signed_statement(chain.unsigned(statement))
    except (TypeError, ValueError) as exc:
        return Finding(BAD_SIGNATURE, sequence, f"{what} cannot be canonicalized ({exc})")
    if not isinstance(signature, str) or not signing.verify_signature(public_key, message, signature):
        return Finding(BAD_SIGNATURE, sequence, f"the signature of {what} does not verify")
    retired = signing.retired_problem(statement, getattr(keys, "retired", {}).get(statement.get("key_id")))
    if retired:
        return Finding(BAD_SIGNATURE, sequence, f"{what} is signed by retired key {statement.get('key_id')}: "
                                                f"{retired}")
    return None


# -- the careful path: parse every line, classify the first problem ---------------------------------

@dataclass
class _Line:
    number: int
    raw: bytes
    intact: bool = False  # parsed, well-formed, canonical, and its hash matches its bytes
    cut: bool = False  # the file's last line, unterminated, ending where the JSON needed more
    sequence: int | None = None
    prev_hash: str | None = None
    hash: str | None = None


def _examine(number: int, raw: bytes, is_last: bool) -> _Line:
    if is_last and not raw.endswith(b"\n"):
        # Every line is written newline-terminated: an unterminated last line was cut. Cut right
        # after its closing brace it is a whole record that lost its newline; cut anywhere else the
        # JSON needs more input (not "extra data", which is a changed byte, not a cut).
        whole = _examine(number, raw + b"\n", False)
        if whole.intact:
            whole.raw, whole.intact, whole.cut = raw, False, True
            return whole
    line = _Line(number, raw)
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        ran_out = (exc.msg != "Extra data" if isinstance(exc, json.JSONDecodeError)
                   else exc.reason == "unexpected end of data")
        line.cut = is_last and not raw.endswith(b"\n") and ran_out
        return line
    if not isinstance(obj, dict) or set(obj) != {"hash", "record"}:
        return line
    record, claimed = obj["record"], obj["hash"]
    if not isinstance(record, dict) or set(record) != set(chain.PAYLOAD_FIELDS) or not isinstance(claimed, str):
        return line
    sequence, prev_hash = record.get("sequence"), record.get("prev_hash")
    if type(sequence) is not int or not isinstance(prev_hash, str):
        return line
    line.sequence, line.prev_hash, line.hash = sequence, prev_hash, claimed
    try:
        payload_bytes = chain.canonical(record)
    except (TypeError, ValueError):
        return line
    line.intact = (hashlib.sha256(payload_bytes).hexdigest() == claimed
                   and raw == chain.export_line(payload_bytes, claimed))
    return line


def classify_lines(raw_lines: list[bytes], first_sequence: int, first_prev_hash: str, expected_count: int,
                   where: str) -> tuple[Finding | None, list[_Line]]:
    """The first problem in a records file, by kind and position (see the module's docstring)."""
    lines = [_examine(i + 1, raw, i == len(raw_lines) - 1) for i, raw in enumerate(raw_lines)]
    last_sequence = first_sequence + expected_count - 1
    occurrences: dict[int, int] = {}
    for line in lines:
        if line.intact:
            occurrences[line.sequence] = occurrences.get(line.sequence, 0) + 1
    expected, prev = first_sequence, first_prev_hash

    def at(line: _Line) -> str:
        return f"{where}:{line.number}"

    def is_expected(line: _Line | None) -> bool:
        return line is not None and line.intact and line.sequence == expected and line.prev_hash == prev

    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else None
        if line.intact and line.sequence == expected and line.prev_hash == prev and expected <= last_sequence:
            expected, prev = expected + 1, line.hash
            continue
        if not line.intact:
            if line.cut:
                return Finding(TRUNCATED, expected, "the last line is cut short", at(line)), lines
            if is_expected(following):
                return Finding(INSERTED, expected, "a line that is no record of this log precedes it", at(line)), lines
            return Finding(MODIFIED, expected, "the record's bytes do not match its hash", at(line)), lines
        if line.sequence > last_sequence or line.sequence < first_sequence or occurrences[line.sequence] > 1:
            if line.sequence == expected - 1:
                return Finding(INSERTED, line.sequence, f"a second record claims #{line.sequence}", at(line)), lines
            return Finding(INSERTED, expected, f"an extra record claiming #{line.sequence} is here", at(line)), lines
        if line.sequence == expected:
            if is_expected(following):
                return Finding(INSERTED, expected, "a record that does not link here precedes it", at(line)), lines
            if index == 0:
                return Finding(MODIFIED, expected, "the first record does not link to the range's start",
                               at(line)), lines
            return Finding(MODIFIED, expected - 1, f"record #{expected - 1} was rewritten: #{expected} "
                           "does not link to it", at(lines[index - 1])), lines
        if line.sequence > expected:
            later = any(other.intact and other.sequence == expected for other in lines[index + 1:])
            if later:
                return Finding(REORDERED, expected, f"#{line.sequence} comes where #{expected} belongs", at(line)), lines
            return Finding(DELETED, expected, f"#{expected} is missing (the next line is #{line.sequence})",
                           at(line)), lines
        return Finding(REORDERED, expected, f"#{line.sequence} comes after #{expected - 1}", at(line)), lines
    if expected <= last_sequence:
        return Finding(TRUNCATED, expected, f"the records end at #{expected - 1}, the range at #{last_sequence}",
                       where), lines
    return None, lines


# -- the fast path ----------------------------------------------------------------------------------

_PREV_KEY = b'"prev_hash":"'


_SCAN_GROUP = 128


def _scan(handle, first_sequence: int, first_prev_hash: str):
    """Hash and link-check every line without parsing it. Returns (digests, last hash) when every
    line is a well-formed, self-consistent, correctly linked record, or None at the first doubt.

    This loop is the verifier's speed: no JSON, C-level searches and comparisons only, done a group
    of lines at a time (small enough to stay in the CPU's cache) so that each check is one
    comprehension or one comparison of joined bytes rather than Python code per line."""
    sha256 = hashlib.sha256
    prefix, middle = chain.LINE_PREFIX, chain.LINE_MIDDLE
    offset = chain.PAYLOAD_OFFSET
    prev = first_prev_hash.encode("ascii")
    expected = first_sequence
    digests: list[bytes] = []
    hexlify = binascii.hexlify
    while lines := list(islice(handle, _SCAN_GROUP)):
        for line in lines:
            if line[:9] != prefix or line[73:offset] != middle or line[-2:] != b"}\n":
                return None
        group = [sha256(line[offset:-2]).digest() for line in lines]
        claimed = b"".join([line[9:73] for line in lines])
        if hexlify(b"".join(group)) != claimed:  # lower-case hex, exactly as written
            return None
        # In canonical JSON no string holds an unescaped quote and the keys after prev_hash hold no
        # object with free keys, so the last `"prev_hash":"` is the record's own and the only
        # `"sequence":` after it is the record's too. Any other layout fails the hash check above
        # or, on the careful path, the canonical form.
        at = [line.rfind(_PREV_KEY, offset) for line in lines]
        if min(at) < 0 or b"".join([line[i + 13:i + 77] for line, i in zip(lines, at, strict=True)]) \
                != prev + claimed[:-64]:
            return None
        sequences = range(expected, expected + len(lines))
        if min([line.find(b'"sequence":%d,' % n, i) for line, i, n in zip(lines, at, sequences, strict=True)]) < 0:
            return None
        prev = claimed[-64:]
        expected += len(lines)
        digests += group
    return digests, prev.decode("ascii")


def leaves_of(digests: list[bytes]) -> list[bytes]:
    sha256 = hashlib.sha256
    return [sha256(b"\x00" + d).digest() for d in digests]


def level_root(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes, a level at a time: the same tree as RFC 6962's recursion (a left-full
    tree), built with one list comprehension per level instead of a Python loop per leaf."""
    if not leaves:
        return merkle.EMPTY_ROOT
    sha256 = hashlib.sha256
    level = leaves
    while len(level) > 1:
        paired = [sha256(b"\x01" + a + b).digest() for a, b in zip(level[0::2], level[1::2], strict=False)]
        if len(level) & 1:
            paired.append(level[-1])
        level = paired
    return level[0]


# -- bundles ----------------------------------------------------------------------------------------

class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list) -> dict:
    """JSON objects whose keys are unique: with a key twice, two readers of one file may each see
    a different value (Python keeps the last, others the first)."""
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKey(f"the key {key!r} occurs twice in one object")
        mapping[key] = value
    return mapping


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _load_json(path: Path, what: str):
    try:
        return json.loads(path.read_bytes(), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except FileNotFoundError:
        raise Stop(Finding(DELETED, None, f"{what} is missing", str(path))) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # JSONDecodeError and _DuplicateKey are ValueErrors.
        raise Stop(Finding(MODIFIED, None, f"{what} is not valid JSON ({exc})", str(path))) from None


# -- bundle files and the manifest's shape ------------------------------------------------------------

# A bundle file's name: one plain name in the bundle directory, never a path.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _bundle_entries(bundle: Path) -> set[str]:
    """The names in the bundle directory, each a plain file (a link or a directory could make the
    verifier read, or an auditor open, something that is not part of the bundle)."""
    names = set()
    with os.scandir(bundle) as entries:
        for entry in entries:
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                raise Stop(Finding(MODIFIED, None, f"{entry.name} is not a plain file: a bundle holds plain files only",
                                   entry.name))
            names.add(entry.name)
    return names


def _bundle_path(bundle: Path, name: str) -> Path:
    """The path of a file the manifest names, which must lie directly inside the bundle."""
    path = bundle / name
    if not _FILE_NAME.fullmatch(name) or path.resolve().parent != bundle.resolve():
        raise Stop(Finding(MODIFIED, None, f"manifest.json names the file {name!r}, which is not a file of the bundle",
                           MANIFEST_NAME))
    return path


class _Shape:
    """What a manifest value must look like: `kind` names the check, `item` the shape of a list's
    items or a mapping's values, `fields` the shape of an object's fields (others are allowed: they
    are signed, and nothing reads them)."""

    def __init__(self, kind, item=None, fields=None, optional=False):
        self.kind, self.item, self.fields, self.optional = kind, item, fields, optional


def _int(minimum=0):
    return _Shape(("int", minimum))


_STR, _HEX, _NULLABLE_STR = _Shape("str"), _Shape("hex64"), _Shape("str-or-null")
_FRONTIER = _Shape("list", _Shape("frontier-node"))
_STATEMENT = {"key_id": _STR, "signature": _STR}
_FILE = _Shape("object", fields={"name": _Shape("file-name"), "sha256": _HEX})
_MANIFEST = _Shape("object", fields={
    "type": _STR, "format": _STR, "key_id": _STR, "signature": _STR,
    "source": _Shape("object", fields={"version": _STR, "host": _STR}),
    "range": _Shape("object", fields={
        "first_sequence": _int(1), "last_sequence": _int(1), "count": _int(1),
        "first_prev_hash": _HEX, "first_hash": _HEX, "last_hash": _HEX, "root_hash": _HEX,
        "since": _NULLABLE_STR, "until": _NULLABLE_STR}),
    "tree": _Shape("object", fields={
        "prefix_frontier": _FRONTIER, "size": _int(1), "root_hash": _HEX, "checkpoint_tree_size": _int(1),
        "checkpoint_root_hash": _HEX, "consistency_proof": _Shape("list", _HEX)}),
    "checkpoints": _Shape("list", _Shape("object", fields={
        "tree_size": _int(1), "root_hash": _HEX, "last_hash": _HEX, **_STATEMENT})),
    "tombstones": _Shape("list", _Shape("object", fields={
        "first_sequence": _int(1), "last_sequence": _int(1), "last_hash": _HEX, "frontier": _FRONTIER,
        **_STATEMENT})),
    "key_rotations": _Shape("list", optional=True),
    "files": _Shape("mapping", _FILE, fields={"records": _FILE, "display": _FILE, "public_key": _FILE}),
    "event_types": _Shape("mapping", _Shape("object", fields={
        "description": _STR, "ocsf_class": _Shape("ocsf-class"), "ocsf_class_name": _STR,
        "ocsf_activity": _int()})),
})


# A filter's stated value: text, an id, or a time (UTC ISO 8601 text).
_FILTER = _Shape("mapping", _Shape("filter-value"), optional=True)
_MANIFEST.fields["filter"] = _FILTER
_SELECTION_MANIFEST = _Shape("object", fields={
    **{name: shape for name, shape in _MANIFEST.fields.items() if name not in ("range", "tree", "filter")},
    "filter": _Shape("mapping", _Shape("filter-value")),
    "selection": _Shape("object", fields={
        "count": _int(1), "first_sequence": _int(1), "last_sequence": _int(1),
        "checkpoint_tree_size": _int(1), "checkpoint_root_hash": _HEX}),
    "files": _Shape("mapping", _FILE, fields={"records": _FILE, "display": _FILE, "public_key": _FILE,
                                              "proofs": _FILE}),
})


def _shape_problem(value, shape: _Shape, path: str) -> str | None:
    kind = shape.kind
    if isinstance(kind, tuple):
        if type(value) is not int or value < kind[1]:
            return f"{path} must be an integer of at least {kind[1]}"
        return None
    if kind == "str":
        return None if isinstance(value, str) else f"{path} must be a string"
    if kind == "str-or-null":
        return None if value is None or isinstance(value, str) else f"{path} must be a string or null"
    if kind == "hex64":
        return None if isinstance(value, str) and _HEX64.fullmatch(value) else \
            f"{path} must be a SHA-256 digest (64 lower-case hex digits)"
    if kind == "file-name":
        return None if isinstance(value, str) and _FILE_NAME.fullmatch(value) else \
            f"{path} must be the plain name of a file in the bundle"
    if kind == "frontier-node":
        return None if (isinstance(value, list) and len(value) == 2 and type(value[0]) is int and value[0] >= 1
                        and isinstance(value[1], str) and _HEX64.fullmatch(value[1])) else \
            f"{path} must be a [size, hash] pair"
    if kind == "filter-value":
        return None if isinstance(value, str) or type(value) is int else f"{path} must be a string or an integer"
    if kind == "ocsf-class":
        from .export.formats import OCSF_CLASS_MAPPINGS

        return None if type(value) is int and value in OCSF_CLASS_MAPPINGS else \
            f"{path} must be one of the OCSF classes {', '.join(map(str, OCSF_CLASS_MAPPINGS))}"
    if kind == "list":
        if not isinstance(value, list):
            return f"{path} must be a list"
        if shape.item is not None:
            for index, item in enumerate(value):
                problem = _shape_problem(item, shape.item, f"{path}[{index}]")
                if problem:
                    return problem
        return None
    if not isinstance(value, dict):
        return f"{path} must be an object"
    for name, field_shape in (shape.fields or {}).items():
        if name not in value:
            if field_shape.optional:
                continue
            return f"{path}.{name} is missing"
        problem = _shape_problem(value[name], field_shape, f"{path}.{name}")
        if problem:
            return problem
    if kind == "mapping":
        for name, item in value.items():
            problem = _shape_problem(item, shape.item, f"{path}.{name}")
            if problem:
                return problem
    return None


def check_manifest_shape(manifest: dict) -> None:
    """Every manifest field the verifier reads has the type and form it expects, and the files it
    names are the bundle's own (records.jsonl, records.<format>, public-key.pem): a manifest that
    does not is refused with the field's path, whoever signed it."""
    from .export.formats import FORMATS

    selection = isinstance(manifest, dict) and "selection" in manifest
    problem = _shape_problem(manifest, _SELECTION_MANIFEST if selection else _MANIFEST, "manifest")
    if problem is None:
        formatter = FORMATS.get(manifest["format"])
        files = manifest["files"]
        expected = {"records": RECORDS_NAME, "public_key": PUBLIC_KEY_NAME,
                    "display": f"records.{formatter.extension}" if formatter else None}
        if selection:
            expected["proofs"] = PROOFS_NAME
        if formatter is None:
            problem = f"manifest.format {manifest['format']!r} is not one of {', '.join(FORMATS)}"
        elif manifest.get("public_key", PUBLIC_KEY_NAME) != PUBLIC_KEY_NAME:
            problem = f"manifest.public_key must be {PUBLIC_KEY_NAME}"
        else:
            problem = next((f"manifest.files.{role}.name {files[role]['name']!r} must be {name}"
                            for role, name in expected.items() if files[role]["name"] != name), None)
        if problem is None and formatter.name == "jsonl" and files["display"] != files["records"]:
            problem = "manifest.files.display must be the records file itself in a jsonl bundle"
        if problem is None:
            names = [entry["name"] for entry in files.values()]
            duplicated = sorted({name for name in names if names.count(name) > 1} - {RECORDS_NAME})
            if duplicated or MANIFEST_NAME in names:
                problem = f"manifest.files names {', '.join(duplicated) or MANIFEST_NAME} twice"
    if problem:
        raise Stop(Finding(MODIFIED, None, problem, MANIFEST_NAME))


def check_bundle_coverage(bundle: Path, manifest: dict, entries: set[str]) -> None:
    """Every file in the bundle is one the signed manifest lists, and each listed file that no
    other check reads record by record matches its digest."""
    files = manifest["files"]
    covered = {MANIFEST_NAME} | {entry["name"] for entry in files.values()}
    for name in sorted(entries - covered):
        raise Stop(Finding(INSERTED, None, f"{name} is in the bundle but the manifest does not list it", name))
    for role, entry in files.items():
        if role in ("records", "display"):
            continue  # checked record by record, then by digest
        path = _bundle_path(bundle, entry["name"])
        if entry["name"] not in entries:
            raise Stop(Finding(DELETED, None, f"{entry['name']} is missing", entry["name"]))
        if sha256_file(path) != entry["sha256"]:
            raise Stop(Finding(MODIFIED, None, f"{entry['name']} differs from the manifest's digest", entry["name"]))


def _manifest_field(manifest: dict, *keys, kind=None):
    value = manifest
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise Stop(Finding(MODIFIED, None, f"manifest.json has no {'.'.join(keys)}", MANIFEST_NAME))
        value = value[key]
    if kind is not None and not isinstance(value, kind):
        raise Stop(Finding(MODIFIED, None, f"manifest.json: {'.'.join(keys)} has the wrong type", MANIFEST_NAME))
    return value


def verify_bundle(path, public_key_file=None, key_list_file=None) -> VerificationResult:
    """Verify an export bundle directory. Needs no database: only the files. Without a public key or a
    key list the bundle's own key is used and the result is not `trusted`."""
    started = time.perf_counter()
    result = VerificationResult(trusted=public_key_file is not None or key_list_file is not None)
    try:
        _verify_bundle(Path(path), public_key_file, result, key_list_file)
    except Stop as stop:
        result.findings.insert(0, stop.finding)
    result.seconds = time.perf_counter() - started
    return result


def check_rotations(anchor, rotations: list, where: str) -> "TrustedKeys":
    """The trusted keys (id -> public key): the anchor and those sound key handovers link to it,
    each retired key with its handover. A handover that does not hold is tampering: a bad signature
    at the size it was made at."""
    for rotation in rotations:
        problem = signing.rotation_problem(rotation)
        if problem:
            size = rotation.get("tree_size") if isinstance(rotation, dict) else None
            raise Stop(Finding(BAD_SIGNATURE, size if isinstance(size, int) else None,
                               f"the key handover after #{size}: {problem}", where))
    return TrustedKeys(signing.trusted_keys(anchor, rotations), signing.retirements(rotations))


def read_key_list(key_list_file) -> "signing.KeyList":
    source = Path(key_list_file)
    try:
        return signing.read_key_list(source.read_bytes(), str(source))
    except OSError as exc:
        raise Stop(Finding(UNKNOWN_KEY, None, f"the key list cannot be read ({exc.strerror})", str(source))) from None
    except signing.SigningKeyError as exc:
        raise Stop(Finding(UNKNOWN_KEY, None, f"the key list does not hold: {exc}", str(source))) from None


def with_key_list(keys: "TrustedKeys", key_list: "signing.KeyList") -> "TrustedKeys":
    """The keys of a bundle's handovers and of the key list together; each key ends at the earliest
    handover either names (a bundle cannot extend a key the list says is retired)."""
    retired = dict(keys.retired)
    for key_id, end in key_list.retired.items():
        if key_id not in retired or end < retired[key_id]:
            retired[key_id] = end
    return TrustedKeys({**keys, **key_list.keys}, retired)


def _trusted_key(bundle: Path, public_key_file, result: VerificationResult, key_list=None):
    if key_list is not None and public_key_file is None:
        result.notes.append(f"signatures checked against the key list of {len(key_list.keys)} key(s) "
                            f"made {key_list.created}")
        key = key_list.keys[key_list.newest]
        return key, key_list.newest
    if public_key_file is not None:
        source = Path(public_key_file)
        result.notes.append(f"signatures checked against {source}")
    else:
        source = bundle / PUBLIC_KEY_NAME
        result.notes.append(f"signatures checked against the bundle's own {PUBLIC_KEY_NAME} only: it proves "
                            "nothing about who made the bundle")
    try:
        key = signing.load_public_key_pem(source.read_bytes(), str(source))
    except FileNotFoundError:
        raise Stop(Finding(UNKNOWN_KEY, None, "no public key to check signatures with", str(source))) from None
    except signing.SigningKeyError as exc:
        raise Stop(Finding(UNKNOWN_KEY, None, str(exc), str(source))) from None
    key_id = signing.key_id_of(key)
    if key_list is not None and key_id not in key_list.keys:
        raise Stop(Finding(UNKNOWN_KEY, None, f"key {key_id} is not in the key list given", str(source)))
    return key, key_id


def _verify_bundle(bundle: Path, public_key_file, result: VerificationResult, key_list_file=None) -> None:
    key_list = read_key_list(key_list_file) if key_list_file is not None else None
    if not bundle.is_dir():
        raise Stop(Finding(DELETED, None, "no bundle directory here", str(bundle)))
    entries = _bundle_entries(bundle)
    manifest = _load_json(bundle / MANIFEST_NAME, MANIFEST_NAME)
    if not isinstance(manifest, dict) or manifest.get("type") != chain.MANIFEST_TYPE:
        raise Stop(Finding(MODIFIED, None, f"not an audit export manifest (type {chain.MANIFEST_TYPE})",
                            MANIFEST_NAME))
    check_manifest_shape(manifest)
    anchor, anchor_id = _trusted_key(bundle, public_key_file, result, key_list)
    rotations = _manifest_field(manifest, "key_rotations", kind=list) if "key_rotations" in manifest else []
    keys = check_rotations(anchor, rotations, MANIFEST_NAME)
    if key_list is not None:
        keys = with_key_list(keys, key_list)
    result.key_id = manifest.get("key_id") if manifest.get("key_id") in keys else anchor_id

    problem = check_statement(manifest, keys, "the manifest", None)
    if problem:
        problem.where = MANIFEST_NAME
        raise Stop(problem)
    check_bundle_coverage(bundle, manifest, entries)
    result.filter = dict(manifest.get("filter") or {})
    if "selection" in manifest:
        _verify_selection(bundle, manifest, keys, result)
        return

    first_sequence = _manifest_field(manifest, "range", "first_sequence", kind=int)
    last_sequence = _manifest_field(manifest, "range", "last_sequence", kind=int)
    count = _manifest_field(manifest, "range", "count", kind=int)
    first_prev = _manifest_field(manifest, "range", "first_prev_hash", kind=str)
    checkpoints = _manifest_field(manifest, "checkpoints", kind=list)
    tombstones = _manifest_field(manifest, "tombstones", kind=list)
    prefix = merkle.frontier_from_json(_manifest_field(manifest, "tree", "prefix_frontier", kind=list))
    result.first_sequence, result.last_sequence = first_sequence, last_sequence

    _check_signed_statements(checkpoints, tombstones, keys)
    result.checkpoints, result.tombstones = len(checkpoints), len(tombstones)
    _check_start(first_sequence, first_prev, prefix, tombstones)

    records_path = _bundle_path(bundle, RECORDS_NAME)
    if not records_path.exists():
        raise Stop(Finding(DELETED, None, f"{RECORDS_NAME} is missing", str(records_path)))
    with records_path.open("rb", buffering=1 << 20) as handle:
        scanned = _scan(handle, first_sequence, first_prev)
    if scanned is None:
        raw_lines = records_path.read_bytes().splitlines(keepends=True)
        finding, _lines = classify_lines(raw_lines, first_sequence, first_prev, count, RECORDS_NAME)
        if finding is None:
            finding = Finding(MODIFIED, None, "a line is not in the canonical export form", RECORDS_NAME)
        raise Stop(finding)
    digests, last_hash = scanned
    result.records = len(digests)
    if len(digests) < count:
        raise Stop(Finding(TRUNCATED, first_sequence + len(digests),
                            f"{len(digests)} records, the manifest says {count}", RECORDS_NAME))
    if len(digests) > count:
        raise Stop(Finding(INSERTED, first_sequence + count,
                            f"{len(digests)} records, the manifest says {count}", RECORDS_NAME))
    _check_tree(manifest, digests, last_hash, prefix, checkpoints, first_sequence, last_sequence)
    if sha256_file(records_path) != manifest["files"]["records"]["sha256"]:
        raise Stop(Finding(MODIFIED, None, f"{RECORDS_NAME} differs from the manifest's digest", RECORDS_NAME))
    _check_display_file(bundle, manifest, digests, first_sequence)


def _check_signed_statements(checkpoints: list, tombstones: list, keys) -> None:
    for statement in checkpoints:
        problem = check_statement(statement, keys, f"checkpoint #{statement.get('tree_size')}",
                                  statement.get("tree_size"))
        if problem:
            problem.where = MANIFEST_NAME
            raise Stop(problem)
    for statement in tombstones:
        problem = check_statement(statement, keys,
                                  f"tombstone #{statement.get('first_sequence')}..#{statement.get('last_sequence')}",
                                  statement.get("first_sequence"))
        if problem:
            problem.where = MANIFEST_NAME
            raise Stop(problem)


def _check_start(first_sequence: int, first_prev: str, prefix, tombstones: list) -> None:
    """Where the range starts must be explained: at the genesis, after a tombstone, or after a prefix
    the signed tree heads vouch for (checked with the Merkle tree)."""
    if merkle.frontier_size(prefix) != first_sequence - 1:
        raise Stop(Finding(MODIFIED, first_sequence, "the manifest's prefix frontier does not end before the range",
                            MANIFEST_NAME))
    if first_sequence == 1 and first_prev != chain.GENESIS_HASH:
        raise Stop(Finding(MODIFIED, 1, "the first record of the log does not start from the genesis hash",
                            RECORDS_NAME))
    for tombstone in tombstones:
        if tombstone.get("last_sequence") == first_sequence - 1:
            if tombstone.get("last_hash") != first_prev:
                raise Stop(Finding(MODIFIED, first_sequence, "the first record does not link to the tombstone "
                                    "before it", RECORDS_NAME))
            if merkle.frontier_from_json(tombstone.get("frontier")) != prefix:
                raise Stop(Finding(MODIFIED, first_sequence, "the tombstone's frontier and the manifest's differ",
                                    MANIFEST_NAME))


def _rewritten(first_sequence: int, bad_size: int, checkpoints: list, why: str) -> Stop:
    earlier = [c["tree_size"] for c in checkpoints if first_sequence <= c["tree_size"] < bad_size]
    start = (max(earlier) + 1) if earlier else first_sequence
    return Stop(Finding(MODIFIED, start, f"the records #{start}..#{bad_size} were rewritten: {why}", RECORDS_NAME))


def _check_tree(manifest, digests, last_hash, prefix, checkpoints, first_sequence, last_sequence) -> None:
    leaves = leaves_of(digests)
    # The signed checkpoints inside the range come first: they bound where a rewrite starts.
    inside = sorted((c for c in checkpoints if first_sequence <= c["tree_size"] <= last_sequence),
                    key=lambda c: c["tree_size"])
    frontier = list(prefix)
    done = first_sequence - 1
    for statement in inside:
        size = statement["tree_size"]
        merkle.frontier_extend(frontier, leaves[done - first_sequence + 1:size - first_sequence + 1])
        done = size
        if merkle.frontier_root(frontier).hex() != statement["root_hash"] \
                or digests[size - first_sequence].hex() != statement["last_hash"]:
            raise _rewritten(first_sequence, size, checkpoints, f"signed checkpoint #{size} disagrees")
    merkle.frontier_extend(frontier, leaves[done - first_sequence + 1:])
    tree_root = merkle.frontier_root(frontier)
    # A range from the first record is the whole tree: its root is the tree's, not hashed twice.
    range_root = tree_root if first_sequence == 1 else level_root(leaves)
    if range_root.hex() != manifest["range"].get("root_hash"):
        raise _rewritten(first_sequence, last_sequence, checkpoints, "the range's Merkle root differs from the manifest")
    if manifest["range"].get("last_hash") != last_hash:
        raise Stop(Finding(MODIFIED, last_sequence, "the last record's hash differs from the manifest", RECORDS_NAME))
    tree = manifest.get("tree", {})
    if tree.get("size") != last_sequence or tree.get("root_hash") != tree_root.hex():
        raise _rewritten(first_sequence, last_sequence, checkpoints, "the tree head differs from the manifest")
    anchor_size = tree.get("checkpoint_tree_size")
    anchor = next((c for c in checkpoints if c["tree_size"] == anchor_size), None)
    if anchor is None or anchor_size < last_sequence:
        raise Stop(Finding(TRUNCATED, last_sequence + 1, "no signed checkpoint covers the end of the range",
                           MANIFEST_NAME))
    try:
        merkle.verify_consistency(last_sequence, anchor_size, tree_root, bytes.fromhex(anchor["root_hash"]),
                                  [bytes.fromhex(h) for h in tree.get("consistency_proof", [])])
    except (merkle.ProofError, ValueError) as exc:
        raise _rewritten(first_sequence, last_sequence, checkpoints, f"not consistent with checkpoint "
                         f"#{anchor_size}: {exc}") from None


def _check_display_file(bundle: Path, manifest: dict, digests, first_sequence: int,
                        sequences: list[int] | None = None) -> None:
    display = manifest["files"]["display"]
    if display["name"] == RECORDS_NAME:
        return
    path = _bundle_path(bundle, display["name"])
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Stop(Finding(DELETED, None, f"{display['name']} is missing", str(path))) from None
    if hashlib.sha256(data).hexdigest() == display["sha256"]:
        return
    from .export.formats import FORMATS, ExportContext

    formatter = FORMATS[manifest["format"]]
    # Locate the first differing record by rendering the verified records again.
    context = ExportContext.from_manifest(manifest)
    rendered = formatter.header(context)
    position = len(rendered)
    if data[:position] != rendered:
        raise Stop(Finding(MODIFIED, None, f"the header of {display['name']} was changed", str(path)))
    with (bundle / RECORDS_NAME).open("rb") as handle:
        for offset, line in enumerate(handle):
            entry = json.loads(line)
            sequence = sequences[offset] if sequences is not None else first_sequence + offset
            if entry["record"]["event"] not in context.event_types:
                raise Stop(Finding(MODIFIED, sequence, f"the manifest's event_types do not describe "
                                   f"{entry['record']['event']!r}", MANIFEST_NAME))
            text = formatter.line(entry["record"], entry["hash"], context)
            if data[position:position + len(text)] != text:
                raise Stop(Finding(MODIFIED, sequence,
                                    f"the {manifest['format']} line of this record differs from the record",
                                    str(path)))
            position += len(text)
    if position != len(data):
        raise Stop(Finding(INSERTED, None, f"{display['name']} has content after the last record", str(path)))
    raise Stop(Finding(MODIFIED, None, f"{display['name']} differs from the manifest's digest", str(path)))


# -- selections: records an audit filter chose, each proven against a signed checkpoint ---------------

def _text_at(*keys):
    def read(record: dict):
        value = record
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value
    return read


def _event_matches(event, wanted: str) -> bool:
    if not isinstance(event, str):
        return False
    if wanted.endswith("*"):
        return event.startswith(wanted[:-1])
    if wanted.endswith("."):
        return event.startswith(wanted)
    return event == wanted


def _timestamp_of(record: dict):
    try:
        return chain.parse_timestamp(record.get("timestamp"))
    except (TypeError, ValueError):
        return None


def _time_matches(record: dict, wanted: str, after: bool) -> bool:
    moment, bound = _timestamp_of(record), chain.parse_timestamp(wanted)
    return moment is not None and (moment >= bound if after else moment < bound)


# What each filter of the audit log (appliance.audit.queries.AuditRecordFilter, the same names) asks
# of a record, offline: a test holds the two to the same names and the same answers.
FILTER_MATCHES = {
    "actor": lambda record, wanted: _text_at("actor", "username")(record) == wanted,
    "actor_id": lambda record, wanted: _text_at("actor", "id")(record) == wanted,
    "event": lambda record, wanted: _event_matches(record.get("event"), wanted),
    "action": lambda record, wanted: record.get("action") == wanted,
    "category": lambda record, wanted: record.get("category") == wanted,
    "target_type": lambda record, wanted: _text_at("target", "type")(record) == wanted,
    "target_id": lambda record, wanted: _text_at("target", "id")(record) == wanted,
    "target": lambda record, wanted: str(wanted).casefold() in str(_text_at("target", "name")(record)).casefold(),
    "outcome": lambda record, wanted: record.get("outcome") == wanted,
    "channel": lambda record, wanted: record.get("channel") == wanted,
    "request_id": lambda record, wanted: record.get("request_id") == wanted,
    "since": lambda record, wanted: _time_matches(record, wanted, after=True),
    "until": lambda record, wanted: _time_matches(record, wanted, after=False),
}


def _check_filter_statement(filters: dict) -> None:
    for name, wanted in filters.items():
        if name not in FILTER_MATCHES:
            raise Stop(Finding(MODIFIED, None, f"manifest.filter.{name} is not a filter of the audit log "
                               f"(the filters are {', '.join(FILTER_MATCHES)})", MANIFEST_NAME))
        if name in ("since", "until"):
            try:
                chain.parse_timestamp(wanted)
            except (TypeError, ValueError):
                raise Stop(Finding(MODIFIED, None, f"manifest.filter.{name} must be a UTC time "
                                   "(2026-01-31T12:00:00.000000Z)", MANIFEST_NAME)) from None


def unmatched_filter(record: dict, filters: dict) -> str | None:
    """The first filter of `filters` that `record` (a payload) does not match, else None."""
    return next((name for name, wanted in filters.items() if not FILTER_MATCHES[name](record, wanted)), None)


def _proof_line(raw: bytes, number: int, sequence: int) -> list[bytes]:
    where = f"{PROOFS_NAME}:{number}"
    # Plain parsing is enough here: whatever a proof line says, only a path that leads to the signed
    # root passes.
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Stop(Finding(MODIFIED, sequence, "the inclusion proof is not valid JSON", where)) from None
    path = entry.get("audit_path") if isinstance(entry, dict) else None
    if not isinstance(path, list) or not all(isinstance(node, str) and _HEX64.fullmatch(node) for node in path):
        raise Stop(Finding(MODIFIED, sequence, "the inclusion proof is not a list of SHA-256 digests", where))
    proven = entry.get("sequence")
    if type(proven) is int and proven < sequence:
        raise Stop(Finding(DELETED, proven, f"#{proven} is missing (its inclusion proof is here, the record here is "
                           f"#{sequence})", where))
    if proven != sequence:
        raise Stop(Finding(REORDERED, sequence, f"the inclusion proof here is for #{proven}", where))
    return [bytes.fromhex(node) for node in path]


def _verify_selection(bundle: Path, manifest: dict, keys, result: VerificationResult) -> None:
    selection = manifest["selection"]
    filters = manifest["filter"]
    _check_filter_statement(filters)
    result.selection = True
    count, size = selection["count"], selection["checkpoint_tree_size"]
    result.first_sequence, result.last_sequence = selection["first_sequence"], selection["last_sequence"]
    result.checkpoint_tree_size = size
    _check_signed_statements(manifest["checkpoints"], manifest["tombstones"], keys)
    result.checkpoints, result.tombstones = len(manifest["checkpoints"]), len(manifest["tombstones"])
    anchor = next((c for c in manifest["checkpoints"] if c["tree_size"] == size), None)
    if anchor is None:
        raise Stop(Finding(TRUNCATED, None, f"the signed checkpoint #{size} the records are proven against is not in "
                           "the manifest", MANIFEST_NAME))
    if anchor["root_hash"] != selection["checkpoint_root_hash"]:
        raise Stop(Finding(MODIFIED, None, f"manifest.selection names a root other than checkpoint #{size}'s",
                           MANIFEST_NAME))
    root = bytes.fromhex(anchor["root_hash"])
    records_path = _bundle_path(bundle, RECORDS_NAME)
    try:
        raw_lines = records_path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        raise Stop(Finding(DELETED, None, f"{RECORDS_NAME} is missing", str(records_path))) from None
    proof_lines = _bundle_path(bundle, PROOFS_NAME).read_bytes().splitlines(keepends=True)
    digests, sequences, previous = [], [], 0
    for index, raw in enumerate(raw_lines):
        where = f"{RECORDS_NAME}:{index + 1}"
        line = _examine(index + 1, raw, index == len(raw_lines) - 1)
        if not line.intact:
            if line.cut:
                raise Stop(Finding(TRUNCATED, line.sequence, "the last line is cut short", where))
            raise Stop(Finding(MODIFIED, line.sequence, "the record's bytes do not match its hash", where))
        sequence = line.sequence
        if sequence <= previous:
            kind = INSERTED if sequence == previous else REORDERED
            raise Stop(Finding(kind, sequence, f"#{sequence} comes after #{previous}", where))
        if not 1 <= sequence <= size:
            raise Stop(Finding(INSERTED, sequence, f"#{sequence} lies beyond signed checkpoint #{size}", where))
        if index >= len(proof_lines):
            raise Stop(Finding(DELETED, sequence, "the record has no inclusion proof", PROOFS_NAME))
        path = _proof_line(proof_lines[index], index + 1, sequence)
        try:
            merkle.verify_inclusion(sequence - 1, size, chain.merkle_leaf(line.hash), path, root)
        except merkle.ProofError:
            raise Stop(Finding(MODIFIED, sequence, f"record #{sequence} is not included in signed checkpoint "
                               f"#{size}: its content or its hash was changed", where)) from None
        unmatched = unmatched_filter(json.loads(raw)["record"], filters)
        if unmatched:
            raise Stop(Finding(INSERTED, sequence, f"record #{sequence} does not match the manifest's filter "
                               f"{unmatched}={filters[unmatched]}", where))
        digests.append(bytes.fromhex(line.hash))
        sequences.append(sequence)
        previous = sequence
    result.records = len(digests)
    if len(digests) < count:
        raise Stop(Finding(TRUNCATED, None, f"{len(digests)} records, the manifest says {count}", RECORDS_NAME))
    if len(digests) > count or len(proof_lines) != len(digests):
        what = RECORDS_NAME if len(digests) > count else PROOFS_NAME
        raise Stop(Finding(INSERTED, None, f"{len(digests)} records and {len(proof_lines)} proofs, the manifest "
                           f"says {count}", what))
    if (sequences[0], sequences[-1]) != (result.first_sequence, result.last_sequence):
        raise Stop(Finding(MODIFIED, None, f"the records run #{sequences[0]}..#{sequences[-1]}, the manifest says "
                           f"#{result.first_sequence}..#{result.last_sequence}", RECORDS_NAME))
    if sha256_file(records_path) != manifest["files"]["records"]["sha256"]:
        raise Stop(Finding(MODIFIED, None, f"{RECORDS_NAME} differs from the manifest's digest", RECORDS_NAME))
    _check_display_file(bundle, manifest, digests, sequences[0], sequences)
