"""The collector process a node runs: a sweep every `interval` seconds into the disk buffer, the forwarder
draining the buffer into the InfluxDB sink (when one is configured), the last sweep on /metrics (when a port
is given). `python -m appliance.telemetry.agent --help`; the appliance starts it with `manage.py telemetry
collect`. Plain Python, no Django."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from dataclasses import dataclass, field

from .buffer import Buffer
from .collector import Collector
from .exposition import SweepMetrics, serve
from .sinks import Forwarder, InfluxSink, LineFormatter

log = logging.getLogger(__name__)


@dataclass
class Agent:
    collector: Collector
    buffer: Buffer
    sink: InfluxSink | None = None
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    formatter: LineFormatter = field(default_factory=LineFormatter)
    metrics: SweepMetrics = field(default_factory=SweepMetrics)
    forwarder: Forwarder | None = None
    server: object = None
    sweeps: int = 0
    last_sweep_ns: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    buffer_depth_at_stop: dict = field(default_factory=dict)

    def start(self) -> Agent:
        self.collector.open()
        if self.sink is not None:
            self.forwarder = Forwarder(self.buffer, self.sink)
            self.forwarder.start()
        if self.metrics_port is not None:
            self.server, _ = serve(self.metrics, self.metrics_port, self.metrics_address)
        return self

    def sweep_once(self) -> int:
        sweep = self.collector.sweep()
        body, points = self.formatter.format(sweep)
        if self.forwarder is not None:  # without a sink, the last sweep is only on /metrics
            self.buffer.append(body, points, sweep.time_ns)
        self.metrics.update(sweep)
        self.sweeps += 1
        self.last_sweep_ns = sweep.time_ns
        for event in sweep.events:
            log.warning("telemetry event: %s", event)
        if self.forwarder is not None:
            self.forwarder.wake.set()
        return points

    def run(self, interval_s: float, count: int | None = None) -> None:
        """Sweep on the interval's grid (a slow sweep skips ahead, it does not drift) until stopped."""
        next_at = time.monotonic()
        while not self.stopping.is_set() and (count is None or self.sweeps < count):
            try:
                self.sweep_once()
            except Exception:  # a sweep that fails is logged; the collector keeps its interval
                if count is not None:
                    raise
                log.exception("telemetry sweep failed on %s", self.collector.hostname)
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
            elif count is None or self.sweeps < count:
                self.stopping.wait(delay)

    def stop(self, flush_s: float = 5.0) -> None:
        self.stopping.set()
        if self.forwarder is not None:
            self.forwarder.stop(flush_s)
        if self.server is not None:
            self.server.shutdown()
        self.collector.close()
        if self.sink is not None:
            self.sink.close()
        self.buffer_depth_at_stop = self.buffer.depth()
        self.buffer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance-collector", description=__doc__)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--sysroot", default="/")
    parser.add_argument("--nvml-library", default=None, help="a libnvidia-ml.so.1 to load first (simulated nodes)")
    parser.add_argument("--buffer", required=True, help="the buffer's SQLite file")
    parser.add_argument("--buffer-max-mib", type=int, default=256)
    parser.add_argument("--influx-url", default="")
    parser.add_argument("--influx-token", default="")
    parser.add_argument("--influx-org", default="appliance")
    parser.add_argument("--influx-bucket", default="telemetry")
    parser.add_argument("--metrics-port", type=int, default=None)
    parser.add_argument("--metrics-address", default="127.0.0.1")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--once", action="store_true")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    agent = build(options)
    signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
    agent.start()
    try:
        agent.run(options.interval, 1 if options.once else None)
    except KeyboardInterrupt:
        pass
    finally:
        agent.stop()
    return 0


def build(options) -> Agent:
    sink = InfluxSink(options.influx_url, options.influx_token, options.influx_org, options.influx_bucket) \
        if options.influx_url else None
    return Agent(Collector(options.hostname, options.sysroot, options.nvml_library),
                 Buffer(options.buffer, options.buffer_max_mib * 2**20), sink, options.metrics_port,
                 options.metrics_address)


if __name__ == "__main__":
    raise SystemExit(main())
