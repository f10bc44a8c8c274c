"""Where a collector's points go: InfluxDB line protocol (formatted once per sweep, straight from the
samples: no Point objects), an InfluxDB (or VictoriaMetrics) sink through influxdb-client with gzip, and
the forwarder that drains the disk buffer into it, retrying with backoff until the sink takes every row.
Plain Python, no Django: deployed to the nodes with the collector."""

from __future__ import annotations

import logging
import threading
import time

from .buffer import Buffer
from .collector import Sweep

log = logging.getLogger(__name__)


def _escape_tag(value: str) -> str:
    return value.replace("\\", "\\\\").replace(" ", "\\ ").replace(",", "\\,").replace("=", "\\=")


class LineFormatter:
    """Sweeps as line protocol; the measurement-and-tags prefix of a series is built once."""

    def __init__(self):
        self._prefixes: dict[tuple, str] = {}

    def prefix(self, measurement: str, labels: tuple[tuple[str, str], ...]) -> str:
        key = (measurement, labels)
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = measurement + "".join(f",{name}={_escape_tag(value)}" for name, value in labels if value != "")
            self._prefixes[key] = prefix
        return prefix

    def format(self, sweep: Sweep) -> tuple[str, int]:
        lines, points, stamp = [], 0, f" {sweep.time_ns}"
        for series in sweep.series:
            if not series.fields:
                continue
            # every field a float: a field keeps one type in InfluxDB, whatever NVML answered this time
            lines.append(self.prefix(series.measurement, series.labels) + " "
                         + ",".join(f"{name}={float(value)!r}" for name, value in series.fields.items()) + stamp)
            points += len(series.fields)
        return "\n".join(lines) + "\n", points


class SinkError(Exception):
    pass


class InfluxSink:
    """An InfluxDB v2 write endpoint (or VictoriaMetrics' /api/v2/write), gzip-compressed, synchronous: the
    forwarder decides about retries, so the client never drops a batch on its own."""

    def __init__(self, url: str, token: str = "", org: str = "appliance", bucket: str = "telemetry",
                 timeout_ms: int = 10_000, gzip: bool = True):
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.url, self.bucket, self.org = url, bucket, org
        self._client = InfluxDBClient(url=url, token=token or "unused", org=org, timeout=timeout_ms, enable_gzip=gzip)
        self._write = self._client.write_api(write_options=SYNCHRONOUS)

    def write(self, body: bytes | str) -> None:
        try:
            self._write.write(bucket=self.bucket, org=self.org, record=body, write_precision="ns")
        except Exception as exc:  # urllib3 connection errors and ApiException alike: the row stays buffered
            raise SinkError(f"{self.url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def close(self) -> None:
        self._client.close()


class Forwarder(threading.Thread):
    """Drains the buffer into the sink, oldest rows first, `batch_points` at a time; a failed write keeps
    the rows and is retried after a backoff (0.2 s doubling to `max_backoff_s`)."""

    def __init__(self, buffer: Buffer, sink: InfluxSink, batch_points: int = 50_000, max_backoff_s: float = 5.0):
        super().__init__(name="telemetry-forwarder", daemon=True)
        self.buffer, self.sink = buffer, sink
        self.batch_points, self.max_backoff_s = batch_points, max_backoff_s
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.last_error = ""
        self.last_sent_ns = 0
        self.sent_points = 0
        self.failures = 0

    def drain_once(self) -> int:
        """One write of the oldest rows; returns the points sent (0 when the buffer is empty)."""
        rows = self.buffer.peek(self.batch_points)
        if not rows:
            return 0
        self.sink.write(b"".join(body for _, body, _ in rows))
        self.buffer.ack([row_id for row_id, _, _ in rows])
        sent = sum(points for _, _, points in rows)
        self.sent_points += sent
        self.last_sent_ns = time.time_ns()
        self.last_error = ""
        return sent

    def run(self) -> None:
        backoff = 0.2
        while not self.stopping.is_set():
            try:
                if self.drain_once():
                    backoff = 0.2
                    continue
            except SinkError as exc:
                if self.last_error != str(exc):
                    log.warning("telemetry sink down, points wait in %s: %s", self.buffer.path, exc)
                self.last_error, self.failures = str(exc), self.failures + 1
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            self.wake.wait(1.0)
            self.wake.clear()

    def stop(self, flush_s: float = 5.0) -> None:
        """Stop after sending what the buffer holds (for at most flush_s); what is left stays on disk."""
        deadline = time.monotonic() + flush_s
        self.stopping.set()
        self.wake.set()
        if self.is_alive():
            self.join(timeout=flush_s)
        while time.monotonic() < deadline:
            try:
                if not self.drain_once():
                    return
            except SinkError as exc:
                self.last_error = str(exc)
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
