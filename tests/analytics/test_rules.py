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


def checked_by(rule_name, context):
    """What one rule found, held or not (the evidence of a verdict is its deciding rule's only)."""
    rule = next(r for r in rules.RULES if r.name == rule_name)
    return rule.test(context, rule.thresholds)[1]


def test_a_busy_gpu_is_busy_and_says_no_rule_held():
    result = verdict(gpu())
    assert (result.label, result.rule) == ("busy", "computes")
    assert check(result, "sm_active").note == "no bottleneck rule held"


@pytest.mark.parametrize(("job", "util", "sm", "label"), [
    ("", 4.9, 0.01, "idle-unallocated"), ("", 0.0, 0.0, "idle-unallocated"),
    ("", 8.0, 0.01, "idle-unallocated"),  # allocated-idle needs a holder (a minute a job left)
    ("", 60.0, 0.149, "idle-unallocated"), ("", 60.0, 0.15, "busy"),  # computes: its job map was not seen
    ("4182", 0.0, 0.01, "allocated-idle")])
def test_a_gpu_nobody_holds_is_idle_unallocated_unless_it_computes(job, util, sm, label):
    result = verdict(gpu(job=job, util=util, sm_active=sm, fb_used_mib=0.0))
    assert result.label == label


def test_a_gpu_nobody_holds_without_profiling_fields_is_judged_on_utilization():
    assert verdict(gpu(job="", util=19.9, sm_active=None, fb_used_mib=0.0)).label == "idle-unallocated"
    assert verdict(gpu(job="", util=20.0, sm_active=None, fb_used_mib=0.0)).label == "busy"
    assert verdict(gpu(job="", util=None, sm_active=None)).label == "idle-unallocated"


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
    (40.0, 0.049, 70000.0, "memory-only"),  # a resident kernel that does nothing: SM activity decides
    (9.9, 0.05, 70000.0, "allocated-idle"),  # not near zero: a service between requests (held, little use)
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


def test_a_mount_without_a_measured_rate_is_compared_with_no_other_figure_and_says_so():
    # an NFS mount read at its own limit (~7 GB/s) is not judged against a Lustre figure, nor any other
    nfs = node(7e9, mounts={"/mnt/nfs": {"fstype": "nfs", "read_bps": 7e9, "write_bps": 0.0}})
    result = verdict(gpu(util=25.0, sm_active=0.15), nfs, storage={})
    assert result.label == "busy"
    share = next(c for c in checked_by("waits-on-input", Context(gpu=gpu(util=25.0, sm_active=0.15), node=nfs))
                 if c.metric == "read_share /mnt/nfs")
    assert (share.value, share.held, share.note) == (None, False, "7000000000.0 B/s, no measured rate")
    # judged on iowait (the job's reads stall its loaders) alone
    waiting = verdict(gpu(util=25.0, sm_active=0.15), nfs | {"cpu_iowait": 0.25}, storage={})
    assert waiting.label == "input-bound" and check(waiting, "cpu_iowait").held
    assert verdict(gpu(util=25.0, sm_active=0.15), node(20e9, mounts={}), storage={}).label == "busy"
    [total] = [c for c in checked_by("waits-on-input", Context(gpu=gpu(util=25.0, sm_active=0.15),
                                                               node=node(20e9, mounts={})))
               if c.metric == "read_share"]
    assert total.note == "20000000000.0 B/s, no per-mount figures, no measured rate"


CEILING = {"/mnt/nfs": Reference(7e9, "ceiling learned from this mount's own reads", learned=True)}


