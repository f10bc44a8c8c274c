"""The collector process a node runs: a sweep every `interval` seconds into the disk buffer, the forwarder
draining the buffer into the InfluxDB sink (when one is configured), the last sweep on /metrics (when a port
is given) and, in the deployed form (`--config collector.json`, the telemetry contract), per-minute rollups
(rollup.py) into a second buffer drained into the appliance's ingest endpoint with the node's token.
`python -m appliance.telemetry.agent --help`. Plain Python, no Django."""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .buffer import Buffer
from .collector import Collector, CollectorError
from .exposition import SweepMetrics, serve
from .rollup import Rollup, collector_line, mount_resolver
from .sinks import Forwarder, InfluxSink, LineFormatter

log = logging.getLogger(__name__)
VERSION = "1"
REPORT_EVERY_NS = 60 * 10**9


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
    # the appliance's side: per-minute rollups, their own buffer and sink (config mode)
    rollup: Rollup | None = None
    rollup_buffer: Buffer | None = None
    rollup_sink: InfluxSink | None = None
    rollup_forwarder: Forwarder | None = None
    interval_s: float = 1.0
    sweep_errors: int = 0
    last_report_ns: int = 0

    def start(self) -> Agent:
        try:
            self.collector.open()
        except CollectorError as exc:
            if self.rollup is None:
                raise
            # The deployed collector runs on every node: one without a GPU driver (a management node, or
            # a GPU node before its driver loads) still has a fabric, filesystems and CPUs to report.
            log.warning("no GPU is read on this node: %s", exc)
        if self.sink is not None:
            self.forwarder = Forwarder(self.buffer, self.sink)
            self.forwarder.start()
        if self.rollup_sink is not None and self.rollup_buffer is not None:
            self.rollup_forwarder = Forwarder(self.rollup_buffer, self.rollup_sink)
            self.rollup_forwarder.name = "telemetry-rollup-forwarder"
            self.rollup_forwarder.start()
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
            # a power cap can engage every few seconds: the appliance hears of it (rollup.py), the log need not
            log.log(logging.DEBUG if event.get("kind") == "throttling" else logging.WARNING, "telemetry event: %s", event)
        if self.forwarder is not None:
            self.forwarder.wake.set()
        if self.rollup is not None:
            self._send_rollups(self.rollup.add(sweep), sweep.time_ns)
        return points

    def _send_rollups(self, lines: list[str], now_ns: int, final: bool = False) -> None:
        if self.rollup_buffer is None:
            return
        if final or now_ns - self.last_report_ns >= REPORT_EVERY_NS:
            lines = lines + [self.report(now_ns)]
            self.last_report_ns = now_ns
        if not lines:
            return
        points = sum(entry.split(" ")[-2].count(",") + 1 for entry in lines)  # fields: a line's commas, roughly
        self.rollup_buffer.append("\n".join(lines) + "\n", points, now_ns)
        if self.rollup_forwarder is not None:
            self.rollup_forwarder.wake.set()

    def report(self, now_ns: int) -> str:
        """The collector's own state for the appliance (a `collector` line): its raw buffer's depth, what
        was dropped, and its InfluxDB sink's last error."""
        depth = self.buffer.depth() if self.forwarder is not None else {"rows": 0, "points": 0, "dropped_points": 0}
        if self.rollup_buffer is not None:
            dropped = self.rollup_buffer.depth()["dropped_points"]
        else:
            dropped = 0
        return collector_line(
            self.collector.hostname, now_ns, interval_s=self.interval_s, sweeps=self.sweeps,
            sweep_errors=self.sweep_errors, buffer_rows=depth["rows"], buffer_points=depth["points"],
            dropped_points=depth["dropped_points"] + dropped, last_sweep_ns=self.last_sweep_ns,
            sink_error=self.forwarder.last_error if self.forwarder is not None else "", version=VERSION)

    def run(self, interval_s: float, count: int | None = None) -> None:
        """Sweep on the interval's grid (a slow sweep skips ahead, it does not drift) until stopped."""
        next_at = time.monotonic()
        while not self.stopping.is_set() and (count is None or self.sweeps < count):
            try:
                self.sweep_once()
            except Exception:  # a sweep that fails is logged; the collector keeps its interval
                if count is not None:
                    raise
                self.sweep_errors += 1
                log.exception("telemetry sweep failed on %s", self.collector.hostname)
                if self.rollup is not None:  # the minute still closes on time
                    self._send_rollups(self.rollup.tick(time.time_ns()), time.time_ns())
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
            elif count is None or self.sweeps < count:
                self.stopping.wait(delay)

    def stop(self, flush_s: float = 5.0) -> None:
        self.stopping.set()
        if self.rollup is not None:  # the minute begun so far goes out with its samples count
            now_ns = time.time_ns()
            self._send_rollups(self.rollup.close(now_ns), now_ns, final=True)
        if self.forwarder is not None:
            self.forwarder.stop(flush_s)
        if self.rollup_forwarder is not None:
            self.rollup_forwarder.stop(flush_s)
        if self.server is not None:
            self.server.shutdown()
        self.collector.close()
        for sink in (self.sink, self.rollup_sink):
            if sink is not None:
                sink.close()
        self.buffer_depth_at_stop = self.buffer.depth()
        self.buffer.close()
        if self.rollup_buffer is not None:
            self.rollup_buffer.close()


