"""The telemetry reads at fleet scale: which level of rollups a range reads (per minute, per 5 and per 10
minutes, per hour) and how the levels are joined, the per-10-minute node rows the fold keeps, and the charts of a
day of a node or a GPU in 10-minute points. Rows written by hand (tests/telemetry/rows.py); MAX_ROWS is
lowered so that the two GPU nodes of the sample inventory read what 1,000 nodes read."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.telemetry import queries, services
from appliance.telemetry.models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    MINUTE,
    SIX_HOURS,
    TEN_MINUTES,
    THIRTY_MINUTES,
    TWO_HOURS,
    NodeRollup,
)
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import NOW, at, collector, gpu_row, node_row, sample_telemetry

pytestmark = pytest.mark.django_db


def epoch(hour: int, minute: int, day: int = 2) -> int:
    return int(at(hour, minute, day).timestamp())


@pytest.fixture
def inventory():
    return build_sample_inventory()


@pytest.fixture
def large_fleet(monkeypatch):
    """Two nodes read as 1,000 would: 80 rows at most per fleet-wide read (40,000 for 1,000 nodes)."""
    monkeypatch.setattr(queries, "MAX_ROWS", 80)
    monkeypatch.setattr(queries, "JOB_MAX_ROWS", 100)


@pytest.mark.parametrize(("name", "count", "expected"), [
    # 1,000 nodes: at most 15 columns (15,000 cells), of whole steps
    ("1h", 1000, (FIVE_MINUTES, 300)), ("6h", 1000, (TEN_MINUTES, 1800)), ("24h", 1000, (HOUR, 7200)),
    ("7d", 1000, (SIX_HOURS, 43200)), ("30d", 1000, (DAY, 172800)),
    ("1h", 20, (MINUTE, 60)), ("6h", 20, (MINUTE, 180)), ("24h", 20, (MINUTE, 600)), ("7d", 20, (HOUR, 7200)),
])
def test_the_level_a_range_reads_grows_coarser_with_the_fleet(name, count, expected):
    assert queries.resolution(queries.range_of(name), count) == expected


@pytest.mark.parametrize(("level", "width", "expected"), [
    (TEN_MINUTES, 1800, THIRTY_MINUTES),  # 6 hours of 1,000 nodes: a half-hour row a cell
    (FIVE_MINUTES, 300, FIVE_MINUTES), (HOUR, 7200, TWO_HOURS),  # a day of 1,000 nodes: a 2-hour row a cell
    (SIX_HOURS, 43200, SIX_HOURS), (MINUTE, 600, TEN_MINUTES), (MINUTE, 180, MINUTE), (MINUTE, 240, MINUTE),
])
def test_a_heatmap_reads_the_coarsest_level_that_tiles_its_columns(level, width, expected):
    assert queries.tiling_level(level, width) == expected


def test_six_hours_of_1000_nodes_read_half_hour_rows_then_finer_ones(inventory, monkeypatch):
    """The 6-hour heatmap of a large fleet: 30-minute columns from the half-hour rows the fold made, the
    half hour it has not made yet from its 10-minute rows, then 5-minute rows, then minutes."""
    monkeypatch.setattr(queries, "MAX_ROWS", 2 * 36)  # two nodes read as 1,000 would (36,000 10-minute rows)
    monkeypatch.setattr(queries, "MAX_CELLS", 2 * 15)  # and shown in as many columns (15)
    one = inventory.gpu_node
    node_row(one, at(11, 0), step=THIRTY_MINUTES, gpu_util=20)
    node_row(one, at(11, 0), step=TEN_MINUTES, gpu_util=99)  # covered by the half hour: not read again
    node_row(one, at(11, 30), step=TEN_MINUTES, gpu_util=40)
    node_row(one, at(11, 40), step=FIVE_MINUTES, gpu_util=60)
    node_row(one, at(11, 45), gpu_util=80)
    node_row(one, at(11, 59), gpu_util=100)
    data = queries.overview(range="6h", now=NOW)
    heat = data["heatmap"]
    assert (data["step"], heat["width_s"]) == (THIRTY_MINUTES, 1800)
    assert heat["columns"][-2:] == [epoch(11, 0), epoch(11, 30)]
    # 11:30: 10 minutes at 40 %, 5 at 60 %, a minute at 80 % and one at 100 %
    assert heat["values"][0][-2:] == [20.0, 51.8]  # (600 * 40 + 300 * 60 + 60 * 80 + 60 * 100) / 1020, rounded


def test_a_day_of_a_large_fleet_reads_hours_then_ten_minutes_then_minutes(inventory, large_fleet):
    one, two = inventory.gpu_node, inventory.gpu_node_2
    collector(one, at(11, 59))
    node_row(one, at(9, 0), step=HOUR, gpu_util=20, ib_tx_bps=1e9)
    node_row(one, at(10, 0), step=HOUR, gpu_util=30, ib_tx_bps=2e9)
    node_row(two, at(10, 0), step=HOUR, gpu_util=50, ib_tx_bps=1e9)
    # covered by the hour rows: never read a second time
    node_row(one, at(10, 0), step=TEN_MINUTES, gpu_util=99, ib_tx_bps=9e9)
    node_row(one, at(10, 30), gpu_util=99, ib_tx_bps=9e9)
    # the hour the fold has not reached: two 10-minute rows, then minutes
    node_row(one, at(11, 0), step=TEN_MINUTES, gpu_util=30, ib_tx_bps=1e9)
    node_row(one, at(11, 10), step=TEN_MINUTES, gpu_util=30, ib_tx_bps=1e9)
    for minute in range(20, 30):
        node_row(one, at(11, minute), gpu_util=60, ib_tx_bps=4e9)
    data = queries.overview(range="24h", now=NOW)
    assert data["step"] == HOUR
    heat = data["heatmap"]
    assert heat["width_s"] == 3600 and len(heat["columns"]) == 24
    assert heat["columns"][21:] == [epoch(9, 0), epoch(10, 0), epoch(11, 0)]
    # 11:00: 20 minutes at 30 % and 10 at 60 %
    assert heat["values"][0][21:] == [20.0, 30.0, 40.0]
    assert heat["values"][1][21:] == [None, 50.0, None]
    # The totals read the range's own step (minutes: the fleet's rows, none folded here, then the node rows),
    # in 10-minute points: 10:30, then 11:20 to 11:29; the hour and 10-minute rows are the heatmap's.
    assert data["fabric"]["t"] == [epoch(10, 30), epoch(11, 20)]
    assert data["fabric"]["ib_tx_bps"] == [9e9, 4e9]
    assert data["gpu"]["gpu_util"] == [99.0, 60.0]


def test_six_hours_of_a_large_fleet_read_the_ten_minute_rows(inventory, large_fleet):
    one = inventory.gpu_node
    node_row(one, at(11, 40), step=TEN_MINUTES, gpu_util=10, fs_read_bps=1e9)
    node_row(one, at(11, 50), gpu_util=70, fs_read_bps=3e9)
    node_row(one, at(11, 52), gpu_util=90, fs_read_bps=5e9)
    data = queries.overview(range="6h", now=NOW)
    assert (data["step"], data["heatmap"]["width_s"], len(data["heatmap"]["columns"])) == (600, 600, 36)
    assert data["heatmap"]["values"][0][-2:] == [10.0, 80.0]
    # the totals: the minutes, in 3-minute points (11:48 to 11:50, 11:51 to 11:53)
    assert data["filesystem"] == {"t": [epoch(11, 48), epoch(11, 51)], "fs_read_bps": [3e9, 5e9],
                                  "fs_write_bps": [None, None]}


def test_the_jobs_of_a_day_of_a_large_fleet_read_hours_then_minutes(inventory, large_fleet):
    one = inventory.gpu_node
    gpu_row(one, 0, at(10, 0), step=HOUR, util=30, job="A")
    gpu_row(one, 0, at(10, 30), util=50, job="C")  # in the folded hour, whose job is A: not read
    gpu_row(one, 1, at(11, 30), util=70, job="B")
    gpu_row(one, 2, at(11, 31), util=40, job="B")
    assert queries.jobs("24h", now=NOW) == [
        {"job": "B", "nodes": ["gpu-01"], "gpus": 2, "first": "2026-03-02T11:30:00+00:00",
         "last": "2026-03-02T11:31:00+00:00", "gpu_hours": 0.033, "util_mean": 55.0},  # 2 GPU-minutes
        {"job": "A", "nodes": ["gpu-01"], "gpus": 1, "first": "2026-03-02T10:00:00+00:00",
         "last": "2026-03-02T10:00:00+00:00", "gpu_hours": 1.0, "util_mean": 30.0}]


def test_an_hour_of_jobs_reads_inside_the_hour_only(inventory, large_fleet):
    one = inventory.gpu_node
    now = datetime(2026, 3, 2, 12, 30, 30, tzinfo=UTC)  # the hour from 11:30 to 12:29
    gpu_row(one, 0, at(11, 0), step=HOUR, util=30, job="A")  # starts before the hour: not read
    gpu_row(one, 0, at(11, 29), util=50, job="before")
    gpu_row(one, 0, at(11, 30), util=60, job="inside")
    gpu_row(one, 0, at(12, 29), util=80, job="inside")
    assert [(j["job"], j["util_mean"]) for j in queries.jobs("1h", now=now)] == [("inside", 70.0)]


def test_a_day_of_a_node_and_of_a_gpu_is_ten_minute_points(inventory):
    sample_telemetry(inventory)
    data = queries.node_series(inventory.gpu_node, "24h", now=NOW)
    assert data["width_s"] == 600
    assert data["series"]["t"] == [epoch(11, 50)]
    assert data["series"]["gpu_util"] == [50.0]
    assert data["series"]["ib_tx_bps"] == [2e9]
    assert data["mounts"] == {"/mnt/scratch": {"fstype": "lustre", "read_bps": [3e9], "write_bps": [1.5e8]}}
    assert data["gpus"][0] == {"index": 0, "util": [55.0], "fb_used_mib": [1500.0], "power_w": [275.0],
                               "jobs": ["4242"]}
    gpu = queries.gpu_series(inventory.gpu_node, 0, "24h", now=NOW)
    assert gpu["series"]["t"] == [epoch(11, 50)]
    assert gpu["series"]["util"] == [55.0]
    assert gpu["series"]["util_max"] == [90.0]  # the maximum of the maxima
    assert gpu["series"]["energy_j"] == [33000.0]  # the column's energy
    assert gpu["series"]["job"] == ["4242"]


def test_the_fold_keeps_ten_minute_node_rows_and_folds_late_minutes_again(inventory):
    one = inventory.gpu_node
    node_row(one, at(11, 0), gpu_util=20, samples=60)
    node_row(one, at(11, 5), gpu_util=50, samples=30)
    node_row(one, at(11, 12), gpu_util=40)
    node_row(one, at(11, 21), gpu_util=90)  # its 10 minutes are not complete at 11:25:30
    now = datetime(2026, 3, 2, 11, 25, 30, tzinfo=UTC)
    assert services.fold_ten_minutes(now) == [at(11, 0), at(11, 10)]
    rows = NodeRollup.objects.filter(step=TEN_MINUTES).order_by("start")
    assert [(r.start, r.gpu_util, r.samples) for r in rows] == [(at(11, 0), 30.0, 90), (at(11, 10), 40.0, 60)]
    node_row(one, at(11, 8), gpu_util=80)  # a minute that came late
    assert services.fold_ten_minutes(now + timedelta(minutes=7)) == [at(11, 0), at(11, 10), at(11, 20)]
    assert NodeRollup.objects.get(step=TEN_MINUTES, start=at(11, 0)).gpu_util == 50.0  # (1200 + 1500 + 4800) / 150
    # an hour the hourly fold has passed: its late minutes fold its 10-minute rows again too
    node_row(one, at(10, 0), step=HOUR, gpu_util=1)
    node_row(one, at(10, 10), step=TEN_MINUTES, gpu_util=1)
    node_row(one, at(10, 15), gpu_util=70)
    assert services.refold_late(one.pk, [at(10, 15)]) == [at(10, 0)]
    assert NodeRollup.objects.get(step=TEN_MINUTES, start=at(10, 10)).gpu_util == 70.0
    assert NodeRollup.objects.get(step=HOUR, start=at(10, 0)).gpu_util == 70.0


def test_a_gpus_point_holding_two_jobs_is_the_mean_of_all_its_minutes_and_lists_both_jobs(inventory):
    """A 10-minute point of a day where GPU 0 ran job A, then job B, and one of B's minutes has no
    utilization: its mean is over the minutes that have one, whatever their job."""
    one = inventory.gpu_node
    node_row(one, at(11, 40), gpu_util=10)
    gpu_row(one, 0, at(11, 40), util=10, fb_used_mib=1000, power_w=100, job="A")
    gpu_row(one, 0, at(11, 41), util=20, fb_used_mib=3000, power_w=200, job="A")
    gpu_row(one, 0, at(11, 42), util=60, fb_used_mib=None, power_w=300, job="B")
    gpu_row(one, 0, at(11, 43), util=None, fb_used_mib=5000, power_w=None, job="B")
    gpu_row(one, 1, at(11, 44), util=5, job="")
    data = queries.node_series(one, "24h", now=NOW)
    assert data["series"]["t"] == [epoch(11, 40)]
    assert data["gpus"][0] == {"index": 0, "util": [30.0], "fb_used_mib": [3000.0], "power_w": [200.0],
                               "jobs": ["A", "B"]}
    assert data["gpus"][1] == {"index": 1, "util": [5.0], "fb_used_mib": [None], "power_w": [None], "jobs": []}


def test_a_day_reads_the_two_hour_row_being_filled_from_the_finer_rows(inventory, monkeypatch):
    """The 2-hour row of 10:00 holds the 10:00 hour alone until 11:00 is folded: the day's last column reads
    that hour and the minutes after it instead, each weighing the time it covers."""
    monkeypatch.setattr(queries, "MAX_ROWS", 2 * 24)  # two nodes read as 1,000 would (24,000 hour rows)
    monkeypatch.setattr(queries, "MAX_CELLS", 2 * 15)  # and shown in as many columns (15)
    one = inventory.gpu_node
    node_row(one, at(8, 0), step=TWO_HOURS, gpu_util=25)
    node_row(one, at(8, 0), step=HOUR, gpu_util=99)  # covered by its complete 2-hour row: not read again
    node_row(one, at(10, 0), step=TWO_HOURS, gpu_util=40)  # 10:00 only: not read
    node_row(one, at(10, 0), step=HOUR, gpu_util=40)
    for minute in range(20, 30):
        node_row(one, at(11, minute), gpu_util=61)
    data = queries.overview(range="24h", now=NOW)
    heat = data["heatmap"]
    assert (data["step"], heat["width_s"]) == (TWO_HOURS, 7200)
    assert heat["columns"][-2:] == [epoch(8, 0), epoch(10, 0)]
    # 10:00: an hour at 40 %, then 10 minutes at 61 % ((3600 * 40 + 600 * 61) / 4200)
    assert heat["values"][0][-2:] == [25.0, 43.0]
