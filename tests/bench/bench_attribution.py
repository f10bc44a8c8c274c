"""Attribution graded against ground truth (not a test; tests/bench is outside the default run).

For every interval of simulated days, the workload model's load on every GPU and node is turned into what
a collector's per-minute rollup of that minute would hold (GpuRollup / NodeRollup field names), attributed
by appliance.analytics, and compared with the model's ground-truth label of that GPU and interval. Prints
accuracy by GPU-hours and a confusion matrix per cause, for two sets:

- in-sample: the demo profile, seed 1, the demo's four nodes (three training, one inference), one day:
  what the rules' thresholds were chosen on;
- held-out: what the rules were NOT tuned on and were not changed after seeing: other seeds; H200 nodes
  (141 GB: other memory shares); nodes whose storage delivers less (11.8 and 9 GB/s, each compared with
  its own smoke-test figure); shorter and longer jobs and gaps; and jobs with several causes at once
  ("mixed": a loading phase, then a straggler, its waiting peers, a throttling GPU and two unused GPUs
  in one job), drawn among the other kinds.

This bypasses NVML and the collector: the records are the model's rates as a rollup would state them
(a real collector computes them from counters, with the small lag of counters advanced at the previous
write's rates). tests/telemetry covers the collector's reading and rollup; this grades the rules alone.

With --offset-s S, each rollup bucket starts S seconds into a model interval, as a collector's
wall-clock minutes do: it blends two intervals (means weighted by time, the majority holder), and each
part of the GPU-minute is graded against its own interval's truth. Job starts and ends, phase changes
and checkpoints then fall inside buckets: a harder set than the aligned one, and nothing was tuned on it.

Usage: .venv/bin/python tests/bench/bench_attribution.py [--days N] [--in-sample-only] [--offset-s S]
(default 1 day per configuration, aligned; --in-sample-only is what a change of the rules is tried on).
"""

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.analytics import attribution, rules, vector  # noqa: E402
from appliance.simulation import workload  # noqa: E402
from appliance.simulation.workload import INTERVAL_S, Model, NodeSpec  # noqa: E402

MIB = 2**20
PORTS, NDR_BYTES_PER_S = 8, 400e9 / 8
THROTTLE_BITS = sum(rules.SLOWDOWN_REASONS.values())
FSTYPE = {"/mnt/lustre": "lustre", "/mnt/nfs": "nfs"}


def records(model: Model, node: NodeSpec, interval: int) -> tuple[list[dict], dict, list[str]]:
    """One minute of one node as its collector's rollup would hold it, and the true label of each GPU."""
    load = model.node_load(node, interval)
    start = interval * INTERVAL_S
    gpus, truth = [], []
    for index, gpu in enumerate(load["gpus"]):
        reasons = int(gpu["reasons"])
        gpus.append({"node": node.name, "gpu": index, "instance": -1, "step": 60, "start": start, "samples": 60,
                     "job": gpu["activity"] or "", "util": gpu["util"], "util_max": gpu["util"],
                     "sm_active": gpu["sm"], "tensor_active": gpu["tensor"], "dram_active": gpu["dram"],
                     "fb_used_mib": gpu["memory"] / MIB, "fb_used_max_mib": gpu["memory"] / MIB,
                     "fb_total_mib": node.memory_bytes / MIB, "power_w": gpu["power_w"], "power_max_w": gpu["power_w"],
                     "energy_j": gpu["power_w"] * INTERVAL_S, "temp_c": gpu["temperature"],
                     "temp_max_c": gpu["temperature"], "sm_clock_mhz": float(gpu["sm_clock"]),
                     "throttle_reasons": reasons, "throttled_share": 1.0 if reasons & THROTTLE_BITS else 0.0,
                     "pcie_tx_bps": gpu["pcie_tx"], "pcie_rx_bps": gpu["pcie_rx"], "nvlink_bps": 2 * gpu["nvlink"],
                     "xid_count": 0, "ecc_dbe": 0})
        truth.append(gpu["label"])
    utils = [g["util"] for g in gpus]
    mounts = {load["mount"]: {"fstype": FSTYPE.get(load["mount"], "lustre"), "read_bps": load["fs_read"],
                              "write_bps": load["fs_write"]}} if load["mount"] != "/" else {}
    node_record = {"node": node.name, "step": 60, "start": start, "samples": 60, "gpus": len(gpus),
                   "gpu_util": sum(utils) / len(utils), "gpu_util_max": max(utils),
                   "gpu_fb_used_mib": sum(g["fb_used_mib"] for g in gpus),
                   "gpu_power_w": sum(g["power_w"] for g in gpus), "ib_tx_bps": load["fs_write"],
                   "ib_rx_bps": load["fs_read"], "ib_line_bps": PORTS * NDR_BYTES_PER_S,
                   "ib_xmit_wait": PORTS * 250_000.0 if load["congested"] else 0.0, "ib_errors": 0,
                   "fs_read_bps": load["fs_read"], "fs_write_bps": load["fs_write"], "mounts": mounts,
                   "disk_read_bps": 0.0, "disk_write_bps": 20 * 16384.0, "cpu_busy": load["user"] + 0.02,
                   "cpu_iowait": load["iowait"]}
    return gpus, node_record, truth


