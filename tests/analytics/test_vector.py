"""The rules over columns (vector.py) give rules.classify's label for every record: on the benchmark's
records of the workload model (in-sample and held-out, aligned and blended across two intervals), on
hand-written edge cases (missing fields, MIG rows, peers read only as context) and on random records
that mix missing and boundary values."""

import importlib.util
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from appliance.analytics import attribution, rules, vector
from appliance.simulation.workload import Model

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_attribution.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_attribution_module", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def both(gpu_records, node_records=(), references=None, context_records=()):
    want = [a.label for a in attribution.attribute(gpu_records, node_records, references, context_records)]
    return want, vector.attribute_labels(gpu_records, node_records, references, context_records)


def minute(bench, model, interval, late=0.0):
    gpus, nodes = [], []
    for node in model.nodes:
        g, n, _ = bench.records(model, node, interval)
        if late:
            g2, n2, _ = bench.records(model, node, interval + 1)
            g, n = [bench.blend(a, b, late) for a, b in zip(g, g2, strict=True)], bench.blend(n, n2, late)
        gpus += g
        nodes.append(n)
    return gpus, nodes


def test_the_same_labels_on_the_benchmarks_records(bench):
    models = [(Model("demo", 1, bench.DEMO_NODES, "/mnt/lustre", "/mnt/nfs"), 41)]
    models += [(model, 157) for model, _ in bench.held_out(1)]
    seen: Counter = Counter()
    checked = 0
    for model, stride in models:
        refs = bench.references(model.nodes, model.training_mount)
        for interval in range(5, 1440, stride):
            for late in (0.0, 0.4) if interval % 2 else (0.0,):
                gpus, nodes = minute(bench, model, interval, late)
                want, got = both(gpus, nodes, refs)
                assert got == want, (model.profile, model.seed, interval, late)
                seen.update(want)
                checked += len(want)
    assert checked > 5000
    assert set(seen) == set(rules.LABELS), seen  # every cause was among the records compared


def gpu(**fields):
    record = {"node": "gpu01", "gpu": 0, "instance": -1, "step": 60, "start": 0, "job": "7", "util": 95.0,
              "sm_active": 0.9, "fb_used_mib": 40000.0, "fb_total_mib": 81559.0, "sm_clock_mhz": 1980.0,
              "throttle_reasons": 0, "throttled_share": 0.0, "nvlink_bps": 1e9}
    return record | fields


# gpu02's /x has no measured rate, only the ceiling learned from its own reads
REFERENCES = {"gpu02": attribution.NodeReferences(storage={"/x": rules.Reference(7e9, "learned", learned=True)})}
NODE = {"node": "gpu01", "step": 60, "start": 0, "cpu_busy": 0.2, "cpu_iowait": 0.01, "ib_tx_bps": 1e9,
        "ib_rx_bps": 1e9, "ib_line_bps": 4e11, "fs_read_bps": 1e9, "mounts": {}}


@pytest.mark.parametrize(("records", "node", "label"), [
    ([gpu(job="", util=None, sm_active=None)], None, "idle-unallocated"),  # nothing measured, nobody holds it
    ([gpu(job="", util=30.0)], None, "busy"),  # computes without a holder seen
    ([gpu(util=None, sm_active=None, fb_total_mib=None)], None, "busy"),  # held, nothing measured
    ([gpu(util=3.0, sm_active=None, fb_used_mib=70000.0)], None, "memory-only"),  # util's activity
    ([gpu(util=3.0, sm_active=0.01, fb_total_mib=0.0)], None, "allocated-idle"),  # total 0: no share
    ([gpu(util=50.0, sm_active=0.3)], NODE | {"fs_read_bps": 20e9}, "busy"),  # no mounts: no measured rate
    ([gpu(util=50.0, sm_active=0.3)], NODE | {"mounts": {"/x": {"read_bps": 18e9}}}, "busy"),  # nor here
    ([gpu(util=50.0, sm_active=0.3)], NODE | {"mounts": {"/x": {"read_bps": 18e9}}, "cpu_iowait": 0.2},
     "input-bound"),  # judged on iowait
    ([gpu(node="gpu02", util=50.0, sm_active=0.3)],
     NODE | {"node": "gpu02", "mounts": {"/x": {"read_bps": 5.6e9}}, "cpu_iowait": 0.1},
     "input-bound"),  # at its learned ceiling (REFERENCES) with its loaders blocked
    ([gpu(node="gpu02", util=50.0, sm_active=0.3)],
     NODE | {"node": "gpu02", "mounts": {"/x": {"read_bps": 5.6e9}}, "cpu_iowait": 0.09}, "busy"),
    ([gpu(node="gpu02", util=50.0, sm_active=0.3)],
     NODE | {"node": "gpu02", "mounts": {"/x": {"read_bps": 5.59e9}}, "cpu_iowait": 0.19}, "busy"),
    ([gpu(util=97.0, sm_active=0.3)], NODE | {"ib_tx_bps": 3.4e11}, "communication-bound"),  # NCCL's resident kernels
    ([gpu(gpu=0, sm_active=0.7), *(gpu(gpu=i, sm_active=0.56) for i in range(1, 8))], None, "straggler"),  # mild
    ([gpu(gpu=1, sm_active=0.56), gpu(gpu=0, sm_active=0.7), *(gpu(gpu=i, sm_active=0.56) for i in range(2, 8))],
     None, "communication-bound"),  # waits for the mild straggler
    ([gpu(gpu=0, sm_active=0.42), *(gpu(gpu=i, sm_active=0.3 + 0.02 * i) for i in range(1, 8))], None,
     "busy"),  # ranks that spread: nobody stands out
    ([gpu(util=50.0, sm_active=0.3)], NODE | {"mounts": {"/x": {"read_bps": None}}, "fs_read_bps": 20e9,
                                               "ib_tx_bps": 3.3e11},
     "communication-bound"),  # per-mount figures missing (the total is not read then); the fabric's line decides
    ([gpu(throttle_reasons=0x40, throttled_share=1.0, sm_clock_mhz=1500.0)], None, "throttled"),
    ([gpu(throttle_reasons=0x40, throttled_share=1.0, sm_clock_mhz=None)], None, "busy"),  # clock unknown
    ([gpu(gpu=0, sm_active=0.9), gpu(gpu=1, sm_active=0.3, util=50.0), gpu(gpu=2, sm_active=0.3, util=50.0)], None,
     "straggler"),
    ([gpu(instance=1, profile="1g.10gb", util=4.0, sm_active=0.02, fb_used_mib=9000.0, fb_total_mib=9728.0)], None,
     "memory-only"),  # a MIG instance is judged on its own memory
])
def test_hand_written_cases(records, node, label):
    want, got = both(records, [node] if node else [], REFERENCES)
    assert want[0] == label
    assert got == want


