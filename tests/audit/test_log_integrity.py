"""The log's tail and its checkpoints against an attacker who owns the database: checkpoints by the
clock, the witness outside the database, the unsealed tail, missing or disabled triggers, the
chain head's guard, and the runtime role that owns nothing."""

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit import chain, checkpoints, merkle, signing, triggers, witness
from appliance.audit.models import (
    PAYLOAD_COLUMNS,
    AuditCheckpoint,
    AuditRecord,
    ChainHead,
    payload_from_values,
)
from appliance.audit.verify import MODIFIED, TRUNCATED
from appliance.audit.verify_database import UNPROTECTED, verify_database
from tests.audit.attacker import rewrite_log

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


def append(n):
    for i in range(n):
        audit.record("task.run", details={"i": i})


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run what commits: the witness is written when a checkpoint's transaction commits."""

    def run(function, *args):
        with django_capture_on_commit_callbacks(execute=True):
            return function(*args)

    return run


def head():
    return ChainHead.objects.get()


def drop_triggers_sqlite():
    triggers.uninstall(connection)


# -- the chain head and the cadence ---------------------------------------------------------------------

def test_the_checkpoint_cadence_cannot_be_pushed_ahead_through_the_database(audit_settings):
    """The attack of the review set the cadence in the head far ahead and stopped checkpoints for
    1,200 appends. The cadence is no column any more, and a checkpoint far ahead is refused."""
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 5
    append(3)
    columns = [c.name for c in connection.introspection.get_table_description(connection.cursor(), "audit_chainhead")]
    assert sorted(columns) == ["hash", "id", "sequence"]
    tip = AuditRecord.objects.order_by("-sequence").first()
    for size, last_hash in ((tip.sequence + 1200, tip.hash), (tip.sequence, "e" * 64)):
        with pytest.raises(DatabaseError, match="audit_auditcheckpoint: a checkpoint names a record"), \
                transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO audit_auditcheckpoint (tree_size, root_hash, last_hash, frontier, timestamp, "
                           "key_id, signature) VALUES (%s, %s, %s, '[]', %s, 'k', 's')",
                           [size, "a" * 64, last_hash, "2026-01-01 00:00:00"])
    start = head().sequence
    append(10)
    made = list(AuditCheckpoint.objects.filter(tree_size__gt=start).values_list("tree_size", flat=True))
    assert len(made) == 2 and made[1] - made[0] == 5


# -- checkpoints by the clock ---------------------------------------------------------------------------

def test_an_idle_log_is_sealed_by_the_clock_task_without_a_record_of_its_own(audit_settings):
    from appliance.audit.tasks import seal_unsigned_task

    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 1000
    append(4)
    before = head().sequence
    assert AuditCheckpoint.objects.order_by("-tree_size").first().tree_size < before  # a tail is unsigned
    assert seal_unsigned_task.apply().get() == before
    assert head().sequence == before  # the tick recorded nothing: the log stays idle
    assert AuditCheckpoint.objects.order_by("-tree_size").first().tree_size == before
    assert seal_unsigned_task.apply().get() is None  # nothing unsigned: nothing signed


def test_the_beat_runs_the_checkpoint_clock_every_minute_by_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "AUDIT_CHECKPOINT_EVERY_SECONDS"}
    env["APPLIANCE_STATE_DIR"] = str(tmp_path)
    shown = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from appliance.celery import beat_schedule; "
         "print(beat_schedule()['audit-checkpoint-clock'])"],
        cwd=REPO, env={**env, "DJANGO_SETTINGS_MODULE": "appliance.settings"}, capture_output=True, text=True,
        timeout=120)
    assert shown.stdout.strip() == "{'task': 'audit.seal_unsigned', 'schedule': 60}", shown.stderr


def test_the_beats_housekeeping_leaves_an_idle_log_idle():
    """Every tick of every beat entry with nothing to do writes nothing: a record per tick would
    fill the log and keep an idle appliance's tail unsigned for ever."""
    from appliance.celery import app, beat_schedule

    app.loader.import_default_modules()  # what a worker and the embedded beat do first
    append(2)
    checkpoints.seal_unsigned()
    before = head().sequence
    for name, entry in beat_schedule().items():
        app.tasks[entry["task"]].apply().get()
        assert head().sequence == before, f"a tick of {name} wrote to the audit log"