def references(nodes, mount: str) -> dict[str, attribution.NodeReferences]:
    """What each node's storage smoke test measured on the training mount (as the simulated fio reports
    it for the node's storage), the references an input-bound verdict compares reads with."""
    result = {}
    for node in nodes:
        read = node.storage_read_gbps or workload.STORAGE_READ_GBPS
        result[node.name] = attribution.NodeReferences(storage={mount: rules.Reference(
            read * 1e9, f"storage smoke test of this node: {read * 1000:.0f} MB/s")})
    return result


def blend(first: dict, second: dict, late: float) -> dict:
    """A rollup bucket that holds the end of one model interval and the start of the next (`late` of it
    in the next): means weighted by time, maxima and reasons over both, the holder of most of it."""
    result = dict(first)
    for key, value in first.items():
        other = second[key]
        if key in ("start", "node", "gpu", "instance", "step", "samples", "fb_total_mib", "ib_line_bps", "gpus"):
            continue
        if key == "job":
            result[key] = value if late <= 0.5 else other
        elif key == "throttle_reasons":
            result[key] = value | other
        elif key.endswith("_max") or key.endswith("_max_mib") or key.endswith("_max_w") or key.endswith("_max_c"):
            result[key] = max(value, other)
        elif key == "mounts":
            result[key] = {mount: {"fstype": (value.get(mount) or other.get(mount))["fstype"],
                                   **{rate: (1 - late) * (value.get(mount) or {}).get(rate, 0.0)
                                      + late * (other.get(mount) or {}).get(rate, 0.0)
                                      for rate in ("read_bps", "write_bps")}}
                           for mount in set(value) | set(other)}
        elif isinstance(value, int | float) and isinstance(other, int | float):
            result[key] = (1 - late) * value + late * other
    return result


