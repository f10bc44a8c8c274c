"""The ledger: complete minutes of rollups attributed into CauseHour (GPU-seconds by cause, weighted by the
GPU share a row measures), once each, with the pool of the node; a rebuild a person asks for; the verdicts
of a job with their evidence; the attribution clock."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import attribution, ledger, vector
from appliance.analytics.models import CAUSE_FIELDS, AttributionCursor, CauseHour
from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from appliance.telemetry import frames
from appliance.telemetry.models import GpuRollup, NodeRollup

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
CAUSE_COLUMNS = tuple(CAUSE_FIELDS.values())
MINUTE = timedelta(minutes=1)
GIB = 1024  # MiB


def row(node, gpu, minute, job, util, sm, used_gib, total_gib=80, instance=-1, profile=""):
    return GpuRollup(node=node, gpu=gpu, instance=instance, profile=profile, step=60, start=T0 + minute * MINUTE,
                     samples=60, job=job, util=util, sm_active=sm, fb_used_mib=used_gib * GIB,
                     fb_total_mib=total_gib * GIB, sm_clock_mhz=1980.0, throttled_share=0.0)


@pytest.fixture
def rows(db):
    return make_rows()


def make_rows():
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11",
                                facts={"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100,
                                                                "write_mbps": 1800}]}})
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    PoolMembership.objects.create(pool=training, node=gpu01)
    PoolMembership.objects.create(pool=inference, node=gpu02)
    GpuRollup.objects.bulk_create([
        # Job 4182 on gpu01 computes on both GPUs in the first minute; in the second GPU 0 straggles and GPU 1
        # stalls while the node reads /mnt/scratch at 2.0 of the 2.1 GB/s its smoke test measured.
        row(gpu01, 0, 0, "4182", 98.0, 0.85, 64), row(gpu01, 1, 0, "4182", 96.0, 0.84, 64),
        row(gpu01, 0, 1, "4182", 100.0, 0.97, 64), row(gpu01, 1, 1, "4182", 60.0, 0.35, 64),
        # gpu02: a chat service holding 72 of 80 GiB and computing nothing; a GPU nobody holds.
        row(gpu02, 0, 0, "chat-7b", 4.0, 0.02, 72), row(gpu02, 0, 1, "chat-7b", 4.0, 0.02, 72),
        row(gpu02, 1, 0, "", 0.0, 0.0, 0), row(gpu02, 1, 1, "", 0.0, 0.0, 0),
        # GPU 2 of gpu02 in MIG mode, first minute: a 1g.10gb slice serving "embed", an unused 3g.40gb one, and
        # the whole GPU's own row (not counted again).
        row(gpu02, 2, 0, "embed", 50.0, 0.5, 9, 10, instance=1, profile="1g.10gb"),
        row(gpu02, 2, 0, "", 0.0, 0.0, 0, 40, instance=2, profile="3g.40gb"),
        row(gpu02, 2, 0, "", 20.0, 0.2, 9),
    ])
    NodeRollup.objects.bulk_create([
        NodeRollup(node=gpu01, step=60, start=T0, samples=60, fs_read_bps=0.3e9, cpu_iowait=0.01, cpu_busy=0.2,
                   mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 0.3e9}}),
        NodeRollup(node=gpu01, step=60, start=T0 + MINUTE, samples=60, fs_read_bps=2.0e9, cpu_iowait=0.01,
                   cpu_busy=0.2, mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 2.0e9}}),
    ])
    return gpu01, gpu02


COLUMNS = ("gpu_seconds", "used_seconds", "busy_s", "idle_unallocated_s", "input_bound_s", "straggler_s",
           "memory_only_s", "memory_held_mib_s", "memory_used_mib_s")


def ledger_rows() -> dict:
    return {(r.node.name, r.gpu, r.instance, r.job): (r.hour, r.pool, r.user, *(round(getattr(r, c), 3) for c in COLUMNS))
            for r in CauseHour.objects.select_related("node")}


EXPECTED = {
    ("gpu01", 0, -1, "4182"): (T0, "training", "", 120.0, 118.8, 60.0, 0.0, 0.0, 60.0, 0.0, 120 * 80 * GIB,
                               120 * 64 * GIB),
    ("gpu01", 1, -1, "4182"): (T0, "training", "", 120.0, 93.6, 60.0, 0.0, 60.0, 0.0, 0.0, 120 * 80 * GIB,
                               120 * 64 * GIB),
    ("gpu02", 0, -1, "chat-7b"): (T0, "inference", "", 120.0, 4.8, 0.0, 0.0, 0.0, 0.0, 120.0, 120 * 80 * GIB,
                                  120 * 72 * GIB),
    ("gpu02", 1, -1, ""): (T0, "inference", "", 120.0, 0.0, 0.0, 120.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    ("gpu02", 2, 1, "embed"): (T0, "inference", "", 8.571, 4.286, 8.571, 0.0, 0.0, 0.0, 0.0, round(60 / 7 * 10 * GIB, 3),
                               round(60 / 7 * 9 * GIB, 3)),
    ("gpu02", 2, 2, ""): (T0, "inference", "", 25.714, 0.0, 0.0, 25.714, 0.0, 0.0, 0.0, 0.0, 0.0),
}


def test_complete_minutes_go_into_the_ledger_by_cause_weighted_by_gpu_share(rows):
    result = ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert result["minutes"] == 2 and result["buckets"] == 11
    assert result["seconds"] == pytest.approx(4 * 120 + 60 / 7 + 3 * 60 / 7)
    assert result["attributed_until"] == (T0 + 2 * MINUTE).isoformat()
    assert ledger_rows() == EXPECTED
    assert AttributionCursor.objects.get(name="rollups").attributed_until == T0 + 2 * MINUTE


def test_a_minute_is_never_counted_twice(rows):
    assert ledger.run_incremental(until=T0 + MINUTE)["minutes"] == 1
    assert ledger.run_incremental(until=T0 + MINUTE)["minutes"] == 0  # nothing new
    assert ledger.run_incremental(until=T0 + 2 * MINUTE, max_minutes=5)["minutes"] == 1
    assert ledger.run_incremental(until=T0 + 2 * MINUTE) == {"minutes": 0, "buckets": 0, "seconds": 0.0,
                                                                "attributed_until": (T0 + 2 * MINUTE).isoformat(),
                                                                "elapsed_s": pytest.approx(0, abs=5)}
    assert ledger_rows() == EXPECTED  # two runs add up to what one gives


def test_a_late_row_waits_for_a_rebuild_which_is_audited(rows):
    gpu01, gpu02 = rows
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    GpuRollup.objects.create(node=gpu02, gpu=3, step=60, start=T0 + MINUTE, samples=60, job="", util=0.0,
                             sm_active=0.0)
    assert ledger.run_incremental(until=T0 + 2 * MINUTE)["minutes"] == 0
    assert not CauseHour.objects.filter(gpu=3).exists()
    assert not AuditRecord.objects.filter(event="analytics.attribution.rebuild").exists()
    result = ledger.rebuild(since=T0 + 30 * timedelta(seconds=1), until=T0 + 2 * MINUTE)
    assert (result["rows_deleted"], result["minutes"], result["since"]) == (6, 2, T0.isoformat())
    assert ledger_rows() == EXPECTED | {("gpu02", 3, -1, ""): (T0, "inference", "", 60.0, 0.0, 0.0, 60.0, 0.0, 0.0,
                                                               0.0, 0.0, 0.0)}
    [record] = AuditRecord.objects.filter(event="analytics.attribution.rebuild")
    assert record.details["rows_deleted"] == 6 and record.details["minutes"] == 2


def test_bad_arguments_are_named(rows):
    with pytest.raises(ledger.LedgerError, match="until"):
        ledger.run_incremental(until=datetime(2026, 1, 1, 10))
    with pytest.raises(ledger.LedgerError, match="max_minutes"):
        ledger.run_incremental(max_minutes=0)
    with pytest.raises(ledger.LedgerError, match="since"):
        ledger.rebuild(since="2026-01-01")
    with pytest.raises(ledger.LedgerError, match="until"):
        ledger.job_verdicts("4182", T0, T0)


def test_the_ledgers_labels_are_the_rules_labels(rows):
    window = ledger.attribute_window(T0, T0 + 2 * MINUTE)
    gpu = window["gpu"]
    got = {(int(n), int(g), int(i), int(t)): vector.labels([rule])[0]
           for n, g, i, t, rule in zip(gpu["node_id"], gpu["gpu"], gpu["instance"], gpu["t"], gpu["rule"], strict=True)}
    attributed, _ = attribution.from_database(T0, T0 + 2 * MINUTE)
    want = {(a.record["node"], a.record["gpu"], a.record["instance"], int(a.record["start"].timestamp())): a.label
            for a in attributed}
    assert got == want
    assert sorted(want.values()).count("input-bound") == 1 and sorted(want.values()).count("straggler") == 1


def test_the_mounts_are_read_for_the_pairs_asked_a_batch_of_nodes_at_a_time(rows, monkeypatch):
    """One node a query (MOUNT_NODES_A_QUERY), the pairs asked for on both nodes found; a minute a node has
    no row at is left out, and so is a pair not asked for (gpu01 at 10:00, read with 10:01)."""
    gpu01, gpu02 = rows
    NodeRollup.objects.create(node=gpu02, step=60, start=T0 + MINUTE, samples=60, fs_read_bps=1.0e9,
                              mounts={"/home": {"fstype": "nfs", "read_bps": 1.0e9}})
    monkeypatch.setattr(ledger, "MOUNT_NODES_A_QUERY", 1)
    t0, t1 = int(T0.timestamp()), int((T0 + MINUTE).timestamp())
    assert ledger._mounts([(gpu01.pk, t1), (gpu02.pk, t1), (gpu02.pk, t0)]) == {
        (gpu01.pk, t1): {"mounts": {"/mnt/scratch": {"fstype": "lustre", "read_bps": 2.0e9}}, "fs_read_bps": 2.0e9},
        (gpu02.pk, t1): {"mounts": {"/home": {"fstype": "nfs", "read_bps": 1.0e9}}, "fs_read_bps": 1.0e9}}


def test_a_jobs_verdicts_carry_their_evidence(rows):
    verdicts = ledger.job_verdicts("4182", T0, T0 + 2 * MINUTE)
    assert [(v["node"], v["gpu"], v["start"][11:16], v["label"], v["rule"]) for v in verdicts] == [
        ("gpu01", 0, "10:00", "busy", "computes"), ("gpu01", 1, "10:00", "busy", "computes"),
        ("gpu01", 0, "10:01", "straggler", "holds-back-its-job"),
        ("gpu01", 1, "10:01", "input-bound", "waits-on-input")]
    reads = [c for c in verdicts[3]["evidence"] if c["metric"] == "read_share /mnt/scratch"]
    assert reads == [{"metric": "read_share /mnt/scratch", "value": round(2.0e9 / 2.1e9, 6), "op": ">=",
                      "threshold": 0.8, "held": True,
                      "note": "2000000000.0 B/s of 2.1e+09 B/s (storage smoke test of this node: 2100 MB/s)"}]


def test_the_clock_attributes_every_minute(db):
    from appliance.analytics import tasks
    from appliance.celery import beat_schedule

    assert beat_schedule()["analytics-attribute"] == {"task": "analytics.attribute", "schedule": 60}
    assert tasks.attribute.apply().get() == {"minutes": 0, "buckets": 0, "seconds": 0.0, "attributed_until": None,
                                             "elapsed_s": pytest.approx(0, abs=5),
                                             "summary": {"from": None, "hours": 0, "jobs": 0}}


def test_the_clock_brings_the_pages_summaries_up_to_the_ledger(rows):
    from appliance.analytics import tasks
    from appliance.analytics.models import PoolUserHour

    # Up to a few minutes after the rows (not to now: months of empty hours to walk through).
    result = tasks.attribute.apply(kwargs={"until": (T0 + 5 * MINUTE).isoformat()}).get()
    assert result["minutes"] > 0
    assert result["summary"]["hours"] == 1 and result["summary"]["jobs"] == 3  # 4182, chat-7b, embed
    assert sorted(PoolUserHour.objects.values_list("pool", flat=True)) == ["inference", "training"]


def test_the_columns_are_what_the_rows_hold(rows):
    """The raw column read (one binary value a column on PostgreSQL, the cursor on SQLite) gives every value
    exactly, a missing one as NaN, texts as codes (test_ledger_read.py checks it value by value)."""
    gpu01, _ = rows
    GpuRollup.objects.create(node=gpu01, gpu=5, step=60, start=T0, samples=60, job="x", util=1 / 3, sm_active=None,
                             fb_used_mib=0.1 + 0.2, throttle_reasons=0x40)
    columns = ledger._gpu_columns(T0, T0 + MINUTE)
    mine = [i for i, (n, g) in enumerate(zip(columns["node_id"], columns["gpu"], strict=True))
            if (n, g) == (gpu01.pk, 5)]
    [i] = mine
    assert columns["util"][i] == 1 / 3 and columns["fb_used_mib"][i] == 0.1 + 0.2
    assert columns["sm_active"][i] != columns["sm_active"][i]  # NaN
    assert columns["throttle_reasons"][i] == 0x40 and columns["jobs"][columns["job_code"][i]] == "x"
    assert columns["t"][i] == int(T0.timestamp()) and len(columns["t"]) == 8
    assert sorted(columns["share"].round(4).tolist()) == [0.1429, 0.4286] + [1.0] * 6
    assert set(columns["jobs"][columns["job_code"][columns["instance"] == 2]]) == {""}


def test_a_cursor_older_than_the_oldest_row_starts_from_that_row(rows):
    AttributionCursor.objects.create(name="rollups", attributed_until=T0 - timedelta(days=20))
    result = ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert (result["minutes"], result["buckets"]) == (2, 11)
    assert ledger_rows() == EXPECTED


def test_empty_hours_are_skipped_in_one_step_to_the_next_row(rows):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    gpu01, _gpu02 = rows
    later = T0 + timedelta(days=3)
    GpuRollup.objects.create(node=gpu01, gpu=0, step=60, start=later, samples=60, job="", util=0.0, sm_active=0.0)
    with CaptureQueriesContext(connection) as queries:
        result = ledger.run_incremental(until=later + MINUTE)
    assert (result["minutes"], result["buckets"]) == (3 * 24 * 60 + 1, 12)
    # The rollups are asked: for the oldest row; the first hour's rows; the second hour (none) and the next
    # row after it; that row's hour. Walking the 71 empty hours would ask 70 times more.
    rollup_reads = [q["sql"] for q in queries.captured_queries if "FROM telemetry_gpurollup" in q["sql"]]
    assert len(rollup_reads) == 5, rollup_reads
    assert CauseHour.objects.filter(hour=later).count() == 1
    assert AttributionCursor.objects.get(name="rollups").attributed_until == later + MINUTE


def test_minutes_with_frames_are_read_from_them_and_give_what_the_rows_give(rows):
    """With the frames the ingest would have written, the GPU rows' columns are not read: same ledger."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert frames.build([T0, T0 + MINUTE]) == 4  # two nodes, two minutes
    with CaptureQueriesContext(connection) as queries:
        ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED
    read = [q["sql"] for q in queries.captured_queries if "telemetry_gpurollup" in q["sql"]]
    assert any("count(*)" in sql for sql in read) and not any("util" in sql for sql in read), read
    # nor the node rows: the frames carry their figures and mounts (gpu01 at 10:01 reads 2.0 of 2.1 GB/s)
    assert not any("telemetry_noderollup" in q["sql"] for q in queries.captured_queries)


