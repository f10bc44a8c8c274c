"""Archiving old records: a verified export of exactly the range, two different Administrators,
a signed tombstone, and a log that still verifies afterwards."""

import re
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit import retention
from appliance.audit.export import export_bundle
from appliance.audit.models import AuditRecord, AuditTombstone, RetentionRequest, RetentionState
from appliance.audit.proofs import verify_record
from appliance.audit.verify import verify_bundle
from appliance.audit.verify_database import verify_database
from tests.accounts.settled import settle

pytestmark = pytest.mark.django_db


def set_floor(days: int) -> None:
    """The floor as the appliance stores it (set through the service: an Administrator, recorded)."""
    from appliance.accounts.models import User

    retention.set_retention_floor(days, User.objects.get(username="alice"))


@pytest.fixture
def old_log(make_user):
    """Records of which the first ones are past the retention period."""
    # Two Administrators who have been on the appliance longer than the four-eyes cooling period.
    admins = settle(make_user("administrator", "alice"), make_user("administrator", "bob"))
    set_floor(30)
    for i in range(12):
        audit.record("task.run", details={"i": i})
    boundary = AuditRecord.objects.order_by("-sequence").first()
    for i in range(6):
        audit.record("task.run", details={"late": i})
    # Time moves on: everything up to `boundary` is now older than the cut-off.
    cutoff = AuditRecord.objects.get(sequence=boundary.sequence + 1).timestamp
    set_floor(0)
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
    events = list(AuditRecord.objects.filter(event__startswith="audit.retention.").values_list("event", "outcome"))
    # The fixture's last floor change is younger than the cut-off; alice's own approval is refused, recorded.
    assert events == [("audit.retention.floor", "success"), ("audit.retention.request", "success"),
                      ("audit.retention.approve", "failure"), ("audit.retention.approve", "success"),
                      ("audit.retention.archive", "success")]

    live = verify_database(record_event=False)
    assert live.ok and live.tombstones == 1, live.summary()
    after = tmp_path / "after"
    export_bundle(after, "jsonl")
    result = verify_bundle(after)
    assert result.ok and result.first_sequence == last + 1, result.summary()
    assert verify_record(last + 3).ok
    assert verify_bundle(bundle).ok  # the archive itself still verifies offline


def test_records_younger_than_the_retention_period_stay(old_log, tmp_path):
    (alice, _bob), cutoff, _last = old_log
    set_floor(365)
    with pytest.raises(retention.RetentionError, match="365 days"):
        retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))


def test_the_floor_is_the_appliances_not_the_callers_environment(old_log, tmp_path, settings, monkeypatch):
    """A caller exporting AUDIT_RETENTION_DAYS=0 (or a settings override) does not move the floor."""
    (alice, bob), cutoff, _last = old_log
    set_floor(365)
    monkeypatch.setenv("AUDIT_RETENTION_DAYS", "0")
    settings.AUDIT_RETENTION_DAYS = 0
    with pytest.raises(retention.RetentionError, match="records are kept 365 days"):
        retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))
    assert retention.retention_floor_days() == 365
    change = AuditRecord.objects.filter(event="audit.retention.floor").latest("sequence")
    assert change.actor_username == "alice" and change.details == {"days": [0, 365]}


def test_only_an_administrator_sets_the_floor_within_bounds(old_log, make_user):
    with pytest.raises(retention.RetentionError, match="not an active Administrator"):
        retention.set_retention_floor(0, make_user("operator", "oscar"))
    (alice, _bob), _cutoff, _last = old_log
    for bad in (-1, 36501, "30", True):
        with pytest.raises(retention.RetentionError, match="days: a whole number from 0 to 36500"):
            retention.set_retention_floor(bad, alice)
    assert retention.retention_floor_days() == 0


def test_the_floor_command_shows_and_sets_it(old_log, tmp_path, capsys):
    from django.core.management import call_command

    from tests.conftest import PASSWORD

    password = tmp_path / "pw"
    password.write_text(PASSWORD + "\n")
    call_command("audit", "retention", "floor", "400", "--user", "bob", "--password-file", str(password))
    call_command("audit", "retention", "floor")
    out = capsys.readouterr().out
    assert "records are now kept at least 400 days" in out and "records are kept at least 400 days" in out
    assert retention.retention_floor_days() == 400


def test_an_approver_created_after_the_request_is_refused(old_log, tmp_path):
    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    (alice, _bob), cutoff, _last = old_log
    request = retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))
    newcomer = create_user("newcomer", "administrator", PASSWORD)
    with pytest.raises(retention.RetentionError,
                       match="^approver: 'newcomer' was created at .*, less than 24 h before the request; an account "
                             "takes part in a four-eyes decision only 24 h after it was created"):
        retention.approve_retention(request.pk, newcomer)
    request.refresh_from_db()
    assert request.state == RetentionState.REQUESTED
    [refusal] = AuditRecord.objects.filter(event="audit.retention.approve")
    assert (refusal.outcome, refusal.actor_username, refusal.details["field"]) == ("failure", "newcomer", "approver")
    assert refusal.reason.startswith("approver: 'newcomer' was created at ")