@pytest.mark.django_db(transaction=True)
def test_the_embedded_worker_seals_an_idle_log_by_the_clock(audit_settings):
    from appliance.core import dispatch

    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 1000
    audit_settings.CELERY_BROKER_URL = ""
    append(4)  # the first append makes a checkpoint, the other three lie unsigned
    tip = head().sequence
    audit_settings.AUDIT_CHECKPOINT_EVERY_SECONDS = 1  # the clock's tick, read when the timers start
    assert AuditCheckpoint.objects.order_by("-tree_size").first().tree_size < tip
    stop = dispatch.start_embedded_beat()
    assert stop is not None and dispatch.start_embedded_beat() is None  # once per process
    try:
        deadline = time.monotonic() + 20
        while not AuditCheckpoint.objects.filter(tree_size=tip).exists():
            assert time.monotonic() < deadline, "no checkpoint of the idle tail within 20 s"
            time.sleep(0.2)
    finally:
        dispatch.stop_embedded_beat()
    assert head().sequence == tip
    assert verify_database(record_event=False).unsealed == 0


def test_the_bootstrap_runs_only_the_clock_of_the_embedded_beat():
    import threading

    from appliance.core import dispatch

    stop = dispatch.start_embedded_beat(only=("audit-checkpoint-clock",))
    try:
        assert stop is not None
        running = sorted(t.name for t in threading.enumerate() if t.name.startswith("appliance-beat-")
                         and t.is_alive())
        assert running == ["appliance-beat-audit-checkpoint-clock"]
    finally:
        dispatch.stop_embedded_beat()


# -- the witness ----------------------------------------------------------------------------------------

def test_every_committed_checkpoint_is_in_the_witness_file_private_and_append_only(audit_settings, committed):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    committed(append, 9)
    path = audit_settings.AUDIT_WITNESS_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = path.read_bytes().splitlines()
    assert [json.loads(line) for line in lines] == [c.signed() for c in AuditCheckpoint.objects.order_by("tree_size")]
    assert len(lines) == 3
    committed(append, 1)
    committed(checkpoints.make_checkpoint)
    assert path.read_bytes().startswith(b"\n".join(lines) + b"\n")  # appended, never rewritten
    assert len(path.read_bytes().splitlines()) == 4


def test_a_rolled_back_checkpoint_is_not_witnessed(audit_settings, committed):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 2

    def doomed():
        with pytest.raises(RuntimeError), transaction.atomic():
            append(5)
            raise RuntimeError("boom")

    committed(doomed)
    assert not audit_settings.AUDIT_WITNESS_FILE.exists()


def test_the_witness_goes_to_syslog_when_configured(audit_settings, committed, tmp_path):
    import socket

    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "syslog.sock")
    receiver.bind(address)
    receiver.settimeout(5)
    audit_settings.AUDIT_WITNESS_SYSLOG = address
    try:
        committed(append, 1)
        message = receiver.recv(65536).decode()
    finally:
        receiver.close()
    statement = AuditCheckpoint.objects.order_by("-tree_size").first().signed()
    assert message.startswith("<86>")  # authpriv (10) * 8 + info (6)
    assert message.endswith(f"appliance-audit-witness: {chain.canonical_json(statement).decode()}\x00")


# -- the attacks of the review, on the live database -----------------------------------------------------

def sealed_log(audit_settings, committed, n=30):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 5
    committed(append, n)
    assert verify_database(record_event=False).ok


def test_sqlite_drop_trigger_rewrite_and_recompute_is_tampering_by_the_witness(audit_settings, committed, capsys):
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite form of the attack (DROP TRIGGER)")
    sealed_log(audit_settings, committed)
    drop_triggers_sqlite()
    try:
        rewrite_log(changes={12: {"reason": "edited", "outcome": "denied"}})
        result = verify_database(record_event=False)
        assert not result.ok
        first = result.first
        assert (first.kind, first.sequence) == (MODIFIED, 16), result.summary()
        assert first.message.startswith("checkpoint #16 in the witness does not match the database")
        assert first.where.endswith("witness.jsonl:4")
        unprotected = [f.message for f in result.findings if f.kind == UNPROTECTED]
        assert "trigger audit_auditrecord_no_update on audit_auditrecord is missing" in unprotected
        assert "trigger audit_chainhead_forward_only on audit_chainhead is missing" in unprotected
        with pytest.raises(SystemExit) as exit_:
            call_command("audit", "verify", "--database")
        assert exit_.value.code == 1
        err = capsys.readouterr().err
        assert "modified at #16: checkpoint #16 in the witness does not match the database" in err
        assert "also: unprotected: trigger audit_auditrecord_no_update on audit_auditrecord is missing" in err
    finally:
        triggers.install(connection)


