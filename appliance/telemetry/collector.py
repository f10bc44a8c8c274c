"""One node's collector: a sweep reads every GPU through NVML (pynvml, the maintained binding, unchanged),
the InfiniBand ports, the filesystem clients, the block devices, the host CPU and the job map, and returns
the samples under DCGM's field names.

Plain Python and pynvml, no Django: this module is deployed to the nodes. A node is read under `sysroot`
("/" on a real node; a simulated node's sysroot, whose simulated libnvidia-ml.so.1 is named by
`nvml_library` and loaded before pynvml looks for the library).

Names: GPUs as dcgm-exporter's etc/default-counters.csv and etc/dcp-metrics-included.csv
(DCGM_FI_DEV_*, DCGM_FI_PROF_*, units as DCGM's: MiB, W, mJ, MHz, ratios 0-1 for the profiling fields) with
its labels (gpu, UUID, device, modelName, Hostname, pci_bus_id; hpc_job as its HPC job mapping); the
rest as node_exporter's (node_infiniband_*, node_disk_*, node_cpu_seconds_total) where it has one.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# GPM metric id -> DCGM field; GPM answers percentages (utilizations) or MiB/s (throughputs).
GPM_FIELDS = {
    1: ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01),
    2: ("DCGM_FI_PROF_SM_ACTIVE", 0.01),
    3: ("DCGM_FI_PROF_SM_OCCUPANCY", 0.01),
    5: ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.01),
    10: ("DCGM_FI_PROF_DRAM_ACTIVE", 0.01),
    20: ("DCGM_FI_PROF_PCIE_TX_BYTES", 2**20),
    21: ("DCGM_FI_PROF_PCIE_RX_BYTES", 2**20),
    60: ("DCGM_FI_PROF_NVLINK_RX_BYTES", 2**20),
    61: ("DCGM_FI_PROF_NVLINK_TX_BYTES", 2**20),
}
# Cumulative fields (Prometheus counters; a buffer's roll-up keeps their last value, not a mean).
COUNTER_FIELDS = frozenset({
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_XID_ERRORS_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    # counters in dcgm-exporter's default-counters.csv (ROW_REMAP_PENDING and _FAILURE are gauges there)
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_port_data_received_bytes_total",
    "node_infiniband_port_packets_transmitted_total", "node_infiniband_port_packets_received_total",
    "node_infiniband_port_transmit_wait_total", "node_infiniband_symbol_error_total",
    "node_infiniband_link_downed_total", "node_infiniband_port_errors_received_total",
    "appliance_filesystem_read_bytes_total", "appliance_filesystem_written_bytes_total",
    "node_disk_read_bytes_total", "node_disk_written_bytes_total", "node_disk_io_time_seconds_total",
    "node_cpu_seconds_total",
})
IB_COUNTERS = (
    # sysfs counter, name, factor (port_*_data counts 4-octet words, as the kernel's)
    ("port_xmit_data", "node_infiniband_port_data_transmitted_bytes_total", 4),
    ("port_rcv_data", "node_infiniband_port_data_received_bytes_total", 4),
    ("port_xmit_packets", "node_infiniband_port_packets_transmitted_total", 1),
    ("port_rcv_packets", "node_infiniband_port_packets_received_total", 1),
    ("port_xmit_wait", "node_infiniband_port_transmit_wait_total", 1),
    ("symbol_error", "node_infiniband_symbol_error_total", 1),
    ("link_downed", "node_infiniband_link_downed_total", 1),
    ("port_rcv_errors", "node_infiniband_port_errors_received_total", 1),
)
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
USER_HZ = 100
THROTTLE_REASONS = {  # NVML clock event reasons that slow a busy GPU (idle and application clocks are not)
    "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
}


class CollectorError(Exception):
    pass


@dataclass
class Series:
    """One measured thing: its measurement (gpu, ib, fs, disk, host), labels, and this sweep's fields."""

    measurement: str
    labels: tuple[tuple[str, str], ...]
    fields: dict[str, float]


@dataclass
class Sweep:
    time_ns: int
    series: list[Series]
    events: list[dict] = field(default_factory=list)   # XID, ECC, link down, throttling: changes since the last sweep
    nvml_cpu_s: float = 0.0

    def points(self) -> int:
        return sum(len(item.fields) for item in self.series)


@dataclass
class _Gpu:
    index: int
    handle: object
    labels: dict[str, str]
    bus: str
    gpm: bool
    samples: list = field(default_factory=list)
    last_reasons: int = 0
    last_ecc: int = 0
    migs: list[_Mig] = field(default_factory=list)


@dataclass
class _Mig:
    """A MIG instance of a GPU: labelled as dcgm-exporter labels one (GPU_I_ID, GPU_I_PROFILE)."""

    handle: object
    gpu_instance: int
    labels: dict[str, str]
    samples: list = field(default_factory=list)


