"""What the Overview reads instead of rows, and where it falls back to them: each GPU's newest minute as the
ingest keeps it on the node's collector (NodeCollector.live_gpus), and each bucket's heatmap cells as the
fold keeps them on the fleet's row (FleetRollup.node_ids, node_gpu_util). Numbers written out by hand."""

import hashlib
import importlib
import math
from datetime import timedelta

import numpy as np
import pytest
from django.apps import apps as live_apps
from django.test import Client

from appliance.inventory.models import Node
from appliance.telemetry import ingest, queries, services
from appliance.telemetry.models import MINUTE, FleetRollup, GpuRollup, NodeCollector
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import NOW, at, gpu_row, node_row, place

pytestmark = pytest.mark.django_db
TOKEN = "tok-live-gpu01-Zx8Cv3Bn6Mq1We4Rt7Yu2Io5"
T_1158, T_1159 = 1772452680, 1772452740  # 2026-03-02 11:58 and 11:59 UTC, seconds since 1970


@pytest.fixture
def inventory():
    return build_sample_inventory()


@pytest.fixture
def writer(inventory):
    NodeCollector.objects.create(node=inventory.gpu_node, token=TOKEN, issued_at=NOW - timedelta(days=1),
                                 token_digest=hashlib.sha256(TOKEN.encode()).hexdigest())
    place(inventory.gpu_node, "4242", "4243")  # where the scheduler runs the tests' jobs

    def write(*lines):
        response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=s", "\n".join(lines),
                                    HTTP_AUTHORIZATION=f"Token {TOKEN}")
        assert response.status_code == 204, response.content

    return write


def gpu_line(gpu: int, t: int, fields: str, tags: str = "") -> str:
    return f"gpu_rollup,Hostname=gpu-01,gpu={gpu}{tags} step=60,samples=60,{fields} {t}"


def kept(node) -> dict:
    collector = NodeCollector.objects.get(node=node)
    return ingest.live_gpu_rows(collector.live_gpus, collector.live_gpu_jobs)


def test_the_ingest_keeps_each_gpu_newest_whole_gpu_minute(inventory, writer):
    writer(gpu_line(0, T_1159, "util=70,fb_used_mib=2000,fb_total_mib=81559,power_w=300,temp_c=55", ",hpc_job=4242"),
           gpu_line(1, T_1159, "util=12.5,fb_used_mib=100,power_w=90"),
           # a MIG instance of GPU 0: not a whole GPU, not kept
           gpu_line(0, T_1159, "util=5,fb_used_mib=9000", ",GPU_I_ID=1,GPU_I_PROFILE=1g.10gb"))
    one = inventory.gpu_node
    rows = kept(one)
    assert sorted(rows) == [0, 1]
    assert rows[0] == ([0.0, float(T_1159), 70.0, 2000.0, 81559.0, 300.0, 55.0], "4242")
    gpu1, job1 = rows[1]
    assert gpu1[:3] == [1.0, float(T_1159), 12.5] and math.isnan(gpu1[4]) and math.isnan(gpu1[6]) and job1 == ""
    # an older minute sent late (a buffer draining) does not replace a newer one
    writer(gpu_line(0, T_1158, "util=10,fb_used_mib=1,fb_total_mib=81559,power_w=100,temp_c=40", ",hpc_job=4242"))
    assert kept(one)[0] == ([0.0, float(T_1159), 70.0, 2000.0, 81559.0, 300.0, 55.0], "4242")
    # the same minute sent again with other values: what its row now holds; GPU 1 is left as it was
    writer(gpu_line(0, T_1159, "util=75,fb_used_mib=2500,fb_total_mib=81559,power_w=310,temp_c=56", ",hpc_job=4243"))
    rows = kept(one)
    assert rows[0] == ([0.0, float(T_1159), 75.0, 2500.0, 81559.0, 310.0, 56.0], "4243")
    assert rows[1][0][:3] == [1.0, float(T_1159), 12.5]


