"""Rotating the audit signing key: the handover is signed by both keys; checkpoints before and after
it verify, live and in bundles, against the old key or the new one; a forged handover does not."""

import json

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit import chain, signing
from appliance.audit.export import export_bundle
from appliance.audit.keys import finish_interrupted, rotate_signing_key
from appliance.audit.models import AuditCheckpoint, AuditKeyRotation, AuditRecord
from appliance.audit.proofs import verify_record
from appliance.audit.verify import BAD_SIGNATURE, UNKNOWN_KEY, verify_bundle
from appliance.audit.verify_database import verify_database

pytestmark = pytest.mark.django_db


def append(n):
    for i in range(n):
        audit.record("task.run", details={"i": i})


@pytest.fixture
def rotated(audit_settings, tmp_path):
    """Records under the first key, a rotation, records under the second; the old public key saved."""
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    append(6)
    old = signing.load_signing_key()
    old_pem = tmp_path / "old.pem"
    old_pem.write_text(old.public_pem())
    rotation = rotate_signing_key()
    append(9)
    return old, rotation, old_pem


def test_a_rotation_seals_the_log_under_the_old_key_and_signs_the_rest_with_the_new(rotated):
    old, rotation, _ = rotated
    new = signing.load_signing_key()
    assert (rotation.old_key_id, rotation.new_key_id) == (old.key_id, new.key_id) and old.key_id != new.key_id
    assert signing.rotation_problem(rotation.signed()) is None
    sealed = AuditCheckpoint.objects.get(tree_size=rotation.tree_size)
    assert sealed.key_id == old.key_id
    later = AuditCheckpoint.objects.filter(tree_size__gt=rotation.tree_size + 1)
    assert later.exists() and {c.key_id for c in later} == {new.key_id}
    event = AuditRecord.objects.get(event="audit.key.rotate")
    assert event.details == {"old_key_id": old.key_id, "new_key_id": new.key_id, "tree_size": rotation.tree_size}
    assert not (new.path.parent / (new.path.name + ".next")).exists()


def test_the_live_log_verifies_across_the_rotation(rotated, capsys):
    result = verify_database(record_event=False)
    assert result.ok, result.summary()
    before = verify_record(2)
    assert before.ok and before.checkpoint["key_id"] == rotated[0].key_id, before.message
    call_command("audit", "verify", "--database")
    assert "intact" in capsys.readouterr().out


def test_a_bundle_verifies_against_the_old_key_or_the_new_one_but_not_a_stranger(rotated, tmp_path):
    _old, rotation, old_pem = rotated
    bundle = tmp_path / "bundle"
    manifest = export_bundle(bundle, "jsonl")
    assert [r["new_key_id"] for r in manifest["key_rotations"]] == [rotation.new_key_id]
    assert verify_bundle(bundle).ok
    assert verify_bundle(bundle, public_key_file=old_pem).ok  # a key handed out before the rotation
    stranger = tmp_path / "stranger.pem"
    stranger.write_text(signing.load_signing_key(tmp_path / "stranger.key").public_pem())
    result = verify_bundle(bundle, public_key_file=stranger)
    assert not result.ok and result.first.kind == UNKNOWN_KEY, result.summary()


def test_a_forged_handover_in_a_bundle_is_a_bad_signature(rotated, tmp_path):
    bundle = tmp_path / "bundle"
    export_bundle(bundle, "jsonl")
    manifest = json.loads((bundle / "manifest.json").read_text())
    attacker = signing.load_signing_key(tmp_path / "attacker.key")
    manifest["key_rotations"][0].update(new_key_id=attacker.key_id, new_public_key=attacker.public_pem())
    # re-signed by the real current key (which an attacker lacks): the handover itself still fails
    manifest = chain.unsigned(manifest)
    manifest["signature"] = signing.load_signing_key().sign(chain.signed_statement(manifest))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = verify_bundle(bundle)
    assert not result.ok and result.first.kind == BAD_SIGNATURE, result.summary()
    assert result.first.sequence == rotated[1].tree_size


def test_handovers_are_append_only(rotated):
    for sql in ("UPDATE audit_auditkeyrotation SET tree_size = 1", "DELETE FROM audit_auditkeyrotation"):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    assert AuditKeyRotation.objects.count() == 1


