"""Trust in a bundle comes from outside it (issue 40): without a trusted key `audit verify` says
"unverified", and the published key list proves each key's retirement, so a copy of a handed-over key
cannot export a bundle that verifies by leaving the handover out."""

import json
import shutil

import pytest
from django.core.management import call_command
from django.db import connection

from appliance import audit
from appliance.audit import chain, signing, triggers, witness
from appliance.audit.export import export_bundle
from appliance.audit.keys import key_list, rotate_signing_key
from appliance.audit.models import AuditCheckpoint, AuditRecord
from appliance.audit.verify import BAD_SIGNATURE, MODIFIED, UNKNOWN_KEY, verify_bundle
from appliance.audit.verify_database import verify_database

pytestmark = pytest.mark.django_db


def append(n, what="task.run"):
    for i in range(n):
        audit.record(what, details={"i": i})


def write_key_list(path):
    path.write_text(json.dumps(key_list()))
    return path


def run_verify(capsys, *argv):
    """`audit verify ...`: (exit status, stdout, stderr)."""
    status = 0
    try:
        call_command("audit", "verify", *map(str, argv))
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_bundle_without_a_trusted_key_is_unverified_and_the_command_fails(audit_settings, tmp_path, capsys):
    """The issue's second attack: a bundle made on a fresh appliance, with fabricated records, checked
    against nothing but its own public-key.pem."""
    append(3, "auth.login.success")
    bundle = tmp_path / "fabricated"
    export_bundle(bundle, "jsonl")

    result = verify_bundle(bundle)
    assert (result.ok, result.trusted, result.verified) == (True, False, False)
    assert result.summary() == (
        f"unverified: no trusted key: 3 records (#1..#3), 2 signed checkpoints, 0 tombstones, key {result.key_id}, "
        "consistent only with the bundle's own public-key.pem, which whoever made it chose; check it with "
        "--key-list (the appliance's published key list) or --public-key (a key obtained independently)")
    status, out, err = run_verify(capsys, bundle)
    assert status == 3 and out == ""
    assert "unverified: no trusted key" in err and "intact" not in err

    # On purpose, the bundle's own key: its consistency, said as such.
    status, out, err = run_verify(capsys, bundle, "--trust-bundle-key")
    assert status == 0 and out.startswith("intact: 3 records (#1..#3)")
    assert "checked against the bundle's own key only (--trust-bundle-key)" in err


def test_a_genuine_bundle_is_intact_against_the_key_list_across_a_rotation(audit_settings, tmp_path, capsys):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    append(6)
    old_key = signing.load_signing_key()
    rotation = rotate_signing_key()
    append(5)
    keys = write_key_list(tmp_path / "keys.json")
    document = json.loads(keys.read_text())
    assert [entry["key_id"] for entry in document["keys"]] == [old_key.key_id, rotation.new_key_id]
    end = {"tree_size": rotation.tree_size, "timestamp": chain.format_timestamp(rotation.timestamp)}
    assert document["keys"][0]["valid_until"] == end == document["keys"][1]["valid_from"]
    assert document["keys"][1]["valid_until"] is None and document["key_id"] == rotation.new_key_id

    bundle = tmp_path / "genuine"
    export_bundle(bundle, "jsonl")
    result = verify_bundle(bundle, key_list_file=keys)
    assert result.verified, result.summary()
    status, out, _err = run_verify(capsys, bundle, "--key-list", keys)
    # 6 records, the handover's own record, 5 more
    assert status == 0 and out.startswith("intact: 12 records (#1..#12), 5 signed checkpoints")


def test_the_retired_key_forgery_is_refused_by_the_key_list(audit_settings, tmp_path, capsys):
    """The issue's attack, on a copy of the appliance: K0 hands over to K1 after #N; a holder of a copy
    of K0 takes the log as it was before the handover, appends records "forged after the handover" and
    exports with K0. Judged by P0 alone the bundle is intact (nothing in it says K0 was retired); the
    published key list refuses it, and the live log's witness still holds the handover."""
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    append(6)
    k0_file = signing.load_signing_key().path
    stolen = tmp_path / "stolen-k0.key"
    shutil.copy(k0_file, stolen)
    p0 = tmp_path / "p0.pem"
    p0.write_text(signing.load_signing_key().public_pem())
    rotation = rotate_signing_key()
    handover = rotation.tree_size
    append(5)
    keys = write_key_list(tmp_path / "keys.json")  # what the auditors were given after the rotation

    # The log as it was before the handover: later records, checkpoints and the handover itself gone.
    with triggers.suspended(connection), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditrecord WHERE sequence > %s", [handover])
        cursor.execute("DELETE FROM audit_auditcheckpoint WHERE tree_size > %s", [handover])
        cursor.execute("DELETE FROM audit_auditkeyrotation")
        tip = AuditRecord.objects.get(sequence=handover)
        cursor.execute("UPDATE audit_chainhead SET sequence = %s, hash = %s WHERE id = 1", [handover, tip.hash])
    witnessed_file = audit_settings.AUDIT_WITNESS_FILE
    audit_settings.AUDIT_SIGNING_KEY_FILE = stolen
    audit_settings.AUDIT_WITNESS_FILE = tmp_path / "forger-witness.jsonl"  # the forger's own copy
    for i in range(20):
        audit.record("task.run", reason="forged after the handover", details={"forged": i})
    forged = tmp_path / "forged"
    manifest = export_bundle(forged, "jsonl")
    assert manifest["key_id"] == rotation.old_key_id and manifest["range"]["last_sequence"] == handover + 20
    assert "key_rotations" not in manifest or manifest["key_rotations"] == []

    # What the issue saw: P0 alone calls it intact.
    assert verify_bundle(forged, public_key_file=p0).verified
    # The key list: K0 ended at the handover, whatever the bundle says.
    result = verify_bundle(forged, key_list_file=keys)
    assert not result.ok and result.first.kind == BAD_SIGNATURE, result.summary()
    assert result.first.message == (
        f"the manifest is signed by retired key {rotation.old_key_id}: its key was handed over after #{handover} "
        f"({chain.format_timestamp(rotation.timestamp)}) and signs nothing past that: this statement speaks for "
        f"#{handover + 20}")
    status, out, err = run_verify(capsys, forged, "--key-list", keys, "--public-key", p0)
    assert status == 1 and out == "" and err.splitlines()[-1].startswith(
        f"DAMAGED: bad signature: the manifest is signed by retired key {rotation.old_key_id}")

    # On the copy itself, the witness outside the database still holds the handover the tables lost.
    audit_settings.AUDIT_WITNESS_FILE = witnessed_file
    audit_settings.AUDIT_SIGNING_KEY_FILE = k0_file
    assert [entry.statement["new_key_id"] for entry in witness.read() if entry.is_handover] == [rotation.new_key_id]
    live = verify_database(record_event=False)  # the appliance's key is K1 now; its handover is gone
    assert (live.first.kind, live.first.sequence) == (UNKNOWN_KEY, 1), live.summary()


