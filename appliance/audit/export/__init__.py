"""Export bundles: a contiguous range of the log, or the records an audit filter selects, ready for
an auditor or a SIEM.

A bundle is a directory:
- records.jsonl: the canonical records (always, whatever the display format), what `audit verify` checks;
- records.<format>: the same records as CEF, RFC 5424 syslog, OCSF or CSV (for jsonl, the same file);
- manifest.json: the range (first/last sequence and hash, count, Merkle root of the range), the tree
  head at the range's end with the frontier before it and a consistency proof to the signed
  checkpoint after it, every signed checkpoint inside the range, the tombstones, the key id, the
  digest of every other file of the bundle (a verifier refuses a file the manifest does not list);
  itself signed with the audit key;
- public-key.pem: the key that signed it all.

A filter on more than time (actor, event, outcome, target...) selects records scattered through
the chain: such a bundle (a selection) cannot show a contiguous chain, so it proves each record
instead. Its manifest states the filter and, in place of the range and tree, the signed checkpoint
the records are proven against; proofs.jsonl holds each record's RFC 6962 inclusion proof in that
checkpoint's tree. A filter on time alone still exports the contiguous range (first to last
matching record), which proves completeness as well.

`export_bundle` is the one path for the CLI, the portal and the API, and records `audit.export`.
The filter comes from `appliance.audit.queries.select_records`, the parser the log page uses too.
"""

import hashlib
import json
import os
import shutil
import socket
import uuid
from contextlib import nullcontext
from datetime import datetime
from importlib import metadata
from pathlib import Path

from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from appliance.core import resources

from ...core.files import sha256_file
from .. import catalogue, chain, merkle, signing
from ..checkpoints import IncompleteLog, covering_checkpoint, make_checkpoint, prefix_frontier
from ..models import (
    PAYLOAD_COLUMNS,
    AuditCheckpoint,
    AuditKeyRotation,
    AuditRecord,
    AuditTombstone,
    payload_from_values,
)
from ..queries import AuditSelection
from ..verify import MANIFEST_NAME, PROOFS_NAME, PUBLIC_KEY_NAME, RECORDS_NAME, level_root
from .formats import FORMATS, ExportContext

__all__ = ["FORMATS", "ExportError", "export_bundle", "prefix_frontier"]

CHUNK = 5000


class ExportError(ValueError):
    pass


def product_version() -> str:
    try:
        return metadata.version("appliance-suite")
    except metadata.PackageNotFoundError:
        return "unknown"


def _describe_event(name: str) -> dict:
    event_type = catalogue.get(name)
    return {"description": event_type.description, "ocsf_class": event_type.ocsf_class,
            "ocsf_class_name": event_type.ocsf_class_name, "ocsf_activity": event_type.ocsf_activity}


def _describe_filter(filters: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in filters.items())


def _bounds(records, filters: dict) -> tuple[int, int]:
    bounds = records.aggregate(first=Min("sequence"), last=Max("sequence"))
    if bounds["first"] is None:
        if set(filters) <= {"since", "until"}:
            raise ExportError("the audit log holds no records in that time range")
        raise ExportError(f"the audit log holds no records that match the filter ({_describe_filter(filters)})")
    return bounds["first"], bounds["last"]


def _range(since: datetime | None, until: datetime | None) -> tuple[int, int]:
    records = AuditRecord.objects.all()
    filters = {}
    if since is not None:
        records = records.filter(timestamp__gte=since)
        filters["since"] = chain.format_timestamp(since)
    if until is not None:
        records = records.filter(timestamp__lt=until)
        filters["until"] = chain.format_timestamp(until)
    return _bounds(records, filters)


def _prepare_directory(out: Path) -> Path:
    # A link would send the bundle (the whole log) wherever it points, and the final rename cannot
    # put a directory in its place: refused by name, before anything is written.
    if out.is_symlink():
        raise ExportError(f"out: {out} is a symbolic link; name a new or empty directory that is not a link")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"out: {out} exists and is not an empty directory")
    if not out.parent.is_dir():
        raise ExportError(f"out: the directory {out.parent} does not exist")
    staging = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    staging.mkdir(mode=0o700)
    return staging


