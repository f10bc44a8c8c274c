import pytest
from django.db import connection

from appliance import audit
from appliance.audit import chain, merkle, signing
from appliance.audit.checkpoints import make_checkpoint
from appliance.audit.models import AuditCheckpoint, AuditRecord, ChainHead
from appliance.audit.proofs import consistency_proof, verify_record

pytestmark = pytest.mark.django_db


def append(n):
    for i in range(n):
        audit.record("task.run", details={"i": i})


def leaves():
    return [chain.merkle_leaf(h) for h in AuditRecord.objects.order_by("sequence").values_list("hash", flat=True)]


def test_a_signed_checkpoint_is_made_every_n_records_with_the_tree_head(audit_settings):
    start = ChainHead.objects.filter(pk=1).values_list("sequence", flat=True).first() or 0  # no head: empty log
    append(12)
    key = signing.load_signing_key()
    all_leaves = leaves()
    sizes = list(AuditCheckpoint.objects.filter(tree_size__gt=start).values_list("tree_size", flat=True))
    assert sizes and all(b - a == 5 for a, b in zip(sizes, sizes[1:], strict=False))
    for checkpoint in AuditCheckpoint.objects.all():
        assert checkpoint.root_hash == merkle.root_of(all_leaves[:checkpoint.tree_size]).hex()
        assert checkpoint.last_hash == AuditRecord.objects.get(sequence=checkpoint.tree_size).hash
        assert checkpoint.key_id == key.key_id
        assert signing.verify_signature(key.public_key, chain.signed_statement(checkpoint.statement()),
                                        checkpoint.signature)


def test_a_checkpoint_is_made_when_the_interval_has_passed(audit_settings):
    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 10**6
    append(2)
    audit_settings.AUDIT_CHECKPOINT_EVERY_SECONDS = 0
    append(1)
    head = ChainHead.objects.get()
    assert AuditCheckpoint.objects.filter(tree_size=head.sequence).exists()


def test_making_a_checkpoint_costs_the_same_on_a_long_log(audit_settings):
    """The root comes from the previous checkpoint's frontier plus the records since: a checkpoint
    on a long log issues the same statements as on a short one and reads only those records."""
    from django.test.utils import CaptureQueriesContext

    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 1

    def checkpointing_append():
        with CaptureQueriesContext(connection) as queries:
            record = audit.record("task.run")
        assert AuditCheckpoint.objects.filter(tree_size=record.sequence).exists()
        return record, [q["sql"] for q in queries.captured_queries]

    # This connection learns the tip (a previous test left it a stale guess, which costs a failed
    # compare-and-swap and then one locked append before it guesses again).
    append(2)
    _record, short = checkpointing_append()
    append(40)
    record, long = checkpointing_append()
    assert len(short) == len(long)
    reads_of_records = [sql for sql in long if "audit_auditrecord" in sql and sql.lstrip().startswith("SELECT")]
    assert len(reads_of_records) == 1
    # bounded below by the previous checkpoint, which is the record just before
    assert f'"sequence" > {record.sequence - 1}' in reads_of_records[0], reads_of_records[0]


def test_appends_in_one_transaction_cost_one_statement_each_on_postgresql():
    """After the first append of a transaction the writer knows the tip: one statement moves the
    head and inserts the record."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite takes two statements (it has no data-modifying WITH)")
    from django.db import transaction
    from django.test.utils import CaptureQueriesContext

    append(2)  # as above: the connection's guess of the tip is current again
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            audit.record("task.run")
    statements = [q["sql"] for q in queries.captured_queries if "audit_" in q["sql"]]
    assert len(statements) == 3 and all(sql.startswith("WITH moved AS (UPDATE") for sql in statements), statements


def test_make_checkpoint_signs_the_current_head_and_records_it():
    append(3)
    checkpoint = make_checkpoint()
    assert checkpoint.tree_size == AuditRecord.objects.filter(event="audit.checkpoint").get().sequence - 1
    assert make_checkpoint().tree_size == checkpoint.tree_size + 1  # the audit.checkpoint record is new


def test_verify_record_checks_an_inclusion_proof_against_a_signed_checkpoint():
    append(13)
    for sequence in (1, 6, 13):
        result = verify_record(sequence)
        assert result.ok, result.message
        assert result.checkpoint["tree_size"] >= sequence and result.checkpoint["signature"]
        path = [bytes.fromhex(h) for h in result.proof["audit_path"]]
        merkle.verify_inclusion(sequence - 1, result.proof["tree_size"], chain.merkle_leaf(
            AuditRecord.objects.get(sequence=sequence).hash), path, bytes.fromhex(result.checkpoint["root_hash"]))
    verification = AuditRecord.objects.filter(event="audit.verify").last()
    assert verification.outcome == "success" and verification.details["sequence"] == 13


def test_verify_record_reports_a_record_changed_behind_the_triggers_back():
    from appliance.audit import triggers

    append(6)
    with triggers.suspended(connection), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditrecord SET outcome = 'failure' WHERE sequence = 3")
    result = verify_record(3)
    assert not result.ok and "modified" in result.message
    assert AuditRecord.objects.filter(event="audit.verify").last().outcome == "failure"


def test_consistency_proof_between_two_checkpoints_verifies():
    append(23)
    older, newer = AuditCheckpoint.objects.order_by("tree_size")[1], AuditCheckpoint.objects.order_by("tree_size").last()
    proof = consistency_proof(older, newer)
    merkle.verify_consistency(older.tree_size, newer.tree_size, bytes.fromhex(older.root_hash),
                              bytes.fromhex(newer.root_hash), proof)