@pytest.mark.parametrize(("read", "iowait", "label"), [
    (5.6e9, 0.1, "input-bound"),  # 0.8 of its own ceiling, its loaders blocked a tenth of the time
    (5.59e9, 0.1, "busy"),  # under the share
    (5.6e9, 0.09, "busy"),  # at its ceiling with nobody waiting for it: a mount read as usual
    (1e9, 0.19, "busy"),
])
def test_a_mount_without_a_measured_rate_is_compared_with_its_own_ceiling_when_its_loaders_block(read, iowait, label):
    nfs = node(read, cpu_iowait=iowait, mounts={"/mnt/nfs": {"fstype": "nfs", "read_bps": read, "write_bps": 0.0}})
    result = verdict(gpu(util=40.0, sm_active=0.2), nfs, storage=CEILING)
    assert result.label == label
    share = next(c for c in checked_by("waits-on-input", Context(gpu=gpu(util=40.0, sm_active=0.2), node=nfs,
                                                                 storage=CEILING))
                 if c.metric == "read_share /mnt/nfs")
    assert share.held == (label == "input-bound")
    if read == 5.6e9 and iowait == 0.1:
        assert (share.value, share.threshold) == (0.8, 0.8)
        assert share.note == ("5600000000.0 B/s of 7e+09 B/s (ceiling learned from this mount's own reads); "
                              "no measured rate: a ceiling counts with cpu_iowait >= 0.1, it was 0.1")


@pytest.mark.parametrize(("iowait", "cpu", "label"), [(0.2, 0.2, "input-bound"), (0.19, 0.2, "busy"),
                                                      (0.01, 0.9, "input-bound"), (0.01, 0.89, "busy")])
def test_input_bound_by_iowait_or_data_loaders_saturating_the_cpus(iowait, cpu, label):
    assert verdict(gpu(util=25.0, sm_active=0.15), node(cpu_iowait=iowait, cpu_busy=cpu)).label == label


@pytest.mark.parametrize(("util", "sm", "label"), [(74.9, 0.49, "input-bound"), (97.0, 0.49, "input-bound"),
                                                   (74.9, 0.5, "busy"), (74.9, None, "input-bound"),
                                                   (75.0, None, "busy")])
def test_input_bound_needs_a_stalled_gpu_by_sm_activity_where_it_is_measured(util, sm, label):
    result = verdict(gpu(util=util, sm_active=sm), node(2.0e9))
    assert result.label == label
    if label == "input-bound":
        stalled = result.evidence[0]
        assert stalled.metric == ("sm_active" if sm is not None else "util")
        assert stalled.note == ("profiling field" if sm is not None
                                else "utilization: the GPU reports no profiling fields")


def peers(*sm_values):
    return [gpu(gpu=i + 1, sm_active=value, util=value * 100) for i, value in enumerate(sm_values)]


@pytest.mark.parametrize(("sm", "label"), [(0.345, "straggler"), (0.344, "communication-bound"),
                                           (0.97, "straggler")])
def test_a_straggler_is_busier_than_its_peers_median(sm, label):
    # peers' median 0.3: 1.15 times is 0.345 (peers waiting on the fabric: below it, it waits too)
    result = verdict(gpu(sm_active=sm, util=100.0), node(ib_tx_bps=380e9), peers=peers(0.3, 0.3, 0.28, 0.3))
    assert result.label == label


def test_a_mild_straggler_holds_back_its_job_and_its_peers_wait_for_it():
    # one GPU of eight at 1.25 times its peers' SM activity, the others waiting in collectives
    ranks = [0.56, 0.57, 0.55, 0.56, 0.58, 0.56, 0.57]
    result = verdict(gpu(sm_active=0.7, util=99.0), peers=peers(*ranks))
    assert result.label == "straggler"
    ratio = check(result, "sm_active / peers' median")
    assert (ratio.value, ratio.threshold, ratio.note) == (1.25, 1.15, "peers' median 0.560")
    waiting = verdict(gpu(sm_active=0.56, util=97.0), peers=peers(0.7, *ranks[1:]))
    assert waiting.label == "communication-bound"
    behind = waiting.evidence[0]
    assert (behind.metric, behind.value, behind.threshold, behind.note) == (
        "sm_active / busiest peer's", 0.8, 0.87, "busiest peer 0.700, the job's straggler")


