"""UPDATE and DELETE on the audit tables fail in the database itself, raw SQL included."""

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from appliance import audit
from appliance.audit.checkpoints import make_checkpoint
from appliance.audit.models import AuditRecord, AuditTombstone

pytestmark = pytest.mark.django_db


def raw(sql, params=()):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def log():
    for i in range(3):
        audit.record("task.run", details={"i": i})
    make_checkpoint()
    AuditTombstone.objects.create(
        first_sequence=1000, last_sequence=1001, count=2, first_prev_hash="0" * 64, last_hash="1" * 64,
        range_root="2" * 64, tree_root="3" * 64, frontier=[], export_manifest_sha256="4" * 64,
        timestamp=timezone.now(), key_id="k", signature="s")


@pytest.mark.parametrize("sql", [
    "UPDATE audit_auditrecord SET outcome = 'failure' WHERE sequence = 2",
    "UPDATE audit_auditrecord SET details = '{}'",
    "DELETE FROM audit_auditrecord WHERE sequence = 2",
    "DELETE FROM audit_auditrecord",
    "UPDATE audit_auditcheckpoint SET root_hash = 'x'",
    "DELETE FROM audit_auditcheckpoint",
    "UPDATE audit_audittombstone SET count = 0",
    "DELETE FROM audit_audittombstone",
])
def test_raw_sql_cannot_change_or_remove_audit_rows(log, sql):
    before = AuditRecord.objects.count()
    with pytest.raises(DatabaseError, match="append-only"):
        raw(sql)
    assert AuditRecord.objects.count() == before


def test_the_orm_cannot_either(log):
    record = AuditRecord.objects.get(sequence=1)
    record.outcome = "failure"
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        record.save()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditRecord.objects.filter(sequence=1).delete()


def test_a_tombstone_alone_does_not_open_the_archive_path_on_postgresql(log):
    """A forged tombstone row is not enough on PostgreSQL: the DELETE must come from the archiving
    transaction that names it (and on both databases, verification rejects its missing signature)."""
    if connection.vendor != "postgresql":
        pytest.skip("the transaction-scoped archive setting exists on PostgreSQL only")
    AuditTombstone.objects.create(
        first_sequence=1, last_sequence=1, count=1, first_prev_hash="0" * 64, last_hash="1" * 64,
        range_root="2" * 64, tree_root="3" * 64, frontier=[], export_manifest_sha256="4" * 64,
        timestamp=timezone.now(), key_id="k", signature="s")
    with pytest.raises(DatabaseError, match="append-only"):
        raw("DELETE FROM audit_auditrecord WHERE sequence = 1")


@pytest.mark.postgres
def test_truncate_is_rejected_on_postgresql(log):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    for table in ("audit_auditrecord", "audit_auditcheckpoint", "audit_audittombstone"):
        with pytest.raises(DatabaseError, match="append-only"):
            raw(f"TRUNCATE {table} CASCADE")
