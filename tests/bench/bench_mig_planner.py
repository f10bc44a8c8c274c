"""The partition planner's exact solver (HiGHS after the greedy search) on random fleets (not a test;
tests/bench is outside the default run).

1. Small cases (1-3 GPUs, up to 8 replicas, as bench_partition_planner.py makes them): the plan against
   the exhaustive optimum of bench_partition_planner.py (code that shares nothing with the planner); prints
   how many plans serve it, how many the plan calls optimal, and the greedy search alone for comparison.
2. Larger random fleets (bench_partition_planner.large_case: six models, three pools, hard, soft and
   exclusive requests): the served weight, the bound, the gap the plan states, where the plan and the
   bound came from, and the seconds.
3. Speed: 1,000 GPUs and 5,000 requests, best of 3 (the goal: <= 1 s, the solver's time included).

Usage: .venv/bin/python tests/bench/bench_mig_planner.py [--cases N] [--seed S] [--fleets N] [--skip-speed]
"""

import argparse
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_partition_planner import expand, large_case, optimum, small_case  # noqa: E402

from appliance.partitioning import planner, solver  # noqa: E402
from appliance.partitioning import profiles as P  # noqa: E402


def small(cases: int, seed: int) -> None:
    rng = random.Random(seed)
    equal = called_optimal = greedy_equal = wrong_claims = 0
    sources: Counter = Counter()
    greedy_ratios, times = [], []
    for case in range(cases):
        gpus, requests = small_case(rng)
        best = optimum(gpus, expand(requests))
        started = time.perf_counter()
        result = planner.plan(gpus, requests)
        times.append(time.perf_counter() - started)
        greedy = planner.plan(gpus, requests, options={"solver": False})
        optimality = result["optimality"]
        if result["served_weight"] > best + 1e-9:
            raise SystemExit(f"case {case}: served {result['served_weight']} > optimum {best}\n{gpus}\n{requests}")
        equal += abs(result["served_weight"] - best) <= 1e-9
        greedy_equal += abs(greedy["served_weight"] - best) <= 1e-9
        greedy_ratios.append(1.0 if best == 0 else greedy["served_weight"] / best)
        if optimality["status"] == "optimal":
            called_optimal += 1
            wrong_claims += abs(result["served_weight"] - best) > 1e-9
        sources[(optimality["plan_from"], optimality["solver_status"])] += 1
    print(f"small cases: {cases} random (1-3 GPUs, up to 8 replicas), seed {seed}; solver {solver.version()}")
    print(f"  plan serves the exhaustive optimum: {equal} of {cases}; the plan says optimal: {called_optimal} "
          f"(wrongly: {wrong_claims})")
    print(f"  greedy search alone: the optimum in {greedy_equal} of {cases}, mean "
          f"{100 * sum(greedy_ratios) / cases:.2f} %, worst {100 * min(greedy_ratios):.1f} %")
    print(f"  plan time: mean {1000 * sum(times) / cases:.1f} ms, max {1000 * max(times):.1f} ms")
    print("  where the plan came from (plan, solver status): "
          + ", ".join(f"{a}/{b} {n}" for (a, b), n in sorted(sources.items())))


def fleets(count: int, seed: int) -> None:
    print(f"random fleets (seed {seed}): served / bound, the gap the plan states, where plan and bound came from")
    print(f"  {'GPUs':>5} {'requests':>8} {'greedy':>8} {'plan':>8} {'bound':>10} {'gap':>7}  {'time':>6} {'CPU':>6}  "
          f"source")
    for n_gpus, n_requests in ((16, 60), (32, 120), (64, 300), (200, 1000), (1000, 5000))[:count]:
        for k in range(2):
            gpus, requests = large_case(random.Random(seed + k), n_gpus, n_requests)
            greedy = planner.plan(gpus, requests, options={"solver": False})
            started, started_cpu = time.perf_counter(), time.process_time()
            result = planner.plan(gpus, requests)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
            o = result["optimality"]
            gap = "optimal" if o["status"] == "optimal" else f"{o['gap_percent']:.2f}%"
            print(f"  {n_gpus:5d} {n_requests:8d} {greedy['served_weight']:8g} {result['served_weight']:8g} "
                  f"{o['bound_weight']:10.2f} {gap:>7}  {elapsed:5.2f}s {cpu:5.2f}s  {o['plan_from']}, {o['solver_status']}")


def speed(n_gpus: int, n_requests: int, seed: int) -> None:
    gpus, requests = large_case(random.Random(seed), n_gpus, n_requests)
    for model_id in P.MODELS:
        planner.valid_layouts(P.MODELS[model_id])   # the tables are built once per process
    times, cpu = [], []
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = planner.plan(gpus, requests)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    started = time.perf_counter()
    planner.plan(gpus, requests, options={"solver": False})
    greedy_time = time.perf_counter() - started
    o = result["optimality"]
    stated = "optimal" if o["status"] == "optimal" else f"within {o['gap_percent']:g} % of the bound"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"speed: {n_gpus} GPUs, {n_requests} requests: plan() took {min(times):.3f} s (best of 3; "
          f"{', '.join(f'{t:.3f}' for t in times)}), {min(cpu):.3f} s of CPU; goal <= 1 s "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs); the greedy search alone {greedy_time:.3f} s")
    print(f"  served {result['served_weight']:g} of {result['total_weight']:g}; bound {o['bound_weight']:g}; "
          f"{stated} ({o['plan_from']} plan; {o['note']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--fleets", type=int, default=5, help="how many fleet sizes (16 to 1,000 GPUs)")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    if not solver.available():
        print("highspy is not installed: every plan below is the greedy one, with the simple bound")
    if not args.skip_speed:
        speed(1000, 5000, args.seed)
    if args.fleets:
        fleets(args.fleets, args.seed)
    if args.cases:
        small(args.cases, args.seed)


if __name__ == "__main__":
    main()
