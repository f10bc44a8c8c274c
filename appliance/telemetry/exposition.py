"""A collector's Prometheus endpoint: the last sweep as /metrics, in prometheus_client's own exposition
format, under dcgm-exporter's names and labels (gpu, UUID, device, modelName, Hostname, pci_bus_id,
hpc_job). A field `name:mode` becomes `name{mode="..."}` (node_cpu_seconds_total). Plain Python, no Django."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric

from .collector import COUNTER_FIELDS, Sweep


class SweepMetrics:
    """A prometheus_client collector answering from the last sweep it was given."""

    def __init__(self):
        self._sweep: Sweep | None = None
        self._lock = threading.Lock()

    def update(self, sweep: Sweep) -> None:
        with self._lock:
            self._sweep = sweep

    def collect(self):
        with self._lock:
            sweep = self._sweep
        if sweep is None:
            return
        families: dict[str, Metric] = {}
        for series in sweep.series:
            labels = dict(series.labels)  # a MIG instance's series has GPU_I_ID, GPU_I_PROFILE and MIG_UUID more
            for field, value in series.fields.items():
                name, _, mode = field.partition(":")
                family = families.get(name)
                if family is None:
                    counter = name in COUNTER_FIELDS
                    family = Metric(name.removesuffix("_total") if counter else name, _help(name),
                                    "counter" if counter else "gauge")
                    families[name] = family
                sample_name = family.name + "_total" if family.type == "counter" else family.name
                family.add_sample(sample_name, labels | {"mode": mode} if mode else labels, float(value))
        yield from families.values()


def _help(name: str) -> str:
    return f"{name} (as dcgm-exporter or node_exporter name it)"


def serve(metrics: SweepMetrics, port: int, address: str = "127.0.0.1"):
    """Serve /metrics on address:port in a daemon thread; returns (server, thread) (server.server_port is the
    port when 0 asked for a free one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return start_http_server(port, addr=address, registry=registry)
