"""Per-minute rollups folded into per-hour rows (numbers worked out by hand below), late minutes folded
again as they arrive, rows and events pruned by age with one audit record."""

import hashlib
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance, Node
from appliance.telemetry import frames, services, tasks
from appliance.telemetry.models import (
    FleetMinuteFrame,
    GpuMinuteFrame,
    GpuRollup,
    HardwareEvent,
    JobPlacement,
    NodeCollector,
    NodeRollup,
)
from tests.telemetry.rows import hgx_gpus

pytestmark = pytest.mark.django_db
TOKEN = "tok-fold-gpu01-Lk3J9sQ2wE5rT8yU1iO4pA7s"


def at(day, hour, minute=0):
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def node(db):
    appliance = Appliance.objects.create(name="demo", simulated=True)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    NodeCollector.objects.create(node=node, token=TOKEN, token_digest=hashlib.sha256(TOKEN.encode()).hexdigest(),
                                 issued_at=timezone.now())
    return node


def gpu_minute(node, minute, gpu=0, hour=10, **values):
    return GpuRollup.objects.create(node=node, gpu=gpu, step=60, start=at(1, hour, minute), **values)


@pytest.fixture
def hour_of_minutes(node):
    """GPU 0 over 10:00-10:02 (the middle minute a partial one of 30 sweeps), GPU 1 once, the node twice,
    one minute in the hour before and one in the hour after."""
    gpu_minute(node, 0, samples=60, util=50, util_max=80, power_w=300, power_max_w=400, energy_j=18000,
               temp_c=60, throttle_reasons=4, job="4711", xid_count=0, uuid="GPU-aa")
    gpu_minute(node, 1, samples=30, util=80, util_max=100, power_w=600, power_max_w=700, energy_j=18000,
               temp_c=72, throttle_reasons=8, job="4712", xid_count=1, uuid="GPU-aa")
    gpu_minute(node, 2, samples=60, util=20, util_max=30, power_w=200, power_max_w=250, energy_j=12000,
               temp_c=None, throttle_reasons=0, job="4712", xid_count=0, uuid="GPU-aa")
    gpu_minute(node, 0, gpu=1, samples=60, util=10, job="")
    gpu_minute(node, 59, hour=9, samples=60, util=5)
    gpu_minute(node, 0, hour=11, samples=60, util=99)
    NodeRollup.objects.create(node=node, step=60, start=at(1, 10, 0), samples=60, gpus=8, gpu_util=40,
                              gpu_util_max=80, ib_errors=1,
                              mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 100.0, "write_bps": 10.0}})
    NodeRollup.objects.create(node=node, step=60, start=at(1, 10, 1), samples=30, gpus=8, gpu_util=70,
                              gpu_util_max=100, ib_errors=2,
                              mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 400.0, "write_bps": None},
                                      "/home": {"fstype": "nfs", "read_bps": 5.0, "write_bps": 5.0}})


def test_complete_hours_fold_into_hour_rows_weighted_by_samples(node, hour_of_minutes):
    assert services.fold(now=at(1, 11, 1)) == [at(1, 9)]  # hour 10 ended a minute ago: not settled yet
    assert services.fold(now=at(1, 11, 3)) == [at(1, 10)]
    gpu = GpuRollup.objects.get(node=node, gpu=0, step=3600, start=at(1, 10))
    assert gpu.start == at(1, 10)
    # samples 60 + 30 + 60; util (50x60 + 80x30 + 20x60) / 150; power (300x60 + 600x30 + 200x60) / 150;
    # temperature over the minutes that have one: (60x60 + 72x30) / 90
    assert (gpu.samples, gpu.util, gpu.power_w, gpu.temp_c) == (150, 44.0, 320.0, 64.0)
    assert (gpu.util_max, gpu.power_max_w, gpu.energy_j, gpu.xid_count) == (100.0, 700.0, 48000.0, 1)
    # reasons 4 | 8; job 4712 held the GPU for 90 samples, 4711 for 60
    assert (gpu.throttle_reasons, gpu.job, gpu.uuid, gpu.sm_active) == (12, "4712", "GPU-aa", None)
    assert GpuRollup.objects.get(node=node, gpu=1, step=3600).util == 10.0

    hour = NodeRollup.objects.get(node=node, step=3600)
    # gpu_util (40x60 + 70x30) / 90; scratch reads (100x60 + 400x30) / 90, writes over the minute that has one
    assert (hour.samples, hour.gpus, hour.gpu_util, hour.gpu_util_max, hour.ib_errors) == (90, 8, 50.0, 100.0, 3)
    assert hour.mounts == {"/mnt/scratch": {"fstype": "lustre", "read_bps": 200.0, "write_bps": 10.0},
                           "/home": {"fstype": "nfs", "read_bps": 5.0, "write_bps": 5.0}}
    # the hour still under way stays in minutes; a second run finds nothing new
    assert not GpuRollup.objects.filter(step=3600, start=at(1, 11)).exists()
    assert services.fold(now=at(1, 11, 30)) == []


def test_hours_without_rows_are_skipped_and_a_long_gap_does_not_stall_the_fold(node):
    gpu_minute(node, 0, hour=1, samples=60, util=1)
    GpuRollup.objects.create(node=node, gpu=0, step=60, start=at(5, 7, 30), samples=60, util=2)  # four days later
    assert services.fold(now=at(5, 12)) == [at(1, 1), at(5, 7)]