def test_the_overview_reads_the_kept_minutes_and_the_rows_of_gpus_that_have_none(inventory, writer):
    writer(gpu_line(0, T_1159, "util=75,fb_used_mib=2500,fb_total_mib=81559,power_w=310,temp_c=56", ",hpc_job=4243"))
    # The row under it changed by hand: the Overview shows what the collector keeps, not the row.
    GpuRollup.objects.filter(node=inventory.gpu_node, gpu=0).update(util=1)
    # gpu-02 has no collector: its GPU 3's minute, written without the ingest, is read from its row
    gpu_row(inventory.gpu_node_2, 3, at(11, 58), util=10, fb_used_mib=30000, fb_total_mib=81559, power_w=120,
            temp_c=40, job="4242")
    gpus = queries.overview(range="1h", now=NOW)["gpus"]
    assert gpus["live"] == [True] + [False] * 7 + [False] * 3 + [True] + [False] * 4
    assert [gpus[field][0] for field in ("util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c", "job", "t",
                                         "age_s")] == [75.0, 2500.0, 81559.0, 310.0, 56.0, "4243", T_1159, 90]
    assert [gpus[field][11] for field in ("util", "fb_used_mib", "power_w", "temp_c", "job", "t", "age_s")] == [
        10.0, 30000.0, 120.0, 40.0, "4242", T_1158, 150]
    # a kept minute out of the live window (three minutes) is not live, whatever the collector kept
    later = queries.overview(range="1h", now=NOW + timedelta(minutes=3))["gpus"]
    assert later["live"][0] is False and later["util"][0] is None


def test_kept_minutes_of_a_shape_this_version_does_not_write_are_left_to_the_rows(inventory, writer):
    writer(gpu_line(0, T_1159, "util=75,fb_total_mib=81559", ",hpc_job=4243"))
    # two jobs for one GPU's values: not read (the rows are)
    NodeCollector.objects.filter(node=inventory.gpu_node).update(live_gpu_jobs="4243\n4244")
    GpuRollup.objects.filter(node=inventory.gpu_node, gpu=0).update(util=33)
    gpus = queries.overview(range="1h", now=NOW)["gpus"]
    assert (gpus["live"][0], gpus["util"][0], gpus["job"][0]) == (True, 33.0, "4243")


def test_the_migration_keeps_the_newest_minute_of_each_gpu_already_stored(inventory):
    one = inventory.gpu_node
    NodeCollector.objects.create(node=one, token=TOKEN, issued_at=NOW - timedelta(days=1),
                                 token_digest=hashlib.sha256(TOKEN.encode()).hexdigest())
    gpu_row(one, 0, at(11, 58), util=10, fb_used_mib=1, fb_total_mib=81559, power_w=100, temp_c=40, job="7")
    gpu_row(one, 0, at(11, 59), util=70, fb_used_mib=2000, fb_total_mib=81559, power_w=300, temp_c=None, job="8")
    gpu_row(one, 0, at(11, 59), instance=2, util=5)  # a MIG instance
    gpu_row(one, 2, at(11, 30), util=3, job="")
    migration = importlib.import_module("appliance.telemetry.migrations.0008_collector_live_gpus")
    migration.fill(live_apps, None)
    rows = kept(one)
    assert sorted(rows) == [0, 2]
    assert rows[0][0][:6] == [0.0, float(T_1159), 70.0, 2000.0, 81559.0, 300.0] and math.isnan(rows[0][0][6])
    assert rows[0][1] == "8"
    assert rows[2][0][:3] == [2.0, float(at(11, 30).timestamp()), 3.0] and rows[2][1] == ""


@pytest.fixture
def minutes(inventory):
    one, two = inventory.gpu_node, inventory.gpu_node_2
    node_row(one, at(11, 50), gpu_util=40)
    node_row(two, at(11, 50), gpu_util=80)
    node_row(one, at(11, 51), gpu_util=None)
    node_row(two, at(11, 51), gpu_util=30)
    node_row(inventory.storage_node, at(11, 50), gpu_util=None)  # no GPU: not in the fleet's cells
    return one, two