def test_the_administrator_who_made_the_requester_cannot_approve(old_log, tmp_path):
    """A makes B, B asks, A approves: refused; so through a chain A -> C -> B; a third one approves."""
    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    (alice, bob), cutoff, _last = old_log
    made = settle(create_user("alice-made", "administrator", PASSWORD, created_by=alice))
    middle = settle(create_user("alice-middle", "administrator", PASSWORD, created_by=alice))
    chained = settle(create_user("alice-chained", "administrator", PASSWORD, created_by=middle))
    for requester in (made, chained):
        request = retention.request_retention(requester, cutoff, exported(tmp_path, cutoff, requester.username))
        with pytest.raises(retention.RetentionError) as refused:
            retention.approve_retention(request.pk, alice)
        assert str(refused.value) == (
            f"approver: 'alice' created {requester.username!r}, who asked (directly or through accounts they "
            "made); the approver must not have made the requester's account")
        request.refresh_from_db()
        assert request.state == RetentionState.REQUESTED
        request.delete()  # withdrawn, so that the next one may be asked
    request = retention.request_retention(chained, cutoff, exported(tmp_path, cutoff, "last"))
    assert retention.approve_retention(request.pk, bob).state == RetentionState.APPROVED


def test_a_request_by_a_fresh_administrator_cannot_be_approved(old_log, tmp_path):
    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    (_alice, bob), cutoff, _last = old_log
    fresh = create_user("fresh-admin", "administrator", PASSWORD)
    request = retention.request_retention(fresh, cutoff, exported(tmp_path, cutoff))
    made, until = (moment.isoformat(timespec="seconds") for moment in (fresh.date_joined,
                                                                        fresh.date_joined + timedelta(hours=24)))
    with pytest.raises(retention.RetentionError,
                       match=f"^requester: 'fresh-admin' was created at {re.escape(made)}, less than 24 h before the "
                             f"request; .* a request made from {re.escape(until)} on can be decided$"):
        retention.approve_retention(request.pk, bob)
    request.refresh_from_db()
    assert request.state == RetentionState.REQUESTED


def test_an_approver_the_requester_created_before_the_request_is_refused(make_user, old_log, tmp_path):
    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    (alice, _bob), cutoff, _last = old_log
    made_by_alice = create_user("alice-helper", "administrator", PASSWORD, created_by=alice)
    made_by_helper = create_user("alice-helper-2", "administrator", PASSWORD, created_by=made_by_alice)
    request = retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))
    for account in (made_by_alice, made_by_helper):
        with pytest.raises(retention.RetentionError, match="was created by 'alice', who asked"):
            retention.approve_retention(request.pk, account)


def test_an_approver_promoted_after_the_request_is_refused(make_user, old_log, tmp_path):
    from appliance.accounts.services import set_role

    (alice, _bob), cutoff, _last = old_log
    viewer = make_user("viewer", "vera")
    request = retention.request_retention(alice, cutoff, exported(tmp_path, cutoff))
    set_role(viewer, "administrator")
    with pytest.raises(retention.RetentionError,
                       match="^approver: 'vera' was given the role administrator at .*, less than 24 h before"):
        retention.approve_retention(request.pk, viewer)


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


def test_a_filtered_export_is_not_an_archive(old_log, tmp_path):
    """A bundle of the records one filter chose proves each record, not that the range is whole."""
    from appliance.audit.queries import select_records

    (alice, _bob), cutoff, _last = old_log
    chosen = tmp_path / "chosen"
    export_bundle(chosen, "jsonl", selection=select_records({"event": "task.run"}))
    assert verify_bundle(chosen).ok
    with pytest.raises(retention.RetentionError, match="bundle: .* is a filtered export"):
        retention.request_retention(alice, cutoff, chosen)
    assert not RetentionRequest.objects.exists()


def test_the_command_refuses_an_approver_made_for_the_occasion(old_log, tmp_path):
    """The four-eyes attacks from the command line: alice asks, makes `alice2` from the shell (create_admin: no
    creator recorded, so only the cooling period stands in the way) and approves through it; and bob, who made
    the account that asks, approves. Each is refused with the message the portal and the APIs give, and
    recorded; the request stays open."""
    from django.core.management import CommandError, call_command

    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    (_alice, bob), cutoff, _last = old_log
    password = tmp_path / "pw"
    password.write_text(PASSWORD + "\n")
    common = ["--password-file", str(password)]
    call_command("audit", "retention", "request", "--user", "alice", *common, "--cutoff", cutoff.isoformat(),
                 "--bundle", str(exported(tmp_path, cutoff)))
    request = retention.list_requests().first()
    call_command("create_admin", "--username", "alice2", *common)
    with pytest.raises(CommandError, match="^approver: 'alice2' was created at .*, less than 24 h before the request; "
                                           "an account takes part in a four-eyes decision only 24 h after it was "
                                           "created, re-enabled or given its role: a request made from .* on can "
                                           "be decided$"):
        call_command("audit", "retention", "approve", "--user", "alice2", *common, str(request.pk))
    request.refresh_from_db()
    assert request.state == RetentionState.REQUESTED
    request.delete()

    settle(create_user("bobs-admin", "administrator", PASSWORD, created_by=bob))
    call_command("audit", "retention", "request", "--user", "bobs-admin", *common, "--cutoff", cutoff.isoformat(),
                 "--bundle", str(exported(tmp_path, cutoff, "second")))
    request = retention.list_requests().first()
    with pytest.raises(CommandError) as refused:
        call_command("audit", "retention", "approve", "--user", "bob", *common, str(request.pk))
    assert str(refused.value) == ("approver: 'bob' created 'bobs-admin', who asked (directly or through accounts "
                                  "they made); the approver must not have made the requester's account")
    request.refresh_from_db()
    assert request.state == RetentionState.REQUESTED
    refusals = AuditRecord.objects.filter(event="audit.retention.approve").order_by("sequence")
    assert [(r.outcome, r.actor_username, r.details["field"]) for r in refusals] == [
        ("failure", "alice2", "approver"), ("failure", "bob", "approver")]