def test_cutting_the_signed_tail_and_its_checkpoints_is_truncation_by_the_witness(audit_settings, committed):
    sealed_log(audit_settings, committed)
    with triggers.suspended(connection):
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM audit_auditrecord WHERE sequence > 20")
            cursor.execute("DELETE FROM audit_auditcheckpoint WHERE tree_size > 20")
            last = AuditRecord.objects.get(sequence=20)
            cursor.execute("UPDATE audit_chainhead SET sequence = 20, hash = %s WHERE id = 1", [last.hash])
    result = verify_database(record_event=False)
    assert (result.first.kind, result.first.sequence) == (TRUNCATED, 21), result.summary()
    assert result.first.message == ("checkpoint #21 in the witness does not match the database: the records end "
                                    "at #20, cut after the checkpoint signed them")


def test_the_next_export_refuses_to_sign_a_log_the_witness_disagrees_with(audit_settings, committed, tmp_path):
    from appliance.audit.export import ExportError, export_bundle

    sealed_log(audit_settings, committed)
    with triggers.suspended(connection):
        rewrite_log(changes={12: {"reason": "edited"}})
    with pytest.raises(ExportError, match=r"the audit log disagrees with its witness \(modified at #16: checkpoint "
                                          r"#16 in the witness does not match the database"):
        export_bundle(tmp_path / "bundle", "jsonl")
    assert not (tmp_path / "bundle").exists()


@pytest.mark.postgres
def test_postgresql_disable_trigger_as_superuser_rewrite_and_recompute_is_detected(audit_settings, committed):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    sealed_log(audit_settings, committed)
    with connection.cursor() as cursor:
        for table in triggers.IMMUTABLE_TABLES + (triggers.HEAD_TABLE,):
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        rewrite_log(changes={12: {"reason": "edited"}}, delete=[29, 30])
        for table in triggers.IMMUTABLE_TABLES + (triggers.HEAD_TABLE,):
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
    result = verify_database(record_event=False)
    assert (result.first.kind, result.first.sequence) == (MODIFIED, 16), result.summary()
    assert "in the witness does not match the database" in result.first.message
    unprotected = [f.message for f in result.findings if f.kind == UNPROTECTED]
    assert ("trigger audit_auditrecord_no_update on audit_auditrecord was switched off and on again: it fires only "
            "in origin sessions, not always") in unprotected


@pytest.mark.postgres
def test_postgresql_a_session_that_skips_triggers_is_reported(db):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    append(2)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        # ALWAYS triggers fire even so: the append-only rule holds in a replica session.
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            cursor.execute("UPDATE audit_auditrecord SET reason = 'x' WHERE sequence = 1")
        problems = triggers.problems(connection)
        cursor.execute("SET LOCAL session_replication_role = origin")
    assert problems == ["session_replication_role is 'replica', not 'origin': this session skips triggers"]


# -- the unsealed tail and the live-database link check ----------------------------------------------------

def test_the_unsigned_tail_is_reported_unsealed_never_intact(audit_settings, capsys):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 1000
    append(2)
    sealed = checkpoints.seal_unsigned().tree_size
    append(3)
    result = verify_database(record_event=False)
    assert result.ok and result.unsealed == 3 and result.sealed_through == sealed
    assert f"unsealed: 3 records since checkpoint #{sealed} (#{sealed + 1}..#{sealed + 3}), not signed yet" \
        in result.summary()
    assert f"intact: {sealed} records (#1..#{sealed}) sealed by signed checkpoint #{sealed}" in result.summary()
    call_command("audit", "verify", "--database")  # exit status 0: unsealed alone is no damage
    assert f"unsealed: 3 records since checkpoint #{sealed}" in capsys.readouterr().out