def test_minutes_that_arrive_after_their_hour_was_folded_are_folded_again(node, hour_of_minutes):
    hgx_gpus(node)  # the ingest takes GPU lines only for the node's own GPUs
    services.fold(now=at(1, 11, 3))
    late = "gpu_rollup,Hostname=gpu01,gpu=0 step=60,samples=60,util=100 1796119380000000000"  # 10:03
    response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", late,
                                HTTP_AUTHORIZATION=f"Token {TOKEN}")
    assert response.status_code == 204
    # (6600 + 100x60) / 210
    assert GpuRollup.objects.get(node=node, gpu=0, step=3600, start=at(1, 10)).util == 60.0
    assert GpuRollup.objects.get(node=node, gpu=0, step=3600, start=at(1, 10)).samples == 210


def test_prune_deletes_by_age_only_what_is_folded_and_records_the_counts(node, hour_of_minutes, settings):
    settings.TELEMETRY_RETENTION = {"minute_days": 1, "hour_days": 2}
    HardwareEvent.objects.create(node=node, kind="xid", gpu=0, time=at(1, 9, 30), message="old XID")
    HardwareEvent.objects.create(node=node, kind="xid", gpu=0, time=at(3, 9, 30), message="recent XID")
    for job, end in (("41", None), ("42", at(1, 9, 30)), ("43", at(3, 9, 30))):
        JobPlacement.objects.create(node=node, source="slurm", job=job, start=at(1, 8), end=end, seen_at=at(1, 9))
    # the GPU minute frames the ingest would have written with the rows: one a minute of the node
    assert frames.build(GpuRollup.objects.filter(step=60).values_list("start", flat=True)) == 5
    services.fold(now=at(1, 11, 3))
    # a day later: minute rows before 12-01 11:00 go, but the 11:00 minute waits for its hour to be folded
    counts = services.prune(now=at(2, 11, 30))
    # the node's two minutes and the 5-, 10- and 30-minute rows the fold made of them (a node without GPUs in
    # the inventory: no fleet row sums it), the frames of 09:59, 10:00, 10:01 and 10:02, and the fleet frames
    # the fold packed of them (it packed 11:00 too, settled at 11:03)
    assert counts == {"minute_gpu_rows": 5, "minute_gpu_frames": 4, "minute_fleet_frames": 4, "minute_node_rows": 5,
                      "minute_fleet_rows": 0, "hour_gpu_rows": 0, "hour_node_rows": 0, "hour_fleet_rows": 0,
                      "events": 0, "job_placements": 0}
    assert list(GpuRollup.objects.filter(step=60).values_list("start", flat=True)) == [at(1, 11)]
    assert list(GpuMinuteFrame.objects.values_list("start", flat=True)) == [at(1, 11)]
    assert list(FleetMinuteFrame.objects.values_list("start", flat=True)) == [at(1, 11)]
    counts = services.prune(now=at(4, 0, 0))  # three days after: hour rows and the first event are past two days
    # the node's hour row, and the 2-hour, 6-hour and day rows folded from it (whose buckets ended by the
    # cut-off)
    assert counts == {"minute_gpu_rows": 0, "minute_gpu_frames": 0, "minute_fleet_frames": 0, "minute_node_rows": 0,
                      "minute_fleet_rows": 0, "hour_gpu_rows": 3, "hour_node_rows": 4, "hour_fleet_rows": 0, "events": 1,
                      "job_placements": 1}
    # a job that ended before the cut-off goes; one that ended after it, or runs, stays
    assert sorted(JobPlacement.objects.values_list("job", flat=True)) == ["41", "43"]
    assert list(HardwareEvent.objects.values_list("message", flat=True)) == ["recent XID"]
    records = AuditRecord.objects.filter(event="telemetry.rollup.prune").order_by("sequence")
    assert [(r.details["minute_gpu_rows"], r.details["hour_gpu_rows"], r.details["events"]) for r in records] == \
        [(5, 0, 0), (0, 3, 1)]
    assert services.prune(now=at(4, 0, 30)) == dict.fromkeys(counts, 0)
    assert records.count() == 2  # nothing deleted, nothing recorded


def test_the_periodic_task_folds_then_prunes(node, hour_of_minutes):
    result = tasks.fold_and_prune.apply().get()
    assert result["folded"] == ["2026-12-01T09:00:00+00:00", "2026-12-01T10:00:00+00:00", "2026-12-01T11:00:00+00:00"]
    assert result["pruned"] == {"minute_gpu_rows": 0, "minute_gpu_frames": 0, "minute_fleet_frames": 0,
                                "minute_node_rows": 0,
                                "minute_fleet_rows": 0, "hour_gpu_rows": 0, "hour_node_rows": 0, "hour_fleet_rows": 0,
                                "events": 0, "job_placements": 0}


def test_the_beat_runs_it_every_five_minutes():
    from appliance.celery import beat_schedule

    assert beat_schedule()["telemetry-fold-prune"] == {"task": "telemetry.fold_and_prune", "schedule": 300}


def test_fold_and_prune_commands(node, hour_of_minutes, capsys):
    call_command("telemetry", "fold")
    assert "Folded 3 hour(s): 2026-12-01 09:00 to 2026-12-01 11:00 UTC." in capsys.readouterr().out
    call_command("telemetry", "fold")
    assert "Nothing to fold" in capsys.readouterr().out
    call_command("telemetry", "prune")
    assert "Pruned 0 per-minute row(s) (older than 14 days), 0 per-hour row(s) and 0 event(s) (older than 365 days)." \
        in capsys.readouterr().out
