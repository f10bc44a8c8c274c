"""Minutes that change hands in the ledger: a minute's GPU-seconds split between its holders by the seconds
each held it (GpuRollup.holders, as the collector timed them), the seconds nobody held unallocated, and the
ledger's totals still wall time x GPUs. Every expected value is worked out by hand from the rows below."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import ledger
from appliance.analytics.models import CAUSE_FIELDS, CauseHour
from appliance.inventory.models import GPU, Appliance, Node, Pool, PoolMembership
from appliance.telemetry import frames
from appliance.telemetry.models import GpuRollup

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GIB = 1024  # MiB
COLUMNS = ("gpu_seconds", "used_seconds", "busy_s", "idle_unallocated_s", "allocated_idle_s", "no_data_s")


def row(node, gpu, minute, job, util, sm, holders="", used_gib=64):
    return GpuRollup(node=node, gpu=gpu, step=60, start=T0 + minute * MINUTE, samples=60, job=job, holders=holders,
                     util=util, sm_active=sm, fb_used_mib=used_gib * GIB, fb_total_mib=80 * GIB, sm_clock_mhz=1980.0,
                     throttled_share=0.0)


@pytest.fixture
def node(db):
    appliance = Appliance.objects.create(name="demo")
    pool = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    PoolMembership.objects.create(pool=pool, node=node)
    for index in (0, 1):
        GPU.objects.create(node=node, index=index, model="H100-SXM5-80GB", memory_mib=81559)
    GPU.objects.filter(node=node).update(created=T0 - timedelta(days=1))
    GpuRollup.objects.bulk_create([
        # 10:00: job 4182 computes on both GPUs all the minute
        row(node, 0, 0, "4182", 98.0, 0.85), row(node, 1, 0, "4182", 96.0, 0.84),
        # 10:01: 4182 ends at second 35 on both GPUs. GPU 0 is nobody's for the other 25 s: its minute reads
        # 0.49 of SM activity (0.84 over 4182's 35 s) and 56% utilization (96% over them). On GPU 1 job 4190
        # starts at second 40: 4182 35 s, nobody 5 s, 4190 20 s; the minute reads 0.77 and 88%, 0.84 and 96%
        # over the 55 s held.
        row(node, 0, 1, "4182", 56.0, 0.49, holders="4182:35"),
        row(node, 1, 1, "4182", 88.0, 0.77, holders="4182:35,4190:20"),
        # 10:02: GPU 0 held by nobody and idle; GPU 1's line lost (no data)
        row(node, 0, 2, "", 0.0, 0.0, used_gib=0),
    ])
    return node


def ledger_rows() -> dict:
    return {(r.gpu, r.job): tuple(round(getattr(r, name), 3) for name in COLUMNS)
            for r in CauseHour.objects.filter(hour=T0)}


# (GPU, job): gpu_seconds, used_seconds, busy, idle-unallocated, allocated-idle, no data
EXPECTED = {
    (0, "4182"): (95.0, 92.4, 95.0, 0.0, 0.0, 0.0),    # 60 s + 35 s busy; used 60 x 0.98 + 35 x 0.96
    (0, ""): (85.0, 0.0, 0.0, 85.0, 0.0, 0.0),         # 25 s nobody held at 10:01, the minute at 10:02
    (1, "4182"): (95.0, 91.2, 95.0, 0.0, 0.0, 0.0),    # 60 s + 35 s; used 60 x 0.96 + 35 x 0.96
    (1, "4190"): (20.0, 19.2, 20.0, 0.0, 0.0, 0.0),    # 20 s at 96%
    (1, ""): (65.0, 0.0, 0.0, 5.0, 0.0, 60.0),         # 5 s nobody held, the lost minute no data
}


def test_a_job_ending_at_second_35_has_35_seconds_and_nobody_the_other_25(node):
    ledger.run_incremental(until=T0 + 3 * MINUTE)
    found = ledger_rows()
    assert found[(0, "4182")] == EXPECTED[(0, "4182")]
    assert found[(0, "")] == EXPECTED[(0, "")]


def test_a_minute_with_two_jobs_gives_each_its_seconds_and_the_gap_to_nobody(node):
    ledger.run_incremental(until=T0 + 3 * MINUTE)
    found = ledger_rows()
    assert {key: found[key] for key in found if key[0] == 1} == {key: value for key, value in EXPECTED.items()
                                                                   if key[0] == 1}


def test_the_ledger_adds_up_to_wall_time_times_gpus_each_second_in_one_cause(node):
    result = ledger.run_incremental(until=T0 + 3 * MINUTE)
    assert result["seconds"] == 3 * 60 * 2  # 3 minutes x 2 GPUs
    assert ledger_rows() == EXPECTED
    assert sum(row[0] for row in ledger_rows().values()) == 360.0
    for figures in CauseHour.objects.values():
        assert sum(figures[column] for column in CAUSE_FIELDS.values()) == pytest.approx(figures["gpu_seconds"])


def test_frames_and_fleet_frames_give_the_ledger_the_rows_give(node):
    assert frames.build([T0, T0 + MINUTE, T0 + 2 * MINUTE]) == 3
    ledger.run_incremental(until=T0 + 3 * MINUTE)
    assert ledger_rows() == EXPECTED
    CauseHour.objects.all().delete()
    assert frames.build_fleet([T0, T0 + MINUTE, T0 + 2 * MINUTE]) == 3
    ledger.rebuild(since=T0, until=T0 + 3 * MINUTE)
    assert ledger_rows() == EXPECTED


def test_a_row_without_holders_is_its_jobs_whole_minute(node):
    GpuRollup.objects.filter(holders="4182:35").update(holders="")
    ledger.run_incremental(until=T0 + 3 * MINUTE)
    found = ledger_rows()
    # GPU 0 at 10:01 is 4182's whole minute again, judged on the minute's figures (used 60 x 0.56)
    assert found[(0, "4182")][:2] == (120.0, 92.4)
    assert found[(0, "")] == (60.0, 0.0, 0.0, 60.0, 0.0, 0.0)


def test_the_rules_split_a_minute_as_the_ledger_does_label_for_label(node):
    from appliance.analytics import attribution, vector

    window = ledger.attribute_window(T0, T0 + 3 * MINUTE)
    gpu = window["gpu"]
    got = {(int(g), int(t), str(gpu["jobs"][code])): (float(seconds), vector.labels([rule])[0])
           for g, t, code, seconds, rule in zip(gpu["gpu"], gpu["t"], gpu["job_code"], gpu["seconds"], gpu["rule"],
                                                strict=True)}
    attributed, _ = attribution.from_database(T0, T0 + 3 * MINUTE)
    want = {(a.record["gpu"], int(a.record["start"].timestamp()), a.record["job"]): (a.record["seconds"], a.label)
            for a in attributed}
    assert got == want
    t1 = int((T0 + MINUTE).timestamp())
    assert {key[2]: value for key, value in want.items() if key[:2] == (1, t1)} == {
        "4182": (35.0, "busy"), "": (5.0, "idle-unallocated"), "4190": (20.0, "busy")}
    # the reference's part of job 4182 on GPU 0 at 10:01 is judged on its own 35 s: 0.84 of SM activity
    part = next(a for a in attributed if (a.record["gpu"], a.record["job"]) == (0, "4182")
                and a.record["start"] == T0 + MINUTE)
    assert part.record["sm_active"] == pytest.approx(0.84) and part.record["util"] == pytest.approx(96.0)


def test_a_jobs_verdicts_include_the_minutes_it_held_a_part_of(node):
    verdicts = ledger.job_verdicts("4190", T0, T0 + 3 * MINUTE)
    assert [(v["gpu"], v["start"], v["label"]) for v in verdicts] == [(1, (T0 + MINUTE).isoformat(), "busy")]
    assert len(ledger.job_verdicts("4182", T0, T0 + 3 * MINUTE)) == 4  # 10:00 and 10:01 on both GPUs


def test_a_mig_slice_that_changed_hands_splits_its_share_of_the_gpu(node):
    other = Node.objects.create(appliance=node.appliance, name="gpu02", role=Node.Role.GPU,
                                management_address="10.0.0.12")
    # a 1g.10gb slice (1 of 7 compute slices) serving "embed" for the first 30 s of 10:00, idle after
    GpuRollup.objects.create(node=other, gpu=2, instance=1, profile="1g.10gb", step=60, start=T0, samples=60,
                             job="embed", holders="embed:30", util=25.0, sm_active=0.25, fb_used_mib=4 * GIB,
                             fb_total_mib=10 * GIB, sm_clock_mhz=1980.0, throttled_share=0.0)
    ledger.run_incremental(until=T0 + MINUTE)
    found = {r.job: (round(r.gpu_seconds, 3), round(r.busy_s, 3), round(r.idle_unallocated_s, 3))
             for r in CauseHour.objects.filter(node=other)}
    # 30 s x 1/7 each: embed busy at 0.5 of SM activity over its 30 s, the rest nobody's
    assert found == {"embed": (4.286, 4.286, 0.0), "": (4.286, 0.0, 4.286)}