def test_a_deleted_handover_is_caught_by_the_witness(audit_settings, tmp_path):
    """The owner of the tables holding a copy of the old key: the handover and everything after it deleted,
    the old key put back as the appliance's key. The database alone is consistent again; the witness is
    not."""
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    append(5)
    stolen = tmp_path / "stolen.key"
    shutil.copy(signing.load_signing_key().path, stolen)
    rotation = rotate_signing_key()
    append(3)
    assert verify_database(record_event=False).ok
    with triggers.suspended(connection), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditrecord WHERE sequence > %s", [rotation.tree_size])
        cursor.execute("DELETE FROM audit_auditcheckpoint WHERE tree_size > %s", [rotation.tree_size])
        cursor.execute("DELETE FROM audit_auditkeyrotation")
        tip = AuditRecord.objects.get(sequence=rotation.tree_size)
        cursor.execute("UPDATE audit_chainhead SET sequence = %s, hash = %s WHERE id = 1", [rotation.tree_size, tip.hash])
    audit_settings.AUDIT_SIGNING_KEY_FILE = stolen
    result = verify_database(record_event=False)
    assert (result.first.kind, result.first.sequence) == (MODIFIED, rotation.tree_size), result.summary()
    assert result.first.message == (f"the key handover after #{rotation.tree_size} in the witness (key "
                                    f"{rotation.old_key_id} to {rotation.new_key_id}) is not in the database")


@pytest.mark.parametrize("damage, message", [
    (lambda doc: doc["keys"][0].update(valid_until=None),
     "keys[1].valid_from: the interval does not match its handover"),
    (lambda doc: doc["keys"][1].pop("handover"), "keys[1].handover: missing"),
    (lambda doc: doc["keys"][1]["handover"].update(tree_size=10**6),
     "keys[1].handover: the old key's signature does not verify"),
    (lambda doc: doc.update(keys=doc["keys"][:1], key_id=doc["keys"][0]["key_id"]),
     "keys[0].valid_until: the newest key has no end yet (null)"),
    (lambda doc: doc.update(created="2000-01-01T00:00:00Z"), "signature: does not verify with the newest key"),
])
def test_a_key_list_that_does_not_hold_is_refused_naming_the_field(audit_settings, tmp_path, damage, message):
    append(5)
    rotate_signing_key()
    append(2)
    bundle = tmp_path / "bundle"
    export_bundle(bundle, "jsonl")
    document = key_list()
    damage(document)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(document))
    result = verify_bundle(bundle, key_list_file=keys)
    assert not result.ok and result.first.kind == UNKNOWN_KEY, result.summary()
    assert result.first.message.startswith(f"the key list does not hold: {keys}: {message}"), result.first.message


def test_a_public_key_outside_the_key_list_is_refused(audit_settings, tmp_path):
    append(3)
    bundle = tmp_path / "bundle"
    export_bundle(bundle, "jsonl")
    keys = write_key_list(tmp_path / "keys.json")
    stranger = tmp_path / "stranger.pem"
    stranger.write_text(signing.load_signing_key(tmp_path / "stranger.key").public_pem())
    result = verify_bundle(bundle, public_key_file=stranger, key_list_file=keys)
    assert (result.first.kind, result.first.message) == (
        UNKNOWN_KEY, f"key {signing.load_signing_key(tmp_path / 'stranger.key').key_id} is not in the key list given")


def test_the_key_list_command_writes_what_verify_reads(audit_settings, tmp_path, capsys):
    append(3)
    rotate_signing_key()
    out = tmp_path / "keys.json"
    call_command("audit", "keys", "export", "--out", str(out))
    assert capsys.readouterr().out.startswith(f"key list of 2 key(s), signed by {signing.load_signing_key().key_id}")
    read = signing.read_key_list(out.read_bytes())
    assert read.newest == signing.load_signing_key().key_id and len(read.retired) == 1
    assert AuditCheckpoint.objects.exists()
