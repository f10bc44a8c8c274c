"""Where the GPU-hours went, from rollup rows written by hand: GPU-hours allocated vs used, by cause and
idle share by cause, per pool and job, skew across a job's GPUs, memory held vs used, MIG instances
counted by their slice; in a constant number of queries."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import services
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from appliance.telemetry.models import GpuRollup, NodeRollup

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WINDOW = (T0, T0 + 2 * MINUTE)
GIB = 1024  # MiB


@pytest.fixture
def appliance(db):
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11",
                                facts={"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100,
                                                                "write_mbps": 1800}]}})
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    PoolMembership.objects.create(pool=training, node=gpu01)
    PoolMembership.objects.create(pool=inference, node=gpu02)
    return appliance


def row(node, gpu, minute, job, util, sm, used_gib, total_gib=80, instance=-1, profile=""):
    return GpuRollup(node=node, gpu=gpu, instance=instance, profile=profile, step=60, start=T0 + minute * MINUTE,
                     samples=60, job=job, util=util, sm_active=sm, fb_used_mib=used_gib * GIB,
                     fb_total_mib=total_gib * GIB, sm_clock_mhz=1980.0, throttled_share=0.0)


@pytest.fixture
def rows(appliance):
    gpu01, gpu02 = Node.objects.get(name="gpu01"), Node.objects.get(name="gpu02")
    GpuRollup.objects.bulk_create([
        # Job 4182 on gpu01: both GPUs compute in the first minute; in the second GPU 0 straggles and GPU 1
        # waits for it.
        row(gpu01, 0, 0, "4182", 98.0, 0.85, 64), row(gpu01, 1, 0, "4182", 96.0, 0.84, 64),
        row(gpu01, 0, 1, "4182", 100.0, 0.97, 64), row(gpu01, 1, 1, "4182", 60.0, 0.35, 64),
        # gpu02: a chat service holding 72 of 80 GiB and computing nothing; a GPU nobody holds.
        row(gpu02, 0, 0, "chat-7b", 4.0, 0.02, 72), row(gpu02, 0, 1, "chat-7b", 4.0, 0.02, 72),
        row(gpu02, 1, 0, "", 0.0, 0.0, 0), row(gpu02, 1, 1, "", 0.0, 0.0, 0),
        # GPU 2 of gpu02 in MIG mode, first minute: a 1g.10gb slice serving "embed", an unused 3g.40gb one,
        # and the whole GPU's own row (not counted again).
        row(gpu02, 2, 0, "embed", 50.0, 0.5, 9, 10, instance=1, profile="1g.10gb"),
        row(gpu02, 2, 0, "", 0.0, 0.0, 0, 40, instance=2, profile="3g.40gb"),
        row(gpu02, 2, 0, "", 20.0, 0.2, 9),
    ])
    NodeRollup.objects.create(node=gpu01, step=60, start=T0, samples=60, fs_read_bps=0.3e9, cpu_iowait=0.01,
                              cpu_busy=0.2, mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 0.3e9}})


def test_gpu_hours_by_cause_allocated_used_and_memory_for_the_appliance(rows, django_assert_num_queries):
    with django_assert_num_queries(3):  # GPU rows, node rows, nodes
        result = services.efficiency(*WINDOW)
    total = result["total"]
    assert total["gpu_hours"] == 0.1429  # 8 whole-GPU minutes and 1/7 + 3/7 of a GPU's minute
    assert total["allocated_hours"] == 0.1024
    assert total["used_hours"] == 0.0615
    assert total["by_cause"] == {"busy": 0.0357, "idle-unallocated": 0.0405, "allocated-idle": 0.0,
                                 "input-bound": 0.0, "communication-bound": 0.0167, "straggler": 0.0167,
                                 "throttled": 0.0, "memory-only": 0.0333}
    assert total["idle_share_by_cause"] == {"idle-unallocated": 0.2833, "allocated-idle": 0.0, "input-bound": 0.0,
                                            "communication-bound": 0.1167, "straggler": 0.1167, "throttled": 0.0,
                                            "memory-only": 0.2333}
    assert (total["memory_held_gib_hours"], total["memory_used_gib_hours"], total["memory_used_share"]) == \
        (8.0238, 6.6881, 0.8335)


def test_by_pool_and_by_job(rows):
    pools = {g["key"]: g for g in services.efficiency(*WINDOW, group="pool")["groups"]}
    assert {key: g["gpu_hours"] for key, g in pools.items()} == {"inference": 0.0762, "training": 0.0667}
    assert pools["training"]["by_cause"]["straggler"] == 0.0167
    assert pools["inference"]["by_cause"]["memory-only"] == 0.0333
    jobs = {g["key"]: g["gpu_hours"] for g in services.efficiency(*WINDOW, group="job")["groups"]}
    assert jobs == {"(unallocated)": 0.0405, "4182": 0.0667, "chat-7b": 0.0333, "embed": 0.0024}


def test_by_gpu_node_and_minute(rows):
    gpus = {g["key"]: g["by_cause"] for g in services.efficiency(*WINDOW, group="gpu")["groups"]}
    assert sorted(gpus) == ["gpu01/gpu0", "gpu01/gpu1", "gpu02/gpu0", "gpu02/gpu1", "gpu02/gpu2/gi1",
                            "gpu02/gpu2/gi2"]
    assert gpus["gpu01/gpu1"]["communication-bound"] == 0.0167 and gpus["gpu01/gpu1"]["busy"] == 0.0167
    assert gpus["gpu02/gpu2/gi1"]["busy"] == 0.0024
    nodes = {g["key"]: g["gpu_hours"] for g in services.efficiency(*WINDOW, group="node")["groups"]}
    assert nodes == {"gpu01": 0.0667, "gpu02": 0.0762}
    hours = services.efficiency(*WINDOW, group="hour")["groups"]
    assert [(g["key"], g["gpu_hours"]) for g in hours] == [("2026-01-01T10:00Z", 0.1429)]
    first_minute = services.efficiency(T0, T0 + MINUTE)["total"]
    assert first_minute["gpu_hours"] == 0.0762  # 4 whole GPUs and 4/7 of one


def test_the_number_of_queries_does_not_grow_with_the_rows(rows, django_assert_num_queries):
    gpu01 = Node.objects.get(name="gpu01")
    GpuRollup.objects.bulk_create([row(gpu01, gpu, minute, "4183", 98.0, 0.85, 64)
                                   for gpu in range(2, 8) for minute in range(2, 60)])
    with django_assert_num_queries(3):
        result = services.efficiency(T0, T0 + 60 * MINUTE, group="job")
    assert {g["key"]: g["gpu_hours"] for g in result["groups"]}["4183"] == 5.8  # 6 GPUs x 58 minutes
    with django_assert_num_queries(4):  # by node: the judged rows, their jobs' rows elsewhere, node rows, nodes
        services.efficiency(*WINDOW, node_ids=[gpu01.pk])


def test_skew_across_a_jobs_gpus_names_the_one_holding_it_back(rows):
    skew = services.job_skew(*WINDOW, job="4182")
    assert skew == [{"job": "4182", "gpus": [{"gpu": "gpu01/gpu0", "util_mean": 99.0},
                                             {"gpu": "gpu01/gpu1", "util_mean": 78.0}],
                     "util_mean": 88.5, "spread": 21.0, "cv": 0.1186, "holding_back": "gpu01/gpu0"}]
    everyone = {entry["job"]: entry for entry in services.job_skew(*WINDOW)}
    assert sorted(everyone) == ["4182", "chat-7b", "embed"]
    assert everyone["chat-7b"]["spread"] == 0.0 and everyone["chat-7b"]["holding_back"] == ""


def test_verdicts_carry_their_evidence_and_the_node_smoke_test(appliance):
    gpu01 = Node.objects.get(name="gpu01")
    GpuRollup.objects.create(node=gpu01, gpu=0, step=60, start=T0, job="4190", util=25.0, sm_active=0.15,
                             fb_used_mib=60000.0, fb_total_mib=81559.0, sm_clock_mhz=1980.0)
    NodeRollup.objects.create(node=gpu01, step=60, start=T0, fs_read_bps=1.9e9, cpu_iowait=0.05, cpu_busy=0.4,
                              mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 1.9e9, "write_bps": 0.0}})
    [verdict] = services.verdicts(*WINDOW)
    assert (verdict["gpu"], verdict["job"], verdict["label"], verdict["rule"]) == \
        ("gpu01/gpu0", "4190", "input-bound", "waits-on-input")
    read = next(c for c in verdict["evidence"] if c["metric"] == "read_share /mnt/scratch")
    assert read == {"metric": "read_share /mnt/scratch", "value": 0.904762, "op": ">=", "threshold": 0.8,
                    "held": True,
                    "note": "1900000000.0 B/s of 2.1e+09 B/s (storage smoke test of this node: 2100 MB/s)"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"group": "user"}, "group 'user': must be one of appliance, pool, node, gpu, job, hour, day"),
    ({"step": 300}, "step 300: must be 60"),
])
def test_bad_parameters_are_refused_naming_them(db, kwargs, message):
    with pytest.raises(services.AnalyticsError, match=message):
        services.efficiency(*WINDOW, **kwargs)


def test_a_window_needs_time_zones_and_an_end_after_its_start(db):
    with pytest.raises(services.AnalyticsError, match="since/until: give times with a time zone"):
        services.efficiency(datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(services.AnalyticsError, match="is not after since"):
        services.job_skew(T0, T0)
