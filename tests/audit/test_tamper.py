"""The tamper suite: every kind of damage, on exported bundles and on the live database, is reported
with the right kind and the right sequence number."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from appliance import audit
from appliance.audit import chain, signing, triggers
from appliance.audit.export import export_bundle
from appliance.audit.verify import (
    BAD_SIGNATURE,
    DAMAGE_KINDS,
    DELETED,
    INSERTED,
    MODIFIED,
    REORDERED,
    TRUNCATED,
    UNKNOWN_KEY,
    verify_bundle,
)
from appliance.audit.verify_database import verify_database

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle(real_session, tmp_path):
    path = tmp_path / "bundle"
    export_bundle(path, "jsonl")
    return path


def lines_of(bundle):
    return (bundle / "records.jsonl").read_bytes().splitlines(keepends=True)


def write_lines(bundle, lines):
    (bundle / "records.jsonl").write_bytes(b"".join(lines))


def first_sequence(bundle):
    return json.loads(lines_of(bundle)[0])["record"]["sequence"]


def assert_damage(bundle, kind, sequence, **kwargs):
    result = verify_bundle(bundle, **kwargs)
    assert not result.ok, "damage went unnoticed"
    assert (result.first.kind, result.first.sequence) == (kind, sequence), result.summary()
    return result


def resign_manifest(bundle, manifest, key):
    manifest = chain.unsigned(manifest)
    manifest["signature"] = key.sign(chain.signed_statement(manifest))
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_the_real_session_bundle_verifies_and_the_command_says_so(bundle, capsys, tmp_path):
    assert verify_bundle(bundle).ok
    public_key = tmp_path / "appliance.pem"
    call_command("audit", "public-key", "--out", str(public_key))
    capsys.readouterr()
    call_command("audit", "verify", str(bundle), "--public-key", str(public_key))
    assert capsys.readouterr().out.startswith("intact: ")


def test_flipping_any_byte_of_a_record_is_reported_as_modified_at_that_record(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    for index, line in enumerate(original):
        positions = sorted({0, 1, 9, 40, 84, len(line) // 2, len(line) - 3, len(line) - 2, len(line) - 1})
        for position in positions:
            changed = bytearray(line)
            changed[position] ^= 0x01
            write_lines(bundle, original[:index] + [bytes(changed)] + original[index + 1:])
            result = verify_bundle(bundle)
            assert not result.ok, f"line {index + 1} byte {position}"
            assert (result.first.kind, result.first.sequence) == (MODIFIED, first + index), \
                f"line {index + 1} byte {position}: {result.summary()}"


def test_flipping_bytes_of_the_manifest_or_the_key_is_reported(bundle):
    # A flip that leaves the same key (in the PEM armour's dashes, say) still changes the file the
    # manifest lists by its digest.
    for name, expected in (("manifest.json", {BAD_SIGNATURE, MODIFIED}), ("public-key.pem", {UNKNOWN_KEY, MODIFIED})):
        original = (bundle / name).read_bytes()
        step = max(1, len(original) // 40)
        for position in range(0, len(original) - 1, step):
            changed = bytearray(original)
            changed[position] ^= 0x01
            (bundle / name).write_bytes(bytes(changed))
            result = verify_bundle(bundle)
            assert not result.ok and result.first.kind in expected, f"{name} byte {position}: {result.summary()}"
        (bundle / name).write_bytes(original)
    assert verify_bundle(bundle).ok


def test_removing_a_line_is_deleted_or_at_the_end_truncated(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    for index in (0, 1, len(original) // 2, len(original) - 2):
        write_lines(bundle, original[:index] + original[index + 1:])
        assert_damage(bundle, DELETED, first + index)
    write_lines(bundle, original[:-1])
    assert_damage(bundle, TRUNCATED, first + len(original) - 1)


def test_adding_a_line_is_inserted_at_its_place(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    middle = len(original) // 2
    # a copy of an earlier record
    write_lines(bundle, original[:middle] + [original[2]] + original[middle:])
    assert_damage(bundle, INSERTED, first + middle)
    # a copy of the record just before
    write_lines(bundle, original[:middle] + [original[middle - 1]] + original[middle:])
    assert_damage(bundle, INSERTED, first + middle - 1)
    # a line that is no record
    write_lines(bundle, original[:middle] + [b'{"hash":"00","record":{}}\n'] + original[middle:])
    assert_damage(bundle, INSERTED, first + middle)
    # a well-formed record that claims the place and links correctly
    forged = json.loads(original[middle])["record"]
    forged.update(event="auth.login.success", reason="forged")
    forged_bytes = chain.canonical(forged)
    forged_line = chain.export_line(forged_bytes, hashlib.sha256(forged_bytes).hexdigest())
    write_lines(bundle, original[:middle] + [forged_line] + original[middle:])
    assert_damage(bundle, INSERTED, first + middle)
    # one more record after the last, correctly chained
    last = json.loads(original[-1])
    extra = dict(last["record"], sequence=last["record"]["sequence"] + 1, prev_hash=last["hash"])
    extra_bytes = chain.canonical(extra)
    write_lines(bundle, original + [chain.export_line(extra_bytes, hashlib.sha256(extra_bytes).hexdigest())])
    assert_damage(bundle, INSERTED, first + len(original))


@pytest.fixture
def long_bundle(db, tmp_path):
    """Long enough that the fast path checks it in several groups of lines."""
    from appliance.audit.verify import _SCAN_GROUP

    for i in range(2 * _SCAN_GROUP + 40):
        audit.record("task.run", details={"i": i})
    path = tmp_path / "long"
    export_bundle(path, "jsonl")
    return path


def test_damage_at_the_edges_of_the_verifiers_groups_is_found_where_it_is(long_bundle):
    from appliance.audit.verify import _SCAN_GROUP

    original = lines_of(long_bundle)
    first = first_sequence(long_bundle)
    assert verify_bundle(long_bundle).ok
    for index in (_SCAN_GROUP - 1, _SCAN_GROUP, _SCAN_GROUP + 1, 2 * _SCAN_GROUP):
        write_lines(long_bundle, original[:index] + original[index + 1:])
        assert_damage(long_bundle, DELETED, first + index)
        changed = original[index].replace(b'"task.run"', b'"task.ran"')
        write_lines(long_bundle, original[:index] + [changed] + original[index + 1:])
        assert_damage(long_bundle, MODIFIED, first + index)
        swapped = list(original)
        swapped[index - 1], swapped[index] = swapped[index], swapped[index - 1]
        write_lines(long_bundle, swapped)
        assert_damage(long_bundle, REORDERED, first + index - 1)
    write_lines(long_bundle, original)
    assert verify_bundle(long_bundle).ok


def test_swapping_lines_is_reordered_at_the_first_displaced(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    for a, b in ((0, 1), (3, 4), (2, 7), (len(original) - 2, len(original) - 1)):
        swapped = list(original)
        swapped[a], swapped[b] = swapped[b], swapped[a]
        write_lines(bundle, swapped)
        assert_damage(bundle, REORDERED, first + a)


def test_cutting_the_tail_is_truncated_where_the_cut_is(bundle):
    data = (bundle / "records.jsonl").read_bytes()
    original = lines_of(bundle)
    first = first_sequence(bundle)
    starts = [sum(len(line) for line in original[:i]) for i in range(len(original))]
    for index in (1, len(original) // 2, len(original) - 1):
        for into in (1, 10, 90, len(original[index]) // 2, len(original[index]) - 2, len(original[index]) - 1):
            (bundle / "records.jsonl").write_bytes(data[:starts[index] + into])
            assert_damage(bundle, TRUNCATED, first + index)
        (bundle / "records.jsonl").write_bytes(data[:starts[index]])
        assert_damage(bundle, TRUNCATED, first + index)


def test_a_record_rewritten_with_a_fresh_hash_is_modified(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    middle = len(original) // 2
    record = json.loads(original[middle])["record"]
    record["outcome"] = "success" if record["outcome"] != "success" else "failure"
    payload = chain.canonical(record)
    rewritten = chain.export_line(payload, hashlib.sha256(payload).hexdigest())
    write_lines(bundle, original[:middle] + [rewritten] + original[middle + 1:])
    assert_damage(bundle, MODIFIED, first + middle)


def test_a_chain_rewritten_to_the_end_is_caught_by_the_signed_tree_heads(bundle):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    middle = len(original) // 2
    rewritten, prev = list(original[:middle]), json.loads(original[middle - 1])["hash"]
    for line in original[middle:]:
        record = json.loads(line)["record"]
        record["prev_hash"] = prev
        if len(rewritten) == middle:
            record["reason"] = "nothing happened here"
        payload = chain.canonical(record)
        prev = hashlib.sha256(payload).hexdigest()
        rewritten.append(chain.export_line(payload, prev))
    write_lines(bundle, rewritten)
    result = verify_bundle(bundle)
    assert result.first.kind == MODIFIED and first <= result.first.sequence <= first + middle, result.summary()


def test_changed_checkpoint_signature_is_a_bad_signature(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    checkpoint = manifest["checkpoints"][1]
    checkpoint["signature"] = checkpoint["signature"][:-2] + ("00" if checkpoint["signature"][-2:] != "00" else "11")
    # even re-signed by the real key (which an attacker lacks), the checkpoint itself does not verify
    resign_manifest(bundle, manifest, signing.load_signing_key())
    assert_damage(bundle, BAD_SIGNATURE, checkpoint["tree_size"])


def test_a_bundle_resigned_with_another_key_is_an_unknown_key(bundle, tmp_path):
    trusted = tmp_path / "trusted.pem"
    trusted.write_text(signing.load_signing_key().public_pem())
    attacker = signing.load_signing_key(tmp_path / "attacker.key")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["key_id"] = attacker.key_id
    (bundle / "public-key.pem").write_text(attacker.public_pem())
    resign_manifest(bundle, manifest, attacker)
    assert_damage(bundle, UNKNOWN_KEY, None, public_key_file=trusted)


def test_a_changed_display_line_is_found_by_its_record(real_session, tmp_path):
    path = tmp_path / "cef"
    export_bundle(path, "cef")
    first = first_sequence(path)
    lines = (path / "records.cef").read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b"outcome=", b"outcome=x", 1)
    (path / "records.cef").write_bytes(b"".join(lines))
    assert_damage(path, MODIFIED, first + 5)


# -- every file of a bundle is the manifest's, and the manifest is read strictly -----------------------

def test_a_file_dropped_into_a_bundle_is_refused(bundle, tmp_path):
    records = canonical_lines = lines_of(bundle)
    forged = "sequence,event\r\n" + "".join(f"{json.loads(line)['record']['sequence']},auth.login.success\r\n"
                                             for line in canonical_lines)
    (bundle / "records.csv").write_text(forged)
    result = assert_damage(bundle, INSERTED, None)
    assert result.first.where == "records.csv" and "does not list it" in result.first.message
    (bundle / "records.csv").unlink()
    (bundle / ".hidden").write_text("x")
    assert_damage(bundle, INSERTED, None)
    (bundle / ".hidden").unlink()
    (bundle / "extra").mkdir()
    assert_damage(bundle, MODIFIED, None)
    (bundle / "extra").rmdir()
    assert verify_bundle(bundle).ok and len(records) > 3


def test_a_link_in_a_bundle_is_refused_before_anything_is_read(bundle, tmp_path):
    outside = tmp_path / "outside.jsonl"
    (bundle / "records.jsonl").rename(outside)
    (bundle / "records.jsonl").symlink_to(outside)
    result = assert_damage(bundle, MODIFIED, None)
    assert "records.jsonl is not a plain file" in result.first.message
    (bundle / "records.jsonl").unlink()
    outside.rename(bundle / "records.jsonl")
    assert verify_bundle(bundle).ok


def test_a_public_key_file_the_manifest_does_not_vouch_for_is_refused(bundle, tmp_path):
    trusted = tmp_path / "trusted.pem"
    trusted.write_text(signing.load_signing_key().public_pem())
    other = signing.load_signing_key(tmp_path / "other.key")
    (bundle / "public-key.pem").write_text(other.public_pem())
    # Checked against the independent copy, the signatures hold; the key file in the bundle does not.
    result = assert_damage(bundle, MODIFIED, None, public_key_file=trusted)
    assert result.first.message == "public-key.pem differs from the manifest's digest"


def test_a_manifest_with_a_key_twice_is_refused(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert verify_bundle(bundle).ok
    # Python's json keeps the last "format", other readers the first: each would see another bundle.
    text = json.dumps(manifest)
    (bundle / "manifest.json").write_text('{"format": "csv", ' + text[1:])
    result = assert_damage(bundle, MODIFIED, None)
    assert "the key 'format' occurs twice" in result.first.message


MALFORMED = [
    (lambda m: m.update(checkpoints=["#5"]), "manifest.checkpoints[0] must be an object"),
    (lambda m: m["checkpoints"][0].update(tree_size="5"), "manifest.checkpoints[0].tree_size must be an integer"),
    (lambda m: m["tree"].update(consistency_proof="zz"), "manifest.tree.consistency_proof must be a list"),
    (lambda m: m["tree"].update(prefix_frontier=[["a", "b"]]), "manifest.tree.prefix_frontier[0] must be a [size"),
    (lambda m: m["range"].update(count=True), "manifest.range.count must be an integer of at least 1"),
    (lambda m: m["range"].pop("last_hash"), "manifest.range.last_hash is missing"),
    (lambda m: m["range"].update(first_prev_hash="../.."), "manifest.range.first_prev_hash must be a SHA-256"),
    (lambda m: m["files"].update(display="records.jsonl"), "manifest.files.display must be an object"),
    (lambda m: m.update(tombstones=[1]), "manifest.tombstones[0] must be an object"),
    (lambda m: m.update(event_types=[]), "manifest.event_types must be an object"),
    (lambda m: m["event_types"]["task.run"].update(ocsf_class=9999), "manifest.event_types.task.run.ocsf_class"),
    (lambda m: m.update(format="xml"), "manifest.format 'xml' is not one of"),
    (lambda m: m.update(files=None), "manifest.files must be an object"),
    (lambda m: m.update(source=None), "manifest.source must be an object"),
    (lambda m: m["files"].update(records={"name": "../records.jsonl", "sha256": "0" * 64}),
     "manifest.files.records.name must be the plain name of a file"),
]


@pytest.fixture
def task_bundle(db, tmp_path):
    for i in range(12):
        audit.record("task.run", details={"i": i})
    path = tmp_path / "tasks"
    export_bundle(path, "jsonl")
    return path


@pytest.mark.parametrize(("change", "message"), MALFORMED, ids=[m for _, m in MALFORMED])
def test_a_malformed_manifest_under_a_good_signature_gets_a_verdict_not_a_traceback(task_bundle, capsys, change,
                                                                                     message):
    manifest = json.loads((task_bundle / "manifest.json").read_text())
    change(manifest)
    resign_manifest(task_bundle, manifest, signing.load_signing_key())
    result = assert_damage(task_bundle, MODIFIED, None)
    assert message in result.first.message and result.first.where == "manifest.json"
    with pytest.raises(SystemExit) as exit_info:
        call_command("audit", "verify", str(task_bundle))
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        yield from _leaves(value[0], (*path, 0))
    yield path


def test_any_manifest_value_of_any_other_type_gets_a_verdict(task_bundle):
    original = json.loads((task_bundle / "manifest.json").read_text())
    key = signing.load_signing_key()
    for path in list(_leaves(original)):
        if not path or path[-1] == "signature":
            continue
        for wrong in (None, "x", -1, 2**70, [], {}, [["x"]], True):
            manifest = json.loads(json.dumps(original))
            parent = manifest
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = wrong
            try:
                resign_manifest(task_bundle, manifest, key)
            except ValueError:  # no canonical JSON for 2**70: the value goes in unsigned
                (task_bundle / "manifest.json").write_text(json.dumps(manifest))
            result = verify_bundle(task_bundle)  # never raises
            assert result.ok or (result.first.kind in DAMAGE_KINDS and result.first.message), (path, wrong)
    resign_manifest(task_bundle, original, key)
    assert verify_bundle(task_bundle).ok


def test_a_display_file_name_never_makes_verify_read_outside_the_bundle(real_session, tmp_path):
    bundle = tmp_path / "a" / "b" / "bundle"
    bundle.parent.mkdir(parents=True)
    export_bundle(bundle, "cef")
    outside = tmp_path / "a" / "etc" / "hostname"
    outside.parent.mkdir()
    outside.write_text("not part of the bundle\n")
    (bundle / "records.cef").unlink()
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["display"] = {"name": "../../etc/hostname",
                                    "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}
    resign_manifest(bundle, manifest, signing.load_signing_key())
    result = assert_damage(bundle, MODIFIED, None)
    assert "manifest.files.display.name must be the plain name of a file in the bundle" in result.first.message
    manifest["files"]["display"]["name"] = "records.csv"  # a plain name, but not this format's file
    resign_manifest(bundle, manifest, signing.load_signing_key())
    result = assert_damage(bundle, MODIFIED, None)
    assert result.first.message == "manifest.files.display.name 'records.csv' must be records.cef"


def test_the_command_exits_non_zero_naming_kind_and_position(bundle, capsys):
    original = lines_of(bundle)
    first = first_sequence(bundle)
    write_lines(bundle, original[:3] + original[4:])
    with pytest.raises(SystemExit) as exit_info:
        call_command("audit", "verify", str(bundle))
    assert exit_info.value.code != 0
    assert f"deleted at #{first + 3}" in capsys.readouterr().err


def test_offline_verification_needs_no_database(bundle, tmp_path):
    env = dict(os.environ, DATABASE_URL="postgres://nobody@127.0.0.1:1/no-such-database",
               APPLIANCE_STATE_DIR=str(tmp_path / "elsewhere"))
    key_list = tmp_path / "keys.json"
    call_command("audit", "keys", "export", "--out", str(key_list))
    command = [sys.executable, str(REPO / "manage.py"), "audit", "verify", str(bundle), "--key-list", str(key_list)]
    intact = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert intact.returncode == 0, intact.stderr
    assert "intact" in intact.stdout
    write_lines(bundle, lines_of(bundle)[:-2])
    damaged = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert damaged.returncode == 1 and "truncated at #" in damaged.stderr


# -- the live database -------------------------------------------------------------------------------

@pytest.fixture
def live_log(db):
    for i in range(17):
        audit.record("task.run", details={"i": i})
    assert verify_database(record_event=False).ok


def behind_the_triggers(sql, params=()):
    """What a database superuser can do: switch the triggers off, change rows, switch them on."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            tables = triggers.IMMUTABLE_TABLES
            for table in tables:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            try:
                cursor.execute(sql, params)
            finally:
                for table in tables:
                    cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        else:
            with triggers.suspended(connection):
                cursor.execute(sql, params)