def export_bundle(out_dir, fmt: str, since: datetime | None = None, until: datetime | None = None,
                  destination: str | None = None, selection: AuditSelection | None = None) -> dict:
    """Write a bundle of the records with since <= timestamp < until (all when not given), or of
    those `selection` holds (from queries.select_records; not with since/until), to `out_dir`
    (created; it must not exist or be empty) and return its manifest.

    `destination` is what the `audit.export` record names as where the bundle went: the directory
    by default; the download's file name when the bundle is only a step towards a download.

    The range is the contiguous run of sequence numbers between the first and the last record in
    that time window. A signed checkpoint covering its end is made if none exists yet. Records
    `audit.export` (after the exported range). Nothing half-written is left: the bundle appears
    under its name only once complete.
    """
    from .. import services

    formatter = FORMATS.get(fmt)
    if formatter is None:
        raise ExportError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if since is not None and until is not None and since >= until:
        raise ExportError("since: must be earlier than until")
    out = Path(out_dir)
    if selection is not None and (since is not None or until is not None):
        raise ExportError("since/until: give them inside the selection's filter, not beside it")
    if selection is None:
        filters = {name: chain.format_timestamp(moment) for name, moment in (("since", since), ("until", until))
                   if moment is not None}
        first, last = _range(since, until)
        scattered = False
    else:
        filters = dict(selection.filters)
        first, last = _bounds(selection.queryset, filters)
        scattered = not selection.is_time_window
        since, until = (chain.parse_timestamp(filters[name]) if name in filters else None
                        for name in ("since", "until"))
    from ..verify_database import witness_disagreement

    disagreement = witness_disagreement()
    if disagreement:
        raise ExportError(f"the audit log disagrees with its witness ({disagreement}): nothing is exported or "
                          f"signed; run `{resources.program()} audit verify --database`")
    anchor = covering_checkpoint(last) or make_checkpoint()
    staging = _prepare_directory(out)
    try:
        if scattered:
            manifest = _write_selection(staging, formatter, selection.queryset, anchor, filters)
        else:
            manifest = _write(staging, formatter, first, last, anchor, since, until, filters)
        if out.exists():
            out.rmdir()
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with transaction.atomic():
        span = manifest["selection"] if scattered else manifest["range"]
        first, last = span["first_sequence"], span["last_sequence"]
        services.record("audit.export", target_type="audit.export", target_id=f"{first}-{last}",
                        target_name=destination or str(out), details={
                            "format": fmt, "first_sequence": first, "last_sequence": last,
                            "count": span["count"], "filter": filters,
                            "kind": "selection" if scattered else "range",
                            "since": chain.format_timestamp(since) if since else None,
                            "until": chain.format_timestamp(until) if until else None,
                            "manifest_sha256": hashlib.sha256((out / MANIFEST_NAME).read_bytes()).hexdigest()})
    return manifest