def test_a_minute_whose_frames_do_not_pack_every_row_is_read_from_its_rows(rows):
    """A frame for 10:00 only; then a row is added to 10:00 without one (another writer): 10:00's count no
    longer matches, so its rows are read (the added GPU is counted), and 10:01, with no frame, too."""
    gpu01, _ = rows
    assert frames.build([T0]) == 2
    GpuRollup.objects.create(node=gpu01, gpu=7, step=60, start=T0, samples=60, job="", util=0.0, sm_active=0.0)
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED | {("gpu01", 7, -1, ""): (T0, "training", "", 60.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0,
                                                               0.0, 0.0)}


def test_a_frame_whose_rows_are_gone_is_not_counted(rows):
    assert frames.build([T0, T0 + MINUTE]) == 4
    GpuRollup.objects.filter(start=T0 + MINUTE, node__name="gpu02").delete()
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    result = ledger_rows()
    assert result[("gpu02", 1, -1, "")] == (T0, "inference", "", 60.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert result[("gpu01", 1, -1, "4182")] == EXPECTED[("gpu01", 1, -1, "4182")]


def test_the_ledger_rows_are_the_same_when_their_keys_do_not_fit_one_number(rows, monkeypatch):
    """The five keys sorted apart (what a fleet whose node ids, jobs and instances span more than an int64
    would take) give the same rows as the one number."""
    monkeypatch.setattr(ledger, "COMBINED_KEY_LIMIT", 1.0)
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED


def _frame_reads(queries) -> dict[str, int]:
    """How many of the captured queries read each frame table."""
    return {table: sum(f"FROM {table}" in q["sql"] for q in queries.captured_queries)
            for table in ("telemetry_fleetminuteframe", "telemetry_gpuminuteframe")}


def test_minutes_with_fleet_frames_are_read_from_them_alone(rows):
    """A settled minute's fleet frame packs every node's frame: the node frames are not read, nor the GPU rows'
    columns, and the ledger is the one the rows give."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert frames.build([T0, T0 + MINUTE]) == 4
    frames.build_fleet([T0, T0 + MINUTE])
    with CaptureQueriesContext(connection) as queries:
        ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED
    assert _frame_reads(queries) == {"telemetry_fleetminuteframe": 1, "telemetry_gpuminuteframe": 0}
    read = [q["sql"] for q in queries.captured_queries if "telemetry_gpurollup" in q["sql"]]
    assert any("count(*)" in sql for sql in read) and not any("util" in sql for sql in read), read


def test_a_fleet_frame_whose_minute_gained_a_row_is_passed_over_for_the_rows(rows):
    """Another writer adds GPU 7 of gpu01 to 10:00 after its fleet frame was packed: 10:00 is read from its
    rows (the added GPU counted), 10:01 still from its fleet frame."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    gpu01, _ = rows
    assert frames.build([T0, T0 + MINUTE]) == 4
    frames.build_fleet([T0, T0 + MINUTE])
    GpuRollup.objects.create(node=gpu01, gpu=7, step=60, start=T0, samples=60, job="", util=0.0, sm_active=0.0)
    with CaptureQueriesContext(connection) as queries:
        ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED | {("gpu01", 7, -1, ""): (T0, "training", "", 60.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0,
                                                               0.0, 0.0)}
    # 10:00's node frames are looked at (they pack 2 rows fewer than 10:00 holds now), then its rows read
    assert _frame_reads(queries) == {"telemetry_fleetminuteframe": 1, "telemetry_gpuminuteframe": 1}
    assert any("util" in q["sql"] for q in queries.captured_queries if "telemetry_gpurollup" in q["sql"])


def test_a_minute_whose_fleet_frame_a_late_write_dropped_is_read_from_its_node_frames(rows):
    """A late write rebuilds gpu02's frame of 10:01, which drops that minute's fleet frame: 10:01 is read from
    its node frames, 10:00 from its fleet frame, and the ledger is the one the rows give."""
    from appliance.telemetry.models import FleetMinuteFrame

    assert frames.build([T0, T0 + MINUTE]) == 4
    frames.build_fleet([T0, T0 + MINUTE])
    frames.build([T0 + MINUTE])
    assert [f.start for f in FleetMinuteFrame.objects.all()] == [T0]
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED


def test_minutes_whose_fleet_frames_are_all_stale_are_read_from_their_node_frames(rows):
    """The window's only fleet frame (10:00) no longer matches its rows (a row added by another writer): 10:00
    is read from its rows, and 10:01, which has no fleet frame, from its node frames, not from its rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    gpu01, _ = rows
    assert frames.build([T0, T0 + MINUTE]) == 4
    frames.build_fleet([T0])
    GpuRollup.objects.create(node=gpu01, gpu=7, step=60, start=T0, samples=60, job="", util=0.0, sm_active=0.0)
    with CaptureQueriesContext(connection) as queries:
        ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert ledger_rows() == EXPECTED | {("gpu01", 7, -1, ""): (T0, "training", "", 60.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0,
                                                               0.0, 0.0)}
    assert _frame_reads(queries) == {"telemetry_fleetminuteframe": 1, "telemetry_gpuminuteframe": 1}


def _hours_of_rows(later=(1, 3)):
    """The `rows` fixture's rows (and node rows) at 10:00, and again `later` hours after (by default at
    11:00, none at 12:00, and at 13:00)."""
    gpu_rows, node_rows = list(GpuRollup.objects.all()), list(NodeRollup.objects.all())
    for hours in later:
        for item in gpu_rows + node_rows:
            item.pk, item.start = None, item.start + timedelta(hours=hours)
        GpuRollup.objects.bulk_create(gpu_rows)
        NodeRollup.objects.bulk_create(node_rows)
        for item in gpu_rows + node_rows:
            item.start -= timedelta(hours=hours)


@pytest.fixture
def committed_rows(transactional_db):
    """The `rows` fixture's rows, committed (a run outside a transaction reads ahead on another connection,
    which sees committed rows only), at 10:00, 11:00 and 13:00."""
    gpu01, gpu02 = make_rows()
    _hours_of_rows()
    return gpu01, gpu02


def ledger_by_hour() -> dict:
    """{hour: that hour's ledger rows as ledger_rows gives them, the hour written as T0} (each hour holds 10:00's
    rows, so EXPECTED is every hour's)."""
    by_hour = {}
    for r in CauseHour.objects.select_related("node"):
        by_hour.setdefault(r.hour, {})[(r.node.name, r.gpu, r.instance, r.job)] = (
            T0, r.pool, r.user, *(round(getattr(r, c), 3) for c in COLUMNS))
    return by_hour


def _reads(monkeypatch) -> list[tuple[str, str]]:
    """(the span's start, the reading thread's name) of each GPU columns read, as they happen."""
    import threading

    seen, read = [], ledger._gpu_columns

    def recorded(since, until):
        thread = threading.current_thread().name
        seen.append((f"{since:%H:%M}-{until:%H:%M}", "ahead" if thread.startswith(ledger._Ahead.THREAD_NAME) else "run"))
        return read(since, until)

    monkeypatch.setattr(ledger, "_gpu_columns", recorded)
    return seen


def test_a_run_outside_a_transaction_reads_the_next_hour_ahead_and_writes_the_same_ledger(committed_rows,
                                                                                          monkeypatch):
    seen = _reads(monkeypatch)
    result = ledger.run_incremental(until=T0 + timedelta(hours=3, minutes=2))
    assert (result["minutes"], result["buckets"]) == (3 * 60 + 2, 33)
    # 10:00 read by the run, which then has the next two chunks read and judged ahead: 11:00 and the empty
    # 12:00, then, 11:00 taken, 13:00-13:02 (the empty hour skips to 13:00, which is under way already)
    assert seen == [("10:00-11:00", "run"), ("11:00-12:00", "ahead"), ("12:00-13:00", "ahead"),
                    ("13:00-13:02", "ahead")]
    assert ledger_by_hour() == {T0: EXPECTED, T0 + timedelta(hours=1): EXPECTED, T0 + timedelta(hours=3): EXPECTED}
    assert AttributionCursor.objects.get(name="rollups").attributed_until == T0 + timedelta(hours=3, minutes=2)


def test_chunks_judged_ahead_that_an_empty_hour_skips_past_are_dropped(transactional_db, monkeypatch):
    """Rows at 10:00, 11:00 and 15:00: 12:00 and 13:00 are under way when 12:00 turns out empty and the run
    skips to 15:00, which nobody is reading; the run drops them and reads 15:00 itself."""
    make_rows()
    _hours_of_rows(later=(1, 5))
    seen = _reads(monkeypatch)
    result = ledger.run_incremental(until=T0 + timedelta(hours=5, minutes=2))
    assert (result["minutes"], result["buckets"]) == (5 * 60 + 2, 33)
    assert seen[:3] == [("10:00-11:00", "run"), ("11:00-12:00", "ahead"), ("12:00-13:00", "ahead")]
    assert seen[-1] == ("15:00-15:02", "run")
    assert set(seen[3:-1]) <= {("13:00-14:00", "ahead")}  # read, or cancelled before it began
    assert ledger_by_hour() == {T0: EXPECTED, T0 + timedelta(hours=1): EXPECTED, T0 + timedelta(hours=5): EXPECTED}


def test_a_read_ahead_that_fails_stops_the_run_before_its_hour(committed_rows, monkeypatch):
    """The error of a read made ahead, in the reading thread, is the run's: the hour before it is in the ledger,
    nothing of the hour it read, and the cursor stops between them."""
    read = ledger._gpu_columns

    def failing(since, until):
        if since == T0 + timedelta(hours=1):
            raise frames.FrameError("fleet minute frame 2026-01-01 11:00: 3 node ids for 2")
        return read(since, until)

    monkeypatch.setattr(ledger, "_gpu_columns", failing)
    with pytest.raises(frames.FrameError, match="11:00: 3 node ids for 2"):
        ledger.run_incremental(until=T0 + timedelta(hours=3, minutes=2))
    assert {r.hour for r in CauseHour.objects.all()} == {T0}
    assert AttributionCursor.objects.get(name="rollups").attributed_until == T0 + timedelta(hours=1)


def test_a_read_ahead_of_another_span_is_not_taken(committed_rows):
    """A chunk judged ahead for a span the run does not go on to (another run moved the cursor) is dropped:
    the run reads and judges its own span itself."""
    ahead = ledger._Ahead()
    try:
        ahead.start(T0, T0 + timedelta(hours=1))
        assert ahead.take(T0 + timedelta(minutes=30), T0 + timedelta(hours=1)) is ledger.NOT_AHEAD
        assert ahead.take(T0, T0 + timedelta(hours=1)) is ledger.NOT_AHEAD  # dropped, not kept for later
        ahead.start(T0 + timedelta(hours=1), T0 + timedelta(hours=2))
        window = ahead.take(T0 + timedelta(hours=1), T0 + timedelta(hours=2))
        assert len(window["gpu"]["t"]) == 11 and set(window["gpu"]["t"].tolist()) == {int(T0.timestamp()) + 3600,
                                                                                      int(T0.timestamp()) + 3660}
        ahead.start(T0 + timedelta(hours=2), T0 + timedelta(hours=3))
        assert ahead.take(T0 + timedelta(hours=2), T0 + timedelta(hours=3)) is None  # judged: no rows
    finally:
        ahead.close()


def test_a_window_judged_ahead_keeps_the_nodes_it_was_judged_with(committed_rows):
    """The thread adds the next chunk's nodes to its own cache while the run makes the ledger rows of the
    chunk before: a window carries a copy of the nodes' info, not the cache itself."""
    ahead = ledger._Ahead()
    try:
        ahead.start(T0, T0 + timedelta(hours=1))
        window = ahead.take(T0, T0 + timedelta(hours=1))
        nodes = sorted(window["info"])
        ahead._known[-1] = "a node the next chunk read"
        assert sorted(window["info"]) == nodes and -1 not in window["info"]
        assert {entry.pool for entry in window["info"].values()} == {"training", "inference"}
    finally:
        ahead.close()


def test_a_run_inside_a_transaction_reads_every_hour_itself(rows, monkeypatch):
    """A caller's transaction (its rows not yet committed, here the test's): no other connection would see
    them, so nothing is read ahead, and the ledger is the same."""
    _hours_of_rows()
    seen = _reads(monkeypatch)
    result = ledger.run_incremental(until=T0 + timedelta(hours=3, minutes=2))
    assert (result["minutes"], result["buckets"]) == (3 * 60 + 2, 33)
    assert [thread for _, thread in seen] == ["run"] * 4
    assert ledger_by_hour() == {T0: EXPECTED, T0 + timedelta(hours=1): EXPECTED, T0 + timedelta(hours=3): EXPECTED}


def _nfs_history(iowait: float, read_now: float):
    """gpu03 (training pool, /mnt/nfs measured by nothing): 30 minutes before T0 read at 0.1 to 3.0 GB/s,
    a day earlier a 40 GB/s minute (outside the look-back), /home read 29 minutes only (1 to 29 MB/s); at T0
    a stalled GPU while /mnt/nfs reads `read_now` with `iowait` (and /home 1 MB/s)."""
    appliance = Appliance.objects.create(name="nfs")
    pool = Pool.objects.create(appliance=appliance, name="train-nfs", kind=Pool.Kind.TRAINING)
    gpu03 = Node.objects.create(appliance=appliance, name="gpu03", role=Node.Role.GPU, management_address="10.0.0.13")
    PoolMembership.objects.create(pool=pool, node=gpu03)
    history = [NodeRollup(node=gpu03, step=60, start=T0 - (30 - i) * MINUTE, samples=60, cpu_iowait=0.0,
                          mounts={"/mnt/nfs": {"fstype": "nfs", "read_bps": (i + 1) * 0.1e9},
                                  **({"/home": {"fstype": "nfs", "read_bps": i * 1e6}} if i else {})})
               for i in range(30)]
    history.append(NodeRollup(node=gpu03, step=60, start=T0 - timedelta(hours=24, minutes=1), samples=60,
                              mounts={"/mnt/nfs": {"fstype": "nfs", "read_bps": 40e9}}))
    history.append(NodeRollup(node=gpu03, step=60, start=T0, samples=60, cpu_iowait=iowait, cpu_busy=0.3,
                              fs_read_bps=read_now, mounts={"/mnt/nfs": {"fstype": "nfs", "read_bps": read_now},
                                                            "/home": {"fstype": "nfs", "read_bps": 1e6}}))
    NodeRollup.objects.bulk_create(history)
    GpuRollup.objects.create(node=gpu03, gpu=0, step=60, start=T0, samples=60, job="5102", util=40.0, sm_active=0.2,
                             fb_used_mib=60 * GIB, fb_total_mib=80 * GIB, sm_clock_mhz=1980.0, throttled_share=0.0)
    return gpu03


def test_a_mounts_ceiling_is_learned_from_its_own_reads_before_the_window(db):
    gpu03 = _nfs_history(0.12, 2.5e9)
    info = attribution.nodes_info([gpu03.pk])
    references = {gpu03.pk: info[gpu03.pk].references}
    attribution.learn_ceilings(references, {gpu03.pk: {"/mnt/nfs", "/home"}}, T0)
    # the 99th percentile of 0.1, 0.2, ... 3.0 GB/s (between the two highest); /home's 29 minutes learn nothing
    assert list(references[gpu03.pk].storage) == ["/mnt/nfs"]
    ceiling = references[gpu03.pk].storage["/mnt/nfs"]
    assert ceiling.value == pytest.approx(2.971e9) and ceiling.learned
    assert ceiling.source == "ceiling learned from this mount's own reads: 99th percentile of 30 minutes in the 24 h " \
                             "before 2026-01-01 10:00"


@pytest.mark.parametrize(("iowait", "read", "label"), [(0.12, 2.5e9, "input-bound"), (0.05, 2.5e9, "busy"),
                                                       (0.12, 2.3e9, "busy")])
def test_a_mount_without_a_measured_rate_at_its_own_ceiling_with_blocked_loaders_is_input_bound(db, iowait, read,
                                                                                               label):
    """Read as rows, from frames, and by the rules with their evidence: the same verdict. The look-back ends
    with the window: its ceiling over 0.1, 0.2, ... 3.0 GB/s and this minute's reads is 2.97 GB/s (2.5 GB/s
    is 0.84 of it, 2.3 is 0.77)."""
    _nfs_history(iowait, read)
    as_rows = ledger.attribute_window(T0, T0 + MINUTE)
    assert [vector.RULE_NAMES[code] for code in as_rows["gpu"]["rule"]] == [
        "waits-on-input" if label == "input-bound" else "computes"]
    assert frames.build([T0]) == 1
    from_frames = ledger.attribute_window(T0, T0 + MINUTE)
    assert from_frames["gpu"]["rule"].tolist() == as_rows["gpu"]["rule"].tolist()
    [verdict] = ledger.job_verdicts("5102", T0, T0 + MINUTE)
    assert verdict["label"] == label
    if label == "input-bound":
        [share] = [c for c in verdict["evidence"] if c["metric"] == "read_share /mnt/nfs"]
        assert share["value"] == round(2.5e9 / 2.97e9, 6) and share["held"]
        assert "ceiling learned from this mount's own reads" in share["note"]
        assert share["note"].endswith("no measured rate: a ceiling counts with cpu_iowait >= 0.1, it was 0.12")


def _three_minutes_with_silent_gpus(t0: datetime) -> None:
    """Three minutes from t0: gpu01 sends GPU 0 every minute, GPU 1 the first only, GPU 2 the second only
    and held by nobody (its hour's row has idle and no-data seconds: one key, whatever the database);
    gpu04's two GPUs, listed the day before, send nothing (a collector silent); gpu05's GPU, listed after the
    minutes, is not expected in them. Attributed into the ledger."""
    from appliance.inventory.models import GPU

    appliance = Appliance.objects.create(name="silent")
    pool = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    nodes = {}
    for number, name in ((1, "gpu01"), (4, "gpu04"), (5, "gpu05")):
        nodes[name] = Node.objects.create(appliance=appliance, name=name, role=Node.Role.GPU,
                                          management_address=f"10.0.0.{number}")
        PoolMembership.objects.create(pool=pool, node=nodes[name])
    for name, count in (("gpu01", 3), ("gpu04", 2), ("gpu05", 1)):
        for index in range(count):
            GPU.objects.create(node=nodes[name], index=index, model="H100-SXM5-80GB", memory_mib=81559)
    GPU.objects.filter(node__name__in=["gpu01", "gpu04"]).update(created=t0 - timedelta(days=1))
    GPU.objects.filter(node__name="gpu05").update(created=t0 + timedelta(hours=2))
    rows = [row(nodes["gpu01"], 0, minute, "4182", 98.0, 0.85, 64) for minute in range(3)]
    rows.append(row(nodes["gpu01"], 1, 0, "4182", 96.0, 0.84, 64))
    rows.append(row(nodes["gpu01"], 2, 1, "", 0.0, 0.0, 0))
    for record in rows:
        record.start += t0 - T0
    GpuRollup.objects.bulk_create(rows)
    assert ledger.run_incremental(until=t0 + 3 * MINUTE)["seconds"] == 3 * 5 * 60


def test_every_listed_gpu_second_has_one_cause_no_data_included(db):
    """The ledger adds to 3 minutes x 5 GPUs, as the summaries do."""
    from appliance.analytics import services

    _three_minutes_with_silent_gpus(T0)
    no_data = {(r.node.name, r.gpu, r.job): (r.gpu_seconds, r.no_data_s, r.busy_s, r.pool)
               for r in CauseHour.objects.select_related("node") if r.no_data_s}
    assert no_data == {("gpu01", 1, ""): (120.0, 120.0, 0.0, "training"), ("gpu01", 2, ""): (180.0, 120.0, 0.0, "training"),
                       ("gpu04", 0, ""): (180.0, 180.0, 0.0, "training"), ("gpu04", 1, ""): (180.0, 180.0, 0.0, "training")}
    for figures in CauseHour.objects.values():
        causes = sum(figures[column] for column in CAUSE_COLUMNS)
        assert causes == pytest.approx(figures["gpu_seconds"])  # each second in exactly one cause
    total = services.efficiency(since=T0, until=T0 + timedelta(hours=1), group="node")["total"]
    assert total["gpu_hours"] == round(900 / 3600, 4)
    assert total["by_cause"]["no-data"] == round(600 / 3600, 4) and total["no_data_share"] == round(600 / 900, 4)
    assert total["by_cause"]["busy"] == round(240 / 3600, 4)
    assert total["idle_share"] == round(60 / 900, 4)  # GPU 2's minute without a holder: the silent ones are no data


def test_the_efficiency_page_shows_the_gpu_hours_with_no_data(db, client_for):
    from django.utils import timezone

    from appliance.analytics import services

    _three_minutes_with_silent_gpus(timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2))
    services.refresh_summary()
    text = client_for("viewer").get("/analytics/", {"range": "24h"}).content.decode()
    assert '<dd data-part="no-data">0.2 GPU-hours</dd>' in text  # 600 s of 900
    assert "cause-no-data" in text  # its segment of the bar and the legend's chip
    # the accuracy it states names the data it was measured on, and each cause's
    assert ("98.3 % of GPU-seconds on held-out telemetry written apart from the rules (tests/analytics/heldout.py, "
            "seeds 1-5 and 7, 32 GPUs x 1 h each), every cause 97.0 % or more; 99.8 % of GPU-hours on the simulated "
            "workloads") in text
    assert "Held out, by cause: Busy 100.0 %, Idle, not allocated 99.5 %" in text and "No data 100.0 %." in text


