"""Collector CPU benchmark (not a test; tests/bench is outside the default run). Prints the CPU time of one
sweep of a simulated HGX H100 node (8 GPUs through the simulated NVML with GPM, 8 InfiniBand ports, the
Lustre client, block devices, host CPU, the job map) and of formatting it as line protocol, with the NVML
share separately, against the budget of 10 ms a sweep (1% of a core at 1 Hz).

Usage: .venv/bin/python tests/bench/bench_collector.py [--sweeps N] (default 500; its own state dir).
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("APPLIANCE_STATE_DIR", tempfile.mkdtemp(prefix="bench-collector-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweeps", type=int, default=500)
    options = parser.parse_args()
    import django

    django.setup()
    from appliance.simulation import nvml
    from appliance.telemetry.collector import Collector
    from appliance.telemetry.sinks import LineFormatter
    from tests.telemetry.simnode import make_node

    sysroot = Path(os.environ["APPLIANCE_STATE_DIR"]) / "bench-node"
    make_node(sysroot)
    os.environ["APPLIANCE_SIM_SYSROOT"] = str(sysroot)
    formatter = LineFormatter()
    with Collector("gpu01", sysroot, str(nvml.library_path())) as collector:
        for _ in range(5):  # warm: caches of paths and label prefixes, as a running collector has them
            formatter.format(collector.sweep())
        nvml_cpu = sweep_cpu = format_cpu = 0.0
        points = 0
        wall = time.perf_counter()
        for _ in range(options.sweeps):
            started = time.process_time()
            sweep = collector.sweep()
            middle = time.process_time()
            _, count = formatter.format(sweep)
            format_cpu += time.process_time() - middle
            sweep_cpu += middle - started
            nvml_cpu += sweep.nvml_cpu_s
            points += count
        wall = time.perf_counter() - wall
    n = options.sweeps
    total_ms = (sweep_cpu + format_cpu) / n * 1000
    print(f"{n} sweeps of 8 GPUs + 8 IB ports + filesystems + host, {points // n} points a sweep")
    print(f"  CPU a sweep: {total_ms:.2f} ms (budget 10 ms) = {total_ms / 10:.2f}% of a core at 1 Hz")
    print(f"    NVML (pynvml + simulated library, GPM incl.): {nvml_cpu / n * 1000:.2f} ms")
    print(f"    files (IB, Lustre/NFS/disk, /proc/stat, kmsg, job map): {(sweep_cpu - nvml_cpu) / n * 1000:.2f} ms")
    print(f"    line protocol: {format_cpu / n * 1000:.2f} ms")
    print(f"  wall a sweep: {wall / n * 1000:.2f} ms")


if __name__ == "__main__":
    main()
