"""Each attribution rule on hand-written records, just each side of its threshold; one cause per bucket,
and the evidence a user reads to see why."""

import pytest

from appliance.analytics import attribution, rules
from appliance.analytics.rules import Context, Reference, classify

SMOKE = {"/mnt/scratch": Reference(2.1e9, "storage smoke test of this node: 2100 MB/s")}


def gpu(**fields) -> dict:
    """A GPU computing flat out for job 4182 (what the rules leave as busy)."""
    return {"node": "gpu01", "gpu": 0, "instance": -1, "step": 60, "start": 0, "job": "4182", "util": 98.0,
            "sm_active": 0.85, "fb_used_mib": 70000.0, "fb_total_mib": 81559.0, "sm_clock_mhz": 1980.0,
            "throttle_reasons": 0, "throttled_share": 0.0, "nvlink_bps": 100e9} | fields


def node(read_bps: float = 0.3e9, **fields) -> dict:
    return {"node": "gpu01", "step": 60, "start": 0, "fs_read_bps": read_bps, "cpu_iowait": 0.01, "cpu_busy": 0.2,
            "ib_tx_bps": 0.0, "ib_rx_bps": read_bps, "ib_line_bps": 400e9, "ib_xmit_wait": 0.0,
            "mounts": {"/mnt/scratch": {"fstype": "lustre", "read_bps": read_bps, "write_bps": 0.0}}} | fields


def verdict(record, node_record=None, peers=(), storage=SMOKE):
    return classify(Context(gpu=record, node=node_record or node(), peers=list(peers), storage=storage))


def check(result, metric):
    return next(c for c in result.evidence if c.metric == metric)


def test_a_busy_gpu_is_busy_and_says_no_rule_held():
    result = verdict(gpu())
    assert (result.label, result.rule) == ("busy", "computes")
    assert check(result, "sm_active").note == "no bottleneck rule held"


@pytest.mark.parametrize(("job", "util", "label"), [("", 4.9, "idle-unallocated"), ("", 0.0, "idle-unallocated"),
                                                    ("", 5.0, "allocated-idle"), ("4182", 0.0, "allocated-idle")])
def test_a_gpu_nobody_holds_is_idle_unallocated_unless_it_computes(job, util, label):
    result = verdict(gpu(job=job, util=util, sm_active=0.01, fb_used_mib=0.0))
    assert result.label == label


@pytest.mark.parametrize(("clock", "share", "label"), [(1683.0, 0.5, "throttled"), (1684.0, 0.5, "busy"),
                                                       (1683.0, 0.49, "busy"), (1200.0, 1.0, "throttled")])
def test_a_gpu_is_throttled_when_its_clock_is_cut_by_a_slowdown_most_of_the_bucket(clock, share, label):
    result = verdict(gpu(sm_clock_mhz=clock, throttled_share=share, throttle_reasons=0x20 | 0x40))
    assert result.label == label
    if label == "throttled":
        assert check(result, "throttle_reasons").value == "sw_thermal,hw_thermal"
        assert check(result, "sm_clock_ratio").threshold == 0.85
        assert "of 1980 MHz (nominal boost clock of the GPU)" in check(result, "sm_clock_ratio").note


def test_a_gpu_at_its_power_cap_with_its_full_clock_is_busy_not_throttled():
    assert verdict(gpu(throttle_reasons=0x4, throttled_share=1.0, sm_clock_mhz=1980.0)).label == "busy"
    assert verdict(gpu(throttle_reasons=0x1, throttled_share=1.0, sm_clock_mhz=345.0)).label == "busy"


@pytest.mark.parametrize(("util", "sm", "used", "label"), [
    (9.9, 0.049, 20390.0, "memory-only"),     # 25.0% of 81559 MiB
    (9.9, 0.049, 20380.0, "allocated-idle"),  # 24.99%
    (10.0, 0.049, 70000.0, "allocated-idle"),  # not near zero: a service between requests (held, little use)
    (9.9, 0.05, 70000.0, "allocated-idle"),
    (2.0, 0.01, 6000.0, "allocated-idle"),
])
def test_memory_held_with_no_compute_is_memory_only_and_little_memory_is_allocated_idle(util, sm, used, label):
    assert verdict(gpu(util=util, sm_active=sm, fb_used_mib=used)).label == label


