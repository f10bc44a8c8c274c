"""The fleet's own rows (FleetRollup): what the folds sum from the node rows of the GPU nodes, what the
Overview's totals read of them (and of the node rows newer than them), a late write summed again, the
5-minute level of node rows, and the prune. Numbers written out by hand."""

import hashlib
from datetime import timedelta

import numpy as np
import pytest
from django.test import Client

from appliance.inventory.models import Appliance
from appliance.telemetry import queries, services
from appliance.telemetry.models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    MINUTE,
    SIX_HOURS,
    TWO_HOURS,
    FleetRollup,
    NodeCollector,
    NodeRollup,
)
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import NOW, at, node_row

pytestmark = pytest.mark.django_db
TOKEN = "tok-fleet-gpu01-Qw7Ty2Ui9Op4As1Df6Gh3Jk8"


def epoch(hour: int, minute: int) -> int:
    return int(at(hour, minute).timestamp())


@pytest.fixture
def inventory():
    return build_sample_inventory()


@pytest.fixture
def minutes(inventory):
    """gpu-01 and gpu-02 at 11:50 and 11:51, gpu-01 alone at 11:58 and 11:59; the storage node (no GPU) at
    11:50, which the fleet's rows leave out like the Overview does."""
    one, two = inventory.gpu_node, inventory.gpu_node_2
    node_row(one, at(11, 50), gpu_util=40, gpu_power_w=2000, ib_tx_bps=1e9, ib_rx_bps=2e9, fs_read_bps=3e9)
    node_row(two, at(11, 50), gpu_util=80, gpu_power_w=4000, ib_tx_bps=5e9, ib_rx_bps=None, fs_read_bps=1e9)
    node_row(one, at(11, 51), gpu_util=None, gpu_power_w=1000, ib_tx_bps=2e9)
    node_row(two, at(11, 51), gpu_util=30, gpu_power_w=3000, ib_tx_bps=2e9)
    node_row(one, at(11, 58), gpu_util=10, gpu_power_w=500, ib_tx_bps=4e9)
    node_row(one, at(11, 59), gpu_util=20, gpu_power_w=600, ib_tx_bps=6e9)
    node_row(inventory.storage_node, at(11, 50), gpu_util=None, ib_tx_bps=9e11, fs_read_bps=9e11)
    return one, two


def fleet(step=MINUTE):
    return [(row.start, row.nodes, row.gpu_util_sum, row.gpu_util_count, row.gpu_power_w, row.ib_tx_bps, row.ib_rx_bps,
             row.fs_read_bps) for row in FleetRollup.objects.filter(step=step).order_by("start")]


def test_the_fold_sums_the_settled_minutes_of_the_gpu_nodes(inventory, minutes):
    # at 12:00:30 the minutes up to 11:57 have settled (SETTLE_S, 120 s, after they closed)
    assert services.fold_fleet_minutes(NOW) == (at(11, 50), at(11, 57))
    assert fleet() == [
        (at(11, 50), 2, 120.0, 2, 6000.0, 6e9, 2e9, 4e9),
        (at(11, 51), 2, 30.0, 1, 4000.0, 4e9, None, None),
    ]
    assert {row.appliance_id for row in FleetRollup.objects.all()} == {inventory.appliance.pk}
    # ten minutes later 11:58 and 11:59 have settled too; the newest ten minutes are summed again
    assert services.fold_fleet_minutes(NOW + timedelta(minutes=10)) == (at(11, 50), at(12, 7))
    assert [row[0] for row in fleet()] == [at(11, 50), at(11, 51), at(11, 58), at(11, 59)]


