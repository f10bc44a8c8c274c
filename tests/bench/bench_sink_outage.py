"""Sink outage benchmark (not a test; tests/bench is outside the default run): the InfluxDB sink, a real
VictoriaMetrics (Debian's victoria-metrics, started here in a temporary folder), crashes (SIGKILL) while the
collectors of every GPU node of the demo site (8 GPUs each, a sweep a second) keep sweeping; it stays down
`--outage-s` seconds (default 600), then comes back. Prints the points produced, buffered, delivered and
lost (must be 0: counted in the server afterwards), the time the buffers took to drain and their size on disk.

Time is compressed, not waited for: each node's sweeps are real sweeps of a simulated HGX H100 node (the
simulated NVML through pynvml, its /sys and /proc files; one simulated node read by a collector per demo
node name, as the simulated NVML is one per process), stamped one second apart and made as fast as the
collector can. What the sink side sees is the same as in real time: the same rows in the same order in the
same disk buffer, and a forwarder thread that keeps failing and backing off (up to 5 s) until the server
answers again; only the number of failed retries during the outage is smaller. The collector's own cost a
sweep is bench_collector.py's figure.

Usage: .venv/bin/python tests/bench/bench_sink_outage.py [--outage-s S] [--before-s S]
"""

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("APPLIANCE_STATE_DIR", tempfile.mkdtemp(prefix="bench-sink-outage-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
SECOND = 10**9


def demo_gpu_nodes() -> list[str]:
    import yaml

    site = yaml.safe_load((ROOT / "appliance" / "inventory" / "sites" / "demo.yml").read_text())
    return [node["name"] for node in site["nodes"] if node.get("role") == "gpu"]


class Node:
    """A demo node's collector, disk buffer and forwarder, as the agent runs them."""

    def __init__(self, name: str, work: Path, sysroot: Path, library: str, url: str):
        from appliance.telemetry.buffer import Buffer
        from appliance.telemetry.collector import Collector
        from appliance.telemetry.sinks import Forwarder, InfluxSink, LineFormatter

        self.name, self.sysroot = name, sysroot
        self.collector = Collector(name, self.sysroot, library)
        self.buffer = Buffer(work / f"{name}.sqlite")
        self.forwarder = Forwarder(self.buffer, InfluxSink(url), max_backoff_s=5.0)
        self.formatter = LineFormatter()
        self.produced = 0

    def sweep(self, stamp_ns: int) -> None:
        sweep = self.collector.sweep()
        sweep.time_ns = stamp_ns
        body, points = self.formatter.format(sweep)
        self.buffer.append(body, points, stamp_ns)
        self.produced += points
        self.forwarder.wake.set()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outage-s", type=int, default=600)
    parser.add_argument("--before-s", type=int, default=60, help="seconds of sweeps delivered before the crash")
    options = parser.parse_args()
    import django

    django.setup()
    from appliance.simulation import nvml
    from tests.telemetry.simnode import make_node
    from tests.telemetry.vmserver import VictoriaMetrics

    work = Path(os.environ["APPLIANCE_STATE_DIR"])
    library = str(nvml.library_path())
    server = VictoriaMetrics(work / "vm").start()
    names = demo_gpu_nodes()
    sysroot = work / "hgx-node"
    make_node(sysroot)
    os.environ["APPLIANCE_SIM_SYSROOT"] = str(sysroot)
    nodes = [Node(name, work, sysroot, library, server.url) for name in names]
    for node in nodes:
        node.collector.open()
        node.forwarder.start()
    total_s = options.before_s + options.outage_s
    start = (time.time_ns() - (total_s + 5) * SECOND) // SECOND * SECOND
    try:
        for second in range(options.before_s):  # the sink up: delivered as they come
            for node in nodes:
                node.sweep(start + second * SECOND)
        while any(node.buffer.depth()["rows"] for node in nodes):
            time.sleep(0.05)
        server.kill()  # a crash: what it took in its last seconds was not on its disk yet
        began = time.perf_counter()
        for second in range(options.before_s, total_s):
            for node in nodes:
                node.sweep(start + second * SECOND)
        made_s = time.perf_counter() - began
        waiting = sum(node.buffer.depth()["points"] for node in nodes)
        before = sum(node.produced for node in nodes) * options.before_s // total_s
        again = sum(node.buffer.delivery()["replayed_points"] for node in nodes)
        on_disk = sum(node.buffer.path.stat().st_size + Path(f"{node.buffer.path}-wal").stat().st_size
                      for node in nodes if node.buffer.path.exists())
        produced = sum(node.produced for node in nodes)
        failures = sum(node.forwarder.failures for node in nodes)
        print(f"{len(nodes)} demo GPU nodes ({', '.join(names)}) x 8 GPUs, a sweep a second: {options.before_s} s "
              f"delivered, then VictoriaMetrics SIGKILLed and down for {options.outage_s} s "
              f"(sweeps stamped 1 s apart, made in {made_s:.1f} s)")
        print(f"  points produced: {produced:,} ({before:,} before the crash); waiting in the buffers when it "
              f"returned: {waiting:,} ({produced - before:,} made while it was down, {again:,} it had taken in the "
              f"minute before its crash, to be sent again); {failures} failed writes; buffers on disk: "
              f"{on_disk / 2**20:.1f} MiB")
        server.start()
        began = time.perf_counter()
        for node in nodes:
            node.forwarder.wake.set()
        while any(node.buffer.depth()["rows"] for node in nodes):
            time.sleep(0.05)
        drain_s = time.perf_counter() - began
    finally:
        for node in nodes:
            node.forwarder.stop(0)
            node.collector.close()
    delivery = [node.buffer.delivery() for node in nodes]
    depth = [node.buffer.depth() for node in nodes]
    replayed = sum(item["replayed_points"] for item in delivery)
    sent = sum(node.forwarder.sent_points for node in nodes)
    print(f"  drained in {drain_s:.1f} s after it returned; points written {sent:,} (of which {replayed:,} sent "
          f"again); rolled up "
          f"{sum(item['rolled_up_rows'] for item in depth)} rows, dropped {sum(item['dropped_points'] for item in depth)} "
          f"points")
    try:
        import json
        import urllib.parse
        import urllib.request

        urllib.request.urlopen(server.url + "/internal/force_flush", timeout=60).read()
        found = 0
        deadline = time.monotonic() + 30
        while True:
            host = "|".join(names)
            query = urllib.parse.urlencode({"query": f'sum(count_over_time({{Hostname=~"{host}"}}[{total_s + 60}s]))',
                                            "time": str((start + (total_s + 1) * SECOND) / SECOND)})
            with urllib.request.urlopen(f"{server.url}/api/v1/query?{query}", timeout=120) as answer:
                result = json.loads(answer.read())["data"]["result"]
            found = int(float(result[0]["value"][1])) if result else 0
            if found >= produced or time.monotonic() > deadline:
                break
            time.sleep(1)
        exported = server.export(f'{{__name__="DCGM_FI_DEV_GPU_UTIL",Hostname=~"{host}"}}')
        per_series = {len(series["timestamps"]) for series in exported}
    finally:
        server.stop()
    lost = produced - found
    print(f"  points in VictoriaMetrics afterwards: {found:,} of {produced:,}: {lost} lost; "
          f"GPU utilization: {len(exported)} series of {sorted(per_series)} samples (expected {len(nodes) * 8} "
          f"of [{total_s}])")
    for node in nodes:
        node.buffer.close()
    if lost or per_series != {total_s} or len(exported) != len(nodes) * 8:
        raise SystemExit("points were lost")


if __name__ == "__main__":
    threading.excepthook = lambda args: print("thread:", args.exc_value, file=sys.stderr)
    main()
