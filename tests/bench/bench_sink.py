"""Sink benchmark (not a test; tests/bench is outside the default run), into a real VictoriaMetrics
(Debian's victoria-metrics, started here in a temporary folder on a free port). Prints:

1. throughput: points/s from one process through the collector's real path (line protocol formatted from
   sweeps, the disk buffer, the forwarder's gzip writes through influxdb-client), and through the sink alone;
2. outage: `--outage-s` seconds (default 600) of sweeps at 1 Hz from 4 simulated HGX nodes (8 GPUs each)
   made while the server is down (the sweeps are real ones of the simulated node, time-stamped 1 s apart,
   so ten minutes take seconds), then the server comes back: every point must be found (/api/v1/export).

Usage: .venv/bin/python tests/bench/bench_sink.py [--points N] [--outage-s S]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("APPLIANCE_STATE_DIR", tempfile.mkdtemp(prefix="bench-sink-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")


def sweeps(collector, count: int, start_ns: int, step_ns: int):
    for index in range(count):
        sweep = collector.sweep()
        sweep.time_ns = start_ns + index * step_ns
        yield sweep


def throughput(server, sysroot, library, work: Path, target_points: int) -> None:
    from appliance.telemetry.buffer import Buffer
    from appliance.telemetry.collector import Collector
    from appliance.telemetry.sinks import Forwarder, InfluxSink, LineFormatter

    formatter = LineFormatter()
    with Collector("bench01", sysroot, library) as collector:
        template = [formatter.format(sweep) for sweep in sweeps(collector, 10, 0, 0)]  # stamped " 0"
    per_sweep = template[0][1]
    count = target_points // per_sweep
    start = time.time_ns() - count * 10**9
    # the sweeps' line protocol, time-stamped 1 s apart (formatting is in bench_collector's figures)
    bodies = [template[i % 10][0].replace(" 0\n", f" {start + i * 10**9}\n") for i in range(count)]
    buffer = Buffer(work / "throughput.sqlite", max_bytes=2**31)
    sink = InfluxSink(server.url)
    forwarder = Forwarder(buffer, sink, batch_points=100_000)
    started = time.perf_counter()
    for index, body in enumerate(bodies):
        buffer.append(body, per_sweep, start + index * 10**9)
    appended = time.perf_counter() - started
    while forwarder.drain_once():
        pass
    total = time.perf_counter() - started
    points = count * per_sweep
    print(f"throughput: {points} points ({count} sweeps x {per_sweep}) through buffer + forwarder + influxdb-client "
          f"(gzip): {points / total:,.0f} points/s ({len(bodies[0].splitlines()) * count / total:,.0f} lines/s); "
          f"buffer appends alone {points / appended:,.0f} points/s")
    started = time.perf_counter()
    sink.write("".join(bodies))  # the same points again: the server keeps one of each
    seconds = time.perf_counter() - started
    print(f"  the sink alone, one write of {points} pre-formatted points: {points / seconds:,.0f} points/s")
    buffer.close()
    sink.close()


def outage(server, sysroot, library, work: Path, seconds: int) -> None:
    from appliance.telemetry.buffer import Buffer
    from appliance.telemetry.collector import Collector
    from appliance.telemetry.sinks import Forwarder, InfluxSink, LineFormatter

    server.stop()
    start = (time.time_ns() - seconds * 10**9) // 10**9 * 10**9
    agents, produced = [], 0
    began = time.perf_counter()
    for name in NODES:
        buffer = Buffer(work / f"{name}.sqlite")
        forwarder = Forwarder(buffer, InfluxSink(server.url), max_backoff_s=1.0)
        formatter = LineFormatter()
        with Collector(name, sysroot, library) as collector:
            for sweep in sweeps(collector, seconds, start, 10**9):
                body, points = formatter.format(sweep)
                buffer.append(body, points, sweep.time_ns)
                produced += points
        try:
            forwarder.drain_once()
            raise SystemExit("the server should be down")
        except Exception as exc:  # the sink is down: the rows stay
            assert "should be down" not in str(exc), exc
        agents.append((buffer, forwarder))
    depth = sum(buffer.depth()["bytes"] for buffer, _ in agents)
    print(f"outage: {seconds} s x 1 Hz x {len(NODES)} nodes x 8 GPUs made while the server was down "
          f"({time.perf_counter() - began:.1f} s): {produced} points waiting, {depth / 2**20:.1f} MiB of buffer")
    server.start()
    began = time.perf_counter()
    for _, forwarder in agents:
        forwarder.start()
        forwarder.wake.set()
    while any(buffer.depth()["rows"] for buffer, _ in agents):
        time.sleep(0.1)
    print(f"  drained after the server returned in {time.perf_counter() - began:.1f} s")
    for buffer, forwarder in agents:
        forwarder.stop(0)
        assert buffer.depth()["rolled_up_rows"] == buffer.depth()["dropped_rows"] == 0
        buffer.close()
    exported = server.export('{__name__=~"DCGM_FI_DEV_GPU_UTIL|node_infiniband_port_data_received_bytes_total",'
                             'Hostname=~"gpu0[1-4]"}')
    found = sum(len(series["timestamps"]) for series in exported)
    expected = seconds * len(NODES) * (8 + 8)
    print(f"  found {found} of {expected} GPU utilization and IB samples: {expected - found} lost")
    if found != expected:
        raise SystemExit("points were lost")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--outage-s", type=int, default=600)
    options = parser.parse_args()
    import django

    django.setup()
    from appliance.simulation import nvml
    from tests.telemetry.simnode import make_node
    from tests.telemetry.vmserver import VictoriaMetrics

    work = Path(os.environ["APPLIANCE_STATE_DIR"])
    sysroot = work / "bench-node"
    make_node(sysroot)
    os.environ["APPLIANCE_SIM_SYSROOT"] = str(sysroot)
    library = str(nvml.library_path())
    server = VictoriaMetrics(work / "vm").start()
    try:
        throughput(server, sysroot, library, work, options.points)
        outage(server, sysroot, library, work, options.outage_s)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