def test_the_overview_totals_read_the_fleet_rows_then_the_newer_node_rows(inventory, minutes):
    services.fold_fleet_minutes(NOW)
    # what the Overview reads is the fleet's row, not the node rows under it: changed by hand, it shows
    FleetRollup.objects.filter(step=MINUTE, start=at(11, 50)).update(ib_tx_bps=7e9)
    data = queries.overview(range="1h", now=NOW)
    assert data["fabric"]["t"] == [epoch(11, 50), epoch(11, 51), epoch(11, 58), epoch(11, 59)]
    assert data["fabric"]["ib_tx_bps"] == [7e9, 4e9, 4e9, 6e9]
    assert data["gpu"]["gpu_util"] == [60.0, 30.0, 10.0, 20.0]
    assert data["gpu"]["gpu_power_w"] == [6000.0, 4000.0, 500.0, 600.0]
    # the appliance's own view reads its own fleet rows; another appliance has none
    other = Appliance.objects.create(name="other", simulated=True)
    assert queries.overview(inventory.appliance, range="1h", now=NOW)["fabric"]["ib_tx_bps"] == [7e9, 4e9, 4e9, 6e9]
    assert queries.overview(other, range="1h", now=NOW)["fabric"] == {"t": [], "ib_tx_bps": [], "ib_rx_bps": []}


def test_a_write_for_a_minute_already_summed_sums_it_again(inventory, minutes):
    one, _ = minutes
    NodeCollector.objects.create(node=one, token=TOKEN, token_digest=hashlib.sha256(TOKEN.encode()).hexdigest(),
                                 issued_at=NOW - timedelta(days=1))
    services.fold_fleet_minutes(NOW)
    assert FleetRollup.objects.get(step=MINUTE, start=at(11, 51)).gpu_util_count == 1
    # gpu-01 sends 11:51 again, now with a GPU utilization (a collector's resend after a lost answer)
    late = f"node_rollup,Hostname=gpu-01 step=60,samples=60,gpus=8,gpu_util=50,gpu_power_w=1000,ib_tx_bps=2e9 " \
           f"{int(at(11, 51).timestamp()) * 10**9}"
    response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", late,
                                HTTP_AUTHORIZATION=f"Token {TOKEN}")
    assert response.status_code == 204, response.content
    row = FleetRollup.objects.get(step=MINUTE, start=at(11, 51))
    assert (row.nodes, row.gpu_util_sum, row.gpu_util_count, row.gpu_power_w) == (2, 80.0, 2, 4000.0)
    # the heatmap's cells of that minute: gpu-01's read again, gpu-02's kept as the fleet row held them
    # (changed by hand here, they stay: only the writing node's rows are read again)
    ids = np.frombuffer(row.node_ids, dtype="<i8").tolist()
    assert ids == sorted([one.pk, inventory.gpu_node_2.pk])
    utils = dict(zip(ids, np.frombuffer(row.node_gpu_util, dtype="<f8").tolist(), strict=True))
    assert utils == {one.pk: 50.0, inventory.gpu_node_2.pk: 30.0}
    row.node_gpu_util = np.array([99.0 if pk == inventory.gpu_node_2.pk else 50.0 for pk in ids], dtype="<f8").tobytes()
    row.save()
    again = f"node_rollup,Hostname=gpu-01 step=60,samples=60,gpus=8,gpu_util=55,gpu_power_w=1000,ib_tx_bps=2e9 " \
            f"{int(at(11, 51).timestamp()) * 10**9}"
    assert Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", again,
                            HTTP_AUTHORIZATION=f"Token {TOKEN}").status_code == 204
    row = FleetRollup.objects.get(step=MINUTE, start=at(11, 51))
    assert dict(zip(np.frombuffer(row.node_ids, dtype="<i8").tolist(),
                    np.frombuffer(row.node_gpu_util, dtype="<f8").tolist(), strict=True)) == {
        one.pk: 55.0, inventory.gpu_node_2.pk: 99.0}
    assert row.gpu_util_sum == 85.0  # the sums are read again whole
    # a minute newer than the fleet's rows is left to the periodic fold
    newer = f"node_rollup,Hostname=gpu-01 step=60,samples=60,gpus=8,gpu_util=5 {int(at(11, 59).timestamp()) * 10**9}"
    assert Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", newer,
                            HTTP_AUTHORIZATION=f"Token {TOKEN}").status_code == 204
    assert not FleetRollup.objects.filter(start=at(11, 59)).exists()


