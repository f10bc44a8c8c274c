"""Where the GPU-hours went, from ledger rows (CauseHour) written by hand: GPU-hours allocated vs used, by
cause and idle share by cause, per appliance, pool, user, job, GPU, hour and day, memory held vs used, skew
across a job's GPUs, a MIG slice counted by its share; one query whatever the number of rows; bad input
refused naming the option."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import services
from appliance.analytics.models import CauseHour
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership

H0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
GIB_S = 1024 * 3600  # MiB x seconds of one GiB held for an hour
SLICE_S = 3600 / 7  # a 1g.10gb MIG instance's hour, weighted by its share of the GPU


def ledger_rows():
    """Written out: the figures the tests expect are computed by hand from these."""
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    PoolMembership.objects.create(pool=training, node=gpu01)
    PoolMembership.objects.create(pool=inference, node=gpu02)

    def row(node, gpu, hour, job="", user="", pool="training", instance=-1, **seconds):
        return CauseHour(node=node, gpu=gpu, instance=instance, hour=hour, job=job, user=user, pool=pool, **seconds)

    CauseHour.objects.bulk_create([
        # Job 4182 of alice on gpu01: GPU 0 busy 50 min and a straggler 10 min; GPU 1 waits on it half the hour.
        row(gpu01, 0, H0, "4182", "alice", gpu_seconds=3600, used_seconds=3240, busy_s=3000, straggler_s=600,
            memory_held_mib_s=80 * GIB_S, memory_used_mib_s=64 * GIB_S),
        row(gpu01, 1, H0, "4182", "alice", gpu_seconds=3600, used_seconds=1800, busy_s=1800,
            communication_bound_s=1800, memory_held_mib_s=80 * GIB_S, memory_used_mib_s=64 * GIB_S),
        # The next hour GPU 0 waits on its input half the time.
        row(gpu01, 0, H0 + HOUR, "4182", "alice", gpu_seconds=3600, used_seconds=1800, busy_s=1800,
            input_bound_s=1800, memory_held_mib_s=80 * GIB_S, memory_used_mib_s=64 * GIB_S),
        # gpu02 (inference): bob's chat service holds 72 of 80 GiB and computes nothing; a GPU nobody holds;
        # a 1g.10gb slice of GPU 2 serving bob's "embed", busy at 50 %.
        row(gpu02, 0, H0, "chat-7b", "bob", "inference", gpu_seconds=3600, used_seconds=144, memory_only_s=3600,
            memory_held_mib_s=80 * GIB_S, memory_used_mib_s=72 * GIB_S),
        row(gpu02, 1, H0, pool="inference", gpu_seconds=3600, idle_unallocated_s=3600),
        row(gpu02, 2, H0, "embed", "bob", "inference", instance=1, gpu_seconds=SLICE_S, used_seconds=SLICE_S / 2,
            busy_s=SLICE_S, memory_held_mib_s=10 * SLICE_S * 1024, memory_used_mib_s=9 * SLICE_S * 1024),
        # The next day: gpu01's GPU 0 unallocated for an hour.
        row(gpu01, 0, H0 + 24 * HOUR, gpu_seconds=3600, idle_unallocated_s=3600),
    ])


@pytest.fixture
def rows(db):
    ledger_rows()


WINDOW = {"since": H0, "until": H0 + 2 * HOUR}


def test_the_appliance_gpu_hours_by_cause_allocated_used_and_memory(rows, django_assert_num_queries):
    assert services.refresh_summary() == {"from": "2026-01-01T10:00:00+00:00", "hours": 3, "jobs": 3}
    with django_assert_num_queries(4):  # the summary's state, the ledger's cursor and newest rows; the sums
        result = services.efficiency(**WINDOW, group="appliance")
    total = result["total"]
    assert [g["key"] for g in result["groups"]] == ["appliance"] and result["groups"][0]["gpu_hours"] == 5.1429
    assert (total["gpu_hours"], total["allocated_hours"], total["used_hours"]) == (5.1429, 4.1429, 2.0114)
    assert (total["allocated_share"], total["used_share"]) == (0.8056, 0.3911)
    assert total["by_cause"] == {"busy": 1.9762, "idle-unallocated": 1.0, "allocated-idle": 0.0, "input-bound": 0.5,
                                 "communication-bound": 0.5, "straggler": 0.1667, "throttled": 0.0,
                                 "memory-only": 1.0, "no-data": 0.0}
    assert total["idle_share_by_cause"] == {"idle-unallocated": 0.1944, "allocated-idle": 0.0, "input-bound": 0.0972,
                                            "communication-bound": 0.0972, "straggler": 0.0324, "throttled": 0.0,
                                            "memory-only": 0.1944, "no-data": 0.0}
    assert total["idle_share"] == 0.6157
    assert (total["memory_held_gib_hours"], total["memory_used_gib_hours"], total["memory_used_share"]) == \
        (321.4286, 265.2857, 0.8253)


def test_by_pool_user_job_gpu_hour_and_day(rows):
    def hours(group, **window):
        return {g["key"]: g["gpu_hours"] for g in services.efficiency(**(window or WINDOW), group=group)["groups"]}

    assert hours("pool") == {"inference": 2.1429, "training": 3.0}
    assert hours("user") == {"(no user)": 1.0, "alice": 3.0, "bob": 1.1429}
    assert hours("job") == {"(unallocated)": 1.0, "4182": 3.0, "chat-7b": 1.0, "embed": 0.1429}
    assert hours("node") == {"gpu01": 3.0, "gpu02": 2.1429}
    assert hours("gpu") == {"gpu01/gpu0": 2.0, "gpu01/gpu1": 1.0, "gpu02/gpu0": 1.0, "gpu02/gpu1": 1.0,
                            "gpu02/gpu2/gi1": 0.1429}
    assert hours("hour") == {"2026-01-01T10:00Z": 4.1429, "2026-01-01T11:00Z": 1.0}
    assert hours("day", since=H0, until=H0 + 48 * HOUR) == {"2026-01-01": 5.1429, "2026-01-02": 1.0}
    pools = {g["key"]: g for g in services.efficiency(**WINDOW)["groups"]}  # by pool unless told
    assert pools["training"]["by_cause"]["straggler"] == 0.1667
    assert pools["inference"]["idle_share_by_cause"]["memory-only"] == 0.4667  # 1 of 2.1429 GPU-hours


def test_one_pool_and_one_job(rows):
    training = services.efficiency(**WINDOW, pool="training", group="user")
    assert [(g["key"], g["gpu_hours"]) for g in training["groups"]] == [("alice", 3.0)]
    assert training["total"]["used_hours"] == 1.9  # (3240 + 1800 + 1800) s
    job = services.efficiency(**WINDOW, job="4182", group="hour")
    assert [(g["key"], g["by_cause"]["busy"]) for g in job["groups"]] == [("2026-01-01T10:00Z", 1.3333),
                                                                         ("2026-01-01T11:00Z", 0.5)]


def test_skew_across_a_jobs_gpus(rows):
    jobs = {g["key"]: g for g in services.efficiency(**WINDOW, group="job")["groups"]}
    # GPU 0: (3240 + 1800) of 7200 s used; GPU 1: 1800 of 3600.
    assert jobs["4182"]["skew"] == {"job": "4182", "gpus": [{"gpu": "gpu01/gpu0", "util_mean": 70.0},
                                                            {"gpu": "gpu01/gpu1", "util_mean": 50.0}],
                                    "util_mean": 60.0, "spread": 20.0, "cv": 0.1667, "least_used": "gpu01/gpu1"}
    assert jobs["chat-7b"]["skew"]["spread"] == 0.0 and jobs["chat-7b"]["skew"]["least_used"] == ""
    assert jobs["(unallocated)"]["skew"] is None


def test_the_overview_and_the_report_read_the_summary(rows, django_assert_num_queries):
    services.refresh_summary()
    # the summary's state (3), the total, by pool, by pool and user, the pools' kinds, by hour
    with django_assert_num_queries(8):
        page = services.overview(since=H0, until=H0 + 48 * HOUR)
    assert page["total"]["gpu_hours"] == 6.1429
    assert [(p["key"], p["gpu_hours"]) for p in page["pools"]] == [("inference", 2.1429),
                                                                   ("training", 4.0)]
    assert [(u["key"], u["gpu_hours"]) for u in page["users"]] == [("(no user)", 2.0), ("alice", 3.0), ("bob", 1.1429)]
    # Who held them: the blank user's hours were nobody's (an unallocated GPU of each pool).
    assert [(h["holder"], h["key"], h["gpu_hours"]) for h in page["holders"]] == [
        ("user", "alice", 3.0), ("user", "bob", 1.1429), ("unallocated", "(unallocated)", 2.0)]
    assert [(d["key"], d["gpu_hours"]) for d in page["days"]] == [("2026-01-01", 5.1429), ("2026-01-02", 1.0)]
    assert page["accuracy"]["held_out"]["matched"] == 0.9827  # docs/benchmarks.md, held-out telemetry
    weekly = services.report(now=datetime(2026, 1, 3, 8, 30, tzinfo=UTC))
    assert (weekly["since"], weekly["until"]) == ("2025-12-27T00:00:00+00:00", "2026-01-03T00:00:00+00:00")
    assert [(j["job"], j["user"], j["idle_hours"]) for j in weekly["top_jobs"]] == [
        ("4182", "alice", 1.1667), ("chat-7b", "bob", 1.0)]


def test_the_number_of_queries_does_not_grow_with_the_rows(rows, django_assert_num_queries):
    gpu01 = Node.objects.get(name="gpu01")
    CauseHour.objects.bulk_create([CauseHour(node=gpu01, gpu=gpu, hour=H0 + hour * HOUR, job="4183", user="carol",
                                             pool="training", gpu_seconds=3600, used_seconds=3528, busy_s=3600)
                                   for gpu in range(2, 8) for hour in range(24)])
    with django_assert_num_queries(2):  # the sums per GPU, the nodes' names
        gpus = services.efficiency(since=H0, until=H0 + 24 * HOUR, group="gpu")
    assert len(gpus["groups"]) == 11
    jobs = {g["key"]: g for g in services.efficiency(since=H0, until=H0 + 24 * HOUR, group="job")["groups"]}
    assert (jobs["4183"]["gpu_hours"], jobs["4183"]["used_share"]) == (144.0, 0.98)  # 6 GPUs x 24 h


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"group": "rack"}, "group: 'rack' is not one of appliance, pool, node, gpu, job, user, hour, day"),
    ({"pool": "nosuch"}, "pool: no pool is named 'nosuch'"),
    ({"since": "yesterday"}, "since: 'yesterday' is not a time"),
    ({"until": "2026-13-01"}, "until: '2026-13-01' is not a time"),
    ({"since": H0, "until": H0}, "until: 2026-01-01T10:00:00[+]00:00 is not after since"),
    ({"since": H0, "until": H0 + timedelta(days=400)}, "since: the window .* is longer than 366 days"),
])
def test_bad_input_is_refused_naming_the_option(rows, kwargs, message):
    arguments = {"since": H0, "until": H0 + HOUR} | kwargs
    with pytest.raises(services.AnalyticsError, match=message):
        services.efficiency(**arguments)


def test_times_a_date_alone_or_without_a_zone_are_utc():
    assert services.parse_time("2026-01-05", "since") == datetime(2026, 1, 5, tzinfo=UTC)
    assert services.parse_time("2026-01-05T10:00:00Z", "since") == datetime(2026, 1, 5, 10, tzinfo=UTC)
    assert services.window(None, None, now=datetime(2026, 1, 5, 10, 20, tzinfo=UTC)) == (
        datetime(2025, 12, 29, 11, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))


def test_the_summary_follows_the_ledger(rows):
    """Rows written after a refresh (a rebuild writes new rows, even in old hours) and minutes added to the hour
    that was still filling (the ledger's cursor moved) are summed again; nothing else is."""
    from appliance.analytics.models import AttributionCursor

    services.refresh_summary()
    assert services.refresh_summary() == {"from": None, "hours": 0, "jobs": 0}
    gpu02 = Node.objects.get(name="gpu02")
    CauseHour.objects.create(node=gpu02, gpu=3, hour=H0, job="4200", user="carol", pool="inference",
                             gpu_seconds=3600, used_seconds=3600, busy_s=3600)
    assert services.refresh_summary() == {"from": "2026-01-01T10:00:00+00:00", "hours": 3, "jobs": 4}
    assert {g["key"]: g["gpu_hours"] for g in services.efficiency(**WINDOW, group="user")["groups"]}["carol"] == 1.0
    AttributionCursor.objects.create(name="rollups", attributed_until=H0 + 24 * HOUR + timedelta(minutes=30))
    services.refresh_summary()
    row = CauseHour.objects.get(hour=H0 + 24 * HOUR)
    row.gpu_seconds, row.idle_unallocated_s = 5400, 5400  # not a real hour's figure: it shows the re-sum
    row.save()
    AttributionCursor.objects.filter(name="rollups").update(attributed_until=H0 + 25 * HOUR)
    assert services.refresh_summary() == {"from": "2026-01-02T10:00:00+00:00", "hours": 1, "jobs": 0}
    days = services.efficiency(since=H0, until=H0 + 48 * HOUR, group="day")["groups"]
    assert [(d["key"], d["gpu_hours"]) for d in days] == [("2026-01-01", 6.1429), ("2026-01-02", 1.5)]
