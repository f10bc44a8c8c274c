import pytest
from django.db import transaction

from appliance import audit
from appliance.audit import chain, merkle
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
    leaves = [chain.merkle_leaf(r.hash) for r in records]
    assert merkle.frontier_root(merkle.frontier_from_json(head.merkle_frontier)) == merkle.root_of(leaves)


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
    ChainHead.objects.all().delete()
    with pytest.raises(RuntimeError, match="chain head is missing while records exist"):
        audit.record("api.request")


def test_an_empty_log_starts_a_new_head():
    assert not AuditRecord.objects.exists()
    ChainHead.objects.all().delete()
    first = audit.record("api.request")
    assert (first.sequence, first.prev_hash) == (1, chain.GENESIS_HASH)
