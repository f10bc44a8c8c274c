"""What the portal and the API read of the telemetry (appliance.telemetry.queries), over rows written by
hand (tests/telemetry/rows.py): every expected number below is written out from those rows."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from appliance.inventory.models import GPU, Node
from appliance.telemetry import queries
from appliance.telemetry.models import HOUR
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import NOW, at, collector, event, gpu_row, node_row, sample_telemetry

pytestmark = pytest.mark.django_db

T_1158, T_1159 = 1772452680, 1772452740  # 2026-03-02 11:58 and 11:59 UTC, seconds since 1970


@pytest.fixture
def inventory():
    return build_sample_inventory()


def test_the_live_cells_show_each_gpu_newest_minute_or_say_why_there_is_none(inventory):
    sample_telemetry(inventory)
    data = queries.overview(range="1h", now=NOW)
    assert [n["name"] for n in data["nodes"]] == ["gpu-01", "gpu-02"]  # storage-01 has no GPU
    one, two = data["nodes"]
    assert one["collector"] == {"state": "live", "last_bucket": "2026-03-02T11:59:00+00:00",
                                "last_seen": "2026-03-02T11:59:00+00:00", "age_s": 90}
    assert two["collector"] == {"state": "not deployed", "last_bucket": None, "age_s": None}
    # the fleet's GPUs in columns, grouped by node in the order of the list (gpu-01's eight, then gpu-02's):
    # GPU 0 live (its 11:59 bucket, 90 s old); GPU 1's newest bucket (11:55) is 5.5 minutes old: not live;
    # GPUs 2 to 7 never reported
    gpus = data["gpus"]
    assert gpus["node"] == [0] * 8 + [1] * 8
    assert gpus["index"] == list(range(8)) * 2
    assert gpus["live"][:8] == [True] + [False] * 7
    assert [gpus[field][0] for field in ("util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c", "job", "t",
                                         "age_s")] == [70.0, 2000.0, 81559.0, 300.0, 55.0, "4242", T_1159, 90]
    assert {field: gpus[field][1] for field in gpus if field not in ("node", "index", "live")} == dict.fromkeys(
        ("util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c", "job", "t", "age_s"))
    assert gpus["util"][8 + 3] == 10.0
    assert data["summary"] == {"nodes": 2, "gpus": 16, "gpus_live": 2, "collectors": 1, "collectors_live": 1,
                               "util_mean": 40.0, "gpus_busy": 1, "gpus_idle": 0, "power_w": 420.0,
                               "fb_used_mib": 32000.0, "fb_total_mib": 163118.0,
                               "newest_bucket": "2026-03-02T11:59:00+00:00", "newest_age_s": 90}


def test_a_live_gpu_without_a_memory_total_shows_the_memory_the_inventory_knows(inventory):
    """A collector that could not read a GPU's memory total (NVML answered nothing, or 0): the cell and the
    fleet's total fall back to the GPU's memory in the inventory (81,559 MiB for the sample's H100s)."""
    from tests.telemetry.rows import minutes_before

    one = inventory.gpu_node
    collector(one, minutes_before(NOW, 1))
    gpu_row(one, 0, minutes_before(NOW, 1), util=20, fb_used_mib=1000, fb_total_mib=None)
    gpu_row(one, 1, minutes_before(NOW, 1), util=30, fb_used_mib=2000, fb_total_mib=0)
    data = queries.overview(range="1h", now=NOW)
    assert data["gpus"]["fb_total_mib"][:3] == [81559.0, 81559.0, None]
    assert (data["summary"]["fb_used_mib"], data["summary"]["fb_total_mib"]) == (3000.0, 163118.0)


def test_a_collector_that_stopped_writing_is_silent_since_its_last_bucket(inventory):
    collector(inventory.gpu_node, at(11, 50))
    data = queries.overview(range="1h", now=NOW)
    assert data["nodes"][0]["collector"] == {"state": "silent", "last_bucket": "2026-03-02T11:50:00+00:00",
                                             "last_seen": "2026-03-02T11:50:00+00:00", "age_s": 630}
    assert data["summary"]["collectors_live"] == 0


def test_the_collectors_of_a_fleet_each_say_their_own_state(inventory):
    """Nodes sharing their newest bucket share its text and age (collector_states makes them once); each
    keeps its own last write; a collector that never wrote is silent with nothing to show."""
    one, two = inventory.gpu_node, inventory.gpu_node_2
    collector(one, at(11, 59), last_seen=NOW.replace(second=5, microsecond=250000))
    collector(two, at(11, 59), last_seen=NOW.replace(second=7))
    storage = collector(inventory.storage_node, None)
    collectors = {one.pk: {"last_bucket": at(11, 59), "last_seen": NOW.replace(second=5, microsecond=250000)},
                  two.pk: {"last_bucket": at(11, 59), "last_seen": NOW.replace(second=7)},
                  storage.node_id: {"last_bucket": None, "last_seen": None},
                  0: {"last_bucket": at(11, 50), "last_seen": at(11, 51)}}
    assert queries.collector_states(collectors, NOW) == {
        one.pk: {"state": "live", "last_bucket": "2026-03-02T11:59:00+00:00",
                 "last_seen": "2026-03-02T12:00:05.250000+00:00", "age_s": 90},
        two.pk: {"state": "live", "last_bucket": "2026-03-02T11:59:00+00:00",
                 "last_seen": "2026-03-02T12:00:07+00:00", "age_s": 90},
        storage.node_id: {"state": "silent", "last_bucket": None, "last_seen": None, "age_s": None},
        0: {"state": "silent", "last_bucket": "2026-03-02T11:50:00+00:00", "last_seen": "2026-03-02T11:51:00+00:00",
            "age_s": 630}}
    nodes = queries.overview(range="1h", now=NOW)["nodes"]
    assert [node["collector"]["last_seen"] for node in nodes] == ["2026-03-02T12:00:05.250000+00:00",
                                                                  "2026-03-02T12:00:07+00:00"]


def test_the_heatmap_and_the_fleet_throughput_over_an_hour(inventory):
    sample_telemetry(inventory)
    data = queries.overview(range="1h", now=NOW)
    heat = data["heatmap"]
    assert heat["width_s"] == 60
    assert len(heat["columns"]) == 60
    assert heat["columns"][0] == T_1159 - 59 * 60 and heat["columns"][-1] == T_1159
    assert heat["nodes"] == ["gpu-01", "gpu-02"]
    assert heat["values"][0][58:] == [40.0, 60.0]
    assert heat["values"][0][:58] == [None] * 58
    assert heat["values"][1][59] == 20.0
    assert data["fabric"] == {"t": [T_1158, T_1159], "ib_tx_bps": [1e9, 4e9], "ib_rx_bps": [5e8, 2e9]}
    assert data["filesystem"] == {"t": [T_1158, T_1159], "fs_read_bps": [2e9, 4.5e9], "fs_write_bps": [1e8, 2e8]}


def test_a_day_is_at_most_150_columns_of_whole_minutes(inventory):
    sample_telemetry(inventory)
    heat = queries.overview(range="24h", now=NOW)["heatmap"]
    assert heat["width_s"] == 600
    assert len(heat["columns"]) == 144
    # 11:58 and 11:59 fall in the 11:50 column: their mean.
    assert heat["values"][0][-1] == 50.0
    assert queries.overview(range="6h", now=NOW)["heatmap"]["width_s"] == 180


def test_seven_and_thirty_days_read_the_hourly_rows(inventory):
    sample_telemetry(inventory)  # per-minute rows only: not read for a week
    node_row(inventory.gpu_node, at(10, 0), step=HOUR, gpu_util=33, ib_tx_bps=7e8)
    node_row(inventory.gpu_node, at(10, 0, day=1), step=HOUR, gpu_util=11, ib_tx_bps=1e8)
    data = queries.overview(range="7d", now=NOW)
    # its 2-hour columns tile with 2-hour rows (none folded here: the hours are read)
    assert data["step"] == 7200
    assert data["fabric"]["ib_tx_bps"] == [1e8, 7e8]
    assert data["heatmap"]["width_s"] == 7200
    series = queries.node_series(inventory.gpu_node, "30d", now=NOW)["series"]
    assert series["gpu_util"] == [11.0, 33.0]


def test_an_unknown_range_is_refused():
    with pytest.raises(queries.UnknownRange, match="range: '2h' is not one of 1h, 6h, 24h, 7d, 30d"):
        queries.range_of("2h")


def _grow_fleet(upto: int):
    """GPU nodes fleet-000.. up to `upto`, 8 GPUs each, a live collector, three minutes of rows on GPU 0
    and the node (all in one job), an XID each."""
    appliance = Node.objects.first().appliance
    for i in range(Node.objects.filter(name__startswith="fleet-").count(), upto):
        node = Node.objects.create(appliance=appliance, name=f"fleet-{i:03d}", role=Node.Role.GPU)
        GPU.objects.bulk_create(GPU(node=node, index=g, model="H100", memory_mib=81559) for g in range(8))
        collector(node, at(11, 59))
        for minute in (57, 58, 59):
            gpu_row(node, 0, at(11, minute), util=50, power_w=200, job="job-0")
            node_row(node, at(11, minute), gpu_util=50, ib_tx_bps=1e9)
        event(node, "xid", at(11, 59), gpu=0, message="Xid 79")


def _queries(function) -> int:
    with CaptureQueriesContext(connection) as captured:
        function()
    return len(captured)


@pytest.mark.parametrize("read", [
    lambda node: queries.overview(range="1h", now=NOW),
    lambda node: queries.overview(range="24h", now=NOW),
    lambda node: queries.live_summary(now=NOW),
    lambda node: queries.node_series(node, "1h", now=NOW),
    lambda node: queries.gpu_series(node, 0, "1h", now=NOW),
    lambda node: queries.jobs("1h", now=NOW),
    lambda node: queries.job("job-0"),
    lambda node: queries.alerts("all"),
], ids=["overview-1h", "overview-24h", "live-summary", "node", "gpu", "jobs", "job", "alerts"])
def test_the_number_of_queries_does_not_grow_with_the_fleet(inventory, read):
    _grow_fleet(2)
    small = _queries(lambda: read(Node.objects.get(name="fleet-000")))
    _grow_fleet(20)
    assert Node.objects.filter(name__startswith="fleet-").count() == 20
    large = _queries(lambda: read(Node.objects.get(name="fleet-000")))
    assert small == large
    # the node read by the lambda, then the Overview's eight: nodes, GPUs, collectors, the newest minutes (and
    # the GPUs behind them), heatmap, fleet rows, the node rows newer than those; and the newest row of each
    # coarser level its heatmap reads (a small fleet's day: its 10-minute columns from 10-minute rows, then
    # 5-minute rows, then minutes)
    assert large <= 11


def test_the_overview_reads_the_fleet_in_eight_queries_or_fewer(inventory):
    sample_telemetry(inventory)
    assert _queries(lambda: queries.overview(range="1h", now=NOW)) <= 8


def test_a_node_over_an_hour_its_mounts_and_each_gpu(inventory):
    sample_telemetry(inventory)
    data = queries.node_series(inventory.gpu_node, "1h", now=NOW)
    assert data["series"]["t"] == [T_1158, T_1159]
    assert data["series"]["gpu_util"] == [40.0, 60.0]
    assert data["series"]["ib_tx_bps"] == [1e9, 3e9]
    assert data["series"]["cpu_iowait"] == [0.05, 0.25]
    assert data["mounts"] == {"/mnt/scratch": {"fstype": "lustre", "read_bps": [2e9, 4e9], "write_bps": [1e8, 2e8]}}
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert data["gpus"][0] == {"index": 0, "util": [40.0, 70.0], "fb_used_mib": [1000.0, 2000.0],
                               "power_w": [250.0, 300.0], "jobs": ["4242"]}
    assert data["gpus"][2] == {"index": 2, "jobs": []}  # no row: the chart says so
    assert data["collector"]["state"] == "live"


def test_one_gpu_and_its_mig_instances(inventory):
    sample_telemetry(inventory)
    gpu_row(inventory.gpu_node, 6, at(11, 59), util=30, sm_active=0.25)
    gpu_row(inventory.gpu_node, 6, at(11, 59), instance=1, profile="3g.40gb", util=55, fb_used_mib=12000,
            sm_active=0.5)
    data = queries.gpu_series(inventory.gpu_node, 0, "1h", now=NOW)
    assert data["series"]["util"] == [40.0, 70.0]
    assert data["series"]["energy_j"] == [15000.0, 18000.0]
    assert data["series"]["job"] == ["4242", "4242"]
    assert data["jobs"] == ["4242"]
    assert data["inventory"]["memory_mib"] == 81559
    mig = queries.gpu_series(inventory.gpu_node, 6, "1h", now=NOW)
    assert mig["series"]["sm_active"] == [0.25]
    assert mig["instances"] == [{"instance": 1, "profile": "3g.40gb", "t": [T_1159], "util": [55.0],
                                 "fb_used_mib": [12000.0], "sm_active": [0.5]}]


def test_a_job_its_gpus_their_use_and_the_io_of_its_nodes(inventory):
    sample_telemetry(inventory)
    data = queries.job("4242")
    assert data["nodes"] == ["gpu-01", "gpu-02"]
    assert data["gpu_count"] == 2
    assert data["first"] == "2026-03-02T11:58:00+00:00" and data["end"] == "2026-03-02T12:00:00+00:00"
    assert data["duration_s"] == 120
    assert data["util_mean"] == 32.5  # GPU 0 of gpu-01: (40 + 70) / 2; GPU 3 of gpu-02: 10
    assert data["energy_j"] == 40200.0
    assert [(g["node"], g["gpu"], g["util"], g["buckets"]) for g in data["gpus"]] == [
        ("gpu-01", 0, 55.0, 2), ("gpu-02", 3, 10.0, 1)]
    assert data["t"] == [T_1158, T_1159]
    assert data["gpu_series"] == {"gpu-01/0": {"util": [40.0, 70.0], "fb_used_mib": [1000.0, 2000.0]},
                                  "gpu-02/3": {"util": [None, 10.0], "fb_used_mib": [None, 30000.0]}}
    assert data["node_series"]["gpu-01"]["fs_read_bps"] == [2e9, 4e9]
    assert data["node_series"]["gpu-02"]["fs_read_bps"] == [None, 5e8]
    assert data["node_series"]["gpu-01"]["cpu_iowait"] == [0.05, 0.25]
    with pytest.raises(queries.UnknownJob, match="no GPU rollup names the job '999'"):
        queries.job("999")


def test_jobs_of_the_range(inventory):
    sample_telemetry(inventory)
    assert queries.jobs("1h", now=NOW) == [{"job": "4242", "nodes": ["gpu-01", "gpu-02"], "gpus": 2,
                                            "first": "2026-03-02T11:58:00+00:00",
                                            "last": "2026-03-02T11:59:00+00:00",
                                            "gpu_hours": 0.05, "util_mean": 32.5}]  # 3 GPU-minutes
    assert queries.jobs("1h", now=NOW + timedelta(hours=2)) == []


def test_alerts_open_and_all(inventory):
    node = inventory.gpu_node
    event(node, "xid", at(11, 59), gpu=2, message="Xid 79: GPU has fallen off the bus")
    event(node, "throttling", at(11, 30), gpu=1, message="thermal slowdown", acknowledged_at=at(11, 40),
          acknowledged_by="operator-user")
    event(node, "nvml_error", at(11, 45), gpu=4, message="not an alert")
    open_ = queries.alerts("open")
    assert (open_["open"], open_["total"]) == (1, 2)
    assert [(a["node"], a["kind"], a["gpu"], a["message"]) for a in open_["alerts"]] == [
        ("gpu-01", "xid", 2, "Xid 79: GPU has fallen off the bus")]
    every = queries.alerts("all")
    assert [a["kind"] for a in every["alerts"]] == ["xid", "throttling"]
    assert every["alerts"][1]["acknowledged_by"] == "operator-user"
    with pytest.raises(ValueError, match="state: 'new' is not one of open, all"):
        queries.alerts("new")


def test_a_job_longer_than_a_day_reads_its_hourly_rows(inventory):
    node = inventory.gpu_node
    gpu_row(node, 0, at(10, 0, day=1), util=20, job="777")
    gpu_row(node, 0, at(11, 0, day=2), util=90, job="777")
    gpu_row(node, 0, at(10, 0, day=1), step=HOUR, util=25, job="777")
    gpu_row(node, 0, at(11, 0, day=2), step=HOUR, util=85, job="777")
    data = queries.job("777")
    assert data["step"] == 3600
    assert data["gpu_series"]["gpu-01/0"]["util"] == [25.0, 85.0]
    gpu_row(node, 1, at(11, 0), util=50, job="888")
    gpu_row(node, 1, at(11, 0), step=HOUR, util=40, job="888")
    assert queries.job("888")["step"] == 60  # a short job keeps its minutes



@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner, without statistics, is the one to guard")
@pytest.mark.parametrize("read", [
    lambda node: queries.gpu_series(node, 0, "1h", now=NOW),
    lambda node: queries.gpu_series(node, 0, "24h", now=NOW),
    lambda node: queries.node_series(node, "24h", now=NOW),
    lambda node: queries.job("4242"),
], ids=["gpu-1h", "gpu-24h", "node-24h", "job"])
def test_a_node_or_gpu_page_reads_its_own_rows_not_the_fleets(inventory, read):
    """A GPU's (or a node's GPUs') rows are found by the (node, gpu, instance, step, start) index, a job's
    by the (job, step, instance, start) one: read by the fleet's (step, ...) indexes, a day of 1,000 nodes
    is 11.5 million rows to go through for one GPU (a job's first and last minute took 66 ms for 1.25
    hours of 1,000 nodes)."""
    sample_telemetry(inventory)
    with CaptureQueriesContext(connection) as captured:
        read(inventory.gpu_node)
    plans = []
    for query in captured.captured_queries:
        if "telemetry_gpurollup" in query["sql"]:
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
                plans += [row[-1] for row in cursor.fetchall()]
    assert plans
    assert not [plan for plan in plans if "telemetry_gpu_step_start" in plan or "telemetry_gpu_fleet_jobs" in plan]


def test_the_live_columns_follow_the_nodes_listed_by_name_not_their_ids(inventory):
    """gpu-02 renamed "a-gpu" is listed first though its id is the larger: its GPUs come first in the
    columns, and each GPU's "node" is its node's position in the list."""
    sample_telemetry(inventory)
    Node.objects.filter(name="gpu-02").update(name="a-gpu")
    data = queries.overview(range="1h", now=NOW)
    assert [n["name"] for n in data["nodes"]] == ["a-gpu", "gpu-01"]
    gpus = data["gpus"]
    assert gpus["node"] == [0] * 8 + [1] * 8
    assert gpus["index"] == list(range(8)) * 2
    assert (gpus["util"][3], gpus["util"][8]) == (10.0, 70.0)  # a-gpu's GPU 3, gpu-01's GPU 0
    assert gpus["live"] == [False] * 3 + [True] + [False] * 4 + [True] + [False] * 7


def test_bucket_starts_read_raw_become_epoch_seconds_whatever_their_form():
    """SQLite's text (parsed by numpy when every value has the plain form, one at a time otherwise),
    PostgreSQL's epoch seconds, a datetime: 2026-03-02 11:58 and 11:59 UTC."""
    assert queries._epochs(["2026-03-02 11:59:00", "2026-03-02 11:58:00", "2026-03-02 11:59:00"]).tolist() == [
        T_1159, T_1158, T_1159]
    assert queries._epochs(["2026-03-02 11:59:00", "2026-03-02 11:58:00.250000"]).tolist() == [T_1159, T_1158]
    assert queries._epochs([T_1158, T_1159]).tolist() == [T_1158, T_1159]
    assert queries._epochs([at(11, 59)]).tolist() == [T_1159]
    assert queries._epochs([]).tolist() == []
