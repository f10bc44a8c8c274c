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
