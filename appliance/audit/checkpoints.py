"""Signed checkpoints: the tree head (Merkle root over records 1..tree_size and the chain's hash at
tree_size) signed with the audit key. `record()` makes one every AUDIT_CHECKPOINT_EVERY_RECORDS
records or AUDIT_CHECKPOINT_EVERY_SECONDS seconds; the clock (`seal_unsigned()`, from Celery beat or
the embedded worker's timer) makes one every AUDIT_CHECKPOINT_EVERY_SECONDS while records are
unsigned, so an idle appliance's tail is sealed too; `make_checkpoint()` makes one on demand.
Every checkpoint is also appended to the witness outside the database (witness.py).

A checkpoint keeps the Merkle frontier of its tree (the roots of its perfect subtrees), so the
next one starts from it and folds in only the records since: at most N hashes every N records,
never a pass over the log.
"""

import functools

from django.conf import settings
from django.db import router, transaction
from django.utils import timezone

from appliance.core import resources

from . import chain, merkle, signing, witness
from .models import AuditCheckpoint, AuditRecord, AuditTombstone, ChainHead


class IncompleteLog(ValueError):
    """Records that a frontier needs are not in the database."""


def prefix_frontier(size: int, using: str | None = None) -> list[tuple[int, bytes]]:
    """The Merkle frontier of the first `size` records, from the nearest tombstone or checkpoint at
    or before it plus the records after that."""
    using = using or router.db_for_read(AuditRecord)
    tombstone = (AuditTombstone.objects.using(using).filter(last_sequence__lte=size)
                 .order_by("-last_sequence").first())
    start, frontier = (tombstone.last_sequence, tombstone.frontier) if tombstone else (0, [])
    anchor = (AuditCheckpoint.objects.using(using).filter(tree_size__gt=start, tree_size__lte=size)
              .order_by("-tree_size").first())
    if anchor is not None:
        start, frontier = anchor.tree_size, anchor.frontier
    result = merkle.frontier_from_json(frontier)
    if anchor is not None and merkle.frontier_root(result).hex() != anchor.root_hash:
        raise IncompleteLog(f"the stored frontier of {anchor} does not match its signed root: "
                            f"run `{resources.program()} audit verify --database`")
    hashes = list(AuditRecord.objects.using(using).filter(sequence__gt=start, sequence__lte=size)
                  .order_by("sequence").values_list("hash", flat=True))
    if len(hashes) != size - start:
        raise IncompleteLog(f"records #{start + 1}..#{size} are incomplete in the database: "
                            f"run `{resources.program()} audit verify --database`")
    merkle.frontier_extend(result, [chain.merkle_leaf(h) for h in hashes])
    return result


def sign_checkpoint(tree_size: int, frontier, last_hash: str, timestamp, using: str | None = None) -> AuditCheckpoint:
    """Sign and store the tree head of `tree_size` records summarised by `frontier` (the cadence of
    the next ones starts from it), and hand it to the witness once the transaction commits. Called
    with the chain head locked, so nothing is appended in between."""
    from . import services

    using = using or router.db_for_write(AuditRecord)
    key = signing.load_signing_key()
    checkpoint = AuditCheckpoint(tree_size=tree_size, root_hash=merkle.frontier_root(frontier).hex(),
                                 last_hash=last_hash, frontier=merkle.frontier_to_json(frontier),
                                 timestamp=timestamp, key_id=key.key_id)
    checkpoint.signature = key.sign(chain.signed_statement(checkpoint.statement()))
    checkpoint.save(force_insert=True, using=using)
    services.forget_tip(using)  # this connection's guess of the head no longer holds its cadence
    # Only a committed checkpoint is witnessed: a rolled-back one never existed.
    transaction.on_commit(functools.partial(witness.append, checkpoint.signed()), using=using, robust=True)
    return checkpoint


def checkpoint_tip(tree_size: int, last_hash: str, timestamp, using: str) -> AuditCheckpoint:
    """The checkpoint `record()` makes after appending record `tree_size` (the head is locked)."""
    return sign_checkpoint(tree_size, prefix_frontier(tree_size, using=using), last_hash, timestamp, using=using)


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
        checkpoint = checkpoint_tip(head.sequence, head.hash, now, using=using)
        services.record("audit.checkpoint", target=checkpoint, details={
            "tree_size": checkpoint.tree_size, "root_hash": checkpoint.root_hash, "key_id": checkpoint.key_id})
    return checkpoint


def seal_unsigned() -> AuditCheckpoint | None:
    """The clock's checkpoint: sign the log's tip if records after the last checkpoint are unsigned
    (None when there are none). Like the checkpoints `record()` makes, it records no event of its
    own: an event would be a new unsigned record for the next tick to seal, for ever."""
    using = router.db_for_write(AuditRecord)
    with transaction.atomic(using=using):
        head = ChainHead.objects.using(using).select_for_update().filter(pk=1).first()
        if head is None or head.sequence == 0:
            return None
        last = AuditCheckpoint.objects.using(using).order_by("-tree_size").values_list("tree_size", flat=True).first()
        if last is not None and last >= head.sequence:
            return None
        return checkpoint_tip(head.sequence, head.hash, timezone.now(), using=using)


def clock_interval() -> int:
    """Seconds between two ticks of the checkpoint clock."""
    return max(1, settings.AUDIT_CHECKPOINT_EVERY_SECONDS)


def latest_checkpoint() -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.order_by("-tree_size").first()


def covering_checkpoint(sequence: int) -> AuditCheckpoint | None:
    """The first checkpoint whose tree contains record `sequence`."""
    return AuditCheckpoint.objects.filter(tree_size__gte=sequence).order_by("tree_size").first()
