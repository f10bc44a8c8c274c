"""Where a collector's points go: InfluxDB line protocol (formatted once per sweep, straight from the
samples: no Point objects), an InfluxDB (or VictoriaMetrics) sink through influxdb-client with gzip, and
the forwarder that drains the disk buffer into it, retrying with backoff until the sink takes every row.
Delivery is at least once: after a failed write, or a write that found the sink had dropped our connection
(a restart), the rows the sink took in the buffer's replay window are sent again (the buffer's docstring says
why that overwrites instead of counting twice). Plain Python, no Django: deployed to the nodes with the
collector."""

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
            plain, labelled = [], []
            for name, value in series.fields.items():
                metric, _colon, mode = name.partition(":")
                if mode:
                    labelled.append((metric, mode, value))
                else:
                    plain.append(f"{name}={float(value)!r}")
            prefix = self.prefix(series.measurement, series.labels)
            if plain:
                lines.append(prefix + " " + ",".join(plain) + stamp)
            # A field `name:mode` (node_cpu_seconds_total:idle) is node_exporter's `name{mode="idle"}`: a line
            # with the tag mode, so that Prometheus-style stores see one metric with a mode label.
            for metric, mode, value in labelled:
                lines.append(f"{prefix},mode={_escape_tag(mode)} {metric}={float(value)!r}{stamp}")
            points += len(series.fields)
        return "\n".join(lines) + "\n", points


class SinkError(Exception):
    pass


class SinkRefused(SinkError):
    """The sink answered that it will never take this body (400 malformed, 403 not this node's, 413 too big):
    sending it again cannot help, so the forwarder parks it instead of blocking everything behind it."""


REFUSALS = {400, 403, 413}


class InfluxSink:
    """An InfluxDB v2 write endpoint (or VictoriaMetrics' /api/v2/write), gzip-compressed, synchronous: the
    forwarder decides about retries, so the client never drops a batch on its own."""

    def __init__(self, url: str, token: str = "", org: str = "appliance", bucket: str = "telemetry",
                 timeout_ms: int = 10_000, gzip: bool = True, ca_file: str = ""):
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.url, self.bucket, self.org = url, bucket, org
        # ca_file: the CA that signed an https sink's certificate (the appliance's own, say); else the system's
        self._client = InfluxDBClient(url=url, token=token or "unused", org=org, timeout=timeout_ms, enable_gzip=gzip,
                                      ssl_ca_cert=ca_file or None)
        self._write = self._client.write_api(write_options=SYNCHRONOUS)
        self._connects, self._connects_seen, self._kept_alive = 0, 0, False
        self._count_connects()

    def _count_connects(self) -> None:
        """Count the TCP connections the client opens to the sink: urllib3 reopens a keep-alive connection
        the server dropped inside the same connection object, silently, so its pool's own count misses it."""
        try:
            pool = self._client.api_client.rest_client.pool_manager.connection_from_url(self.url)
        except AttributeError:  # another influxdb-client: only failed writes trigger a replay
            return
        sink, base = self, pool.ConnectionCls

        class CountedConnection(base):
            def connect(self):
                super().connect()
                sink._connects += 1

        pool.ConnectionCls = CountedConnection

    def write(self, body: bytes | str) -> None:
        try:
            self._write.write(bucket=self.bucket, org=self.org, record=body, write_precision="ns")
        except Exception as exc:  # urllib3 connection errors and ApiException alike: the row stays buffered
            status = getattr(exc, "status", None)
            if status in REFUSALS:
                reason = (getattr(exc, "body", "") or getattr(exc, "reason", "") or "").strip().splitlines()
                raise SinkRefused(f"{self.url}: {status} {reason[0][:500] if reason else ''}".rstrip()) from None
            text = str(exc)
            if status == 0:  # influxdb-client's wrapping of a TLS failure: "(0)" first, the cause in its reason
                text = " ".join(str(getattr(exc, "reason", "") or "").splitlines()[:2])
            raise SinkError(f"{self.url}: {text.splitlines()[0] if text else type(exc).__name__}") from None

    def reconnected(self) -> bool:
        """Whether the writes since the last call had to open a new connection although the one before had
        been kept alive: the server dropped it, which a crash and quick restart between two writes does
        without any write failing. A server that closes every connection (no keep-alive) never counts, or
        every write would replay; a keep-alive timeout looks like a restart and costs one replay."""
        opened = self._connects - self._connects_seen
        self._connects_seen = self._connects
        dropped, self._kept_alive = opened > 0 and self._kept_alive, opened == 0
        return dropped

    def close(self) -> None:
        self._client.close()