def grade(name: str, models: list[tuple[Model, int]], offset_s: int = 0) -> tuple[float, Counter]:
    """Accuracy by GPU-hours. With an offset, each rollup bucket starts `offset_s` into a model interval
    (a collector's wall-clock minutes are not the model's): it blends two intervals, and each part of
    the GPU-minute is graded against the true cause of its interval."""
    confusion: Counter = Counter()
    began = time.perf_counter()
    count = 0
    attribution_s = 0.0
    disagreements = 0  # vector.py (the ledger's attribution over columns) against rules.classify
    late = offset_s / INTERVAL_S
    for model, days in models:
        refs = references(model.nodes, model.training_mount)

        def minute(interval, model=model):
            gpu_records, node_records, truth = [], [], []
            for node in model.nodes:
                gpus, node_record, labels = records(model, node, interval)
                gpu_records += gpus
                node_records.append(node_record)
                truth += labels
            return gpu_records, node_records, truth

        following = minute(0)
        for interval in range(days * 86400 // INTERVAL_S):
            current, following = following, minute(interval + 1)
            gpu_records, node_records, truth = current
            if late:
                gpu_records = [blend(a, b, late) for a, b in zip(current[0], following[0], strict=True)]
                node_records = [blend(a, b, late) for a, b in zip(current[1], following[1], strict=True)]
            attributing = time.perf_counter()
            verdicts = attribution.attribute(gpu_records, node_records, refs)
            attribution_s += time.perf_counter() - attributing
            columns = vector.attribute_labels(gpu_records, node_records, refs)
            disagreements += sum(a != b.label for a, b in zip(columns, verdicts, strict=True))
            for position, verdict in enumerate(verdicts):
                confusion[(truth[position], verdict.label)] += 1 - late
                if late:
                    confusion[(following[2][position], verdict.label)] += late
                count += 1
    seconds = time.perf_counter() - began
    right = sum(n for (true, got), n in confusion.items() if true == got)
    accuracy = right / count
    print(f"\n== {name}: {count / 60:,.0f} GPU-hours, accuracy {100 * accuracy:.2f}% of GPU-hours "
          f"({count:,} GPU-minutes with the model, records and attribution in {seconds:.1f} s; attribution "
          f"alone {attribution_s:.1f} s, {1e6 * attribution_s / count:.0f} us a GPU-minute)")
    print(f"the ledger's attribution over columns (vector.py) gives another label to {disagreements} of them")
    print_matrix(confusion)
    return accuracy, confusion


def print_matrix(confusion: Counter) -> None:
    short = {label: label[:9] for label in rules.LABELS}
    print(f"{'true / attributed':>22} " + " ".join(f"{short[label]:>9}" for label in rules.LABELS)
          + f" {'GPU-h':>8} {'recall':>7}")
    for true in rules.LABELS:
        row = [confusion[(true, got)] for got in rules.LABELS]
        total = sum(row)
        recall = f"{100 * confusion[(true, true)] / total:6.1f}%" if total else "      -"
        print(f"{true:>22} " + " ".join(f"{n / 60:9.1f}" for n in row) + f" {total / 60:8.1f} {recall:>7}")
    attributed = {got: sum(confusion[(true, got)] for true in rules.LABELS) for got in rules.LABELS}
    print(f"{'precision':>22} " + " ".join(
        f"{100 * confusion[(got, got)] / attributed[got]:8.1f}%" if attributed[got] else f"{'-':>9}"
        for got in rules.LABELS))


DEMO_NODES = (NodeSpec("gpu01", "training", 8), NodeSpec("gpu02", "training", 8), NodeSpec("gpu03", "training", 8),
              NodeSpec("gpu04", "inference", 8))
H200 = 143771 * MIB


def held_out(days: int) -> list[tuple[Model, int]]:
    mixed_kinds = workload.TRAINING_KINDS  # the demo's five and "mixed"
    other_nodes = (NodeSpec("gpu11", "training", 8, H200, storage_read_gbps=11.8),
                   NodeSpec("gpu12", "training", 8, storage_read_gbps=9.0),
                   NodeSpec("gpu13", "training", 8, H200), NodeSpec("gpu14", "training", 8),
                   NodeSpec("gpu15", "inference", 8, H200), NodeSpec("gpu16", "inference", 8))
    return [
        (Model("demo", 2, DEMO_NODES, "/mnt/lustre", "/mnt/nfs"), days),
        (Model("demo", 3, other_nodes, "/mnt/lustre", "/mnt/nfs", job_half_hours=(1, 3), gap_ten_minutes=(0, 2)),
         days),
        (Model("demo", 4, other_nodes, "/mnt/nfs", "/mnt/nfs", demo_kinds=mixed_kinds, job_half_hours=(3, 12),
               gap_ten_minutes=(2, 9)), days),
        (Model("demo", 5, other_nodes, "/mnt/lustre", "/mnt/nfs", demo_kinds=mixed_kinds), days),
        (Model("mixed", 6, other_nodes[:4], "/mnt/lustre", "/mnt/nfs"), days),
        (Model("memory-hungry", 7, other_nodes[4:], "/mnt/lustre", "/mnt/nfs"), days),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--in-sample-only", action="store_true", help="what a change of the rules is tried on")
    parser.add_argument("--offset-s", type=int, default=0, choices=range(0, INTERVAL_S),
                        help="rollup buckets start this many seconds into the model's intervals (blended)")
    options = parser.parse_args()
    offset = f", buckets {options.offset_s} s into the model's minutes" if options.offset_s else ""
    in_sample, _ = grade(f"in-sample (demo, seed 1{offset})",
                         [(Model("demo", 1, DEMO_NODES, "/mnt/lustre", "/mnt/nfs"), options.days)], options.offset_s)
    if options.in_sample_only:
        return
    held, _ = grade(f"held-out (seeds 2-7, H200 and slower-storage nodes, other durations, mixed causes{offset})",
                    held_out(options.days), options.offset_s)
    print(f"\nattribution accuracy by GPU-hours{offset}: in-sample {100 * in_sample:.2f}%, "
          f"held-out {100 * held:.2f}% (target 95%)")


if __name__ == "__main__":
    main()