def test_a_rotation_interrupted_after_commit_is_finished_and_one_never_committed_is_dropped(audit_settings):
    append(2)
    path = signing.load_signing_key().path
    pending = path.with_name(path.name + ".next")
    # Never committed: the key waiting next to the current one is thrown away.
    stray = signing.load_signing_key(pending)
    assert "discarded" in finish_interrupted() and not pending.exists()
    assert signing.load_signing_key().key_id != stray.key_id
    # Committed, then the process died before moving the key into place.
    rotation = rotate_signing_key()
    new_pem = path.read_bytes()
    pending.write_bytes(new_pem)
    pending.chmod(0o600)
    path.write_bytes(b"")  # whatever was there, the handover in the database decides
    assert "finished" in finish_interrupted()
    assert signing.load_signing_key().key_id == rotation.new_key_id


def test_a_copy_of_the_old_key_cannot_re_sign_a_rewritten_log_after_its_handover(audit_settings, tmp_path):
    """The review's attack: with a copy of the signing key taken before `rotate-key`, a record is
    deleted, the rest renumbered and re-hashed, every checkpoint and the manifest re-signed with the
    old key (dated before the handover), the real handover kept. The old key is trusted only for the
    log up to its handover: the bundle is tampered, whichever public key checks it."""
    import shutil

    from appliance.audit import triggers
    from appliance.audit.checkpoints import prefix_frontier, sign_checkpoint
    from tests.audit.attacker import rewrite_log

    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    audit.record("auth.login.failure", outcome="failure", details={"username": "alice"})
    append(5)
    current = signing.load_signing_key().path
    stolen = tmp_path / "stolen.key"
    shutil.copy(current, stolen)
    rotation = rotate_signing_key()
    new_pem = tmp_path / "new.pem"
    new_pem.write_text(signing.load_signing_key().public_pem())
    append(9)

    with triggers.suspended(connection):
        tip = rewrite_log(delete=[1], drop_checkpoints_from=1)
        audit_settings.AUDIT_SIGNING_KEY_FILE = stolen
        backdated = rotation.timestamp.replace(microsecond=0)
        for size in [*range(4, tip, 4), tip]:
            record = AuditRecord.objects.get(sequence=size)
            sign_checkpoint(size, prefix_frontier(size), record.hash, backdated)
    assert AuditKeyRotation.objects.get().tree_size == rotation.tree_size == 6  # the real handover, kept
    bundle = tmp_path / "forged"
    export_bundle(bundle, "jsonl")  # the manifest signed with the stolen key too

    for public_key in (new_pem, None):
        result = verify_bundle(bundle, public_key_file=public_key)
        assert not result.ok, result.summary()
        assert result.first.kind == BAD_SIGNATURE, result.summary()
        assert result.first.message == (
            f"the manifest is signed by retired key {rotation.old_key_id}: its key was handed over after #6 "
            f"({chain.format_timestamp(rotation.timestamp)}) and signs nothing past that: this statement speaks "
            "for #15")
    audit_settings.AUDIT_SIGNING_KEY_FILE = current
    live = verify_database(record_event=False)
    assert (live.first.kind, live.first.sequence) == (BAD_SIGNATURE, 8), live.summary()
    assert live.first.message.startswith(f"checkpoint #8 is signed by retired key {rotation.old_key_id}: its key "
                                         "was handed over after #6")


def test_statements_of_the_old_key_up_to_its_handover_still_verify(rotated, tmp_path):
    old, rotation, old_pem = rotated
    sealed = AuditCheckpoint.objects.get(tree_size=rotation.tree_size)
    assert sealed.key_id == old.key_id
    keys_retired = signing.retirements([rotation.signed()])
    assert keys_retired == {old.key_id: (6, chain.format_timestamp(rotation.timestamp))}
    assert signing.retired_problem(sealed.signed(), keys_retired[old.key_id]) is None
    later = dict(sealed.signed(), timestamp="2999-01-01T00:00:00.000000Z")
    assert signing.retired_problem(later, keys_retired[old.key_id]).endswith(
        "signs nothing later: this statement is dated 2999-01-01T00:00:00.000000Z")
