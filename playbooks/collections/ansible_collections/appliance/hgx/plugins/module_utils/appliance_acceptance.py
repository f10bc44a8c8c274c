# Acceptance checks of one node: each group measures one area and returns one record per check,
# passed or not, {check, node, expected, measured, passed, source, message}.
#
# A group is a function (context) -> list of records, registered in GROUPS; a later stage adds its
# checks (fabric ports, GPUDirect, mounts) as another group without touching the others. A value that
# cannot be measured is a failed check whose message says why, never a silent pass.

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error

from ansible.module_utils.urls import open_url

try:
    from ansible_collections.appliance.hgx.plugins.module_utils.appliance_nvml import driver_record, gpu_records, nvml_session
    from ansible_collections.appliance.hgx.plugins.module_utils.appliance_nvml import gpu_instances, mig_enabled
except ImportError:  # imported outside Ansible (unit tests put module_utils on sys.path)
    from appliance_nvml import driver_record, gpu_instances, gpu_records, mig_enabled, nvml_session


class Context:
    """What the groups need: the node, its sysroot, the platform and values measured elsewhere."""

    def __init__(self, node, sysroot="", platform=None, platform_file="", bios_baseline=None,
                 bios_measured=None, bios_error="", services=(), kernel_cmdline=(), memlock="unlimited",
                 mig_layout=None):
        self.node = node
        self.sysroot = sysroot or ""
        self.platform = platform or {}
        self.platform_file = platform_file or f"firmware/platforms/{self.platform.get('id', '?')}.yaml"
        self.bios_baseline = bios_baseline or {}
        self.bios_measured = bios_measured
        self.bios_error = bios_error or ""
        self.services = list(services)
        self.kernel_cmdline = list(kernel_cmdline)
        self.memlock = memlock
        # The partitioning target: {"gpus": {index: {"mig": [{profile, start}] | None}}, "profiles": {...}}.
        self.mig_layout = mig_layout or {}

    def path(self, absolute):
        return os.path.join(self.sysroot, absolute.lstrip("/")) if self.sysroot else absolute

    def record(self, check, expected, measured, passed, source, message):
        return {"check": check, "node": self.node, "expected": expected, "measured": measured,
                "passed": bool(passed), "source": source, "message": message}

    def spec_source(self, key_path):
        return f"{self.platform_file}: {key_path}"

    def gate(self, name):
        gate = (self.platform.get("acceptance") or {}).get(name)
        return gate if isinstance(gate, dict) else {}


# ---- BIOS -------------------------------------------------------------------------------------------

def bios_checks(ctx):
    records = []
    for name in sorted(ctx.bios_baseline):
        expected = ctx.bios_baseline[name]
        source = ctx.spec_source(f"bios.baseline.{name}")
        if ctx.bios_measured is None:
            records.append(ctx.record(f"bios.{name}", expected, None, False, source,
                                      f"BIOS not read: {ctx.bios_error or 'no value from the BMC'}"))
            continue
        measured = ctx.bios_measured.get(name)
        passed = measured == expected or (isinstance(expected, int) and str(measured) == str(expected))
        message = (f"the BMC reports {name}={measured}" if passed
                   else f"the BMC reports {name}={measured}, the baseline is {expected}")
        records.append(ctx.record(f"bios.{name}", expected, measured, passed, source, message))
    return records


# ---- OS ---------------------------------------------------------------------------------------------

def read_text(path):
    with open(path) as handle:
        return handle.read()


def loaded_modules(ctx):
    return {line.split()[0] for line in read_text(ctx.path("/proc/modules")).splitlines() if line.strip()}


def memlock_limits(ctx):
    """Effective (soft, hard) memlock of the '*' domain: limits.conf, then limits.d/*.conf in order;
    a later line overrides an earlier one, as pam_limits applies them."""
    files = [ctx.path("/etc/security/limits.conf")] + sorted(glob.glob(ctx.path("/etc/security/limits.d/*.conf")))
    soft = hard = None
    for path in files:
        if not os.path.isfile(path):
            continue
        for line in read_text(path).splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) != 4 or fields[0] != "*" or fields[2] != "memlock":
                continue
            if fields[1] in ("soft", "-"):
                soft = fields[3]
            if fields[1] in ("hard", "-"):
                hard = fields[3]
    return soft, hard


