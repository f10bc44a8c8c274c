import pytest
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit import chain, triggers
from appliance.audit.models import AuditRecord, ChainHead
from appliance.inventory.models import Appliance

pytestmark = pytest.mark.django_db


def test_records_form_a_gapless_hash_chain():
    for name in ("a", "b", "c"):
        Appliance.objects.create(name=name)
    records = list(AuditRecord.objects.order_by("sequence"))
    assert [r.sequence for r in records] == list(range(1, len(records) + 1))
    previous = chain.GENESIS_HASH
    for r in records:
        assert r.prev_hash == previous
        assert r.hash == chain.record_hash(r.payload())
        previous = r.hash
    head = ChainHead.objects.get()
    assert head.sequence == records[-1].sequence and head.hash == records[-1].hash


def test_a_rolled_back_append_does_not_break_the_chain():
    """The writer's guess of the tip names a record that rolled back: the next append finds out
    and chains to the real tip."""
    kept = audit.record("api.request")
    with pytest.raises(RuntimeError), transaction.atomic():
        audit.record("api.request")
        audit.record("api.request")
        raise RuntimeError("boom")
    after = audit.record("api.request")
    assert (after.sequence, after.prev_hash) == (kept.sequence + 1, kept.hash)


def test_a_rolled_back_savepoint_inside_a_transaction_does_not_break_the_chain():
    with transaction.atomic():
        first = audit.record("api.request")
        with pytest.raises(RuntimeError), transaction.atomic():
            audit.record("api.request")
            raise RuntimeError("boom")
        second = audit.record("api.request")
    assert (second.sequence, second.prev_hash) == (first.sequence + 1, first.hash)
    assert list(AuditRecord.objects.filter(sequence__gte=first.sequence).values_list("sequence", flat=True)) \
        == [first.sequence, second.sequence]


@pytest.mark.parametrize("move", ["back one record", "back to the genesis", "ahead past the records",
                                  "onto a hash that is not its record's", "in place onto another hash"])