class ConfigError(Exception):
    """collector.json or a file it names is missing or wrong; the message names the file and the key."""


def _under(sysroot: str, path: str) -> Path:
    return Path(sysroot) / path.lstrip("/") if sysroot not in ("", "/") else Path(path)


def _read_token(sysroot: str, path: str, where: str) -> str:
    if not path:
        return ""
    try:
        token = _under(sysroot, path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{where}: {path}: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"{where}: {path} is empty")
    return token


def _sink(url: str, token: str, org: str, bucket: str, ca_file: str = "") -> InfluxSink:
    # the CA for an https ingest URL, where the sink takes one
    if ca_file and "ca_file" in inspect.signature(InfluxSink).parameters:
        return InfluxSink(url, token, org, bucket, ca_file=ca_file)
    return InfluxSink(url, token, org, bucket)


class _MountPoints:
    """A filesystem's mount point from /proc/mounts, read again (at most once a minute) when a filesystem
    mounted after the collector started shows up."""

    def __init__(self, path: Path):
        self.path, self.read_at = path, 0.0
        self.resolve = self._read()

    def _read(self):
        self.read_at = time.monotonic()
        try:
            return mount_resolver(self.path.read_text())
        except OSError:
            return mount_resolver("")

    def __call__(self, fstype: str, name: str) -> str:
        found = self.resolve(fstype, name)
        if not found.startswith("/") and time.monotonic() - self.read_at > 60:
            self.resolve = self._read()
            found = self.resolve(fstype, name)
        return found


def from_config(path: str | os.PathLike, sysroot: str = "/", nvml_library: str | None = None) -> Agent:
    """The deployed collector: collector.json (the telemetry contract) read, its token files read once
    (never logged), its two buffers opened under buffer_dir."""
    try:
        config = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--config {path}: not JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("hostname"), str) or not config["hostname"]:
        raise ConfigError(f"--config {path}: hostname: a node name is required")
    try:
        interval = float(config.get("interval_s", 1.0))
        max_bytes = int(float(config.get("buffer_max_mib", 256)) * 2**20)
    except (TypeError, ValueError):
        raise ConfigError(f"--config {path}: interval_s and buffer_max_mib must be numbers") from None
    if not 0.1 <= interval <= 3600:
        raise ConfigError(f"--config {path}: interval_s {interval:g}: must be between 0.1 and 3600 s")
    buffer_dir = _under(sysroot, str(config.get("buffer_dir") or "/var/lib/appliance/collector"))
    appliance = config.get("appliance") or {}
    influx = config.get("influxdb") or {}
    metrics = config.get("metrics") or {}
    hostname = config["hostname"]
    rollup_sink = None
    if appliance.get("url"):
        token = _read_token(sysroot, str(appliance.get("token_file", "")), f"--config {path}: appliance.token_file")
        ca_file = str(appliance.get("ca_file") or "")
        rollup_sink = _sink(str(appliance["url"]), token, "appliance", "rollups",
                            str(_under(sysroot, ca_file)) if ca_file else "")
    sink = None
    if influx.get("url"):
        token = _read_token(sysroot, str(influx.get("token_file", "")), f"--config {path}: influxdb.token_file")
        sink = _sink(str(influx["url"]), token, str(influx.get("org") or "appliance"),
                     str(influx.get("bucket") or "telemetry"))
    port = metrics.get("port")
    agent = Agent(Collector(hostname, sysroot, nvml_library), Buffer(buffer_dir / "influx.sqlite", max_bytes), sink,
                  int(port) if port not in (None, "", 0) else None, str(metrics.get("address") or "127.0.0.1"))
    agent.interval_s = interval
    agent.rollup = Rollup(hostname, mount_of=_MountPoints(_under(sysroot, "/proc/mounts")))
    agent.rollup_buffer = Buffer(buffer_dir / "appliance.sqlite", max_bytes)
    agent.rollup_sink = rollup_sink
    return agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance-collector", description=__doc__)
    parser.add_argument("--config", default=None, help="collector.json (the deployed form); the options below "
                                                       "except --sysroot and --nvml-library are then ignored")
    parser.add_argument("--hostname")
    parser.add_argument("--sysroot", default="/")
    parser.add_argument("--nvml-library", default=None, help="a libnvidia-ml.so.1 to load first (simulated nodes)")
    parser.add_argument("--buffer", help="the buffer's SQLite file")
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
    if options.config is None and not (options.hostname and options.buffer):
        parser.error("--config, or --hostname and --buffer, are required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if options.sysroot not in ("", "/"):
        # the simulated NVML reads the node it plays from here
        os.environ.setdefault("APPLIANCE_SIM_SYSROOT", options.sysroot)
    try:
        agent = from_config(options.config, options.sysroot, options.nvml_library) if options.config else build(options)
        interval = agent.interval_s if options.config else options.interval
        signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
        agent.start()
    except (ConfigError, CollectorError) as exc:
        log.error("collector not started: %s", exc)
        return 2
    try:
        agent.run(interval, 1 if options.once else None)
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
                 options.metrics_address, interval_s=options.interval)


if __name__ == "__main__":
    raise SystemExit(main())