def os_checks(ctx):
    records = []
    source = ctx.spec_source("os.kernel_cmdline")
    try:
        tokens = read_text(ctx.path("/proc/cmdline")).split()
        missing = [p for p in ctx.kernel_cmdline if p not in tokens]
        message = ("the running kernel has every parameter" if not missing
                   else f"the running kernel lacks {' '.join(missing)} (a reboot applies the GRUB configuration)")
        records.append(ctx.record("os.kernel_cmdline", " ".join(ctx.kernel_cmdline), " ".join(tokens),
                                  not missing, source, message))
    except OSError as exc:
        records.append(ctx.record("os.kernel_cmdline", " ".join(ctx.kernel_cmdline), None, False, source,
                                  f"cannot read /proc/cmdline: {exc}"))

    try:
        loaded = "nouveau" in loaded_modules(ctx)
        records.append(ctx.record("os.nouveau_unloaded", "not loaded", "loaded" if loaded else "not loaded",
                                  not loaded, "NVIDIA driver installation guide: nouveau must not be loaded",
                                  "nouveau is loaded" if loaded else "nouveau is not loaded"))
    except OSError as exc:
        records.append(ctx.record("os.nouveau_unloaded", "not loaded", None, False,
                                  "NVIDIA driver installation guide: nouveau must not be loaded",
                                  f"cannot read /proc/modules: {exc}"))

    soft, hard = memlock_limits(ctx)
    measured = f"soft {soft or 'default'}, hard {hard or 'default'}"
    passed = soft == ctx.memlock and hard == ctx.memlock
    records.append(ctx.record("os.memlock", ctx.memlock, measured, passed, ctx.spec_source("os.memlock"),
                              f"/etc/security/limits.d gives every user memlock {measured}"))
    return records


# ---- services ---------------------------------------------------------------------------------------

def unit_state(unit):
    systemctl = shutil.which("systemctl")
    if not systemctl:
        return None, "systemctl is not on the PATH"
    completed = subprocess.run([systemctl, "is-active", unit], capture_output=True, text=True, check=False)
    state = completed.stdout.strip() or "unknown"
    return state, completed.stderr.strip()


def service_checks(ctx):
    records = []
    for unit in ctx.services:
        state, detail = unit_state(unit)
        message = f"systemctl is-active {unit}: {state}" + (f" ({detail})" if detail and state != "active" else "")
        records.append(ctx.record(f"service.{unit}", "active", state, state == "active",
                                  "the appliance's stages enable and start this unit", message))
    return records


# ---- Slurm ------------------------------------------------------------------------------------------

MPI_DEFAULT = re.compile(r"^\s*MpiDefault\s*=\s*(\S+)", re.IGNORECASE | re.MULTILINE)


def mpi_types(text):
    """The plugin types `srun --mpi=list` prints, one per indented line after "MPI plugin types are...";
    the "specific pmix plugin versions" line after them is not a type."""
    types, listing = [], False
    for line in text.splitlines():
        if line.strip().lower().startswith("mpi plugin types are"):
            listing = True
        elif listing and line[:1] in (" ", "\t") and line.strip():
            types.append(line.strip())
        elif listing and line.strip():
            listing = False
    return types


