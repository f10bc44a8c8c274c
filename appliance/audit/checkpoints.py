"""Signed checkpoints: the tree head (Merkle root over records 1..tree_size and the chain's hash at
tree_size) signed with the audit key. `record()` makes one every AUDIT_CHECKPOINT_EVERY_RECORDS
records or AUDIT_CHECKPOINT_EVERY_SECONDS seconds; `make_checkpoint()` makes one on demand.
Both read the frontier kept in the chain head: no pass over the log.
"""

from django.db import router, transaction
from django.utils import timezone

from . import chain, merkle, signing
from .models import AuditCheckpoint, AuditRecord, ChainHead


def sign_checkpoint(tree_size: int, frontier, last_hash: str, timestamp, using: str | None = None) -> AuditCheckpoint:
    """Sign and store the tree head of `tree_size` records summarised by `frontier`.
    Called with the chain head locked, so nothing is appended in between."""
    key = signing.load_signing_key()
    checkpoint = AuditCheckpoint(tree_size=tree_size, root_hash=merkle.frontier_root(frontier).hex(),
                                 last_hash=last_hash, frontier=merkle.frontier_to_json(frontier),
                                 timestamp=timestamp, key_id=key.key_id)
    checkpoint.signature = key.sign(chain.signed_statement(checkpoint.statement()))
    checkpoint.save(force_insert=True, using=using)
    return checkpoint


def make_checkpoint() -> AuditCheckpoint:
    """A signed checkpoint of the log as it is now (the latest one when nothing was appended since).
    A new one is recorded as `audit.checkpoint`, after it, so the next checkpoint covers that record."""
    from . import services

    using = router.db_for_write(AuditRecord)
    with transaction.atomic(using=using):
        head = ChainHead.objects.using(using).select_for_update().filter(pk=1).first()
        if head is None or head.sequence == 0:
            raise ValueError("the audit log is empty: there is nothing to checkpoint")
        existing = AuditCheckpoint.objects.using(using).filter(tree_size=head.sequence).first()
        if existing is not None:
            return existing
        now = timezone.now()
        checkpoint = sign_checkpoint(head.sequence, merkle.frontier_from_json(head.merkle_frontier), head.hash,
                                     now, using=using)
        head.last_checkpoint_sequence, head.last_checkpoint_at = head.sequence, now
        head.save(update_fields=["last_checkpoint_sequence", "last_checkpoint_at"])
        services.record("audit.checkpoint", target=checkpoint, details={
            "tree_size": checkpoint.tree_size, "root_hash": checkpoint.root_hash, "key_id": checkpoint.key_id})
    return checkpoint


def latest_checkpoint() -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.order_by("-tree_size").first()


def covering_checkpoint(sequence: int) -> AuditCheckpoint | None:
    """The first checkpoint whose tree contains record `sequence`."""
    return AuditCheckpoint.objects.filter(tree_size__gte=sequence).order_by("tree_size").first()