def test_an_inference_pools_replicas_are_not_peers():
    replicas = [gpu(job="chat", gpu=0, sm_active=0.6), gpu(job="chat", gpu=1, sm_active=0.3, util=50.0),
                gpu(job="chat", gpu=2, sm_active=0.3, util=50.0)]
    assert both(replicas) == (["straggler", "communication-bound", "communication-bound"],) * 2
    served = {"gpu01": attribution.NodeReferences(collective=False)}
    assert both(replicas, (), served) == (["busy", "busy", "busy"],) * 2


def test_peers_read_only_as_context_and_peers_in_the_other_metric():
    judged = [gpu(gpu=0, util=95.0, sm_active=None), gpu(gpu=1, util=40.0, sm_active=0.2)]
    context = [gpu(node="gpu02", gpu=0, util=20.0, sm_active=None), gpu(node="gpu02", gpu=1, util=None)]
    want, got = both(judged, (), None, context)
    assert want == ["straggler", "communication-bound"] and got == want


def test_random_records_with_missing_and_boundary_values():
    rng = random.Random(13)

    def pick(*values):
        return rng.choice(values)

    for trial in range(40):
        gpus, nodes = [], []
        for node in range(3):
            for index in range(rng.randint(1, 5)):
                gpus.append({"node": f"n{node}", "gpu": index, "instance": pick(-1, -1, 1), "profile": "2g.20gb",
                             "step": 60, "start": pick(0, 60), "job": pick("", "a", "b", None),
                             "util": pick(None, 0.0, 4.9, 5.0, 9.99, 10.0, 19.9, 20.0, 50.0, 74.9, 75.0, 100.0),
                             "sm_active": pick(None, 0.0, 0.04, 0.05, 0.14, 0.15, 0.3, 0.345, 0.49, 0.5, 0.56, 0.6,
                                               0.616, 0.7, 0.9),
                             "fb_used_mib": pick(None, 0.0, 20000.0, 20390.0, 80000.0),
                             "fb_total_mib": pick(None, 0.0, 81559.0), "sm_clock_mhz": pick(None, 1683.0, 1684.0, 1980.0),
                             "throttle_reasons": pick(None, 0, 0x1, 0x4, 0x40), "throttled_share": pick(None, 0.49, 0.5, 1.0),
                             "nvlink_bps": pick(None, 0.0, 7.2e11, 8e11)})
            for start in (0, 60):
                if rng.random() < 0.8:
                    nodes.append({"node": f"n{node}", "step": 60, "start": start,
                                  "cpu_busy": pick(None, 0.5, 0.9), "cpu_iowait": pick(None, 0.09, 0.1, 0.2),
                                  "ib_tx_bps": pick(None, 0.0, 3.2e11), "ib_rx_bps": pick(None, 1e9, 3.3e11),
                                  "ib_line_bps": pick(None, 0.0, 4e11), "fs_read_bps": pick(None, 1e9, 17.12e9),
                                  "mounts": pick({}, None, {"/m": {"read_bps": pick(None, 1e9, 1.68e9)}})})
        references = {"n0": attribution.NodeReferences(storage={"/m": rules.Reference(2.1e9, "ceiling", learned=True)}),
                      "n1": attribution.NodeReferences(storage={"/m": rules.Reference(2.1e9, "smoke test")}),
                      "n2": attribution.NodeReferences(collective=trial % 2 == 0)}
        want, got = both(gpus, nodes, references)
        assert got == want, trial