def _write(staging: Path, formatter, first: int, last: int, anchor: AuditCheckpoint, since, until,
           filters: dict) -> dict:
    key = signing.load_signing_key()
    context = ExportContext(product_version=product_version(), host=socket.gethostname(),
                            resolve=_describe_event)
    try:
        prefix = prefix_frontier(first - 1)
    except IncompleteLog as exc:
        raise ExportError(str(exc)) from exc
    records_path = staging / RECORDS_NAME
    display_path = staging / f"records.{formatter.extension}"
    separate_display = formatter.name != "jsonl"
    digests: list[bytes] = []
    first_prev = first_hash = last_hash = None
    expected = first
    rows = (AuditRecord.objects.filter(sequence__gte=first, sequence__lte=last).order_by("sequence")
            .values_list(*PAYLOAD_COLUMNS, "hash").iterator(chunk_size=CHUNK))
    with records_path.open("wb", buffering=1 << 20) as records_file, \
            (display_path.open("wb", buffering=1 << 20) if separate_display else nullcontext()) as display:
        if separate_display:
            display.write(formatter.header(context))
        for row in rows:
            payload = payload_from_values(row[:-1])
            record_hash = row[-1]
            if payload["sequence"] != expected:
                raise ExportError(f"record #{expected} is missing from the database: "
                                  f"run `{resources.program()} audit verify --database`")
            payload_bytes = chain.canonical_payload(payload)
            records_file.write(chain.export_line(payload_bytes, record_hash))
            if separate_display:
                display.write(formatter.line(payload, record_hash, context))
            else:
                context.event_type(payload["event"])
            digests.append(bytes.fromhex(record_hash))
            if first_prev is None:
                first_prev, first_hash = payload["prev_hash"], record_hash
            last_hash = record_hash
            expected += 1
    if expected != last + 1:
        raise ExportError(f"records #{expected}..#{last} are missing from the database: "
                          f"run `{resources.program()} audit verify --database`")
    leaves = [hashlib.sha256(b"\x00" + d).digest() for d in digests]
    frontier = list(prefix)
    merkle.frontier_extend(frontier, leaves)
    if anchor.tree_size > last:
        from ..proofs import _tree_for

        proof = merkle.consistency_proof(last, anchor.tree_size, _tree_for(last - 1, anchor.tree_size))
    else:
        proof = []
    (staging / PUBLIC_KEY_NAME).write_text(key.public_pem())
    # Every file of the bundle is listed with its digest: a verifier refuses any file it does not list.
    files = {"records": {"name": RECORDS_NAME, "sha256": sha256_file(records_path)}}
    files["display"] = ({"name": display_path.name, "sha256": sha256_file(display_path)} if separate_display
                        else files["records"])
    files["public_key"] = {"name": PUBLIC_KEY_NAME, "sha256": sha256_file(staging / PUBLIC_KEY_NAME)}
    checkpoints = AuditCheckpoint.objects.filter(tree_size__gte=first, tree_size__lte=anchor.tree_size)
    manifest = {
        "type": chain.MANIFEST_TYPE,
        "format": formatter.name,
        "created": chain.format_timestamp(timezone.now()),
        "source": {"product": "appliance-suite", "version": context.product_version, "host": context.host},
        "range": {
            "first_sequence": first, "last_sequence": last, "count": last - first + 1,
            "first_prev_hash": first_prev, "first_hash": first_hash, "last_hash": last_hash,
            "root_hash": level_root(leaves).hex(),
            "since": chain.format_timestamp(since) if since else None,
            "until": chain.format_timestamp(until) if until else None,
        },
        "tree": {
            "prefix_frontier": merkle.frontier_to_json(prefix),
            "size": last,
            "root_hash": merkle.frontier_root(frontier).hex(),
            "checkpoint_tree_size": anchor.tree_size,
            "checkpoint_root_hash": anchor.root_hash,
            "consistency_proof": [node.hex() for node in proof],
        },
        "filter": filters,
        "checkpoints": [c.signed() for c in checkpoints.order_by("tree_size")],
        "tombstones": [t.signed() for t in AuditTombstone.objects.order_by("first_sequence")],
        "key_id": key.key_id,
        "public_key": PUBLIC_KEY_NAME,
        # Every handover between signing keys, each signed by both: checkpoints made under an
        # earlier key verify against today's, and the other way round.
        "key_rotations": [r.signed() for r in AuditKeyRotation.objects.all()],
        "files": files,
        "event_types": context.event_types,
    }
    return _signed_and_written(manifest, key, staging)


def _signed_and_written(manifest: dict, key, staging: Path) -> dict:
    """Sign the manifest (a range's or a selection's) and write it into the bundle being built."""
    manifest["signature"] = key.sign(chain.signed_statement(manifest))
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    return manifest


