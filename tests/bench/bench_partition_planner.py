"""The partition planner: speed on a large appliance and packing quality against exhaustive search (not a
test; tests/bench is outside the default run).

1. Speed: 1,000 GPUs (six models, three pools) and 5,000 requests of one replica each (hard, soft and
   exclusive, some with a pool or a compute share); prints the seconds plan() takes (the goal: < 1 s)
   and how much it served.
2. Quality: many small random cases (1-3 GPUs, up to 8 replicas) solved exactly by an exhaustive search
   written here, independently of the planner: every valid MIG layout of each model (enumerated from
   profiles.layout_errors), every subset of replicas a GPU can hold as MIG (a matching of replicas to the
   instances of some layout), as time-slicing (memory and stated compute shares summed) or as one
   exclusive replica on a whole GPU, and the best split of the replicas over the GPUs by dynamic
   programming. Prints the distribution of served / optimum weight (the goal: >= 99 %).

Usage: .venv/bin/python tests/bench/bench_partition_planner.py [--cases N] [--seed S] [--gpus N] [--requests N]
"""

import argparse
import os
import random
import sys
import time
from collections import Counter
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.partitioning import planner  # noqa: E402
from appliance.partitioning import profiles as P  # noqa: E402

MODEL_IDS = list(P.MODELS)


# --- exhaustive search (independent of the planner) -------------------------------------------------

@cache
def layouts_of(model_id: str) -> tuple[tuple[P.Profile, ...], ...]:
    """Every distinct multiset of profiles that some valid layout of the model holds."""
    gpu_model = P.MODELS[model_id]
    found = set()

    def walk(chosen):
        found.add(tuple(sorted(name for name, _ in chosen)))
        for profile in gpu_model.profiles:
            for start in profile.placements:
                if chosen and (profile.name, start) <= chosen[-1]:
                    continue  # each set once: instances in increasing order
                candidate = chosen + [(profile.name, start)]
                if not P.layout_errors(gpu_model, candidate):
                    walk(candidate)

    walk([])
    return tuple(tuple(gpu_model.profile(name) for name in names) for names in sorted(found))


def _matches(items, instances) -> bool:
    """Whether every item gets its own instance that fits it (augmenting paths)."""
    owner = [None] * len(instances)

    def augment(i, seen):
        for j, profile in enumerate(instances):
            if j in seen or profile.memory_gb < items[i]["memory_gb"] or \
                    profile.compute_slices < (items[i].get("compute_slices") or 0):
                continue
            seen.add(j)
            if owner[j] is None or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    return all(augment(i, set()) for i in range(len(items)))


def gpu_can_hold(gpu, items) -> bool:
    gpu_model = P.MODELS[gpu["model"]]
    if not items:
        return True
    if any(it.get("pool") is not None and it["pool"] != gpu.get("pool") for it in items):
        return False
    kinds = {it["isolation"] for it in items}
    if "exclusive" in kinds:
        return len(items) == 1 and items[0]["memory_gb"] <= gpu_model.memory_gb
    if kinds == {"soft"} and sum(it["memory_gb"] for it in items) <= gpu_model.memory_gb and \
            sum(it.get("compute_slices") or 0 for it in items) <= P.COMPUTE_SLICES:
        return True
    if len(items) > P.COMPUTE_SLICES:
        return False
    return any(len(layout) >= len(items) and _matches(items, layout) for layout in layouts_of(gpu["model"]))


def optimum(gpus, items) -> float:
    n = len(items)
    weights = [sum(items[i]["weight"] for i in range(n) if mask >> i & 1) for mask in range(1 << n)]
    holds = []
    for gpu in gpus:
        holds.append([gpu_can_hold(gpu, [items[i] for i in range(n) if mask >> i & 1]) for mask in range(1 << n)])

    @cache
    def best(g, remaining):
        if g == len(gpus):
            return 0.0
        top = 0.0
        sub = remaining
        while True:
            if holds[g][sub]:
                top = max(top, weights[sub] + best(g + 1, remaining & ~sub))
            if sub == 0:
                break
            sub = (sub - 1) & remaining
        return top

    return best(0, (1 << n) - 1)


# --- random cases -------------------------------------------------------------------------------------

def random_memory(rng: random.Random) -> float:
    if rng.random() < 0.5:
        return float(rng.choice([5, 10, 12, 18, 20, 23, 24, 35, 40, 45, 47, 71, 80, 90]))
    return round(rng.uniform(2, 100), 1)


def small_case(rng: random.Random):
    model_id = rng.choice(MODEL_IDS)
    gpus = []
    for k in range(rng.randint(1, 3)):
        gpus.append({"id": f"n{k // 8}/gpu{k % 8}", "model": model_id if rng.random() < 0.7 else rng.choice(MODEL_IDS),
                     "pool": rng.choice(["a", "b"]) if rng.random() < 0.2 else None})
    requests = []
    left = rng.randint(1, 8)
    while left:
        replicas = rng.randint(1, min(3, left))
        left -= replicas
        isolation = rng.choices(["hard", "soft", "exclusive"], [0.45, 0.45, 0.1])[0]
        request = {"name": f"r{len(requests)}", "memory_gb": random_memory(rng), "replicas": replicas,
                   "isolation": isolation, "weight": rng.choice([1, 1, 2, 3, 5])}
        if isolation != "exclusive" and rng.random() < 0.3:
            request["compute_slices"] = rng.choice([1, 2, 3, 4])
        if rng.random() < 0.1:
            request["pool"] = rng.choice(["a", "b"])
        requests.append(request)
    return gpus, requests