def test_the_reads_of_many_node_rows_at_once_are_read_saturation_of_each():
    """read_saturation_columns (the ledger's reading of frames) against read_saturation, node row by node
    row: mounts measured by the smoke test or not, reads at and around the share, reads not sent, rows
    without mounts (no measured rate: never saturated), and no row at all."""
    share = rules.RULES[[rule.name for rule in rules.RULES].index("waits-on-input")].thresholds["read_share"]
    nominal = 21.4e9  # a Lustre benchmark: reads at its share on a mount measured at nothing saturate nothing
    storage = {7: {"/mnt/scratch": rules.Reference(2.1e9, "smoke test"), "/home": rules.Reference(1e8, "smoke")},
               8: {}}
    names = ["", "/mnt/scratch", "/home", "/data"]
    generator = random.Random(13)
    rows = [(7, {"mounts": {"/mnt/scratch": {"read_bps": 2.1e9 * share}}}),  # exactly the share
            (7, {"mounts": {"/mnt/scratch": {"read_bps": 2.1e9 * share * 0.999}}}),
            (7, {"mounts": {"/home": {"read_bps": None}, "/mnt/scratch": {"read_bps": 1.0}}}),
            (8, {"mounts": {}, "fs_read_bps": nominal * share}),
            (8, {"mounts": {}, "fs_read_bps": None}),
            (8, None)]
    for _ in range(300):
        mounts = {name: {"read_bps": generator.choice([None, generator.uniform(0, 1.2) * 2.1e9,
                                                        generator.uniform(0, 1.2) * nominal])}
                  for name in generator.sample(names[1:], generator.randint(0, 3))}
        rows.append((generator.choice([7, 8]), None if generator.random() < 0.1 else
                     {"mounts": mounts, "fs_read_bps": generator.choice([None, generator.uniform(0, 1.2) * nominal])}))
    storage[9] = {"/mnt/scratch": rules.Reference(2.1e9, "ceiling", learned=True)}  # no measured rate, a ceiling
    rows += [(9, record) for _, record in rows[:40]]
    expected = [vector.read_saturation(record, storage[node]) for node, record in rows]
    at_ceiling = [vector.read_saturation(record, storage[node], learned=True) for node, record in rows]
    owner, code, reads = [], [], []
    for index, (_, record) in enumerate(rows):
        for name, figures in ((record or {}).get("mounts") or {}).items():
            owner.append(index)
            code.append(names.index(name))
            reads.append(float("nan") if figures["read_bps"] is None else figures["read_bps"])
    fs_read = [float("nan") if not record or record.get("fs_read_bps") is None else record["fs_read_bps"]
               for _, record in rows]
    arguments = (np.array([node for node, _ in rows]), np.array(fs_read), np.array(owner, dtype=np.int64),
                 np.array(code, dtype=np.int64), np.array(names, dtype=object), np.array(reads), lambda pk: storage[pk])
    actual = vector.read_saturation_columns(*arguments)
    assert actual.tolist()[:6] == [True, False, False, False, False, False]
    assert actual.tolist() == expected
    assert 30 < sum(expected) < 270  # both answers are well represented
    assert not any(saturated for (node, _), saturated in zip(rows, expected, strict=True) if node in (8, 9))
    # the mounts compared with their learned ceilings: node 9's only, and its first rows as node 7's were
    learned = vector.read_saturation_columns(*arguments, learned=True)
    assert learned.tolist() == at_ceiling
    assert learned.tolist()[-40:-34] == [True, False, False, False, False, False]
    assert not any(learned[:-40])


@pytest.mark.parametrize(("values", "distinct", "inverse"), [
    # a span small against the count: the table
    ([7, 5, 7, 9, 5, 5], [5, 7, 9], [1, 0, 1, 2, 0, 0]),
    ([-3, 2, -3, 0], [-3, 0, 2], [0, 2, 0, 1]),
    # a span far wider than the count: np.unique's sort, the same answer
    ([10**12, 3, 10**12], [3, 10**12], [1, 0, 1]),
    ([], [], []),
])
def test_unique_of_integers_by_a_table_or_a_sort(values, distinct, inverse):
    array = np.array(values, dtype=np.int64)
    found, found_inverse = vector.unique(array, return_inverse=True)
    assert found.tolist() == distinct and found.dtype == np.int64
    assert found_inverse.tolist() == inverse
    assert vector.unique(array).tolist() == distinct
