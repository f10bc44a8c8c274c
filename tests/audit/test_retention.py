"""Archiving old records: a verified export of exactly the range, two different Administrators,
a signed tombstone, and a log that still verifies afterwards."""

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit import retention
from appliance.audit.export import export_bundle
from appliance.audit.models import AuditRecord, AuditTombstone, RetentionState
from appliance.audit.proofs import verify_record
from appliance.audit.verify import verify_bundle
from appliance.audit.verify_database import verify_database

pytestmark = pytest.mark.django_db


@pytest.fixture
def old_log(make_user, audit_settings):
    """Records of which the first ones are past the retention period."""
    audit_settings.AUDIT_RETENTION_DAYS = 30
    admins = make_user("administrator", "alice"), make_user("administrator", "bob")
    for i in range(12):
        audit.record("task.run", details={"i": i})
    boundary = AuditRecord.objects.order_by("-sequence").first()
    for i in range(6):
        audit.record("task.run", details={"late": i})
    # Time moves on: everything up to `boundary` is now older than the cut-off.
    cutoff = AuditRecord.objects.get(sequence=boundary.sequence + 1).timestamp
    audit_settings.AUDIT_RETENTION_DAYS = 0
    return admins, cutoff, boundary.sequence


def exported(tmp_path, cutoff, name="archive"):
    path = tmp_path / name
    export_bundle(path, "jsonl", until=cutoff)
    return path


def test_archiving_takes_two_administrators_and_leaves_a_log_that_verifies(old_log, tmp_path):
    (alice, bob), cutoff, last = old_log
    bundle = exported(tmp_path, cutoff)
    request = retention.request_retention(alice, cutoff, bundle)
    assert (request.first_sequence, request.last_sequence, request.state) == (1, last, RetentionState.REQUESTED)
    with pytest.raises(retention.RetentionError, match="second Administrator"):
        retention.approve_retention(request.pk, alice)
    with pytest.raises(retention.RetentionError, match="not approved"):
        retention.archive_retention(request.pk, alice)
    retention.approve_retention(request.pk, bob)
    tombstone = retention.archive_retention(request.pk, alice)

    assert not AuditRecord.objects.filter(sequence__lte=last).exists()
    assert (tombstone.first_sequence, tombstone.last_sequence, tombstone.count) == (1, last, last)
    assert AuditRecord.objects.get(sequence=last + 1).prev_hash == tombstone.last_hash
    events = list(AuditRecord.objects.filter(event__startswith="audit.retention.").values_list("event", flat=True))
    assert events == ["audit.retention.request", "audit.retention.approve", "audit.retention.archive"]

    live = verify_database(record_event=False)
    assert live.ok and live.tombstones == 1, live.summary()
    after = tmp_path / "after"
    export_bundle(after, "jsonl")
    result = verify_bundle(after)
    assert result.ok and result.first_sequence == last + 1, result.summary()
    assert verify_record(last + 3).ok
    assert verify_bundle(bundle).ok  # the archive itself still verifies offline


def test_records_younger_than_the_retention_period_stay(old_log, tmp_path, audit_settings):
    (alice, _bob), cutoff, _last = old_log
    audit_settings.AUDIT_RETENTION_DAYS = 365
    with pytest.raises(retention.RetentionError, match="365 days"):
        retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))


def test_the_export_must_be_of_exactly_the_range_and_intact(old_log, tmp_path):
    (alice, _bob), cutoff, _last = old_log
    short = tmp_path / "short"
    export_bundle(short, "jsonl", until=cutoff - timedelta(microseconds=1) - (cutoff - AuditRecord.objects.get(
        sequence=5).timestamp))
    with pytest.raises(retention.RetentionError, match="the range to archive"):
        retention.request_retention(alice, cutoff, short)
    damaged = exported(tmp_path, cutoff, "damaged")
    lines = (damaged / "records.jsonl").read_bytes().splitlines(keepends=True)
    (damaged / "records.jsonl").write_bytes(b"".join(lines[:2] + lines[3:]))
    with pytest.raises(retention.RetentionError, match="does not verify"):
        retention.request_retention(alice, cutoff, damaged)


def test_only_administrators_take_part(old_log, tmp_path, make_user):
    (_alice, _bob), cutoff, _last = old_log
    auditor = make_user("auditor", "carol")
    with pytest.raises(retention.RetentionError, match="not an active Administrator"):
        retention.request_retention(auditor, cutoff, exported(tmp_path, cutoff))


def test_raw_sql_still_cannot_delete_archived_or_remaining_records(old_log, tmp_path):
    (alice, bob), cutoff, last = old_log
    request = retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))
    retention.approve_retention(request.pk, bob)
    retention.archive_retention(request.pk, bob)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditrecord WHERE sequence = %s", [last + 2])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_audittombstone")
    assert AuditTombstone.objects.count() == 1


def test_the_command_runs_the_whole_procedure(old_log, tmp_path, capsys):
    from django.core.management import call_command

    from tests.conftest import PASSWORD

    (_alice, _bob), cutoff, last = old_log
    password = tmp_path / "pw"
    password.write_text(PASSWORD + "\n")
    bundle = exported(tmp_path, cutoff)
    common = ["--password-file", str(password)]
    call_command("audit", "retention", "request", "--user", "alice", *common, "--cutoff", cutoff.isoformat(),
                 "--bundle", str(bundle))
    request_id = retention.list_requests().first().pk
    call_command("audit", "retention", "approve", "--user", "bob", *common, str(request_id))
    call_command("audit", "retention", "archive", "--user", "bob", *common, str(request_id))
    call_command("audit", "retention", "list")
    out = capsys.readouterr().out
    assert f"archived records #1..#{last}" in out and "archived: records" in out