def expand(requests):
    items = []
    for request in requests:
        for _ in range(request["replicas"]):
            items.append(request)
    return items


def quality(cases: int, seed: int) -> None:
    rng = random.Random(seed)
    ratios = []
    worst = []
    started = time.perf_counter()
    for case in range(cases):
        gpus, requests = small_case(rng)
        result = planner.plan(gpus, requests)
        best = optimum(gpus, expand(requests))
        if result["served_weight"] > best + 1e-9:
            raise SystemExit(f"case {case}: the planner served {result['served_weight']} > optimum {best}: "
                             f"the exhaustive search or the planner is wrong\n{gpus}\n{requests}")
        ratio = 1.0 if best == 0 else result["served_weight"] / best
        ratios.append((ratio, result["served_weight"], best))
        if ratio < 1:
            worst.append((ratio, case, gpus, requests, result["served_weight"], best))
    elapsed = time.perf_counter() - started
    served = sum(r[1] for r in ratios)
    opt = sum(r[2] for r in ratios)
    buckets = Counter()
    for ratio, _, _ in ratios:
        if ratio >= 1 - 1e-12:
            buckets["= 100 %"] += 1
        elif ratio >= 0.99:
            buckets[">= 99 %"] += 1
        elif ratio >= 0.9:
            buckets["90-99 %"] += 1
        elif ratio >= 0.75:
            buckets["75-90 %"] += 1
        else:
            buckets["< 75 %"] += 1
    print(f"quality: {cases} random cases (1-3 GPUs, up to 8 replicas), seed {seed}, {elapsed:.1f} s")
    print(f"  served / optimum weight over all cases: {served:g} / {opt:g} = {100 * served / opt:.2f} %")
    print(f"  mean per case {100 * sum(r[0] for r in ratios) / len(ratios):.2f} %, "
          f"worst {100 * min(r[0] for r in ratios):.1f} %")
    print("  distribution of served / optimum per case:")
    for label in ("= 100 %", ">= 99 %", "90-99 %", "75-90 %", "< 75 %"):
        print(f"    {label:>8}: {buckets[label]:5d} ({100 * buckets[label] / cases:.1f} %)")
    for _ratio, case, gpus, requests, got, best in sorted(worst, key=lambda w: w[0])[:3]:
        print(f"  below optimum, case {case}: {got:g} of {best:g}")
        print(f"    gpus {gpus}")
        print(f"    requests {requests}")


def large_case(rng: random.Random, n_gpus: int, n_requests: int):
    pools = ["training", "inference", "batch"]
    gpus = [{"id": f"node{k // 8:03d}/gpu{k % 8}", "model": MODEL_IDS[(k // 64) % len(MODEL_IDS)],
             "pool": pools[(k // 8) % 3]} for k in range(n_gpus)]
    requests = []
    for r in range(n_requests):
        isolation = rng.choices(["hard", "soft", "exclusive"], [0.5, 0.45, 0.05])[0]
        request = {"name": f"svc-{r}", "memory_gb": round(rng.uniform(3, 60 if isolation != "exclusive" else 140), 1),
                   "replicas": 1, "isolation": isolation, "weight": rng.choice([1, 1, 2, 3])}
        if rng.random() < 0.2:
            request["compute_slices"] = rng.choice([1, 2, 3])
        if rng.random() < 0.3:
            request["pool"] = rng.choice(pools)
        requests.append(request)
    return gpus, requests


def speed(n_gpus: int, n_requests: int, seed: int) -> None:
    gpus, requests = large_case(random.Random(seed), n_gpus, n_requests)
    planner.valid_layouts(P.MODELS["h100-80gb"])  # the tables are built once per process
    for model_id in MODEL_IDS:
        planner.valid_layouts(P.MODELS[model_id])
    times, cpu = [], []
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = planner.plan(gpus, requests)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    kinds = Counter(p["kind"] for p in result["placed"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"speed: {n_gpus} GPUs, {n_requests} requests: plan() took {min(times):.3f} s "
          f"(best of 3; {', '.join(f'{t:.3f}' for t in times)}), {min(cpu):.3f} s of CPU; goal < 1 s "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"  placed {len(result['placed'])} ({dict(kinds)}), unplaced {len(result['unplaced'])}, "
          f"served weight {result['served_weight']:g} of {result['total_weight']:g}")
    started, started_cpu = time.perf_counter(), time.process_time()
    again = planner.plan(gpus, requests, {"gpus": result["gpus"]})
    print(f"  planning the same again against its own result as the current layout: "
          f"{time.perf_counter() - started:.3f} s ({time.process_time() - started_cpu:.3f} s of CPU), "
          f"served {again['served_weight']:g}, {len(again['disruption']['gpus_changed'])} GPUs changed")
    # The layouts a plan makes, handed back whole (with where each replica went): the first plan's and the
    # second's; serving as much, a plan against either changes no GPU.
    for label, before in (("the first plan", result), ("the second plan", again)):
        started, started_cpu = time.perf_counter(), time.process_time()
        replan = planner.plan(gpus, requests, before)
        print(f"  planning again against {label}, placed list included: {time.perf_counter() - started:.3f} s "
              f"({time.process_time() - started_cpu:.3f} s of CPU), served {replan['served_weight']:g} "
              f"(it served {before['served_weight']:g}), {len(replan['disruption']['gpus_changed'])} GPUs changed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    if not args.skip_speed:
        speed(args.gpus, args.requests, args.seed)
    if args.cases:
        quality(args.cases, args.seed)


if __name__ == "__main__":
    main()