def cells(step: int, start) -> dict:
    row = FleetRollup.objects.get(step=step, start=start)
    ids = np.frombuffer(row.node_ids, dtype="<i8").tolist()
    assert ids == sorted(ids)
    names = dict(Node.objects.filter(pk__in=ids).values_list("pk", "name"))
    return {names[pk]: value for pk, value in zip(ids, np.frombuffer(row.node_gpu_util, dtype="<f8").tolist(),
                                                   strict=True)}


def test_the_fold_keeps_each_node_utilization_on_the_fleet_row(inventory, minutes):
    services.fold_fleet_minutes(NOW)
    assert cells(MINUTE, at(11, 50)) == {"gpu-01": 40.0, "gpu-02": 80.0}
    found = cells(MINUTE, at(11, 51))
    assert sorted(found) == ["gpu-01", "gpu-02"] and math.isnan(found["gpu-01"]) and found["gpu-02"] == 30.0


def heat(data, node: str, column: int) -> float | None:
    values = data["heatmap"]["values"][data["heatmap"]["nodes"].index(node)]
    return values[data["heatmap"]["columns"].index(column)]


def test_the_heatmap_reads_the_fleet_cells_and_the_node_rows_of_buckets_without_them(inventory, minutes):
    services.fold_fleet_minutes(NOW)
    data = queries.overview(range="1h", now=NOW)
    assert data["heatmap"]["width_s"] == 60
    assert [heat(data, node, int(at(11, 50).timestamp())) for node in ("gpu-01", "gpu-02")] == [40.0, 80.0]
    assert [heat(data, node, int(at(11, 51).timestamp())) for node in ("gpu-01", "gpu-02")] == [None, 30.0]
    # what the heatmap reads is the fleet row's cells: changed by hand, they show
    row = FleetRollup.objects.get(step=MINUTE, start=at(11, 50))
    row.node_gpu_util = np.array([41.0, 81.0], dtype="<f8").tobytes()
    row.save()
    data = queries.overview(range="1h", now=NOW)
    assert [heat(data, node, int(at(11, 50).timestamp())) for node in ("gpu-01", "gpu-02")] == [41.0, 81.0]
    # a fleet row folded before it kept cells (an upgrade): that bucket is read from the node rows
    FleetRollup.objects.filter(start=at(11, 50)).update(node_ids=None, node_gpu_util=None)
    data = queries.overview(range="1h", now=NOW)
    assert [heat(data, node, int(at(11, 50).timestamp())) for node in ("gpu-01", "gpu-02")] == [40.0, 80.0]
    # and one whose cells are not of their shape (a utilization missing): read from the node rows too
    FleetRollup.objects.filter(start=at(11, 50)).update(node_ids=np.array([1, 2], dtype="<i8").tobytes(),
                                                        node_gpu_util=np.array([1.0], dtype="<f8").tobytes())
    data = queries.overview(range="1h", now=NOW)
    assert [heat(data, node, int(at(11, 50).timestamp())) for node in ("gpu-01", "gpu-02")] == [40.0, 80.0]
    # and so is a minute newer than the fleet's rows (11:59, not settled at 12:00:30)
    node_row(inventory.gpu_node, at(11, 59), gpu_util=64)
    data = queries.overview(range="1h", now=NOW)
    assert heat(data, "gpu-01", int(at(11, 59).timestamp())) == 64.0


def test_the_migration_keeps_the_cells_of_the_fleet_rows_already_folded(inventory, minutes):
    services.fold_fleet_minutes(NOW)
    FleetRollup.objects.update(node_ids=None, node_gpu_util=None)
    migration = importlib.import_module("appliance.telemetry.migrations.0007_fleet_heatmap_cells")
    migration.fill(live_apps, None)
    assert cells(MINUTE, at(11, 50)) == {"gpu-01": 40.0, "gpu-02": 80.0}
    assert cells(MINUTE, at(11, 51))["gpu-02"] == 30.0