class Forwarder(threading.Thread):
    """Drains the buffer into the sink, oldest rows first, `batch_points` at a time; a failed write keeps
    the rows and is retried after a backoff (0.2 s doubling to `max_backoff_s`). The first failure of an
    outage, and a write that reconnected, put the buffer's replay window back in front (`Buffer.replay`)."""

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
        self.replayed_points = 0
        self._logged_error = ""

    def drain_once(self) -> int:
        """One write of the oldest rows; returns the points taken off the buffer's waiting list: sent, or
        parked because the sink refused them for good (0 when the buffer is empty)."""
        rows = self.buffer.peek(self.batch_points)
        if not rows:
            return 0
        was_down = bool(self.last_error)
        try:
            self.sink.write(b"".join(body for _, body, _ in rows))
        except SinkRefused as exc:
            return self._isolate_refused(rows, exc)
        except SinkError as exc:
            if not self.last_error:  # the first failure of an outage: what the sink took lately may be lost
                self._replay(f"the sink failed ({exc})")
            self.last_error, self.failures = str(exc), self.failures + 1
            raise
        self.buffer.ack([row_id for row_id, _, _ in rows])
        sent = sum(points for _, _, points in rows)
        self.sent_points += sent
        self.last_sent_ns = time.time_ns()
        self.last_error = ""
        # after an outage the window was put back at its first failure already; a new connection is expected
        reconnected = self.sink.reconnected() if hasattr(self.sink, "reconnected") else False
        if was_down:
            log.warning("telemetry sink back after %d failed write(s): %s", self.failures, self.sink.url)
            self._logged_error = ""
        elif reconnected:
            self._replay("the sink closed our connection since the last write")
        return sent

    def _isolate_refused(self, rows: list, refusal: SinkRefused) -> int:
        """The sink refused a batch: send its rows one at a time, park each one it refuses (counted, logged:
        never silently), keep the others flowing. A transient failure on the way stops here as any does."""
        handled = 0
        for row_id, body, points in rows:
            try:
                if len(rows) > 1:
                    self.sink.write(body)
                else:
                    raise refusal
            except SinkRefused as exc:
                self.buffer.park([row_id], str(exc))
                log.error("telemetry sink refused %d points for good, parked in %s: %s", points, self.buffer.path, exc)
                handled += points
                continue
            self.buffer.ack([row_id])
            self.sent_points += points
            handled += points
        self.last_sent_ns, self.last_error = time.time_ns(), ""
        return handled

    def _replay(self, why: str) -> None:
        rows, points = self.buffer.replay()
        if rows:
            self.replayed_points += points
            log.warning("telemetry sink: sending again the last %d points it took (%s)", points, why)

    def run(self) -> None:
        backoff = 0.2
        while not self.stopping.is_set():
            try:
                if self.drain_once():
                    backoff = 0.2
                    continue
            except Exception as exc:
                if self.stopping.is_set():  # the buffer may be closed under a forwarder told to stop: done
                    return
                if not isinstance(exc, SinkError):  # the buffer's disk, say: logged, retried, the thread lives on
                    log.exception("telemetry forwarder of %s failed; retrying", self.buffer.path)
                elif str(exc) != self._logged_error:
                    log.warning("telemetry sink down, points wait in %s: %s", self.buffer.path, exc)
                    self._logged_error = str(exc)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            self.wake.wait(1.0)
            self.wake.clear()

    def stop(self, flush_s: float = 5.0) -> None:
        """Stop after sending what the buffer holds (for at most flush_s once the thread has ended); what is
        left stays on disk. The thread's write under way is waited for (up to flush_s, at least 1 s) on a
        budget of its own: a slow last write no longer leaves the final drain no time at all."""
        self.stopping.set()
        self.wake.set()
        if self.is_alive():
            self.join(timeout=max(flush_s, 1.0))
        deadline = time.monotonic() + flush_s
        while time.monotonic() < deadline:
            try:
                if not self.drain_once():
                    return
            except SinkError:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