def test_a_tail_record_rewritten_with_its_hash_recomputed_is_found_by_the_next_records_link(audit_settings):
    """No checkpoint covers the tail and the rewritten row's own hash matches its content: only the
    next record's prev_hash tells."""
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 1000
    append(2)
    checkpoints.seal_unsigned()
    append(4)
    target = head().sequence - 2
    row = AuditRecord.objects.values_list(*PAYLOAD_COLUMNS).get(sequence=target)
    payload = payload_from_values(row)
    payload["reason"] = "rewritten"
    forged_hash = hashlib.sha256(chain.canonical(payload)).hexdigest()
    with triggers.suspended(connection), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditrecord SET reason = %s, hash = %s WHERE sequence = %s",
                       ["rewritten", forged_hash, target])
    result = verify_database(record_event=False)
    assert not result.ok, "a rewritten record in the unsealed tail went unnoticed"
    assert (result.first.kind, result.first.sequence) == (MODIFIED, target), result.summary()
    assert result.first.message == f"record #{target} was rewritten: #{target + 1} does not link to it"


# -- missing or disabled triggers in `manage.py check` ---------------------------------------------------------

def test_manage_py_check_reports_a_missing_or_disabled_trigger():
    call_command("check")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DROP TRIGGER audit_chainhead_forward_only")
            expected = "trigger audit_chainhead_forward_only on audit_chainhead is missing"
        else:
            cursor.execute("ALTER TABLE audit_chainhead DISABLE TRIGGER audit_chainhead_forward_only")
            expected = "trigger audit_chainhead_forward_only on audit_chainhead is disabled"
    try:
        with pytest.raises(SystemCheckError) as raised:
            call_command("check")
        assert "audit.E001" in str(raised.value) and expected in str(raised.value)
    finally:
        triggers.install(connection)
    call_command("check")


def test_install_triggers_puts_them_back_and_is_recorded(capsys):
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DROP TRIGGER audit_auditrecord_no_delete")
        else:
            cursor.execute("ALTER TABLE audit_auditrecord DISABLE TRIGGER audit_auditrecord_no_delete")
    assert triggers.problems(connection)
    call_command("audit", "install-triggers")
    assert triggers.problems(connection) == []
    event = AuditRecord.objects.filter(event="audit.triggers.install").get()
    assert event.details["problems_found"][0].startswith("trigger audit_auditrecord_no_delete on audit_auditrecord")


# -- the witness read back ----------------------------------------------------------------------------------

def test_a_damaged_witness_line_is_named_by_file_and_line(audit_settings, committed):
    sealed_log(audit_settings, committed, n=6)
    path = audit_settings.AUDIT_WITNESS_FILE
    with path.open("ab") as handle:
        handle.write(b"{not json\n")
    result = verify_database(record_event=False)
    assert not result.ok and f"{path}:3: not JSON" in result.first.message, result.summary()


def test_a_forged_witness_entry_does_not_verify(audit_settings, committed, tmp_path):
    sealed_log(audit_settings, committed, n=6)
    stranger = signing.load_signing_key(tmp_path / "stranger.key")
    forged = chain.checkpoint_statement(tree_size=3, root_hash="a" * 64, last_hash="b" * 64,
                                        timestamp="2026-01-01T00:00:00.000000Z", key_id=stranger.key_id)
    forged["signature"] = stranger.sign(chain.signed_statement(forged))
    witness.append(forged)
    result = verify_database(record_event=False)
    assert not result.ok and "checkpoint #3 in the witness is signed by key" in result.first.message


def test_frontier_helpers_agree_with_the_records():
    """The rewrite helper above recomputes exactly what record() computes (a sanity check of the test
    tool itself: a rewrite with no change changes nothing)."""
    append(6)
    before = list(AuditRecord.objects.order_by("sequence").values_list("hash", flat=True))
    with triggers.suspended(connection):
        rewrite_log(drop_checkpoints_from=10**9)
    assert list(AuditRecord.objects.order_by("sequence").values_list("hash", flat=True)) == before
    leaves = [chain.merkle_leaf(h) for h in before]
    assert AuditCheckpoint.objects.first().root_hash == merkle.root_of(leaves[:1]).hex()


# -- the runtime database role ---------------------------------------------------------------------------------