def slurm_checks(ctx, run=subprocess.run):
    """The MPI plugin type slurm.conf names as MpiDefault is one this node's srun has (`srun --mpi=list`,
    read with the node's own slurm.conf): a default the packages do not bring fails every MPI job."""
    conf = ctx.path("/etc/slurm/slurm.conf")
    source = "slurm.conf MpiDefault, rendered from the node's Slurm packages (the workloads stage)"
    try:
        with open(conf) as handle:
            match = MPI_DEFAULT.search(handle.read())
    except OSError as exc:
        return [ctx.record("slurm.mpi_default", "a readable slurm.conf", "unreadable", False, source,
                           f"{conf}: {exc.strerror}")]
    wanted = match.group(1) if match else "none"  # Slurm's own default
    srun = shutil.which("srun")
    if not srun:
        return [ctx.record("slurm.mpi_default", wanted, "srun is not on the PATH", False, source,
                           "srun is not on the PATH: the slurm-client package is missing")]
    try:
        completed = run([srun, "--mpi=list"], capture_output=True, text=True, check=False, timeout=60,
                        env={**os.environ, "SLURM_CONF": conf})
    except subprocess.TimeoutExpired:
        return [ctx.record("slurm.mpi_default", wanted, "no answer", False, source, "srun --mpi=list: no answer in 60 s")]
    types = mpi_types(completed.stdout + "\n" + completed.stderr)
    if completed.returncode != 0 or not types:
        detail = (completed.stderr or completed.stdout).strip().splitlines()
        return [ctx.record("slurm.mpi_default", wanted, "unknown", False, source,
                           f"srun --mpi=list (exit status {completed.returncode}): {detail[-1] if detail else 'no output'}")]
    measured = ", ".join(types)
    passed = wanted in types
    message = (f"srun --mpi=list: {measured}; MpiDefault={wanted}" if passed else
               f"MpiDefault={wanted} is not a type srun --mpi=list gives on this node ({measured}): MPI jobs fail to start")
    return [ctx.record("slurm.mpi_default", wanted, measured, passed, source, message)]


# ---- GPUs -------------------------------------------------------------------------------------------

def gpu_checks(ctx, measure=None):
    """GPU checks from NVML; `measure` (for tests) returns (gpus, driver) or raises NvmlUnavailable."""
    gpu_spec = ctx.platform.get("gpu") or {}
    software = ctx.platform.get("software") or {}
    nvlink = gpu_spec.get("nvlink") or {}
    width_gate = ctx.gate("pcie_link_width")
    retired_gate = ctx.gate("retired_pages")
    expectations = [
        ("gpu.count", gpu_spec.get("count"), ctx.spec_source("gpu.count")),
        ("gpu.model", gpu_spec.get("model"), ctx.spec_source("gpu.model")),
        ("gpu.memory_mib", gpu_spec.get("memory_mib"), ctx.spec_source("gpu.memory_mib")),
        ("driver.version", software.get("driver_version"), ctx.spec_source("software.driver_version")),
        ("gpu.persistence_mode", "enabled" if software.get("persistence_mode", True) else "any",
         ctx.spec_source("software.persistence_mode")),
        ("nvlink.links_up", nvlink.get("links_per_gpu"), ctx.spec_source("gpu.nvlink.links_per_gpu")),
        ("pcie.link_width", width_gate.get("min", (gpu_spec.get("pcie") or {}).get("width")),
         width_gate.get("source") or ctx.spec_source("gpu.pcie.width")),
        ("gpu.retired_pages", retired_gate.get("max", 0), retired_gate.get("source") or "no retired pages"),
    ]
    try:
        if measure:
            gpus, driver = measure()
        else:
            with nvml_session() as pynvml:
                gpus, driver = gpu_records(pynvml, health=True), driver_record(pynvml)
    except Exception as exc:  # NvmlUnavailable or an NVMLError mid-query: every GPU check fails with it
        return [ctx.record(check, expected, None, False, source, f"NVML: {exc}")
                for check, expected, source in expectations if expected is not None]

    measured_by_check = {
        "gpu.count": _count(gpus),
        "gpu.model": _uniform(gpus, "name"),
        "gpu.memory_mib": _uniform(gpus, "memory_mib"),
        "driver.version": _driver(driver),
        "gpu.persistence_mode": _persistence(gpus),
        "nvlink.links_up": _per_gpu_minimum(gpus, "nvlink_links_up", "NVLink links up"),
        "pcie.link_width": _per_gpu_minimum(gpus, "pcie_link_width", "PCIe link width"),
        "gpu.retired_pages": _retired(gpus),
    }
    records = []
    for check, expected, source in expectations:
        if expected is None:
            continue
        measured, verdict, message = measured_by_check[check](expected)
        records.append(ctx.record(check, expected, measured, verdict, source, message))
    return records


