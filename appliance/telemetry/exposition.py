"""A collector's Prometheus endpoint: the last sweep as /metrics in the text exposition format (0.0.4), under
dcgm-exporter's names and labels (gpu, UUID, device, modelName, Hostname, pci_bus_id, hpc_job; a MIG
instance's GPU_I_ID and GPU_I_PROFILE), node_exporter's for the rest, and the appliance's own (`host_`,
`appliance_filesystem_`) where node_exporter has no such metric. A field `name:mode` becomes
`name{mode="..."}` (node_cpu_seconds_total).

Written here rather than through prometheus_client, for two reasons: its text output renames a counter's
samples to `<name>_total`, while dcgm-exporter's counters keep their DCGM names
(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`) and dashboards query those; and
the nodes' Python has only the standard library, pynvml and influxdb-client. Plain Python, no Django."""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .collector import COUNTER_FIELDS, Sweep

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_TOTAL": "Framebuffer memory total (in MiB).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "Total energy consumption since boot (in mJ).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_SM_CLOCK": "SM clock frequency (in MHz).",
    "DCGM_FI_DEV_MEM_CLOCK": "Memory clock frequency (in MHz).",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "Current clock event (throttle) reasons, a bit mask.",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "PCIe TX throughput (in KB/s).",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "PCIe RX throughput (in KB/s).",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "Total number of NVLink bandwidth counters for all lanes.",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "Total number of single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "Total number of double-bit volatile ECC errors.",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "Number of remapped rows for correctable errors.",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "Number of remapped rows for uncorrectable errors.",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "Whether a row remapping is pending (1) or not (0).",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Whether remapping of rows has failed.",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
    "DCGM_FI_PROF_SM_OCCUPANCY": "The ratio of number of warps resident on an SM.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is active.",
    "DCGM_FI_PROF_DRAM_ACTIVE": "Ratio of cycles the device memory interface is active sending or receiving data.",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "The rate of data transmitted over the PCIe bus, in bytes per second.",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "The rate of data received over the PCIe bus, in bytes per second.",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "The rate of data transmitted over NVLink, in bytes per second.",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "The rate of data received over NVLink, in bytes per second.",
    "host_cpu_busy_ratio": "Share of CPU time busy (not idle, not waiting for I/O) since the last sweep.",
    "host_cpu_iowait_ratio": "Share of CPU time waiting for I/O since the last sweep.",
    # The appliance's own names: node_exporter has no Lustre client collector, and its NFS names
    # (node_mountstats_nfs_{read,write}_bytes_total) count buffered I/O only, where these add direct I/O.
    "appliance_filesystem_read_bytes_total":
        "Bytes read through a parallel filesystem mount (Lustre llite stats; NFS mountstats, normal and direct).",
    "appliance_filesystem_written_bytes_total":
        "Bytes written through a parallel filesystem mount (Lustre llite stats; NFS mountstats, normal and direct).",
}


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render(sweep: Sweep | None) -> str:
    """The sweep in the text exposition format: one HELP and TYPE per family, its samples after them."""
    if sweep is None:
        return ""
    families: dict[str, list[str]] = {}
    for series in sweep.series:
        # a label without a value is no label to Prometheus: left out (a GPU without a job has no hpc_job)
        labels = [(name, value) for name, value in series.labels if value != ""]
        for field, value in series.fields.items():
            name, _, mode = field.partition(":")
            pairs = labels + [("mode", mode)] if mode else labels
            text = ",".join(f'{label}="{_label_value(str(label_value))}"' for label, label_value in pairs)
            families.setdefault(name, []).append(f"{name}{{{text}}} {_number(value)}" if text else
                                                 f"{name} {_number(value)}")
    out = []
    for name, samples in families.items():
        kind = "counter" if name in COUNTER_FIELDS else "gauge"
        help_text = HELP.get(name, f"{name} (as {'dcgm-exporter' if name.startswith('DCGM_') else 'node_exporter'} "
                                   "names it).").replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        out.append("\n".join(samples) + "\n")
    return "".join(out)


class SweepMetrics:
    """The last sweep it was given, as /metrics text."""

    def __init__(self):
        self._sweep: Sweep | None = None
        self._lock = threading.Lock()

    def update(self, sweep: Sweep) -> None:
        with self._lock:
            self._sweep = sweep

    def text(self) -> str:
        with self._lock:
            sweep = self._sweep
        return render(sweep)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()  # the port is free again once the agent stops


def serve(metrics: SweepMetrics, port: int, address: str = "127.0.0.1"):
    """Serve /metrics on address:port in a daemon thread; returns (server, thread) (server.server_port is the
    port when 0 asked for a free one; server.shutdown() stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # a scrape a second is not news
            pass

    server = _Server((address, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="telemetry-metrics", daemon=True)
    thread.start()
    return server, thread
