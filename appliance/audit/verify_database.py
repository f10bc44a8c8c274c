"""`audit verify --database`: the checks of an offline verification, run on the live log.

Every record's hash is recomputed from its columns (a raw UPDATE of any column shows), the chain
links and sequence continuity from the last tombstone on, the Merkle tree head and chain hash at
every signed checkpoint, the signatures of checkpoints and tombstones (a handed-over key only for
the log before its handover), and the chain head (a cache) against the last record.

Then the database is compared with the witness outside it (witness.py): every witnessed checkpoint
must be in the database, unchanged, over records the database still has. A log rewritten behind the
triggers, its chain recomputed and the disagreeing checkpoints deleted, verifies on its own; against
the witness it does not.

The records after the last checkpoint are reported as unsealed, not intact: nothing signed vouches
for them yet (the checkpoint clock seals them within AUDIT_CHECKPOINT_EVERY_SECONDS). Missing or
disabled triggers, or a session that skips them, are findings too: the log is unprotected.
"""

import hashlib
import time
from dataclasses import dataclass

from django.db import connection, transaction

from . import chain, merkle, signing, triggers, witness
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
UNPROTECTED = "unprotected"


@dataclass
class DatabaseVerificationResult(VerificationResult):
    sealed_through: int = 0  # tree size of the last signed checkpoint
    unsealed: int = 0  # records after it
    witnessed: int = 0  # witness entries that matched the database

    def summary(self) -> str:
        if not self.ok:
            more = len(self.findings) - 1
            return super().summary() + (f" (and {more} more finding{'s' if more > 1 else ''})" if more else "")
        if not self.unsealed:
            return super().summary() + f", {self.witnessed} witnessed"
        last = self.last_sequence
        sealed = max(0, self.sealed_through - self.first_sequence + 1)
        since = (f"since checkpoint #{self.sealed_through}" if self.sealed_through
                 else "since the start of the log (no signed checkpoint yet)")
        sealed_part = (f"intact: {sealed} records (#{self.first_sequence}..#{self.sealed_through}) sealed by "
                       f"signed checkpoint #{self.sealed_through}" if sealed else "intact: no sealed records")
        return (f"{sealed_part}, {self.checkpoints} signed checkpoints ({self.witnessed} witnessed), "
                f"{self.tombstones} tombstones, key {self.key_id}; unsealed: {self.unsealed} records {since} "
                f"(#{last - self.unsealed + 1}..#{last}), not signed yet")


def verify_database(record_event: bool = True) -> DatabaseVerificationResult:
    started = time.perf_counter()
    result = DatabaseVerificationResult()
    try:
        _verify(result)
    except Stop as stop:
        result.findings.insert(0, stop.finding)
    result.findings += [Finding(UNPROTECTED, None, problem, WHERE) for problem in triggers.problems(connection)]
    result.seconds = time.perf_counter() - started
    if record_event:
        from . import services

        with transaction.atomic():
            services.record("audit.verify", target_type="audit.log", target_name="audit log",
                            outcome="success" if result.ok else "failure",
                            reason="" if result.ok else str(result.first),
                            details={"scope": "database", "records": result.records,
                                     "first_sequence": result.first_sequence, "last_sequence": result.last_sequence,
                                     "checkpoints": result.checkpoints, "tombstones": result.tombstones,
                                     "unsealed": result.unsealed, "witnessed": result.witnessed})
    return result


def _verify(result: DatabaseVerificationResult) -> None:
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
    last_size = max((size for size in checkpoints if size <= last), default=0)
    if count:
        result.sealed_through, result.unsealed = last_size, max(0, last - max(last_size, first - 1))
    _check_witness(result, checkpoints, keys, last)


def witness_disagreement() -> str | None:
    """How the database disagrees with the witness, or None when it agrees: the checkpoints only,
    no pass over the records, so it is cheap enough to run before signing anything new (an export
    must never sign a log whose signed prefix was rewritten or cut)."""
    try:
        keys = check_rotations(signing.load_signing_key().public_key,
                               [r.signed() for r in AuditKeyRotation.objects.all()], WHERE)
        checkpoints = {c.tree_size: c for c in AuditCheckpoint.objects.order_by("tree_size")}
        head = ChainHead.objects.filter(pk=1).first()
        _check_witness(DatabaseVerificationResult(), checkpoints, keys, head.sequence if head else 0)
    except Stop as stop:
        return str(stop.finding)
    return None


def _check_witnessed_handover(statement: dict, where: str) -> None:
    """A witnessed key handover is in the database as it was signed: deleting it (triggers off) would let
    a kept copy of the old key sign past its end."""
    size = statement["tree_size"]
    problem = signing.rotation_problem(statement)
    if problem:
        raise Stop(Finding(BAD_SIGNATURE, size, f"the key handover after #{size} in the witness: {problem}", where))
    stored = AuditKeyRotation.objects.filter(new_key_id=statement.get("new_key_id")).first()
    if stored is None or stored.signed() != statement:
        raise Stop(Finding(MODIFIED, size, f"the key handover after #{size} in the witness (key "
                           f"{statement.get('old_key_id')} to {statement.get('new_key_id')}) is not in the database"
                           + (" as it was signed" if stored is not None else ""), where))


def _check_witness(result: DatabaseVerificationResult, checkpoints: dict, keys, last: int) -> None:
    """Every witnessed checkpoint is in the database as it was signed, over records it still has; every
    witnessed key handover is there too."""
    source = witness.path()
    try:
        entries = witness.read(source)
    except witness.WitnessError as exc:
        raise Stop(Finding(MODIFIED, None, f"the witness is damaged: {exc}", str(source))) from None
    if entries is None:
        if checkpoints:
            result.notes.append(f"no witness file at {source}: the database's {len(checkpoints)} signed checkpoints "
                                "are compared with nothing outside it")
        return
    # Handovers first: without one, a kept copy of the old key would pass for the appliance's key.
    for entry in entries:
        if entry.is_handover:
            _check_witnessed_handover(entry.statement, f"{source}:{entry.line}")
    seen = set()
    for entry in entries:
        statement, size = entry.statement, entry.statement["tree_size"]
        where = f"{source}:{entry.line}"
        if entry.is_handover:
            continue
        problem = check_statement(statement, keys, f"checkpoint #{size} in the witness", size)
        if problem:
            problem.where = where
            raise Stop(problem)
        stored = checkpoints.get(size) or AuditCheckpoint.objects.filter(tree_size=size).first()  # made meanwhile
        if stored is None:
            if size > last:
                raise Stop(Finding(TRUNCATED, last + 1, f"checkpoint #{size} in the witness does not match the "
                                   f"database: the records end at #{last}, cut after the checkpoint signed them",
                                   where))
            raise Stop(Finding(MODIFIED, size, f"checkpoint #{size} in the witness does not match the database: "
                               "the database has no checkpoint there (deleted, with the records it signed "
                               "rewritten)", where))
        if stored.signed() != statement:
            differs = sorted(key for key in statement if stored.signed().get(key) != statement.get(key))
            raise Stop(Finding(MODIFIED, size, f"checkpoint #{size} in the witness does not match the database: "
                               f"{', '.join(differs)} differ", where))
        seen.add(size)
    result.witnessed = len(seen)
    unwitnessed = len(set(checkpoints) - seen)
    if unwitnessed:
        result.notes.append(f"{unwitnessed} of the database's {len(checkpoints)} signed checkpoints are not in the "
                            f"witness {source} (made before it existed, or its write failed)")
