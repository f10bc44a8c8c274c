"""Proofs against the live log: the inclusion proof of one record in a signed checkpoint, the
consistency proof between two checkpoints, and `verify_record` behind the portal's
"verify this record" button.

A proof only needs the subtrees right of the nearest earlier checkpoint: its stored frontier stands
for everything before it (and a tombstone's signed frontier for what was archived), so a proof reads
at most the records between two checkpoints, not the whole log.
"""

from dataclasses import dataclass, field

from appliance.core import resources

from . import chain, merkle, signing
from .checkpoints import covering_checkpoint, make_checkpoint
from .models import AuditCheckpoint, AuditRecord, AuditTombstone


def _tree_for(min_leaf_index: int, tree_size: int) -> merkle.PrunedTree:
    """The tree of `tree_size` records, with everything before `min_leaf_index` (0-based) summarised
    by the frontier of the nearest checkpoint or tombstone at or before it."""
    tombstone = AuditTombstone.objects.order_by("-last_sequence").first()
    start, frontier = 0, []
    if tombstone is not None:
        if tombstone.last_sequence > min_leaf_index:
            raise merkle.ProofError(f"record #{min_leaf_index + 1} was archived "
                                    f"(records #{tombstone.first_sequence}..#{tombstone.last_sequence} are gone)")
        start, frontier = tombstone.last_sequence, tombstone.frontier
    anchor = (AuditCheckpoint.objects.filter(tree_size__gt=start, tree_size__lte=min_leaf_index)
              .order_by("-tree_size").first())
    if anchor is not None:
        start, frontier = anchor.tree_size, anchor.frontier
    hashes = list(AuditRecord.objects.filter(sequence__gt=start, sequence__lte=tree_size)
                  .order_by("sequence").values_list("hash", flat=True))
    if len(hashes) != tree_size - start:
        raise merkle.ProofError(f"records #{start + 1}..#{tree_size} should be {tree_size - start}, "
                                f"the database holds {len(hashes)}: run `{resources.program()} audit verify --database`")
    prefix = merkle.frontier_from_json(frontier)
    if anchor is not None and merkle.frontier_root(prefix).hex() != anchor.root_hash:
        raise merkle.ProofError(f"the stored frontier of {anchor} does not match its signed root")
    if merkle.frontier_size(prefix) != start:
        raise merkle.ProofError(f"the stored frontier at #{start} does not cover {start} records")
    return merkle.PrunedTree(prefix, [chain.merkle_leaf(h) for h in hashes])


def inclusion_proof(sequence: int, checkpoint: AuditCheckpoint) -> list[bytes]:
    index = sequence - 1
    return merkle.inclusion_proof(index, checkpoint.tree_size, _tree_for(index, checkpoint.tree_size))


def consistency_proof(older: AuditCheckpoint, newer: AuditCheckpoint) -> list[bytes]:
    tree = _tree_for(older.tree_size - 1, newer.tree_size)
    return merkle.consistency_proof(older.tree_size, newer.tree_size, tree)


@dataclass
class RecordVerification:
    ok: bool
    message: str
    sequence: int
    checkpoint: dict | None = None  # the signed checkpoint statement the proof was checked against
    proof: dict | None = None  # leaf_index, tree_size, leaf_hash, audit_path (hex), root_hash
    problems: list[str] = field(default_factory=list)


def verify_record(sequence: int) -> RecordVerification:
    """Check record `sequence`: its content against its hash, then its inclusion proof against the
    first signed checkpoint that covers it (one is made if none does yet), the checkpoint's signature
    against the audit key. Records `audit.verify` with the outcome."""
    from . import services

    result = _verify_record(sequence)
    record = AuditRecord.objects.filter(sequence=sequence).first()
    services.record("audit.verify", target=record, target_type="audit.auditrecord", target_id=str(sequence),
                    outcome="success" if result.ok else "failure", reason="" if result.ok else result.message,
                    details={"scope": "record", "sequence": sequence,
                             "checkpoint_tree_size": (result.checkpoint or {}).get("tree_size")})
    return result


def _verify_record(sequence: int) -> RecordVerification:
    record = AuditRecord.objects.filter(sequence=sequence).first()
    if record is None:
        archived = AuditTombstone.objects.filter(first_sequence__lte=sequence, last_sequence__gte=sequence).first()
        where = f"archived under {archived}" if archived else "not in the log"
        return RecordVerification(False, f"record #{sequence} is {where}", sequence)
    if chain.record_hash(record.payload()) != record.hash:
        return RecordVerification(False, f"record #{sequence} was modified: its content no longer matches its hash",
                                  sequence)
    checkpoint = covering_checkpoint(sequence) or make_checkpoint()
    statement = checkpoint.signed()
    from .keys import retired_keys_of_the_log, trusted_keys_of_the_log

    public_key = trusted_keys_of_the_log().get(checkpoint.key_id)
    if public_key is None:
        return RecordVerification(False, f"checkpoint #{checkpoint.tree_size} is signed with key {checkpoint.key_id}, "
                                  f"which neither the appliance's key nor its recorded handovers vouch for",
                                  sequence, statement)
    if not signing.verify_signature(public_key, chain.signed_statement(checkpoint.statement()),
                                    checkpoint.signature):
        return RecordVerification(False, f"checkpoint #{checkpoint.tree_size} has a bad signature", sequence, statement)
    retired = signing.retired_problem(statement, retired_keys_of_the_log().get(checkpoint.key_id))
    if retired:
        return RecordVerification(False, f"checkpoint #{checkpoint.tree_size} is signed by retired key "
                                  f"{checkpoint.key_id}: {retired}", sequence, statement)
    leaf = chain.merkle_leaf(record.hash)
    try:
        path = inclusion_proof(sequence, checkpoint)
    except merkle.ProofError as exc:
        return RecordVerification(False, str(exc), sequence, statement)
    proof = {"leaf_index": sequence - 1, "tree_size": checkpoint.tree_size, "leaf_hash": leaf.hex(),
             "audit_path": [node.hex() for node in path], "root_hash": checkpoint.root_hash}
    try:
        merkle.verify_inclusion(sequence - 1, checkpoint.tree_size, leaf, path, bytes.fromhex(checkpoint.root_hash))
    except merkle.ProofError as exc:
        return RecordVerification(False, f"record #{sequence}: {exc}", sequence, statement, proof)
    return RecordVerification(True, f"record #{sequence} is intact and included in checkpoint "
                              f"#{checkpoint.tree_size}, signed by key {checkpoint.key_id}",
                              sequence, statement, proof)