def test_memory_only_says_how_much_memory_it_holds():
    result = verdict(gpu(util=3.0, sm_active=0.02, fb_used_mib=72000.0))
    assert result.rule == "memory-held-no-compute"
    share = check(result, "memory_share")
    assert (share.value, share.op, share.threshold, share.held) == (0.882797, ">=", 0.25, True)
    assert share.note == "72000.0 of 81559.0 MiB"


@pytest.mark.parametrize(("read", "label"), [(1.68e9, "input-bound"), (1.67e9, "busy")])
def test_input_bound_compares_reads_with_the_node_smoke_test(read, label):
    stalled = gpu(util=25.0, sm_active=0.15)
    result = verdict(stalled, node(read))
    assert result.label == label
    share = check(result, "read_share /mnt/scratch") if label == "input-bound" else None
    if share:
        assert (share.value, share.threshold, share.held) == (0.8, 0.8, True)
        assert share.note == "1680000000.0 B/s of 2.1e+09 B/s (storage smoke test of this node: 2100 MB/s)"


def test_input_bound_without_a_smoke_test_uses_the_nominal_figure_and_says_so():
    result = verdict(gpu(util=25.0, sm_active=0.15), node(20e9), storage={})
    assert result.label == "input-bound"
    assert check(result, "read_share /mnt/scratch").note.endswith("(nominal storage benchmark of the platform)")
    assert verdict(gpu(util=25.0, sm_active=0.15), node(2e9), storage={}).label == "busy"


@pytest.mark.parametrize(("iowait", "cpu", "label"), [(0.2, 0.2, "input-bound"), (0.19, 0.2, "busy"),
                                                      (0.01, 0.9, "input-bound"), (0.01, 0.89, "busy")])
def test_input_bound_by_iowait_or_data_loaders_saturating_the_cpus(iowait, cpu, label):
    assert verdict(gpu(util=25.0, sm_active=0.15), node(cpu_iowait=iowait, cpu_busy=cpu)).label == label


@pytest.mark.parametrize(("util", "sm", "label"), [(74.9, 0.49, "input-bound"), (75.0, 0.49, "busy"),
                                                   (74.9, 0.5, "busy")])
def test_input_bound_needs_a_stalled_gpu(util, sm, label):
    assert verdict(gpu(util=util, sm_active=sm), node(2.0e9)).label == label


def peers(*sm_values):
    return [gpu(gpu=i + 1, sm_active=value, util=value * 100) for i, value in enumerate(sm_values)]


@pytest.mark.parametrize(("sm", "label"), [(0.6, "straggler"), (0.59, "busy"), (0.97, "straggler")])
def test_a_straggler_is_far_busier_than_its_peers_median(sm, label):
    result = verdict(gpu(sm_active=sm, util=100.0), peers=peers(0.3, 0.3, 0.28, 0.32))
    assert result.label == label


def test_a_straggler_needs_its_peers_median_far_below():
    assert verdict(gpu(sm_active=0.9), peers=peers(0.61, 0.6, 0.62)).label == "busy"  # ratio 1.475
    result = verdict(gpu(sm_active=0.9), peers=peers(0.6, 0.6, 0.62))  # ratio 1.5
    assert result.label == "straggler"
    ratio = check(result, "sm_active / peers' median")
    assert (ratio.value, ratio.threshold, ratio.note) == (1.5, 1.5, "peers' median 0.600")
    assert verdict(gpu(sm_active=0.9)).label == "busy"  # no peers: nobody waits for it


@pytest.mark.parametrize(("sm", "label"), [(0.36, "communication-bound"), (0.37, "busy")])
def test_a_gpu_waiting_for_a_far_busier_peer_is_communication_bound(sm, label):
    result = verdict(gpu(sm_active=sm, util=65.0), peers=peers(0.6, 0.35))
    assert result.label == label


