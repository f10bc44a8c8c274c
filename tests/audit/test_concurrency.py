import threading

import pytest
from django.db import connection, connections

from appliance import audit
from appliance.audit.models import AuditRecord, ChainHead
from appliance.audit.verify_database import verify_database

WRITERS = 8
PER_WRITER = 40


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_writers_keep_the_chain_gapless_and_linear():
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL")
    start = threading.Barrier(WRITERS)
    errors = []

    def write(writer: int):
        try:
            start.wait()
            for i in range(PER_WRITER):
                audit.record("task.run", details={"writer": writer, "i": i})
        except Exception as exc:  # reported below, with the writer that hit it
            errors.append((writer, exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    records = list(AuditRecord.objects.order_by("sequence").values_list("sequence", "prev_hash", "hash", "details"))
    writes = [r for r in records if "writer" in r[3]]
    assert len(writes) == WRITERS * PER_WRITER
    assert [r[0] for r in records] == list(range(1, len(records) + 1))
    assert all(records[i][1] == records[i - 1][2] for i in range(1, len(records)))
    assert len({r[3]["writer"] for r in writes[:WRITERS * 4]}) > 1, "the writers did not interleave"
    assert ChainHead.objects.get().sequence == len(records)
    assert verify_database(record_event=False).ok