def _count(gpus):
    def judge(expected):
        return len(gpus), len(gpus) == expected, f"NVML reports {len(gpus)} GPUs"
    return judge


def _uniform(gpus, key):
    def judge(expected):
        values = sorted({g[key] for g in gpus}, key=str)
        wrong = [f"GPU {g['index']}: {g[key]}" for g in gpus if g[key] != expected]
        measured = values[0] if len(values) == 1 else values
        if not gpus:
            return None, False, "NVML reports no GPU"
        return measured, not wrong, ("every GPU reports " + str(expected)) if not wrong else "; ".join(wrong)
    return judge


def _driver(driver):
    def judge(expected):
        return driver["version"], driver["version"] == expected, f"NVML reports driver {driver['version']}"
    return judge


def _persistence(gpus):
    def judge(expected):
        on = [g["index"] for g in gpus if g.get("persistence_mode")]
        measured = f"enabled on {len(on)} of {len(gpus)} GPUs"
        if expected == "any":
            return measured, True, measured
        off = [str(g["index"]) for g in gpus if not g.get("persistence_mode")]
        return measured, bool(gpus) and not off, measured + (f" (off: GPU {', '.join(off)})" if off else "")
    return judge


def _per_gpu_minimum(gpus, key, label):
    def judge(expected):
        values = [g.get(key) for g in gpus]
        if not gpus or any(v is None for v in values):
            return None, False, f"NVML does not report the {label} of every GPU"
        low = [f"GPU {g['index']}: {g[key]}" for g in gpus if g[key] < expected]
        measured = min(values)
        return measured, not low, (f"every GPU has {label} >= {expected}" if not low
                                   else f"{label} below {expected}: " + "; ".join(low))
    return judge


def _retired(gpus):
    def judge(expected):
        values = [g.get("retired_pages") for g in gpus]
        if not gpus or any(v is None for v in values):
            return None, False, "NVML reports neither retired pages nor remapped rows for every GPU"
        total = sum(values)
        bad = [f"GPU {g['index']}: {g['retired_pages']}" for g in gpus if g["retired_pages"]]
        return total, total <= expected, ("no retired or pending pages" if not bad
                                          else "retired or pending pages: " + "; ".join(bad))
    return judge


# ---- the telemetry collector ------------------------------------------------------------------------

COLLECTOR_CONFIG = "/etc/appliance/collector.json"
GPU_UTIL_SERIES = re.compile(r'^DCGM_FI_DEV_GPU_UTIL\{(?P<labels>[^}]*)\}\s')
GPU_LABEL = re.compile(r'(?:^|,)gpu="(?P<gpu>[^"]*)"')


def read_metrics(address, port, wait_s=30.0):
    """/metrics of the node's collector: (text, None) or (None, why not). A collector started a moment ago
    (the unit, or the simulation right after the monitoring stage) gets `wait_s` seconds to answer."""
    host = "127.0.0.1" if address in ("", "0.0.0.0") else ("::1" if address == "::" else address)
    url = f"http://{'[' + host + ']' if ':' in host else host}:{int(port)}/metrics"
    deadline = time.monotonic() + wait_s
    while True:
        problem = None
        try:
            with open_url(url, method="GET", timeout=5, validate_certs=False) as response:
                return response.read().decode("utf-8", "replace"), None
        except (OSError, urllib.error.URLError) as exc:
            problem = f"{url}: {getattr(exc, 'reason', exc)}"
        if time.monotonic() >= deadline:
            return None, problem
        time.sleep(0.5)


