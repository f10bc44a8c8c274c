"""`audit verify --database`: the checks of an offline verification, run on the live log.

Every record's hash is recomputed from its columns (a raw UPDATE of any column shows), the chain
links and sequence continuity from the last tombstone on, the Merkle tree head and chain hash at
every signed checkpoint, the signatures of checkpoints and tombstones, and the chain head (a cache)
against the last record.
"""

import hashlib
import time

from django.db import transaction

from . import chain, merkle, signing
from .models import (
    PAYLOAD_COLUMNS,
    AuditCheckpoint,
    AuditKeyRotation,
    AuditRecord,
    AuditTombstone,
    ChainHead,
    payload_from_values,
)
from .verify import (
    BAD_SIGNATURE,
    DELETED,
    INSERTED,
    MODIFIED,
    TRUNCATED,
    Finding,
    Stop,
    VerificationResult,
    check_rotations,
    check_statement,
)

CHUNK = 5000
WHERE = "database"


def verify_database(record_event: bool = True) -> VerificationResult:
    started = time.perf_counter()
    result = VerificationResult()
    try:
        _verify(result)
    except Stop as stop:
        result.findings.insert(0, stop.finding)
    result.seconds = time.perf_counter() - started
    if record_event:
        from . import services

        with transaction.atomic():
            services.record("audit.verify", target_type="audit.log", target_name="audit log",
                            outcome="success" if result.ok else "failure",
                            reason="" if result.ok else str(result.first),
                            details={"scope": "database", "records": result.records,
                                     "first_sequence": result.first_sequence, "last_sequence": result.last_sequence,
                                     "checkpoints": result.checkpoints, "tombstones": result.tombstones})
    return result


def _verify(result: VerificationResult) -> None:
    key = signing.load_signing_key()
    result.key_id = key.key_id
    keys = check_rotations(key.public_key, [r.signed() for r in AuditKeyRotation.objects.all()], WHERE)
    checkpoints = {c.tree_size: c for c in AuditCheckpoint.objects.order_by("tree_size")}
    for checkpoint in checkpoints.values():
        problem = check_statement(checkpoint.signed(), keys,
                                  f"checkpoint #{checkpoint.tree_size}", checkpoint.tree_size)
        if problem:
            problem.where = WHERE
            raise Stop(problem)
    tombstones = list(AuditTombstone.objects.order_by("first_sequence"))
    expected, prev, frontier = 1, chain.GENESIS_HASH, []
    for tombstone in tombstones:
        problem = check_statement(tombstone.signed(), keys, str(tombstone),
                                  tombstone.first_sequence)
        if problem:
            problem.where = WHERE
            raise Stop(problem)
        if tombstone.first_sequence != expected or tombstone.first_prev_hash != prev:
            raise Stop(Finding(MODIFIED, tombstone.first_sequence,
                                f"{tombstone} does not continue the log at #{expected}", WHERE))
        frontier = merkle.frontier_from_json(tombstone.frontier)
        if merkle.frontier_size(frontier) != tombstone.last_sequence \
                or merkle.frontier_root(frontier).hex() != tombstone.tree_root:
            raise Stop(Finding(BAD_SIGNATURE, tombstone.first_sequence, f"{tombstone}'s frontier is inconsistent",
                                WHERE))
        expected, prev = tombstone.last_sequence + 1, tombstone.last_hash
    result.checkpoints, result.tombstones = len(checkpoints), len(tombstones)
    archived_left = AuditRecord.objects.filter(sequence__lt=expected).order_by("sequence").first()
    if archived_left is not None:
        raise Stop(Finding(INSERTED, archived_left.sequence, "a record sits where a tombstone says records were "
                            "archived", WHERE))

    # Writers go on while this runs. The head is read before the records (whatever it names must be
    # there) and again after them (no committed record may lie past it: head and record move together).
    head = ChainHead.objects.filter(pk=1).first()
    at_head = None
    head_seen = head.sequence if head is not None else 0
    first = expected
    last_good_checkpoint = first - 1
    sha256 = hashlib.sha256
    rows = (AuditRecord.objects.filter(sequence__gte=first).order_by("sequence")
            .values_list(*PAYLOAD_COLUMNS, "hash").iterator(chunk_size=CHUNK))
    count = 0
    for row in rows:
        payload = payload_from_values(row[:-1])
        sequence, stored_hash = payload["sequence"], row[-1]
        if sequence > head_seen:
            # Past the head read at the start: fine if a writer appended it since, and then the head
            # has moved with it (they commit together); otherwise it went around record().
            head_now = ChainHead.objects.filter(pk=1).first()
            head_seen = head_now.sequence if head_now is not None else 0
            if sequence > head_seen:
                raise Stop(Finding(INSERTED, sequence, "a record past the chain head was written around the "
                                   "log's one entry point", WHERE))
        if sequence != expected:
            raise Stop(Finding(DELETED, expected, f"#{expected} is missing (the next record is #{sequence})", WHERE))
        digest = sha256(chain.canonical_payload(payload)).digest()
        if digest.hex() != stored_hash:
            raise Stop(Finding(MODIFIED, sequence, "the record's content does not match its hash", WHERE))
        if payload["prev_hash"] != prev:
            raise Stop(Finding(MODIFIED, sequence - 1, f"record #{sequence - 1} was rewritten: #{sequence} "
                                "does not link to it", WHERE))
        merkle.frontier_push(frontier, sha256(b"\x00" + digest).digest())
        checkpoint = checkpoints.get(sequence)
        if checkpoint is not None:
            if merkle.frontier_root(frontier).hex() != checkpoint.root_hash or checkpoint.last_hash != stored_hash:
                raise Stop(Finding(MODIFIED, last_good_checkpoint + 1,
                                    f"records #{last_good_checkpoint + 1}..#{sequence} were rewritten: signed "
                                    f"checkpoint #{sequence} disagrees", WHERE))
            last_good_checkpoint = sequence
        prev, expected = stored_hash, expected + 1
        count += 1
        if head is not None and sequence == head.sequence:
            at_head = stored_hash
    last = expected - 1
    result.records = count
    result.first_sequence, result.last_sequence = (first, last) if count else (None, None)
    beyond = [size for size in checkpoints if size > last]
    if beyond:
        raise Stop(Finding(TRUNCATED, last + 1, f"the records end at #{last}, signed checkpoint "
                            f"#{max(beyond)} covers more", WHERE))
    if head is None:
        raise Stop(Finding(DELETED, None, "the chain head row is missing", WHERE))
    if head.sequence > last:
        raise Stop(Finding(TRUNCATED, last + 1, f"the records end at #{last}, the chain head is at #{head.sequence}",
                            WHERE))
    head_after = ChainHead.objects.filter(pk=1).first()
    if head_after is None or head_after.sequence < last:
        at = (head_after.sequence if head_after else head.sequence) + 1
        raise Stop(Finding(INSERTED, at, f"records past the chain head (#{at - 1}) were written around the "
                            "log's one entry point", WHERE))
    if head.sequence >= first and (at_head is None or head.hash != at_head):
        raise Stop(Finding(MODIFIED, head.sequence, "the chain head disagrees with the record it names", WHERE))