def test_folding_node_rows_of_a_coarser_level_sums_the_fleet_row_of_that_level(inventory, minutes):
    # the 5-minute bucket from 11:50: gpu-01 (40 % over one minute, no utilization the next), gpu-02 (80, 30)
    assert services.fold_five_minutes(NOW) == [at(11, 50)]
    rows = NodeRollup.objects.filter(step=FIVE_MINUTES, start=at(11, 50)).order_by("node__name")
    assert [(row.node.name, row.gpu_util, row.samples) for row in rows] == [
        ("gpu-01", 40.0, 120), ("gpu-02", 55.0, 120), ("storage-01", None, 60)]
    # the nodes' 5-minute means summed: power 1,500 + 3,500 W, tx 1.5e9 + 3.5e9, rx and reads where measured
    assert fleet(FIVE_MINUTES) == [(at(11, 50), 2, 95.0, 2, 5000.0, 5e9, 2e9, 4e9)]
    # the next run folds the newest bucket and the one before it again, then the new one (11:55)
    assert services.fold_five_minutes(NOW + timedelta(minutes=5)) == [at(11, 50), at(11, 55)]
    # an hour folded: its fleet row (gpu-01's hour (40 + 10 + 20) / 3, gpu-02's 55)
    services.fold_hour(at(11, 0))
    [(start, nodes, util_sum, *_)] = fleet(HOUR)
    assert (start, nodes) == (at(11, 0), 2) and util_sum == pytest.approx(78.333, abs=1e-3)


def test_prune_deletes_the_fleet_rows_with_the_node_rows_of_their_level(inventory, minutes, settings):
    settings.TELEMETRY_RETENTION = {"minute_days": 1, "hour_days": 2}
    services.fold(now=NOW)
    services.fold_hour(at(11, 0))
    assert {(row.step, row.start) for row in FleetRollup.objects.all()} == {
        (MINUTE, at(11, 50)), (MINUTE, at(11, 51)), (FIVE_MINUTES, at(11, 50)), (HOUR, at(11, 0)),
        (TWO_HOURS, at(10, 0)), (SIX_HOURS, at(6, 0)), (DAY, at(0, 0))}
    counts = services.prune(now=NOW + timedelta(days=1, hours=1))
    assert (counts["minute_fleet_rows"], counts["hour_fleet_rows"]) == (3, 0)
    # three days on: the hour, and the 2-hour, 6-hour and day buckets that ended two days before
    counts = services.prune(now=NOW + timedelta(days=3))
    assert (counts["minute_fleet_rows"], counts["hour_fleet_rows"]) == (0, 4)
    assert not FleetRollup.objects.exists()


def test_hours_kept_before_the_six_hour_and_day_levels_existed_are_folded_into_them(inventory, minutes):
    one, two = minutes
    services.fold_hour(at(11, 0))
    # gpu-01's hour: (40 + 10 + 20) / 3, 240 samples; its 6-hour and day rows hold that one hour
    six = NodeRollup.objects.get(node=one, step=SIX_HOURS, start=at(6, 0))
    assert (six.samples, round(six.gpu_util, 3)) == (240, 23.333)
    # an appliance upgraded from a version without these levels: its hours have none
    NodeRollup.objects.filter(step__in=(SIX_HOURS, DAY)).delete()
    FleetRollup.objects.filter(step__in=(SIX_HOURS, DAY)).delete()
    assert services.fold_above_hour_backlog() == [(SIX_HOURS, at(6, 0)), (DAY, at(0, 0))]
    day = NodeRollup.objects.get(node=two, step=DAY, start=at(0, 0))
    assert (day.samples, day.gpu_util) == (120, 55.0)
    assert services.fold_above_hour_backlog() == []  # nothing left to catch up


def test_the_migration_sums_the_node_rows_kept_before_it(inventory, minutes):
    """What migration 0003 runs over the rows an appliance kept before the upgrade (with the historical
    models it is given), compared with what the fold makes of the same rows."""
    import importlib

    from django.apps import apps as live_apps

    migration = importlib.import_module("appliance.telemetry.migrations.0003_fleet_rollups")
    migration.sum_existing_node_rows(live_apps, None)
    assert fleet() == [
        (at(11, 50), 2, 120.0, 2, 6000.0, 6e9, 2e9, 4e9),
        (at(11, 51), 2, 30.0, 1, 4000.0, 4e9, None, None),
        (at(11, 58), 1, 10.0, 1, 500.0, 4e9, None, None),
        (at(11, 59), 1, 20.0, 1, 600.0, 6e9, None, None),
    ]
