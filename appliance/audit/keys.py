"""Rotating the audit signing key.

The old key signs a checkpoint at the chain's tip (everything so far is sealed under it), then a
handover statement naming both keys, signed by the old key and by the new one, goes into the
append-only rotation table in the same transaction. From then on checkpoints, tombstones and export
manifests are signed by the new key. Verifiers follow the handovers (signing.trusted_keys): trusting
either key of a handover means trusting the other, so a bundle checked against a public key obtained
years ago still verifies, and so does one checked against today's. A handed-over key is trusted only
for the log up to its handover (signing.retirements): a copy of the old key, kept by whoever had it,
cannot sign checkpoints, tombstones or manifests for a larger tree or a later time.

What rotation does not protect: the records up to the handover, which the old key did seal. Whoever
keeps a copy of it can forge a whole bundle that ends before the handover; the witness, the signed
checkpoints after the handover (the new key's, over the whole tree) and exports taken before the
key leaked are what catch that.

The new private key is written next to the current one (`<key file>.next`) before the transaction
and moved into place once it has committed; the old private key is gone after that. A process that dies
in between leaves the `.next` file: the next `rotate` finishes a handover the database holds, or
throws away one it does not.
"""

import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import router, transaction
from django.utils import timezone

from appliance.core.files import write_private

from . import chain, services, signing, witness
from .checkpoints import checkpoint_tip
from .models import AuditCheckpoint, AuditKeyRotation, AuditRecord, ChainHead


def _next_path(path: Path) -> Path:
    return path.with_name(path.name + ".next")


def finish_interrupted(path: Path | None = None) -> str | None:
    """Complete or discard a rotation a dead process left half-way. Returns what was done."""
    path = Path(path or settings.AUDIT_SIGNING_KEY_FILE)
    pending = _next_path(path)
    if not pending.exists():
        return None
    new = signing.load_signing_key(pending)
    if AuditKeyRotation.objects.filter(new_key_id=new.key_id).exists():
        os.replace(pending, path)
        return f"finished the interrupted rotation to key {new.key_id}"
    pending.unlink()
    return f"discarded key {new.key_id} of a rotation that never committed"


def rotate_signing_key(path: Path | None = None) -> AuditKeyRotation:
    """Replace the signing key; returns the handover. Recorded as `audit.key.rotate`."""
    path = Path(path or settings.AUDIT_SIGNING_KEY_FILE)
    finish_interrupted(path)
    old = signing.load_signing_key(path)
    new_private = Ed25519PrivateKey.generate()
    new_public_pem = signing.public_key_pem(new_private.public_key())
    new_key_id = signing.key_id_of(new_private.public_key())
    pending = _next_path(path)
    write_private(pending, signing.private_pem(new_private))
    using = router.db_for_write(AuditRecord)
    try:
        # Durable: the handover is committed when the block ends, before the key file changes.
        with transaction.atomic(using=using, durable=True):
            head = ChainHead.objects.using(using).select_for_update().filter(pk=1).first()
            tree_size = head.sequence if head is not None else 0
            now = timezone.now()
            # Seal the log as it is under the old key, unless a checkpoint already does.
            if tree_size and not AuditCheckpoint.objects.using(using).filter(tree_size=tree_size).exists():
                checkpoint_tip(tree_size, head.hash, now, using=using)
            rotation = AuditKeyRotation(old_key_id=old.key_id, old_public_key=old.public_pem(), new_key_id=new_key_id,
                                        new_public_key=new_public_pem, tree_size=tree_size, timestamp=now)
            message = chain.signed_statement(rotation.statement())
            rotation.old_signature = old.sign(message)
            rotation.new_signature = new_private.sign(message).hex()
            rotation.save(using=using)
            services.record("audit.key.rotate", target=rotation, details={
                "old_key_id": old.key_id, "new_key_id": new_key_id, "tree_size": tree_size})
    except BaseException:
        pending.unlink(missing_ok=True)  # the handover rolled back: its key never signed anything
        raise
    os.replace(pending, path)
    # The handover is witnessed outside the database, as checkpoints are: whoever later rewrites the
    # tables (or keeps a copy of the old key) cannot make it unsaid.
    witness.append(rotation.signed())
    return rotation


def key_list(using: str | None = None) -> dict:
    """The published key list (signing.read_key_list reads it): every key of this log with its validity
    interval, its handover kept in its successor's entry, the whole signed by the current key."""
    current = signing.load_signing_key()
    rotations = [r.signed() for r in AuditKeyRotation.objects.using(using or router.db_for_read(AuditRecord))]
    statement = signing.key_list_statement(current.public_pem(), rotations,
                                           chain.format_timestamp(timezone.now()))
    return {**statement, "signature": current.sign(chain.signed_statement(statement))}


def trusted_keys_of_the_log(using: str | None = None) -> dict:
    """The keys the live log's signatures may carry: the current key and every key the recorded
    handovers link to it."""
    anchor = signing.load_signing_key().public_key
    rotations = [r.signed() for r in AuditKeyRotation.objects.using(using or router.db_for_read(AuditRecord))]
    return signing.trusted_keys(anchor, rotations)


def retired_keys_of_the_log(using: str | None = None) -> dict:
    """When each handed-over key of the live log was retired (signing.retirements)."""
    rotations = [r.signed() for r in AuditKeyRotation.objects.using(using or router.db_for_read(AuditRecord))]
    return signing.retirements(rotations)