def assert_live_damage(kind, sequence, capsys=None):
    result = verify_database(record_event=False)
    assert not result.ok and (result.first.kind, result.first.sequence) == (kind, sequence), result.summary()


@pytest.mark.parametrize("column, value", [("outcome", "denied"), ("actor_username", "nobody"),
                                           ("details", '{"i": 99}'), ("prev_hash", "f" * 64), ("hash", "e" * 64)])
def test_a_raw_update_behind_the_triggers_is_modified_at_that_sequence(live_log, column, value, capsys):
    behind_the_triggers(f"UPDATE audit_auditrecord SET {column} = %s WHERE sequence = 9", [value])
    assert_live_damage(MODIFIED, 9)
    with pytest.raises(SystemExit):
        call_command("audit", "verify", "--database")
    assert "modified at #9" in capsys.readouterr().err


def test_a_raw_delete_behind_the_triggers_is_deleted_or_truncated(live_log):
    behind_the_triggers("DELETE FROM audit_auditrecord WHERE sequence = 4")
    assert_live_damage(DELETED, 4)


def test_deleting_the_newest_records_is_truncated(live_log):
    behind_the_triggers("DELETE FROM audit_auditrecord WHERE sequence >= 16")
    assert_live_damage(TRUNCATED, 16)


def test_a_record_written_around_the_entry_point_is_inserted(live_log):
    columns = [f.column for f in __import__("appliance.audit.models", fromlist=["AuditRecord"])
               .AuditRecord._meta.concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(columns)} FROM audit_auditrecord WHERE sequence = 17")
        row = list(cursor.fetchone())
    row[columns.index("sequence")] = 18
    row[columns.index("uuid")] = "0" * 32 if connection.vendor == "sqlite" else "00000000-0000-0000-0000-000000000000"
    row[columns.index("hash")] = "d" * 64
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO audit_auditrecord ({', '.join(columns)}) VALUES "
                       f"({', '.join(['%s'] * len(columns))})", row)
    assert_live_damage(INSERTED, 18)


def test_a_changed_checkpoint_is_a_bad_signature(live_log):
    from appliance.audit.models import AuditCheckpoint

    size = AuditCheckpoint.objects.order_by("tree_size").values_list("tree_size", flat=True)[1]
    behind_the_triggers("UPDATE audit_auditcheckpoint SET root_hash = %s WHERE tree_size = %s", ["a" * 64, size])
    assert_live_damage(BAD_SIGNATURE, size)


def test_verify_database_records_its_outcome(live_log):
    from appliance.audit.models import AuditRecord

    call_command("audit", "verify", "--database")
    assert AuditRecord.objects.filter(event="audit.verify").last().outcome == "success"


@pytest.mark.postgres
def test_raw_update_as_superuser_after_disabling_the_trigger_on_postgresql(live_log):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone()[0], "the test plays the database superuser"
    behind_the_triggers("UPDATE audit_auditrecord SET reason = 'edited' WHERE sequence = 12")
    assert_live_damage(MODIFIED, 12)