class Collector:
    def __init__(self, hostname: str, sysroot: str | os.PathLike = "/", nvml_library: str | None = None,
                 gpm: bool = True):
        self.hostname = hostname
        self.sysroot = Path(sysroot)
        self.nvml_library = nvml_library
        self.want_gpm = gpm
        self.nvml = None
        self.gpus: list[_Gpu] = []
        self._kmsg_seen = 0
        self._xids: dict[str, int] = {}
        self._ib_state: dict[str, str] = {}
        self._cpu_last: list[int] | None = None
        self._ib_paths: list[tuple[str, str, Path]] | None = None

    # ---- NVML -----------------------------------------------------------------------------------------
    def open(self) -> Collector:
        if self.nvml_library:
            ctypes.CDLL(self.nvml_library, mode=ctypes.RTLD_GLOBAL)
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise CollectorError(f"{self.hostname}: NVML: {exc} (is the NVIDIA driver loaded?)") from None
        self.nvml = pynvml
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            minor = pynvml.nvmlDeviceGetMinorNumber(handle) if hasattr(pynvml, "nvmlDeviceGetMinorNumber") else index
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            gpm = False
            if self.want_gpm:
                try:
                    gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
                except pynvml.NVMLError:
                    gpm = False
            gpu = _Gpu(index, handle, {
                "gpu": str(index), "UUID": pynvml.nvmlDeviceGetUUID(handle), "device": f"nvidia{minor}",
                "modelName": pynvml.nvmlDeviceGetName(handle), "Hostname": self.hostname, "pci_bus_id": bus,
            }, bus.lower()[4:] if len(bus) > 12 else bus.lower(), gpm)
            if gpm:
                gpu.samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
                pynvml.nvmlGpmSampleGet(handle, gpu.samples[0])
            gpu.migs = self._open_migs(gpu)
            self.gpus.append(gpu)
        return self

    def _open_migs(self, gpu: _Gpu) -> list[_Mig]:
        n = self.nvml
        try:
            current, _ = n.nvmlDeviceGetMigMode(gpu.handle)
            count = n.nvmlDeviceGetMaxMigDeviceCount(gpu.handle) if current else 0
        except n.NVMLError:
            return []
        migs = []
        for index in range(count):
            try:
                handle = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, index)
            except n.NVMLError_NotFound:
                continue
            instance = n.nvmlDeviceGetGpuInstanceId(handle)
            labels = gpu.labels | {"GPU_I_ID": str(instance),
                                   "GPU_I_PROFILE": n.nvmlDeviceGetName(handle).rsplit(" ", 1)[-1],
                                   "MIG_UUID": n.nvmlDeviceGetUUID(handle)}
            mig = _Mig(handle, instance, labels)
            if gpu.gpm:
                mig.samples = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
                n.nvmlGpmMigSampleGet(gpu.handle, instance, mig.samples[0])
            migs.append(mig)
        return migs

    def close(self) -> None:
        if self.nvml is None:
            return
        for gpu in self.gpus:
            for sample in gpu.samples + [sample for mig in gpu.migs for sample in mig.samples]:
                self.nvml.nvmlGpmSampleFree(sample)
        self.gpus = []
        self.nvml.nvmlShutdown()
        self.nvml = None

    def __enter__(self) -> Collector:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _gpu_fields(self, gpu: _Gpu, events: list[dict]) -> dict[str, float]:
        n, h = self.nvml, gpu.handle
        memory = n.nvmlDeviceGetMemoryInfo(h)
        utilization = n.nvmlDeviceGetUtilizationRates(h)
        reasons = n.nvmlDeviceGetCurrentClocksEventReasons(h)
        fields = {
            "DCGM_FI_DEV_GPU_UTIL": utilization.gpu,
            "DCGM_FI_DEV_MEM_COPY_UTIL": utilization.memory,
            "DCGM_FI_DEV_FB_USED": memory.used // 2**20,
            "DCGM_FI_DEV_FB_FREE": memory.free // 2**20,
            "DCGM_FI_DEV_FB_TOTAL": memory.total // 2**20,
            "DCGM_FI_DEV_POWER_USAGE": n.nvmlDeviceGetPowerUsage(h) / 1000,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": n.nvmlDeviceGetTotalEnergyConsumption(h),
            "DCGM_FI_DEV_GPU_TEMP": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "DCGM_FI_DEV_SM_CLOCK": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "DCGM_FI_DEV_MEM_CLOCK": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons,
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
            "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES),
        }
        values = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                                n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX])
        if all(value.nvmlReturn == 0 for value in values):
            # KiB, summed over the links: DCGM's NVLINK_BANDWIDTH_TOTAL counts both directions
            fields["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = (values[0].value.ullVal + values[1].value.ullVal) * 1024
        try:
            sbe = n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)
            dbe = n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
            fields["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"], fields["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = sbe, dbe
            if dbe > gpu.last_ecc:
                events.append({"kind": "ecc", "gpu": gpu.index, "uncorrected": dbe - gpu.last_ecc})
            gpu.last_ecc = dbe
            correctable, uncorrectable, pending, failure = n.nvmlDeviceGetRemappedRows(h)
            fields |= {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": correctable,
                       "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": uncorrectable,
                       "DCGM_FI_DEV_ROW_REMAP_PENDING": int(bool(pending)),
                       "DCGM_FI_DEV_ROW_REMAP_FAILURE": int(bool(failure))}
        except n.NVMLError_NotSupported:
            pass
        throttled = reasons & sum(THROTTLE_REASONS.values())
        if throttled and not gpu.last_reasons & throttled:
            events.append({"kind": "throttling", "gpu": gpu.index,
                           "reasons": [name for name, bit in THROTTLE_REASONS.items() if reasons & bit]})
        gpu.last_reasons = reasons
        if gpu.gpm:
            fields |= self._gpm(gpu)
        return fields

    def _mig_fields(self, gpu: _Gpu, mig: _Mig) -> dict[str, float]:
        memory = self.nvml.nvmlDeviceGetMemoryInfo(mig.handle)
        fields = {"DCGM_FI_DEV_FB_USED": memory.used // 2**20, "DCGM_FI_DEV_FB_FREE": memory.free // 2**20,
                  "DCGM_FI_DEV_FB_TOTAL": memory.total // 2**20}
        if mig.samples:
            fields |= self._gpm(mig, gpu.handle, mig.gpu_instance)
        return fields

    def _gpm(self, gpu: _Gpu | _Mig, parent=None, gpu_instance: int | None = None) -> dict[str, float]:
        n = self.nvml
        first, second = gpu.samples
        if gpu_instance is None:
            n.nvmlGpmSampleGet(gpu.handle, second)
        else:
            n.nvmlGpmMigSampleGet(parent, gpu_instance, second)
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.sample1, request.sample2 = first, second
        request.numMetrics = len(GPM_FIELDS)
        for i, metric in enumerate(GPM_FIELDS):
            request.metrics[i].metricId = metric
        n.nvmlGpmMetricsGet(request)
        gpu.samples = [second, first]  # this sweep's sample starts the next interval
        out = {}
        for i in range(len(GPM_FIELDS)):
            metric = request.metrics[i]
            if metric.nvmlReturn == 0:
                name, factor = GPM_FIELDS[int(metric.metricId)]
                out[name] = round(metric.value * factor, 6)
        return out

    # ---- the kernel's files ---------------------------------------------------------------------------
    def _path(self, absolute: str) -> Path:
        return self.sysroot / absolute.lstrip("/")

    def _xid_events(self, events: list[dict]) -> None:
        """New `NVRM: Xid (PCI:<bus>): <xid>, ...` lines of the kernel log (/dev/kmsg, by sequence number)."""
        try:
            text = self._path("/dev/kmsg").read_text(errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            prefix, _, message = line.partition(";")
            parts = prefix.split(",")
            if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) <= self._kmsg_seen:
                continue
            self._kmsg_seen = int(parts[1])
            if "NVRM: Xid (PCI:" in message:
                bus = message.split("PCI:", 1)[1].split(")", 1)[0].lower()
                xid = message.split("):", 1)[1].split(",", 1)[0].strip()
                self._xids[bus] = self._xids.get(bus, 0) + 1
                gpu = next((g.index for g in self.gpus if g.bus == bus or bus.endswith(g.bus)), None)
                events.append({"kind": "xid", "gpu": gpu, "xid": int(xid) if xid.isdigit() else xid,
                               "text": message.strip()})

    def _owners(self) -> dict[str, dict]:
        """GPU index -> its holder, from the job map a Slurm prolog (or the simulation) writes."""
        try:
            return json.loads(self._path("/run/appliance/gpu-owners.json").read_text()).get("gpus", {})
        except (OSError, ValueError):
            return {}

    def _infiniband(self, series: list[Series], events: list[dict]) -> None:
        if self._ib_paths is None:
            base = self._path("/sys/class/infiniband")
            self._ib_paths = [(device.name, port.name, port) for device in sorted(base.glob("*"))
                              for port in sorted((device / "ports").glob("*"))]
        for device, port, path in self._ib_paths:
            fields = {}
            for counter, name, factor in IB_COUNTERS:
                try:
                    fields[name] = int((path / "counters" / counter).read_bytes()) * factor
                except (OSError, ValueError):
                    continue
            try:
                state = (path / "state").read_text().split(":")[-1].strip()
                rate = (path / "rate").read_text().split()[0]
                fields["node_infiniband_state_id"] = 1.0 if state == "ACTIVE" else 0.0
                fields["node_infiniband_rate_bytes_per_second"] = float(rate) * 1e9 / 8
            except (OSError, ValueError, IndexError):
                state = ""
            key = f"{device}/{port}"
            if self._ib_state.get(key) == "ACTIVE" and state != "ACTIVE":
                events.append({"kind": "link_down", "device": device, "port": int(port), "state": state})
            self._ib_state[key] = state
            series.append(Series("ib", (("Hostname", self.hostname), ("device", device), ("port", port)), fields))

    def _filesystems(self, series: list[Series]) -> None:
        host = ("Hostname", self.hostname)
        for stats in sorted(self._path("/sys/kernel/debug/lustre/llite").glob("*/stats")):
            fields = {}
            for line in stats.read_text().splitlines():
                parts = line.split()
                if parts and parts[0] in ("read_bytes", "write_bytes") and len(parts) >= 7:
                    name = "appliance_filesystem_read_bytes_total" if parts[0] == "read_bytes" else \
                        "appliance_filesystem_written_bytes_total"
                    fields[name] = int(parts[6])
            if fields:
                series.append(Series("fs", (host, ("fstype", "lustre"), ("mount", stats.parent.name)), fields))
        try:
            text = self._path("/proc/self/mountstats").read_text()
        except OSError:
            text = ""
        target = ""
        for line in text.splitlines():
            if line.startswith("device "):
                words = line.split()
                target = words[4] if len(words) > 4 and words[3] == "on" else ""
            elif line.strip().startswith("bytes:") and target:
                values = line.split()[1:]
                series.append(Series("fs", (host, ("fstype", "nfs"), ("mount", target)), {
                    "appliance_filesystem_read_bytes_total": int(values[0]) + int(values[2]),
                    "appliance_filesystem_written_bytes_total": int(values[1]) + int(values[3])}))
        try:
            text = self._path("/proc/diskstats").read_text()
        except OSError:
            text = ""
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 13:
                series.append(Series("disk", (host, ("device", parts[2])), {
                    "node_disk_read_bytes_total": int(parts[5]) * 512,
                    "node_disk_written_bytes_total": int(parts[9]) * 512,
                    "node_disk_io_time_seconds_total": int(parts[12]) / 1000}))

    def _host(self, series: list[Series]) -> None:
        try:
            first = self._path("/proc/stat").read_text().split("\n", 1)[0].split()
        except OSError:
            return
        if not first or first[0] != "cpu":
            return
        ticks = [int(value) for value in first[1:1 + len(CPU_MODES)]]
        fields = {f"node_cpu_seconds_total:{mode}": tick / USER_HZ for mode, tick in zip(CPU_MODES, ticks, strict=False)}
        if self._cpu_last is not None:
            delta = [now - before for now, before in zip(ticks, self._cpu_last, strict=False)]
            total = sum(delta)
            if total > 0:
                fields["host_cpu_busy_ratio"] = round(1 - (delta[3] + delta[4]) / total, 6)
                fields["host_cpu_iowait_ratio"] = round(delta[4] / total, 6)
        self._cpu_last = ticks
        series.append(Series("host", (("Hostname", self.hostname),), fields))

    # ---- one sweep --------------------------------------------------------------------------------------
    def sweep(self) -> Sweep:
        now = time.time_ns()
        series: list[Series] = []
        events: list[dict] = []
        owners = self._owners()
        started = time.process_time()
        if self.nvml is not None:
            for gpu in self.gpus:
                owner = owners.get(str(gpu.index)) or {}
                job = owner.get("job") or owner.get("service") or ""
                labels = tuple(gpu.labels.items()) + (("hpc_job", str(job)),)
                try:
                    series.append(Series("gpu", labels, self._gpu_fields(gpu, events)))
                    for mig in gpu.migs:
                        # An instance may serve another job than its GPU's: "<GPU>/<GPU instance>" in the map.
                        held = owners.get(f"{gpu.index}/{mig.gpu_instance}") or {}
                        mig_job = held.get("job") or held.get("service") or job
                        series.append(Series("gpu", tuple(mig.labels.items()) + (("hpc_job", str(mig_job)),),
                                             self._mig_fields(gpu, mig)))
                except self.nvml.NVMLError as exc:  # e.g. a GPU fallen off the bus: the others are still read
                    events.append({"kind": "nvml_error", "gpu": gpu.index, "error": str(exc)})
        nvml_cpu = time.process_time() - started
        self._xid_events(events)
        self._infiniband(series, events)
        self._filesystems(series)
        self._host(series)
        for event in events:
            event.setdefault("Hostname", self.hostname)
            event["time_ns"] = now
        return Sweep(now, series, events, nvml_cpu)