def _memoized_subtrees(tree: merkle.PrunedTree):
    """The subtree roots of `tree`, each computed once: the proofs of many records share most of
    their nodes, and a subtree past the archived part is built from its two halves."""
    cache: dict[tuple[int, int], bytes] = {}

    def root(start: int, end: int) -> bytes:
        node = cache.get((start, end))
        if node is None:
            if end - start > 64 and start >= tree.pruned_size:
                half = 1 << ((end - start - 1).bit_length() - 1)
                node = merkle.node_hash(root(start, start + half), root(start + half, end))
            else:
                node = tree(start, end)
            cache[(start, end)] = node
        return node

    return root


def _write_selection(staging: Path, formatter, records, anchor: AuditCheckpoint, filters: dict) -> dict:
    """The records `records` selects, each with its inclusion proof in the tree `anchor` signs."""
    from ..proofs import _tree_for

    key = signing.load_signing_key()
    context = ExportContext(product_version=product_version(), host=socket.gethostname(),
                            resolve=_describe_event)
    rows = (records.order_by("sequence").values_list(*PAYLOAD_COLUMNS, "hash").iterator(chunk_size=CHUNK))
    records_path = staging / RECORDS_NAME
    proofs_path = staging / PROOFS_NAME
    display_path = staging / f"records.{formatter.extension}"
    separate_display = formatter.name != "jsonl"
    subtree_root = None
    count, first, last = 0, None, None
    with records_path.open("wb", buffering=1 << 20) as records_file, \
            proofs_path.open("wb", buffering=1 << 20) as proofs_file, \
            (display_path.open("wb", buffering=1 << 20) if separate_display else nullcontext()) as display:
        if separate_display:
            display.write(formatter.header(context))
        for row in rows:
            payload = payload_from_values(row[:-1])
            record_hash, sequence = row[-1], payload["sequence"]
            if sequence > anchor.tree_size:
                break  # recorded after the checkpoint was signed (this export's own reads among them)
            if subtree_root is None:
                try:
                    subtree_root = _memoized_subtrees(_tree_for(sequence - 1, anchor.tree_size))
                except merkle.ProofError as exc:
                    raise ExportError(str(exc)) from exc
            records_file.write(chain.export_line(chain.canonical_payload(payload), record_hash))
            if separate_display:
                display.write(formatter.line(payload, record_hash, context))
            else:
                context.event_type(payload["event"])
            path = merkle.inclusion_proof(sequence - 1, anchor.tree_size, subtree_root)
            proofs_file.write(json.dumps({"audit_path": [node.hex() for node in path], "sequence": sequence},
                                         sort_keys=True, separators=(",", ":")).encode() + b"\n")
            first = sequence if first is None else first
            last, count = sequence, count + 1
    (staging / PUBLIC_KEY_NAME).write_text(key.public_pem())
    files = {"records": {"name": RECORDS_NAME, "sha256": sha256_file(records_path)}}
    files["display"] = ({"name": display_path.name, "sha256": sha256_file(display_path)} if separate_display
                        else files["records"])
    files["proofs"] = {"name": PROOFS_NAME, "sha256": sha256_file(proofs_path)}
    files["public_key"] = {"name": PUBLIC_KEY_NAME, "sha256": sha256_file(staging / PUBLIC_KEY_NAME)}
    manifest = {
        "type": chain.MANIFEST_TYPE,
        "format": formatter.name,
        "created": chain.format_timestamp(timezone.now()),
        "source": {"product": "appliance-suite", "version": context.product_version, "host": context.host},
        "filter": filters,
        "selection": {
            "count": count, "first_sequence": first, "last_sequence": last,
            "checkpoint_tree_size": anchor.tree_size, "checkpoint_root_hash": anchor.root_hash,
        },
        "checkpoints": [anchor.signed()],
        "tombstones": [t.signed() for t in AuditTombstone.objects.order_by("first_sequence")],
        "key_id": key.key_id,
        "public_key": PUBLIC_KEY_NAME,
        "key_rotations": [r.signed() for r in AuditKeyRotation.objects.all()],
        "files": files,
        "event_types": context.event_types,
    }
    return _signed_and_written(manifest, key, staging)