def gpu_util_series(text):
    """{gpu label: number of DCGM_FI_DEV_GPU_UTIL series} of an exposition text."""
    counts = {}
    for line in text.splitlines():
        match = GPU_UTIL_SERIES.match(line)
        if match:
            gpu = GPU_LABEL.search(match.group("labels"))
            key = gpu.group("gpu") if gpu else "(no gpu label)"
            counts[key] = counts.get(key, 0) + 1
    return counts


def collector_checks(ctx, wait_s=30.0):
    source = "the monitoring stage deploys the collector (contract: /metrics under dcgm-exporter's names)"
    try:
        with open(ctx.path(COLLECTOR_CONFIG)) as handle:
            metrics = json.load(handle)["metrics"]
        address, port = metrics.get("address", ""), int(metrics["port"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [ctx.record("collector.metrics", "answers", None, False, source,
                           f"{COLLECTOR_CONFIG}: not deployed or unreadable ({exc})")]
    text, problem = read_metrics(address, port, wait_s)
    records = [ctx.record("collector.metrics", "answers", "answers" if text is not None else None, text is not None,
                          source, f"/metrics on port {port} answered" if text is not None else problem)]
    expected = int((ctx.platform.get("gpu") or {}).get("count") or 0)
    if expected:
        counts = gpu_util_series(text or "")
        repeated = sorted(gpu for gpu, count in counts.items() if count > 1)
        measured = len(counts) if text is not None else None
        passed = measured == expected and not repeated
        message = (f"DCGM_FI_DEV_GPU_UTIL for GPU(s) {', '.join(sorted(counts, key=str)) or 'none'}"
                   + (f"; more than one series for GPU(s) {', '.join(repeated)}" if repeated else "")
                   if text is not None else problem)
        records.append(ctx.record("collector.gpu_util_series", expected, measured, passed,
                                  ctx.spec_source("gpu.count"), message))
    return records


# ---- MIG layout ------------------------------------------------------------------------------------

def _layout_text(enabled, instances):
    if not enabled:
        return "whole GPU (MIG off)"
    return " ".join(f"{i['profile']}@{i['start']}" for i in sorted(instances, key=lambda i: i["start"])) or "MIG on, no instances"


def mig_layout_checks(ctx, measure=None):
    """Each GPU's instances, as NVML reports them, equal the applied partition plan's (profile and first
    memory slice), each GPU instance with its compute instance."""
    gpus = ctx.mig_layout.get("gpus") or {}
    profiles = ctx.mig_layout.get("profiles") or {}
    if not gpus:
        return []
    source = "NVML (nvmlDeviceGetGpuInstances) against the partition plan"
    records = []
    try:
        with nvml_session() as pynvml:
            for index in sorted(gpus, key=int):
                target = gpus[index]
                if target.get("keep"):
                    continue
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(index))
                found = gpu_instances(pynvml, handle, profiles)
                measured = _layout_text(mig_enabled(pynvml, handle), found)
                if any(not i["compute_instances"] for i in found):
                    measured += " (a GPU instance without its compute instance)"
                expected = _layout_text(target.get("mig") is not None, target.get("mig") or [])
                records.append(ctx.record(f"mig_layout_gpu{index}", expected, measured, measured == expected, source,
                                          "" if measured == expected else
                                          f"GPU {index}: NVML shows {measured}, the plan has {expected}"))
    except Exception as exc:  # NVML unavailable or a call refused: one failed record naming it
        records.append(ctx.record("mig_layout", "the planned MIG layout", f"NVML: {exc}", False, source,
                                  f"the MIG layout could not be read: {exc}"))
    return records


GROUPS = {
    "mig_layout": mig_layout_checks,
    "bios": bios_checks,
    "os": os_checks,
    "services": service_checks,
    "gpu": gpu_checks,
    "collector": collector_checks,
    "slurm": slurm_checks,
}


def run_groups(ctx, names):
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise ValueError(f"unknown acceptance check group(s) {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    records = []
    for name in names:
        records.extend(GROUPS[name](ctx))
    return records