@pytest.mark.postgres
def test_postgresql_the_runtime_role_cannot_alter_update_or_delete_the_audit_log():
    """Connected as the role the portal and workers use (after `dbroles`), the review's first step,
    ALTER TABLE ... DISABLE TRIGGER USER, fails, and so do UPDATE, DELETE and TRUNCATE; appending,
    checkpointing and ordinary work on the other tables go on."""
    import uuid

    from appliance.audit import dbroles
    from appliance.inventory.models import Appliance

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    role = f"appliance_runtime_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")  # rolled back with the test's transaction
    granted = dbroles.grant_runtime(connection, role)
    assert "audit_auditrecord" in granted and "inventory_appliance" in granted
    append(3)

    def refused(sql):
        with pytest.raises(DatabaseError) as raised, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL ROLE {role}")
            cursor.execute(sql)
        return str(raised.value).splitlines()[0]

    for table in triggers.IMMUTABLE_TABLES + (triggers.HEAD_TABLE,):
        assert refused(f"ALTER TABLE {table} DISABLE TRIGGER USER") == f"must be owner of table {table}"
        assert refused(f"DROP TRIGGER {table}_no_delete ON {table}") == f"must be owner of relation {table}"
        assert refused(f"TRUNCATE {table}") == f"permission denied for table {table}"
    for table in triggers.IMMUTABLE_TABLES:
        assert refused(f"UPDATE {table} SET id = id" if table != "audit_auditrecord"
                       else "UPDATE audit_auditrecord SET reason = 'x'") == f"permission denied for table {table}"
        assert refused(f"DELETE FROM {table}") == f"permission denied for table {table}"
    assert refused("DELETE FROM audit_chainhead") == "permission denied for table audit_chainhead"

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        Appliance.objects.create(name="made-by-the-runtime-role")  # a change and its audit record
        checkpoint = checkpoints.make_checkpoint()
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == role
        cursor.execute("RESET ROLE")
    assert checkpoint.tree_size == head().sequence - 1  # the `audit.checkpoint` record came after it
    assert verify_database(record_event=False).ok


@pytest.mark.postgres
def test_postgresql_dbroles_refuses_a_role_that_owns_tables_or_is_a_superuser():
    from appliance.audit import dbroles

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
    with pytest.raises(dbroles.RoleError, match="is a superuser: it can switch any trigger off"):
        dbroles.grant_runtime(connection, owner)
    with pytest.raises(dbroles.RoleError, match="does not exist"):
        dbroles.grant_runtime(connection, "no_such_role_here")


@pytest.mark.postgres
def test_postgresql_migrate_runs_as_the_owner_and_the_runtime_role_owns_nothing(tmp_path):
    """The README's set-up, end to end: two roles, DATABASE_URL the runtime one, DATABASE_MIGRATE_URL
    the owner. migrate creates the tables as the owner and grants the runtime role; the appliance then
    runs as the runtime role, which cannot switch a trigger off."""
    import uuid

    import psycopg

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    where = connection.settings_dict
    host, port = where["HOST"] or "127.0.0.1", where["PORT"] or 5432
    suffix = uuid.uuid4().hex[:8]
    owner, runtime, name = f"appliance_owner_{suffix}", f"appliance_app_{suffix}", f"appliance_roles_{suffix}"
    admin = psycopg.connect(host=host, port=port, user=where["USER"], password=where["PASSWORD"] or None,
                            dbname="postgres", autocommit=True)
    admin.execute(f"CREATE ROLE {owner} LOGIN")
    admin.execute(f"CREATE ROLE {runtime} LOGIN")
    admin.execute(f"CREATE DATABASE {name} OWNER {owner}")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DATABASE_")}
        env.update(APPLIANCE_STATE_DIR=str(tmp_path), DATABASE_URL=f"postgres://{runtime}@{host}:{port}/{name}",
                   DATABASE_MIGRATE_URL=f"postgres://{owner}@{host}:{port}/{name}")

        def manage(*args):
            done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        assert f"runtime role {runtime}: granted what it needs" in manage("migrate")
        manage("audit", "checkpoint")
        assert "intact" in manage("audit", "verify", "--database")
        with psycopg.connect(host=host, port=port, user=runtime, dbname=name, autocommit=True) as app:
            owned = app.execute("SELECT count(*) FROM pg_tables WHERE tableowner = current_user").fetchone()[0]
            assert owned == 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="must be owner of table audit_auditrecord"):
                app.execute("ALTER TABLE audit_auditrecord DISABLE TRIGGER USER")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                app.execute("UPDATE audit_auditrecord SET reason = 'x'")
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {runtime}")
        admin.execute(f"DROP ROLE IF EXISTS {owner}")
        admin.close()
