"""The collector's per-minute rollups: the sweeps of one wall-clock minute folded into the lines the
appliance stores (gpu_rollup, node_rollup, mount_rollup), hardware events as `event` lines the moment they
are seen, and the collector's own report (`collector`), all as InfluxDB line protocol (the telemetry
contract). Computing them here, on the node, keeps the appliance's database at one row per GPU and minute
whatever the sweep interval.

Gauges are means over the bucket's sweeps (with maxima where a peak matters); counters become rates: each
sweep's increase since the sweep before (a counter that went backwards was reset, and counts from zero) is
credited to the bucket of the later sweep, and the rate is the bucket's increases over the seconds they
span. An increase over a gap longer than a bucket (the collector was stopped) is not credited anywhere:
spreading it over one minute would invent a peak. A bucket closes at the first sweep past its minute; the
first one after a start is partial and says so by its `samples`.

Who held a GPU (the `hpc_job` label of its sweeps) is timed sweep by sweep: a sweep's holder holds from that
sweep until the next one of the minute, the last one until the minute's end, and the seconds before the
minute's first sweep belong to the holder of the sweep before it (the minute before's last, when it was
less than a minute earlier; else to the first sweep's). A minute that changes hands (a job starts or ends
inside it) carries each job's seconds in its `holders` field ("41:35,chat-7b:20"; the seconds nobody held
are what is left of the minute), and `hpc_job` names the holder of the most seconds. A minute held by one
holder throughout has no `holders` field: its `hpc_job` held all of it.

Plain Python, no Django: deployed to the nodes with the collector.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .collector import COUNTER_FIELDS, THROTTLE_REASONS, Sweep

STEP_S = 60
# What the appliance's ingest takes (it refuses a whole write over any of them)
MESSAGE_CHARS = 2000
DETAIL_BYTES = 16 * 1024
JOB_CHARS = 100
# A power cap engages and lets go within seconds under a changing load: one throttling event per GPU in this
# long is an alert a person can act on; how much it throttled is each minute's throttled_share.
THROTTLING_QUIET_S = 600
THROTTLE_MASK = sum(THROTTLE_REASONS.values())
WHOLE_GPU = "-1"

# gpu_rollup field -> (DCGM field, whether its maximum is kept too, under this name)
GPU_GAUGES = {
    "util": ("DCGM_FI_DEV_GPU_UTIL", "util_max"),
    "sm_active": ("DCGM_FI_PROF_SM_ACTIVE", None),
    "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", None),
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", None),
    "fb_used_mib": ("DCGM_FI_DEV_FB_USED", "fb_used_max_mib"),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", "power_max_w"),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP", "temp_max_c"),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK", None),
}
IB_RATES = {
    "ib_tx_bps": "node_infiniband_port_data_transmitted_bytes_total",
    "ib_rx_bps": "node_infiniband_port_data_received_bytes_total",
    "ib_xmit_wait": "node_infiniband_port_transmit_wait_total",
}
IB_ERRORS = ("node_infiniband_symbol_error_total", "node_infiniband_port_errors_received_total",
             "node_infiniband_link_downed_total")
CPU_IDLE = ("node_cpu_seconds_total:idle", "node_cpu_seconds_total:iowait")


def escape_tag(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace(" ", "\\ ").replace(",", "\\,").replace("=", "\\=")


def quote_field(value: str) -> str:
    # one line: a newline would end the line protocol's line in the middle of the field
    text = " ".join(str(value).split("\n")).replace("\r", " ")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def line(measurement: str, tags: list[tuple[str, object]], fields: dict[str, object], time_ns: int) -> str:
    """One line of line protocol: tags with an empty value left out, floats as floats, strings quoted."""
    head = measurement + "".join(f",{name}={escape_tag(value)}" for name, value in tags if str(value) != "")
    # a NaN or an infinity (a counter read mid-reset, say) is no measurement: the field is left out
    body = ",".join(f"{name}={quote_field(value) if isinstance(value, str) else repr(float(value))}"
                    for name, value in fields.items()
                    if value is not None and (isinstance(value, str) or math.isfinite(float(value))))
    return f"{head} {body} {time_ns}"


@dataclass
class _Rates:
    """Counter increases credited to a bucket: {name: [increase, seconds]}."""

    sums: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, increase: float, seconds: float) -> None:
        entry = self.sums.setdefault(name, [0.0, 0.0])
        entry[0] += increase
        entry[1] += seconds

    def rate(self, name: str) -> float | None:
        entry = self.sums.get(name)
        return entry[0] / entry[1] if entry and entry[1] > 0 else None

    def total(self, name: str) -> float | None:
        entry = self.sums.get(name)
        return entry[0] if entry else None


@dataclass
class _Series:
    """One series (a GPU, an instance, a port, a mount...) within the open bucket."""

    tags: dict[str, str]
    samples: int = 0
    gauges: dict[str, list[float]] = field(default_factory=dict)
    rates: _Rates = field(default_factory=_Rates)
    reasons: int = 0
    throttled: int = 0
    held: list[tuple[int, str]] = field(default_factory=list)  # (time ns, holder) of each sweep of the bucket
    lead: str | None = None  # the holder of the sweep before the bucket's first (the minute before's last)
    xids: int = 0

    def gauge(self, name: str, value) -> None:
        self.gauges.setdefault(name, []).append(float(value))

    def mean(self, name: str) -> float | None:
        values = self.gauges.get(name)
        return sum(values) / len(values) if values else None

    def max(self, name: str) -> float | None:
        values = self.gauges.get(name)
        return max(values) if values else None

    def last(self, name: str) -> float | None:
        values = self.gauges.get(name)
        return values[-1] if values else None


class Rollup:
    """Feed it every sweep (`add`); it answers the lines that are ready: the events of that sweep, and the
    rollups of the bucket the sweep closed. `close()` gives the open bucket as it is (the collector stops)."""

    def __init__(self, hostname: str, step_s: int = STEP_S, mount_of: Callable[[str, str], str] | None = None):
        self.hostname = hostname
        self.step_ns = step_s * 10**9
        self.step_s = step_s
        self.mount_of = mount_of or (lambda fstype, name: name)
        self.bucket: int | None = None
        self.sweeps = 0
        self.series: dict[tuple, _Series] = {}
        # (series key, counter) -> (time_ns, value) of the sweep before
        self._previous: dict[tuple[tuple, str], tuple[int, float]] = {}
        self._throttling_sent: dict[object, int] = {}  # GPU -> time of its last throttling event sent
        self._last_holder: dict[tuple, tuple[int, str]] = {}  # GPU series key -> (time ns, holder) of its last sweep
        self._end_ns: int | None = None  # where the bucket being closed ends (the collector stopping: now)

    # ---- input ------------------------------------------------------------------------------------------
    def add(self, sweep: Sweep) -> list[str]:
        out = self.tick(sweep.time_ns)
        bucket = sweep.time_ns // self.step_ns * self.step_ns
        if self.bucket is None:
            self.bucket = bucket
        # a sweep whose clock stepped back still counts, in the open bucket
        self.sweeps += 1
        for series in sweep.series:
            self._add_series(series.measurement, dict(series.labels), series.fields, sweep.time_ns)
        out.extend(self._events(sweep))
        return out

    def tick(self, now_ns: int) -> list[str]:
        """The open bucket's lines if `now_ns` is past its minute (also called when a sweep failed)."""
        if self.bucket is not None and now_ns >= self.bucket + self.step_ns:
            return self.close()
        return []

    def close(self, now_ns: int | None = None) -> list[str]:
        """The open bucket's lines, whatever its minute; the next sweep opens a new one. `now_ns`: the
        collector stops at that time, before the minute's end (its holder is timed up to it)."""
        if self.bucket is None or not self.sweeps:
            self.bucket = None
            return []
        self._end_ns = self.bucket + self.step_ns if now_ns is None else min(now_ns, self.bucket + self.step_ns)
        lines = self._lines()
        self.bucket, self.sweeps, self.series = None, 0, {}
        return lines

    def _key(self, measurement: str, labels: dict[str, str]) -> tuple:
        if measurement == "gpu":
            return ("gpu", labels.get("gpu", ""), labels.get("GPU_I_ID", WHOLE_GPU))
        if measurement == "ib":
            return ("ib", labels.get("device", ""), labels.get("port", ""))
        if measurement in ("fs", "disk"):
            return (measurement, labels.get("fstype", ""), labels.get("mount") or labels.get("device", ""))
        return (measurement,)

    def _add_series(self, measurement: str, labels: dict[str, str], fields: dict, time_ns: int) -> None:
        key = self._key(measurement, labels)
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series(labels)
        series.tags = labels  # a MIG profile or the job may change; the bucket's line carries the last
        series.samples += 1
        for name, value in fields.items():
            if name.split(":", 1)[0] in COUNTER_FIELDS:
                self._count(series, key, name, float(value), time_ns)
            else:
                series.gauge(name, value)
        if measurement == "gpu":
            holder = labels.get("hpc_job", "")[:JOB_CHARS]
            if not series.held:
                before = self._last_holder.get(key)
                if before is not None and 0 <= time_ns - before[0] <= self.step_ns:
                    series.lead = before[1]
            series.held.append((time_ns, holder))
            self._last_holder[key] = (time_ns, holder)
            reasons = int(fields.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 0) or 0)
            series.reasons |= reasons
            series.throttled += 1 if reasons & THROTTLE_MASK else 0

    def _count(self, series: _Series, key: tuple, name: str, value: float, time_ns: int) -> None:
        previous = self._previous.get((key, name))
        self._previous[(key, name)] = (time_ns, value)
        if previous is None:
            return
        seconds = (time_ns - previous[0]) / 1e9
        if seconds <= 0 or seconds > self.step_s:
            return
        series.rates.add(name, value - previous[1] if value >= previous[1] else value, seconds)

    def _events(self, sweep: Sweep) -> list[str]:
        lines, seen = [], Counter()
        for event in sweep.events:
            kind = str(event.get("kind", "collector"))
            gpu = event.get("gpu")
            device = f"{event['device']}/{event.get('port', 1)}" if event.get("device") else ""
            # two events of one kind on one GPU in one sweep keep apart: the appliance keys an event by its time
            time_ns = int(event.get("time_ns", sweep.time_ns))
            if kind == "throttling":
                last = self._throttling_sent.get(gpu)
                if last is not None and time_ns - last < THROTTLING_QUIET_S * 10**9:
                    continue
                self._throttling_sent[gpu] = time_ns
            time_ns += seen[(kind, gpu, device)]
            seen[(kind, gpu, device)] += 1
            if kind == "xid" and gpu is not None:
                series = self.series.get(("gpu", str(gpu), WHOLE_GPU))
                if series is not None:
                    series.xids += 1
            detail = {name: value for name, value in event.items()
                      if name not in ("kind", "gpu", "device", "Hostname", "time_ns")}
            tags = [("Hostname", self.hostname), ("kind", kind), ("gpu", "" if gpu is None else gpu),
                    ("device", device)]
            text = json.dumps(detail, sort_keys=True, default=str)
            if len(text.encode()) > DETAIL_BYTES:
                text = json.dumps({"truncated": True, "keys": sorted(detail)[:50]}, default=str)
            lines.append(line("event", tags, {"message": describe(event)[:MESSAGE_CHARS], "detail": text}, time_ns))
        return lines

    # ---- output -----------------------------------------------------------------------------------------
    def _lines(self) -> list[str]:
        out = []
        start = self.bucket
        gpus = [s for key, s in sorted(self.series.items(), key=_order) if key[0] == "gpu"]
        for series in gpus:
            out.append(self._gpu_line(series, start))
        whole = [s for s in gpus if s.tags.get("GPU_I_ID", WHOLE_GPU) == WHOLE_GPU]
        ports = [s for key, s in self.series.items() if key[0] == "ib"]
        mounts = [(key, s) for key, s in sorted(self.series.items(), key=_order) if key[0] == "fs"]
        disks = [s for key, s in self.series.items() if key[0] == "disk"]
        host = self.series.get(("host",))
        means = [s.mean("DCGM_FI_DEV_GPU_UTIL") for s in whole]
        means = [value for value in means if value is not None]
        fields = {
            "step": self.step_s, "samples": self.sweeps, "gpus": len(whole),
            "gpu_util": sum(means) / len(means) if means else None,
            "gpu_util_max": max(means) if means else None,
            "gpu_fb_used_mib": _sum(s.mean("DCGM_FI_DEV_FB_USED") for s in whole),
            "gpu_power_w": _sum(s.mean("DCGM_FI_DEV_POWER_USAGE") for s in whole),
        }
        for name, counter in IB_RATES.items():
            fields[name] = _sum(s.rates.rate(counter) for s in ports)
        fields["ib_line_bps"] = _sum(
            s.mean("node_infiniband_rate_bytes_per_second") * (s.mean("node_infiniband_state_id") or 0)
            for s in ports if s.mean("node_infiniband_rate_bytes_per_second") is not None)
        fields["ib_errors"] = (_sum(s.rates.total(name) for s in ports for name in IB_ERRORS) or 0.0) if ports else None
        fields["fs_read_bps"] = _sum(s.rates.rate("appliance_filesystem_read_bytes_total") for _, s in mounts)
        fields["fs_write_bps"] = _sum(s.rates.rate("appliance_filesystem_written_bytes_total") for _, s in mounts)
        fields["disk_read_bps"] = _sum(s.rates.rate("node_disk_read_bytes_total") for s in disks)
        fields["disk_write_bps"] = _sum(s.rates.rate("node_disk_written_bytes_total") for s in disks)
        if host is not None:
            fields["cpu_busy"], fields["cpu_iowait"] = _cpu(host.rates)
        out.append(line("node_rollup", [("Hostname", self.hostname)], fields, start))
        for (_, fstype, name), series in mounts:
            if not self.mount_of(fstype, name).startswith("/"):
                continue  # a filesystem whose mount point is unknown counts in the node's totals only
            out.append(line("mount_rollup", [("Hostname", self.hostname), ("mount", self.mount_of(fstype, name)),
                                             ("fstype", fstype)],
                            {"step": self.step_s,
                             "read_bps": series.rates.rate("appliance_filesystem_read_bytes_total") or 0.0,
                             "write_bps": series.rates.rate("appliance_filesystem_written_bytes_total") or 0.0}, start))
        return out

    def _gpu_line(self, series: _Series, start: int) -> str:
        tags = series.tags
        instance = tags.get("GPU_I_ID", "")
        seconds = self._held_seconds(series, start)
        # the holder of the most seconds (of two as long, the first to hold the GPU)
        holder = max(seconds, key=seconds.get) if seconds else ""
        fields: dict[str, object] = {"step": self.step_s, "samples": series.samples}
        for name, (source, maximum) in GPU_GAUGES.items():
            fields[name] = series.mean(source)
            if maximum:
                fields[maximum] = series.max(source)
        fields["fb_total_mib"] = series.last("DCGM_FI_DEV_FB_TOTAL")
        energy = series.rates.total("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        fields["energy_j"] = energy / 1000 if energy is not None else None  # NVML counts mJ
        if not instance:
            fields["throttle_reasons"] = series.reasons
            fields["throttled_share"] = series.throttled / series.samples if series.samples else None
        for name, gpm, nvml in (("pcie_tx_bps", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"),
                                ("pcie_rx_bps", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT")):
            # GPM measures bytes/s over the sweep's interval; NVML's sample (KB/s, 20 ms) is the fallback
            value = series.mean(gpm)
            fields[name] = value if value is not None else _times(series.mean(nvml), 1024)
        nvlink = series.rates.rate("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
        if nvlink is None:
            nvlink = _sum(series.mean(name) for name in ("DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES"))
        fields["nvlink_bps"] = nvlink
        if not instance:
            fields["xid_count"] = series.xids
            fields["ecc_dbe"] = series.rates.total("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") or 0
        jobs = [(job, value) for job, value in seconds.items() if job]
        if set(seconds) != {holder} and jobs:  # the minute changed hands
            fields["holders"] = ",".join(f"{job}:{value}" for job, value in jobs)
        uuid = tags.get("MIG_UUID") or tags.get("UUID", "")
        return line("gpu_rollup", [("Hostname", self.hostname), ("gpu", tags.get("gpu", "")),
                                   ("GPU_I_ID", instance), ("GPU_I_PROFILE", tags.get("GPU_I_PROFILE", "")),
                                   ("UUID", uuid), ("hpc_job", holder)], fields, start)


    def _held_seconds(self, series: _Series, start: int) -> dict[str, int]:
        """{holder ("" for nobody): whole seconds of the bucket it held the GPU}, in the order they first held
        it, adding up to the bucket's timed seconds (its largest remainders rounded up)."""
        end = self._end_ns if self._end_ns is not None else start + self.step_ns
        held = sorted(series.held)
        if not held:
            return {}
        spans = {held[0][1] if series.lead is None else series.lead: max(0, min(held[0][0], end) - start)}
        for (moment, holder), following in zip(held, [*held[1:], (end, None)], strict=True):
            since, until = max(moment, start), min(following[0], end)
            spans[holder] = spans.get(holder, 0) + max(0, until - since)
        total = round(sum(spans.values()) / 10**9)
        whole = {holder: ns // 10**9 for holder, ns in spans.items()}
        short = total - sum(whole.values())
        for holder in sorted(spans, key=lambda name: spans[name] % 10**9, reverse=True)[:max(short, 0)]:
            whole[holder] += 1
        return {holder: value for holder, value in whole.items() if value > 0}


def _order(item):
    # GPUs by their index (gpu10 after gpu9), whole GPU before its instances
    key = item[0]
    return (key[0],) + tuple((0, int(part), "") if part.lstrip("-").isdigit() else (1, 0, part) for part in key[1:])


def _sum(values) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _cpu(rates: _Rates) -> tuple[float | None, float | None]:
    seconds = {name: entry[0] for name, entry in rates.sums.items() if name.startswith("node_cpu_seconds_total:")}
    total = sum(seconds.values())
    if total <= 0:
        return None, None
    idle = sum(seconds.get(name, 0.0) for name in CPU_IDLE)
    return (total - idle) / total, seconds.get("node_cpu_seconds_total:iowait", 0.0) / total


def describe(event: dict) -> str:
    """One line a person reads in the portal's alert list."""
    kind = event.get("kind")
    gpu = event.get("gpu")
    where = f"GPU {gpu}" if gpu is not None else "a GPU"
    if kind == "xid":
        # the kernel's "NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.": what follows the number
        text = str(event.get("text", ""))
        text = text.split("): ", 1)[-1].split(", ", 1)[-1] if "): " in text else text
        return f"Xid {event.get('xid')} on {where}: {text}".strip().rstrip(":")
    if kind == "ecc":
        return f"{event.get('uncorrected', 1)} uncorrectable ECC error(s) on {where}"
    if kind == "link_down":
        return f"InfiniBand port {event.get('device')}/{event.get('port', 1)} went {event.get('state') or 'down'}"
    if kind == "throttling":
        return f"{where} throttled: {', '.join(event.get('reasons') or []) or 'clock event reasons'}"
    if kind == "nvml_error":
        return f"NVML failed on {where}: {event.get('error', '')}"
    return str(event.get("message") or kind)


def collector_line(hostname: str, time_ns: int, *, interval_s: float, sweeps: int, sweep_errors: int, buffer_rows: int,
                   buffer_points: int, dropped_points: int, last_sweep_ns: int, sink_error: str, version: str) -> str:
    """The collector's own report, once a minute."""
    return line("collector", [("Hostname", hostname)], {
        "interval_s": interval_s, "sweeps": sweeps, "sweep_errors": sweep_errors, "buffer_rows": buffer_rows,
        "buffer_points": buffer_points, "dropped_points": dropped_points, "last_sweep_ns": last_sweep_ns,
        "sink_error": sink_error, "version": version}, time_ns)


def lustre_mounts(mounts_text: str) -> dict[str, str]:
    """{fsname: mount point} of the Lustre mounts in a /proc/mounts text (a Lustre client's llite instance
    is named `<fsname>-<instance>`; the rollup names the mount point)."""
    found: dict[str, str] = {}
    for entry in mounts_text.splitlines():
        parts = entry.split()
        if len(parts) >= 3 and parts[2] == "lustre" and ":/" in parts[0]:
            found.setdefault(parts[0].rsplit(":/", 1)[-1].strip("/"), parts[1])
    return found


def mount_resolver(mounts_text: str) -> Callable[[str, str], str]:
    lustre = lustre_mounts(mounts_text)

    def mount_of(fstype: str, name: str) -> str:
        if fstype == "lustre" and not name.startswith("/"):
            return lustre.get(name.rsplit("-", 1)[0], name)
        return name

    return mount_of