def test_the_database_refuses_a_head_moved_back_or_away_from_its_record(move):
    """The head moves only forward, onto the records it names, whoever writes it (raw SQL here)."""
    audit.record("api.request")
    tip = audit.record("api.request")
    sequence, hash_hex = {
        "back one record": (tip.sequence - 1, tip.prev_hash),
        "back to the genesis": (0, chain.GENESIS_HASH),
        "ahead past the records": (tip.sequence + 1200, "a" * 64),
        "onto a hash that is not its record's": (tip.sequence + 1, "b" * 64),
        "in place onto another hash": (tip.sequence, "c" * 64),
    }[move]
    with pytest.raises(DatabaseError, match="audit_chainhead moves only forward"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute("UPDATE audit_chainhead SET sequence = %s, hash = %s WHERE id = 1", [sequence, hash_hex])
    head = ChainHead.objects.get()
    assert (head.sequence, head.hash) == (tip.sequence, tip.hash)
    assert audit.record("api.request").prev_hash == tip.hash


def test_the_head_is_never_deleted_and_a_second_one_never_starts():
    audit.record("api.request")
    for sql, message in (("DELETE FROM audit_chainhead", "DELETE rejected"),
                         (f"INSERT INTO audit_chainhead (id, sequence, hash) VALUES (2, 0, '{chain.GENESIS_HASH}')",
                          "starts only at the genesis")):
        with pytest.raises(DatabaseError, match=message), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    assert ChainHead.objects.count() == 1


def test_change_and_its_record_roll_back_together():
    before = AuditRecord.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        Appliance.objects.create(name="doomed")
        raise RuntimeError("boom")
    assert not Appliance.objects.filter(name="doomed").exists()
    assert AuditRecord.objects.count() == before


def test_queryset_update_is_recorded_per_object():
    a = Appliance.objects.create(name="x", description="old")
    Appliance.objects.filter(pk=a.pk).update(description="new")
    rec = AuditRecord.objects.filter(event="inventory.appliance.update").latest("sequence")
    assert rec.details["changes"]["description"] == ["old", "new"]
    assert rec.target_id == str(a.pk)


def test_delete_is_recorded_with_the_state_before():
    a = Appliance.objects.create(name="gone", description="d")
    a.delete()
    rec = AuditRecord.objects.filter(event="inventory.appliance.delete").latest("sequence")
    assert rec.details["before"]["name"] == "gone"


def test_unknown_event_is_refused():
    with pytest.raises(KeyError, match="not in the catalogue"):
        audit.record("no.such.event")


def test_a_lost_chain_head_over_existing_records_stops_appends():
    Appliance.objects.create(name="before")
    with triggers.suspended(connection):  # only the tables' owner can lose the head
        ChainHead.objects.all().delete()
    with pytest.raises(RuntimeError, match="chain head is missing while records exist"):
        audit.record("api.request")


def test_an_empty_log_starts_a_new_head():
    assert not AuditRecord.objects.exists()
    with triggers.suspended(connection):
        ChainHead.objects.all().delete()
    first = audit.record("api.request")
    assert (first.sequence, first.prev_hash) == (1, chain.GENESIS_HASH)


# -- audit.batch(): many records, one write ----------------------------------------------------------

def chain_is_intact():
    from appliance.audit.verify_database import verify_database

    result = verify_database(record_event=False)
    assert result.ok, result.summary()


def test_a_batch_writes_its_records_in_order_at_its_end():
    before = audit.record("api.request")
    with audit.batch():
        made = [audit.record("task.run", details={"i": i}) for i in range(5)]
        assert all(r.sequence is None for r in made)  # not chained yet
        assert not AuditRecord.objects.filter(event="task.run").exists()
    stored = list(AuditRecord.objects.filter(sequence__gt=before.sequence).order_by("sequence"))
    assert [r.details["i"] for r in stored] == [0, 1, 2, 3, 4]
    assert [r.sequence for r in made] == [r.sequence for r in stored] == list(range(before.sequence + 1,
                                                                                   before.sequence + 6))
    assert stored[0].prev_hash == before.hash
    head = ChainHead.objects.get()
    assert (head.sequence, head.hash) == (stored[-1].sequence, stored[-1].hash)
    chain_is_intact()
    after = audit.record("api.request")  # and the one-by-one path chains on
    assert after.prev_hash == stored[-1].hash


def test_a_failed_batch_writes_nothing_and_rolls_back_its_changes():
    count = AuditRecord.objects.count()
    with pytest.raises(RuntimeError), audit.batch():
        Appliance.objects.create(name="doomed")
        raise RuntimeError("boom")
    assert AuditRecord.objects.count() == count and not Appliance.objects.filter(name="doomed").exists()


def test_a_record_made_in_a_rolled_back_savepoint_of_a_batch_is_dropped_with_it():
    with audit.batch():
        Appliance.objects.create(name="kept")
        with pytest.raises(RuntimeError), transaction.atomic():
            Appliance.objects.create(name="undone")
            raise RuntimeError("boom")
        Appliance.objects.create(name="also-kept")
    names = [r.target_name for r in AuditRecord.objects.filter(event="inventory.appliance.create")]
    assert names == ["kept", "also-kept"]
    chain_is_intact()


def test_a_batch_makes_the_checkpoints_appending_one_by_one_would(audit_settings):
    from appliance.audit import merkle
    from appliance.audit.models import AuditCheckpoint

    audit_settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 4
    start = audit.record("api.request").sequence
    with audit.batch():
        for i in range(11):
            audit.record("task.run", details={"i": i})
    sizes = list(AuditCheckpoint.objects.filter(tree_size__gt=start).values_list("tree_size", flat=True))
    assert sizes == [start + 4, start + 8]
    leaves = [chain.merkle_leaf(h) for h in AuditRecord.objects.order_by("sequence").values_list("hash", flat=True)]
    for checkpoint in AuditCheckpoint.objects.filter(tree_size__gt=start):
        assert checkpoint.root_hash == merkle.root_of(leaves[:checkpoint.tree_size]).hex()
    chain_is_intact()


def test_bulk_changes_of_audited_models_are_recorded_through_one_batch():
    for name in ("p", "q", "r"):
        Appliance.objects.create(name=name, description="old")
    Appliance.objects.filter(name__in=["p", "q", "r"]).update(description="new")
    updates = AuditRecord.objects.filter(event="inventory.appliance.update").order_by("sequence")
    assert [r.details["changes"]["description"] for r in updates] == [["old", "new"]] * 3
    timestamps = {r.timestamp for r in updates}
    assert len(timestamps) == 1  # chained together, when the update's transaction wrote them
    chain_is_intact()