def test_a_mounts_history_is_read_only_where_a_verdict_depends_on_its_ceiling(db):
    """From frames: a stalled GPU on a node whose iowait is under ceiling_iowait (0.05) is busy whatever the
    ceiling, so the node's day of reads is not read; at 0.12 it is, once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _nfs_history(0.05, 2.5e9)
    assert frames.build([T0]) == 1
    with CaptureQueriesContext(connection) as queries:
        window = ledger.attribute_window(T0, T0 + MINUTE)
    assert vector.RULE_NAMES[window["gpu"]["rule"][0]] == "computes"
    assert not [q for q in queries.captured_queries if "telemetry_noderollup" in q["sql"]]
    NodeRollup.objects.filter(start=T0).update(cpu_iowait=0.12)
    assert frames.build([T0]) == 1
    with CaptureQueriesContext(connection) as queries:
        window = ledger.attribute_window(T0, T0 + MINUTE)
    assert vector.RULE_NAMES[window["gpu"]["rule"][0]] == "waits-on-input"
    assert len([q for q in queries.captured_queries if "telemetry_noderollup" in q["sql"]]) == 1


def test_hours_in_which_no_collector_sent_anything_are_no_data_too(db):
    """gpu07 (2 GPUs, listed the day before) sends GPU 0 at 10:00 and at 12:30 only: the run skips the empty
    chunks in one step, and their minutes are no data all the same: 151 minutes x 2 GPUs, 2 of them measured."""
    from appliance.inventory.models import GPU

    appliance = Appliance.objects.create(name="outage")
    node = Node.objects.create(appliance=appliance, name="gpu07", role=Node.Role.GPU, management_address="10.0.0.7")
    for index in range(2):
        GPU.objects.create(node=node, index=index, model="H100-SXM5-80GB", memory_mib=81559)
    GPU.objects.update(created=T0 - timedelta(days=1))
    GpuRollup.objects.bulk_create([row(node, 0, 0, "4182", 98.0, 0.85, 64), row(node, 0, 150, "4182", 98.0, 0.85, 64)])
    result = ledger.run_incremental(until=T0 + 151 * MINUTE)
    assert result["minutes"] == 151 and result["seconds"] == 151 * 2 * 60
    by_hour: dict = {}
    for r in CauseHour.objects.all():  # the job's row and the one with no holder, added
        seconds, no_data = by_hour.get((r.hour.hour, r.gpu), (0.0, 0.0))
        by_hour[(r.hour.hour, r.gpu)] = (seconds + r.gpu_seconds, no_data + r.no_data_s)
    assert by_hour == {(10, 0): (3600.0, 3540.0), (10, 1): (3600.0, 3600.0), (11, 0): (3600.0, 3600.0),
                       (11, 1): (3600.0, 3600.0), (12, 0): (1860.0, 1800.0), (12, 1): (1860.0, 1860.0)}
