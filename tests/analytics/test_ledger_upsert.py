"""The ledger's upsert (ledger._upsert): a chunk's rows added into CauseHour, a key already there added to
(on PostgreSQL a binary COPY into a temporary table, then one INSERT from it; on SQLite a statement a row), texts and
figures kept exactly."""

from datetime import UTC, datetime

import pytest

from appliance.analytics import ledger
from appliance.analytics.models import CauseHour
from appliance.inventory.models import Appliance, Node

HOUR = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
JOB = 'svc "a", café – 東京 \\ {x}\t'  # a quote, a comma, non-ASCII, a backslash, braces, a tab
FIGURES = ("gpu_seconds", "used_seconds", "busy_s", "idle_unallocated_s", "allocated_idle_s", "input_bound_s",
           "communication_bound_s", "straggler_s", "throttled_s", "memory_only_s", "memory_held_mib_s",
           "memory_used_mib_s", "no_data_s")


@pytest.fixture
def nodes(db):
    appliance = Appliance.objects.create(name="demo")
    return [Node.objects.create(appliance=appliance, name=f"gpu0{i}", role=Node.Role.GPU,
                                management_address=f"10.0.0.1{i}") for i in (1, 2)]


def ledger_row(node, gpu, instance, job, pool, user, *figures):
    return (ledger._param(HOUR), node.pk, gpu, instance, job, pool, user, *figures)


def stored() -> dict:
    return {(r.node.name, r.gpu, r.instance, r.job): (r.hour, r.pool, r.user, *(getattr(r, f) for f in FIGURES))
            for r in CauseHour.objects.select_related("node")}


def test_rows_are_added_and_a_key_already_there_is_added_to(nodes):
    gpu01, gpu02 = nodes
    assert ledger.CAUSE_COLUMNS == FIGURES[2:10]
    first = [ledger_row(gpu01, 0, -1, JOB, "training", "alice", 60.0, 0.1 + 0.2, 1 / 3, 0.0, 0.0, 0.0, 0.0, 0.0,
                        0.0, 0.0, 4893540.0, 3600000.0, 0.0),
             ledger_row(gpu02, 2, 1, "", "inference", "", 8.571428571428571, 0.0, 0.0, 8.571428571428571, 0.0,
                        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    ledger._upsert(first)
    assert stored() == {
        ("gpu01", 0, -1, JOB): (HOUR, "training", "alice", 60.0, 0.30000000000000004, 0.3333333333333333, 0.0, 0.0,
                                0.0, 0.0, 0.0, 0.0, 0.0, 4893540.0, 3600000.0, 0.0),
        ("gpu02", 2, 1, ""): (HOUR, "inference", "", 8.571428571428571, 0.0, 0.0, 8.571428571428571, 0.0, 0.0, 0.0,
                              0.0, 0.0, 0.0, 0.0, 0.0, 0.0)}
    ledger._upsert([])  # nothing
    # The next chunk of the same hour: the two keys again (their figures added; pool and user kept) and one new.
    ledger._upsert([*first, ledger_row(gpu02, 3, -1, "embed", "inference", "bob", 60.0, 30.0, 30.0, 0.0, 0.0,
                                       0.0, 0.0, 30.0, 0.0, 0.0, 600.0, 300.0, 0.0),
                    ledger_row(gpu02, 4, -1, "", "inference", "", 120.0, 0.0, *[0.0] * 10, 120.0)])  # no data
    assert stored() == {
        ("gpu01", 0, -1, JOB): (HOUR, "training", "alice", 120.0, 0.6000000000000001, 0.6666666666666666, 0.0, 0.0,
                                0.0, 0.0, 0.0, 0.0, 0.0, 9787080.0, 7200000.0, 0.0),
        ("gpu02", 2, 1, ""): (HOUR, "inference", "", 17.142857142857142, 0.0, 0.0, 17.142857142857142, 0.0, 0.0,
                              0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        ("gpu02", 3, -1, "embed"): (HOUR, "inference", "bob", 60.0, 30.0, 30.0, 0.0, 0.0, 0.0, 0.0, 30.0, 0.0, 0.0,
                                    600.0, 300.0, 0.0),
        ("gpu02", 4, -1, ""): (HOUR, "inference", "", 120.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                               120.0)}


@pytest.mark.postgres
def test_cause_hours_pages_leave_room_to_update_a_row_in_place(db):
    """PostgreSQL: fillfactor 70 (migration 0004), so that adding a minute to a row is a HOT update."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL storage setting")
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'analytics_causehour'")
        assert cursor.fetchone()[0] == ["fillfactor=70"]