def test_a_straggler_stands_out_from_the_next_busiest_rank():
    # ranks spread evenly (each drawn apart): the busiest is not 10% above the next
    spread = [0.30, 0.32, 0.34, 0.36, 0.38, 0.40, 0.41]
    assert verdict(gpu(sm_active=0.42, util=70.0), peers=peers(*spread)).label == "busy"
    assert verdict(gpu(sm_active=0.30, util=60.0), peers=peers(*spread[1:], 0.42)).label == "busy"
    assert verdict(gpu(sm_active=0.9), peers=peers(0.61, 0.6, 0.62)).label == "straggler"
    assert verdict(gpu(sm_active=0.9)).label == "busy"  # no peers: nobody waits for it


def test_an_inference_services_replicas_are_not_each_others_peers():
    replicas = peers(0.3, 0.32, 0.31)
    hot = gpu(job="chat", sm_active=0.6, util=80.0)
    assert verdict(hot, peers=replicas).label == "straggler"  # were they a collective
    served = classify(Context(gpu=hot, node=node(), peers=replicas, storage=SMOKE, collective=False))
    assert served.label == "busy"
    peers_seen = checked_by("holds-back-its-job", Context(gpu=hot, peers=replicas, collective=False))[0]
    assert (peers_seen.metric, peers_seen.value, peers_seen.held) == ("peers", 0.0, False)


@pytest.mark.parametrize(("sm", "label"), [(0.36, "communication-bound"), (0.37, "busy")])
def test_a_gpu_waiting_for_a_far_busier_peer_is_communication_bound(sm, label):
    # two GPUs far busier (both throttled, say): neither stands out, both are waited for
    result = verdict(gpu(sm_active=sm, util=65.0), peers=peers(0.6, 0.6, 0.35))
    assert result.label == label


@pytest.mark.parametrize(("util", "sm", "label"), [(95.0, 0.3, "communication-bound"), (98.0, 0.49, "communication-bound"),
                                                   (95.0, 0.5, "busy"), (74.0, None, "communication-bound"),
                                                   (95.0, None, "busy")])
def test_a_gpu_waiting_on_nccl_is_communication_bound_whatever_its_utilization(util, sm, label):
    # NCCL's kernels stay resident while they wait: utilization 70-98%, SM activity 0.2-0.4
    result = verdict(gpu(sm_active=sm, util=util), node(ib_tx_bps=360e9))
    assert result.label == label


def test_communication_bound_by_the_fabric_near_its_line_rate():
    waiting = gpu(sm_active=0.3, util=65.0)
    assert verdict(waiting, node(ib_tx_bps=320e9)).label == "communication-bound"
    assert verdict(waiting, node(ib_tx_bps=319e9)).label == "busy"
    result = verdict(gpu(sm_active=0.3, util=65.0, nvlink_bps=720e9))  # 80% of NVLink 4's 900 GB/s
    assert result.label == "communication-bound"
    assert check(result, "nvlink_line_share").value == 0.8
    assert verdict(gpu(sm_active=0.3, util=65.0, nvlink_bps=719e9)).label == "busy"


@pytest.mark.parametrize(("util", "sm", "label"), [(19.9, 0.149, "allocated-idle"), (60.0, 0.149, "allocated-idle"),
                                                   (19.9, 0.15, "busy"), (19.9, None, "allocated-idle"),
                                                   (20.0, None, "busy")])
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
        for node_record, peer_set in ((node(), peers(0.3, 0.32)), (node(2.0e9), peers(0.3, 0.32)),
                                      (node(), peers(0.88, 0.9))):
            result = verdict(record, node_record, peers=peer_set)
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
    assert described[5]["thresholds"] == {"peers": 1, "activity": 0.3, "ratio_to_peers": 1.15, "ratio_to_next": 1.1}


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
