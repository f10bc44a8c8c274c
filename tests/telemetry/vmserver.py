"""A real VictoriaMetrics (Debian's victoria-metrics) for the telemetry tests and benchmarks: started in a
temporary folder on a free port, stopped, killed, restarted on the same port and data, and read back.

Started as a site should run it behind the collectors' sink: -dedup.minScrapeInterval=1ms keeps one sample
per series and millisecond, so the forwarder's replays (at-least-once delivery) overwrite instead of being
stored twice (without it VictoriaMetrics keeps every duplicate)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

BINARY = "victoria-metrics"
# How long a write may take to become searchable in VictoriaMetrics (export() reads until stable this apart).
SETTLE_S = 1.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VictoriaMetrics:
    def __init__(self, data_dir: Path, port: int | None = None, flags: tuple[str, ...] = ()):
        self.data_dir, self.port, self.flags = Path(data_dir), port or free_port(), tuple(flags)
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> VictoriaMetrics:
        if shutil.which(BINARY) is None:
            pytest.skip("victoria-metrics is not installed (tests/run installs the Debian package)")
        self.process = subprocess.Popen(
            [BINARY, f"-storageDataPath={self.data_dir}", f"-httpListenAddr=127.0.0.1:{self.port}",
             "-search.latencyOffset=0s", "-retentionPeriod=100y", "-influxSkipMeasurement",
             "-dedup.minScrapeInterval=1ms", "-loggerLevel=ERROR", *self.flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"victoria-metrics did not answer on {self.url}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """As a crash: SIGKILL, nothing flushed that it had not flushed."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def _export_once(self, match: str) -> list[dict]:
        urllib.request.urlopen(self.url + "/internal/force_flush", timeout=30).read()
        query = urllib.parse.urlencode({"match[]": match, "start": "0"})
        with urllib.request.urlopen(f"{self.url}/api/v1/export?{query}", timeout=60) as answer:
            return [json.loads(line) for line in answer.read().decode().splitlines() if line]

    def export(self, match: str, settle_s: float = SETTLE_S, patience_s: float = 15.0) -> list[dict]:
        """Every series matching `match` with its values and timestamps, once what was written has become
        searchable: even after /internal/force_flush, VictoriaMetrics shows a new series, and at times a
        new sample, only up to a second or so later (measured here: 0.7 to 1.0 s on an idle machine,
        more under load). The answer is read again `settle_s` later until two readings agree."""
        deadline = time.monotonic() + patience_s
        answer = self._export_once(match)
        while True:
            time.sleep(settle_s)
            again = self._export_once(match)
            if again == answer or time.monotonic() > deadline:
                return again
            answer = again
