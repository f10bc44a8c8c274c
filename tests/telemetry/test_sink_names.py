"""What the collector's sink writes, as a Prometheus-style store (a real VictoriaMetrics, run as a site runs it)
reads it: CPU modes as node_exporter's `node_cpu_seconds_total{mode="..."}`, not metric names with a colon;
and the remapped-rows metrics typed as dcgm-exporter types them."""

import time

from appliance.telemetry import exposition
from appliance.telemetry.collector import Series, Sweep
from appliance.telemetry.sinks import InfluxSink, LineFormatter
from tests.telemetry.vmserver import VictoriaMetrics

HOST = Series("host", (("Hostname", "gpu01"),), {"node_cpu_seconds_total:idle": 120.5,
                                                  "node_cpu_seconds_total:user": 30.25,
                                                  "host_cpu_busy_ratio": 0.2})


def test_cpu_modes_are_a_mode_label_on_the_wire():
    body, points = LineFormatter().format(Sweep(1_700_000_000_000_000_000, [HOST]))
    assert points == 3
    assert body.splitlines() == [
        "host,Hostname=gpu01 host_cpu_busy_ratio=0.2 1700000000000000000",
        "host,Hostname=gpu01,mode=idle node_cpu_seconds_total=120.5 1700000000000000000",
        "host,Hostname=gpu01,mode=user node_cpu_seconds_total=30.25 1700000000000000000"]


def test_victoriametrics_sees_one_cpu_metric_with_a_mode_label(tmp_path):
    server = VictoriaMetrics(tmp_path / "vm").start()
    try:
        stamp = (time.time_ns() - 10 * 10**9) // 10**6 * 10**6
        body, _points = LineFormatter().format(Sweep(stamp, [HOST]))
        sink = InfluxSink(server.url)
        sink.write(body)
        sink.close()
        exported = server.export('{__name__=~"node_cpu_seconds_total.*"}')
    finally:
        server.stop()
    assert sorted((row["metric"]["__name__"], row["metric"]["mode"], row["values"]) for row in exported) == [
        ("node_cpu_seconds_total", "idle", [120.5]), ("node_cpu_seconds_total", "user", [30.25])]


def test_remapped_rows_are_typed_as_dcgm_exporters():
    gpu = Series("gpu", (("gpu", "0"), ("Hostname", "gpu01")), {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0})
    text = exposition.render(Sweep(1_700_000_000_000_000_000, [gpu]))
    assert [line for line in text.splitlines() if line.startswith("# TYPE")] == [
        "# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS counter",
        "# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter",
        "# TYPE DCGM_FI_DEV_ROW_REMAP_PENDING gauge",
        "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge"]