def test_communication_bound_by_the_fabric_near_its_line_rate():
    waiting = gpu(sm_active=0.3, util=65.0)
    assert verdict(waiting, node(ib_tx_bps=320e9)).label == "communication-bound"
    assert verdict(waiting, node(ib_tx_bps=319e9)).label == "busy"
    result = verdict(gpu(sm_active=0.3, util=65.0, nvlink_bps=720e9))  # 80% of NVLink 4's 900 GB/s
    assert result.label == "communication-bound"
    assert check(result, "nvlink_line_share").value == 0.8
    assert verdict(gpu(sm_active=0.3, util=65.0, nvlink_bps=719e9)).label == "busy"


@pytest.mark.parametrize(("util", "sm", "label"), [(19.9, 0.149, "allocated-idle"), (20.0, 0.149, "busy"),
                                                   (19.9, 0.15, "busy")])
def test_a_held_gpu_used_a_little_is_allocated_idle(util, sm, label):
    result = verdict(gpu(util=util, sm_active=sm, fb_used_mib=42000.0))
    assert result.label == label


def test_without_profiling_metrics_utilization_stands_for_sm_activity():
    result = verdict(gpu(util=3.0, sm_active=None, fb_used_mib=72000.0))
    assert result.label == "memory-only" and check(result, "util").value == 3.0


def test_every_bucket_gets_exactly_one_known_cause_with_evidence():
    grid = [gpu(job=job, util=util, sm_active=sm, fb_used_mib=used, sm_clock_mhz=clock, throttled_share=share,
                throttle_reasons=0x40 if share else 0)
            for job in ("", "4182") for util in (0.0, 15.0, 40.0, 99.0) for sm in (0.0, 0.1, 0.45, 0.9)
            for used in (0.0, 60000.0) for clock, share in ((1980.0, 0.0), (1200.0, 1.0))]
    seen = set()
    for record in grid:
        for node_record in (node(), node(2.0e9)):
            result = verdict(record, node_record, peers=peers(0.3, 0.9))
            assert result.label in rules.LABELS
            assert result.evidence and all(c.metric and c.op for c in result.evidence)
            seen.add(result.label)
    assert seen == set(rules.LABELS)


def test_the_rules_are_documented_with_their_thresholds():
    described = rules.describe()
    assert [rule["label"] for rule in described] == [
        "idle-unallocated", "throttled", "memory-only", "allocated-idle", "input-bound", "straggler",
        "communication-bound", "allocated-idle", "busy"]
    assert all(rule["doc"] for rule in described)
    assert described[1]["thresholds"] == {"throttled_share": 0.5, "clock_ratio": 0.85}
    assert described[4]["thresholds"]["read_share"] == 0.8


def test_attribute_finds_each_gpu_its_job_peers_in_the_same_bucket_on_any_node():
    waiting = [gpu(node="gpu01", gpu=i, sm_active=0.35, util=60.0) for i in range(3)]
    slow = gpu(node="gpu02", gpu=0, sm_active=0.97, util=100.0)
    other_bucket = gpu(node="gpu02", gpu=1, start=60, sm_active=0.97, util=100.0)
    other_job = gpu(node="gpu03", gpu=0, job="4183", sm_active=0.35, util=60.0)
    result = attribution.attribute(waiting + [slow, other_bucket, other_job])
    assert [a.label for a in result] == ["communication-bound"] * 3 + ["straggler", "busy", "busy"]


def test_node_references_come_from_the_smoke_test_facts_and_the_platform():
    refs = attribution.node_references(
        {"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100, "write_mbps": 1800},
                                 {"mount_point": "/mnt/bad", "read_mbps": "fast"}]}},
        {"gpu": {"nvlink": {"bandwidth_gbs": 900}}})
    assert refs.storage == {"/mnt/scratch": Reference(2.1e9, "storage smoke test of this node: 2100 MB/s")}
    assert refs.nvlink_line == Reference(900e9, "NVLink bandwidth of the platform: 900 GB/s")
    assert attribution.node_references({}, {}).storage == {}
