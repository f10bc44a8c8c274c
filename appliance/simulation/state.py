"""The hardware and OS state of one simulated node: one JSON file inside the node's sysroot.

`<sysroot>/var/lib/appliance-sim/state.json` is the single source of truth. Readers take a shared
fcntl lock, writers an exclusive one and replace the file atomically, so a simulated tool, the
simulated NVML, the BMC emulator and the suite can all act on one node at the same time.

Every write also regenerates files derived from the state: `nvml.state` (the line-oriented view the C
library parses, see nvml/simnvml.c) and `<sysroot>/proc/cmdline`, `<sysroot>/proc/modules`,
`<sysroot>/proc/mounts` (what a playbook would read from /proc on a real machine), and the views of the
load the workload model (workload.py) puts on the node: `<sysroot>/proc/stat`, the Lustre client's llite
stats, NFS `/proc/self/mountstats`, `/proc/diskstats` and the GPU job map `/run/appliance/gpu-owners.json`.

This module is pure Python without Django: the simulated tools and the BMC emulator's configuration
import it in processes that never load the suite.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from . import cpus

STATE_RELATIVE = Path("var/lib/appliance-sim/state.json")
SYSROOT_ENV = "APPLIANCE_SIM_SYSROOT"
FORMAT_VERSION = 1


class StateError(Exception):
    """The node's state file is missing or unreadable."""


class OutsideSysroot(StateError):
    """A path that would leave the node's sysroot (through '..' or a symbolic link)."""


def state_path(sysroot: str | os.PathLike) -> Path:
    return Path(sysroot) / STATE_RELATIVE


def node_path(sysroot: str | os.PathLike, absolute: str) -> Path:
    """The file of the simulated node that the node itself names `absolute`, resolved (symbolic links
    included) and refused with OutsideSysroot when it is not inside the sysroot: a simulated node
    never touches the host it runs on, whatever path a playbook, a unit file or an argument gives."""
    root = Path(os.path.realpath(sysroot))
    text = os.fspath(absolute)
    if not text.startswith("/") or "\x00" in text:
        raise OutsideSysroot(f"{text!r}: not an absolute path of the node")
    resolved = Path(os.path.realpath(root / text.lstrip("/")))
    if resolved != root and root not in resolved.parents:
        raise OutsideSysroot(f"{text}: resolves to {resolved}, outside the node's sysroot {root}: refused")
    # Under the sysroot as the caller names it, so that paths relative to it stay meaningful.
    return Path(sysroot) / resolved.relative_to(root)


def sysroot_from_environment() -> Path:
    value = os.environ.get(SYSROOT_ENV, "")
    if not value:
        raise StateError(f"{SYSROOT_ENV} is not set: this command only runs on a simulated node")
    root = Path(value)
    if not state_path(root).is_file():
        raise StateError(f"{state_path(root)}: no simulated node state here (run `manage.py simulation prepare`)")
    return root


@contextlib.contextmanager
def _locked(sysroot: Path, exclusive: bool) -> Iterator[None]:
    lock_file = state_path(sysroot).with_suffix(".lock")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _read(sysroot: Path) -> dict:
    path = state_path(sysroot)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StateError(f"{path}: no simulated node state here (run `manage.py simulation prepare`)") from None
    except json.JSONDecodeError as exc:
        raise StateError(f"{path}:{exc.lineno}: state file is not valid JSON: {exc.msg}") from None


def load(sysroot: str | os.PathLike) -> dict:
    root = Path(sysroot)
    with _locked(root, exclusive=False):
        return _read(root)


def exists(sysroot: str | os.PathLike) -> bool:
    return state_path(sysroot).is_file()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _write(sysroot: Path, state: dict) -> None:
    _atomic_write(state_path(sysroot), json.dumps(state, indent=1, sort_keys=True) + "\n")
    _write_derived(sysroot, state)


def write_locked(sysroot: str | os.PathLike, state: dict) -> None:
    """Write the state from inside an `update()` block, before handing the lock to another process
    (a systemd unit running simulated commands); the block must then end with an exception."""
    _write(Path(sysroot), state)


def create(sysroot: str | os.PathLike, state: dict) -> bool:
    """Write the initial state unless the node already has one (a node's state is never reset)."""
    root = Path(sysroot)
    with _locked(root, exclusive=True):
        if state_path(root).exists():
            return False
        _write(root, state)
        return True


@contextlib.contextmanager
def update(sysroot: str | os.PathLike) -> Iterator[dict]:
    """Read, let the caller change the dict, write it back; all under the exclusive lock.
    An exception inside the block leaves the file untouched."""
    root = Path(sysroot)
    with _locked(root, exclusive=True):
        state = _read(root)
        yield state
        _write(root, state)


def refresh_derived(sysroot: str | os.PathLike) -> None:
    """Regenerate the derived files (after the NVML sidecar format changed, for instance)."""
    root = Path(sysroot)
    with _locked(root, exclusive=True):
        _write_derived(root, _read(root))


# ---- faults ---------------------------------------------------------------------------------------

def faults(state: dict, kind: str) -> list[dict]:
    return [fault for fault in state.get("faults", []) if fault.get("kind") == kind]


def has_fault(state: dict, kind: str, **match) -> bool:
    return any(all(str(fault.get(key)) == str(value) for key, value in match.items())
               for fault in faults(state, kind))


def xid_events(state: dict) -> list[tuple[str, int, str]]:
    """(PCI bus id, Xid, text) the driver logged since boot: recorded ones, plus Xid 79 for a GPU a
    `gpu_missing` fault took off the bus."""
    events = []
    missing = {int(fault["index"]) for fault in faults(state, "gpu_missing")}
    for gpu in state.get("gpus", []):
        bus = gpu["pci_bus_id"][4:]
        for xid in gpu.get("xid_errors", []):
            events.append((bus, int(xid["xid"]), xid.get("text", "")))
        if gpu["index"] in missing and "nvidia" in state.get("modules", []):
            events.append((bus, 79, "pid=0, name=nvidia, GPU has fallen off the bus."))
    return events


def visible_gpus(state: dict) -> list[dict]:
    """GPUs the driver sees: a `gpu_missing` fault hides one (fallen off the bus)."""
    missing = {int(fault["index"]) for fault in faults(state, "gpu_missing")}
    return [gpu for gpu in state.get("gpus", []) if gpu["index"] not in missing]


PORT_STATES = {"Down": 1, "Initializing": 2, "Armed": 3, "Active": 4}
PHYSICAL_STATES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "LinkUp": 5}
RATE_LANES = {400: ("4X", "NDR"), 200: ("4X", "HDR"), 100: ("4X", "EDR"), 56: ("4X", "FDR"), 40: ("4X", "QDR"),
              10: ("1X", "SDR")}
# The names the kernel writes in ports/<n>/state (ib_port_state_to_str), by ibstat's names.
SYSFS_PORT_STATES = {"Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED", "Active": "ACTIVE"}


def sysfs_guid(guid: str) -> str:
    """0x946dae0300d2a0d2 -> 946d:ae03:00d2:a0d2, as sysfs writes node_guid and the GUID half of a GID."""
    digits = guid.lower().removeprefix("0x").rjust(16, "0")
    return ":".join(digits[i:i + 4] for i in range(0, 16, 4))


def effective_hcas(state: dict) -> list[dict]:
    """HCAs with their ports as the hardware reports them now, injected faults applied
    (`port_down`: no link; `port_rate`: trained at a lower rate)."""
    result = []
    for hca in state.get("hcas", []):
        ports = []
        for port in hca["ports"]:
            port = dict(port)
            if has_fault(state, "port_down", device=hca["device"]):
                port.update(state="Down", physical_state="Polling", rate_gbps=10)
            for fault in faults(state, "port_rate"):
                if fault.get("device") == hca["device"]:
                    port["rate_gbps"] = int(fault["rate_gbps"])
            port["width"], port["speed"] = RATE_LANES.get(port["rate_gbps"], ("4X", "unknown"))
            port["state_code"] = PORT_STATES.get(port["state"], 1)
            port["physical_state_code"] = PHYSICAL_STATES.get(port["physical_state"], 3)
            ports.append(port)
        result.append({**hca, "ports": ports})
    return result


# ---- derived files ----------------------------------------------------------------------------------

# The load of an idle GPU (a node state written before the workload model, or no workload running):
# H100 SXM5 clocks, the GPU-idle clock event reason, nothing counted yet.
IDLE_CLOCKS_MHZ = {"graphics": 345, "sm": 345, "memory": 2619}
MAX_CLOCKS_MHZ = {"graphics": 1980, "sm": 1980, "memory": 2619}
CLOCK_EVENT_GPU_IDLE = 0x1
ACTIVITIES = ("graphics", "sm", "sm_occupancy", "tensor", "dram")
THROUGHPUTS = ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
COUNTERS = tuple(f"{name}_active_us" if name != "sm_occupancy" else "sm_occupancy_us" for name in ACTIVITIES) + \
    tuple(f"{name}_bytes" for name in THROUGHPUTS) + ("energy_mj",)


def idle_load() -> dict:
    """The per-GPU load fields of an idle GPU (hardware.py puts them in a node's factory state)."""
    return {
        "clocks_mhz": dict(IDLE_CLOCKS_MHZ), "max_clocks_mhz": dict(MAX_CLOCKS_MHZ),
        "clock_event_reasons": CLOCK_EVENT_GPU_IDLE,
        "activity": {name: 0.0 for name in ACTIVITIES},
        "throughput": {name: 0 for name in THROUGHPUTS},
        "counters": {name: 0 for name in COUNTERS},
        "ecc_errors": {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 0,
                       "uncorrected_aggregate": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    }


def _load_lines(slot: int, gpu: dict) -> list[str]:
    """The load of one GPU for simnvml.c: clocks, event reasons, activity (ppm = microseconds active per
    second) and bytes per second as rates, the cumulative counters at the state's counters_ns."""
    idle = idle_load()
    clocks, maximum = gpu.get("clocks_mhz") or idle["clocks_mhz"], gpu.get("max_clocks_mhz") or idle["max_clocks_mhz"]
    activity, throughput = gpu.get("activity") or idle["activity"], gpu.get("throughput") or idle["throughput"]
    counters, ecc = gpu.get("counters") or idle["counters"], gpu.get("ecc_errors") or idle["ecc_errors"]
    remapped = gpu.get("remapped_rows") or idle["remapped_rows"]
    lines = [f"gpu {slot} clock_{name} {int(clocks[key])}" for name, key in
             (("sm", "sm"), ("mem", "memory"), ("graphics", "graphics"))]
    lines += [f"gpu {slot} clock_{name}_max {int(maximum[key])}" for name, key in
              (("sm", "sm"), ("mem", "memory"), ("graphics", "graphics"))]
    lines.append(f"gpu {slot} event_reasons {int(gpu.get('clock_event_reasons', CLOCK_EVENT_GPU_IDLE))}")
    lines += [f"gpu {slot} {name}_ppm {round(float(activity.get(name, 0.0)) * 1_000_000)}" for name in ACTIVITIES]
    lines += [f"gpu {slot} {name}_rate {int(throughput.get(name, 0))}" for name in THROUGHPUTS]
    lines += [f"gpu {slot} {name} {int(counters.get(name, 0))}" for name in COUNTERS]
    lines += [f"gpu {slot} ecc_{name} {int(ecc.get(name, 0))}" for name in
              ("corrected_volatile", "uncorrected_volatile", "corrected_aggregate", "uncorrected_aggregate")]
    lines += [f"gpu {slot} remapped_{name} {int(remapped.get(name, 0))}" for name in
              ("correctable", "uncorrectable", "pending", "failure")]
    return lines


def _nvml_sidecar(state: dict) -> str:
    """The NVML view of the state, one fact per line: `<kind> <fields...>`, the last field of a
    `text` line runs to the end of the line. nvml/simnvml.c parses exactly this."""
    software = state.get("driver") or {}
    loaded = "nvidia" in state.get("modules", [])
    lines = [f"system driver_loaded {1 if loaded else 0}"]
    if software.get("version"):
        lines.append(f"text system driver_version {software['version']}")
        lines.append(f"system cuda_version {software.get('cuda_version_int', 0)}")
    gpus = visible_gpus(state)
    lines.append(f"system gpu_count {len(gpus)}")
    lines.append(f"system counters_ns {int(state.get('counters_ns', 0))}")
    for slot, gpu in enumerate(gpus):
        mig = gpu.get("mig", {})
        lines += [
            f"gpu {slot} index {gpu['index']}",
            f"text gpu {slot} name {gpu['name']}",
            f"text gpu {slot} uuid {gpu['uuid']}",
            f"text gpu {slot} serial {gpu['serial']}",
            f"text gpu {slot} pci_bus_id {gpu['pci_bus_id']}",
            f"gpu {slot} pci_device_id {gpu['pci_device_id']}",
            f"gpu {slot} pci_subsystem_id {gpu['pci_subsystem_id']}",
            f"gpu {slot} memory_total {gpu['memory_total_bytes']}",
            f"gpu {slot} memory_reserved {gpu['memory_reserved_bytes']}",
            f"gpu {slot} memory_used {gpu['memory_used_bytes']}",
            f"gpu {slot} util_gpu {gpu['utilization_gpu']}",
            f"gpu {slot} util_memory {gpu['utilization_memory']}",
            f"gpu {slot} power_mw {gpu['power_draw_mw']}",
            f"gpu {slot} power_limit_mw {gpu['power_limit_mw']}",
            f"gpu {slot} temperature {gpu['temperature_c']}",
            f"gpu {slot} persistence {1 if gpu['persistence_mode'] else 0}",
            f"gpu {slot} mig_capable {1 if mig.get('capable') else 0}",
            f"gpu {slot} mig_current {1 if mig.get('current') else 0}",
            f"gpu {slot} mig_pending {1 if mig.get('pending') else 0}",
            f"gpu {slot} pcie_gen_current {gpu['pcie']['generation_current']}",
            f"gpu {slot} pcie_gen_max {gpu['pcie']['generation_max']}",
            f"gpu {slot} pcie_width_current {gpu['pcie']['width_current']}",
            f"gpu {slot} pcie_width_max {gpu['pcie']['width_max']}",
            f"gpu {slot} retired_sbe {len(gpu['retired_pages'].get('single_bit', []))}",
            f"gpu {slot} retired_dbe {len(gpu['retired_pages'].get('double_bit', []))}",
            f"gpu {slot} retired_pending {1 if gpu['retired_pages'].get('pending') else 0}",
            f"gpu {slot} multiprocessors {gpu['multiprocessors']}",
            f"gpu {slot} cc_major {gpu['compute_capability'][0]}",
            f"gpu {slot} cc_minor {gpu['compute_capability'][1]}",
            f"gpu {slot} nvlink_count {len(gpu['nvlinks'])}",
        ]
        lines += _load_lines(slot, gpu)
        for link, link_state in enumerate(gpu["nvlinks"]):
            lines.append(f"nvlink {slot} {link} {1 if link_state == 'up' else 0}")
        for profile in mig.get("profiles", []):
            lines.append(
                f"text profile {slot} {profile['nvml_profile']} {profile['id']} {profile['compute_slices']} "
                f"{profile['memory_slices']} {profile['max']} {profile['memory_mib']} "
                f"{profile['multiprocessors']} {1 if profile.get('media_extensions') else 0} "
                f"{','.join(str(p) for p in profile['placements'])} {profile['name']}")
        for instance in mig.get("gpu_instances", []):
            lines.append(f"gi {slot} {instance['id']} {instance['profile_id']} {instance['placement_start']} "
                         f"{instance['placement_size']}")
            for compute in instance.get("compute_instances", []):
                lines.append(f"text ci {slot} {instance['id']} {compute['id']} {compute['profile_id']} "
                             f"{compute['slices']} {compute['uuid']}")
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    # Most changes touch one part of the state: leaving the other views alone keeps a state write
    # cheap and lets the NVML library keep its parsed copy while nvml.state is unchanged.
    try:
        if path.read_text() == text:
            return
    except (FileNotFoundError, NotADirectoryError):
        pass
    _atomic_write(path, text)


def _lustre_stats(state: dict, io: dict) -> str:
    """A Lustre client's llite stats (lprocfs format of Lustre 2.15: name, count, unit, min, max, sum)."""
    at = int(state.get("counters_ns", 0))
    lines = [f"{'snapshot_time':<25} {at // 10**9}.{at % 10**9:09d} secs.nsecs"]
    for kind in ("read", "write"):
        operations, total = int(io.get(f"{kind}_ops", 0)), int(io.get(f"{kind}_bytes", 0))
        if operations:
            lines.append(f"{kind + '_bytes':<25} {operations} samples [bytes] {min(total, 4096)} "
                         f"{min(total, 16 * 2**20)} {total}")
    return "\n".join(lines) + "\n"


def _mountstats(state: dict, io_by_mount: dict) -> str:
    """/proc/self/mountstats: one `device` line per mount, and the NFS client's counters for NFS mounts
    (bytes: normal read, normal write, direct read, direct write, server read, server write, pages read,
    pages written)."""
    lines = []
    for mount in state.get("mounts", []):
        lines.append(f"device {mount['source']} mounted on {mount['target']} with fstype {mount['fstype']}"
                     + (" statvers=1.1" if mount["fstype"].startswith("nfs") else ""))
        if mount["fstype"].startswith("nfs"):
            io = io_by_mount.get(mount["target"], {})
            read, written = int(io.get("read_bytes", 0)), int(io.get("write_bytes", 0))
            lines.append(f"\topts:\t{','.join(mount['options'])}")
            lines.append(f"\tbytes:\t{read} {written} 0 0 {read} {written} {read // 4096} {written // 4096}")
            lines.append("")
    return "\n".join(lines) + "\n"


def _write_load_views(sysroot: Path, state: dict) -> None:
    """The kernel's views of the load the workload model puts on the node (nothing before it runs)."""
    host = state.get("host") or {}
    if "cpu_ticks" in host:
        ticks = host["cpu_ticks"]
        fields = " ".join(str(int(ticks.get(name, 0))) for name in
                          ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"))
        _write_if_changed(sysroot / "proc" / "stat", f"cpu  {fields}\nprocs_running {int(host.get('running', 1))}\n"
                          f"procs_blocked {int(host.get('blocked', 0))}\n")
    io_by_mount = state.get("filesystem_io") or {}
    if io_by_mount:
        _write_if_changed(sysroot / "proc" / "self" / "mountstats", _mountstats(state, io_by_mount))
        for mount in state.get("mounts", []):
            if mount["fstype"] == "lustre" and mount["target"] in io_by_mount:
                fsname = mount["source"].rsplit(":/", 1)[-1].strip("/") or "lustre"
                instance = hashlib.sha256(f"{state.get('node')}{mount['target']}".encode()).hexdigest()[:16]
                _write_if_changed(sysroot / "sys" / "kernel" / "debug" / "lustre" / "llite" / f"{fsname}-{instance}"
                                  / "stats", _lustre_stats(state, io_by_mount[mount["target"]]))
    disks = state.get("disk_io") or {}
    if disks:
        # /proc/diskstats: major minor name, reads completed, merged, sectors read, ms reading, writes
        # completed, merged, sectors written, ms writing, I/Os in progress, ms doing I/O, weighted ms.
        _write_if_changed(sysroot / "proc" / "diskstats", "".join(
            f"{259:>4} {index:>7} {name} {int(io.get('reads', 0))} 0 {int(io.get('read_bytes', 0)) // 512} "
            f"{int(io.get('read_ms', 0))} {int(io.get('writes', 0))} 0 {int(io.get('write_bytes', 0)) // 512} "
            f"{int(io.get('write_ms', 0))} 0 {int(io.get('io_ms', 0))} {int(io.get('io_ms', 0))}\n"
            for index, (name, io) in enumerate(sorted(disks.items()))))
    if "gpu_owners" in state:
        _write_if_changed(sysroot / "run" / "appliance" / "gpu-owners.json", json.dumps(
            {"updated": int(state.get("counters_ns", 0)) // 10**9, "gpus": state["gpu_owners"]}, sort_keys=True) + "\n")


def _write_derived(sysroot: Path, state: dict) -> None:
    _write_if_changed(state_path(sysroot).with_name("nvml.state"), _nvml_sidecar(state))
    kernel = state.get("kernel", {})
    # The kernel log as /dev/kmsg hands it out (priority,sequence,microseconds,-;message).
    _write_if_changed(sysroot / "dev" / "kmsg", "".join(
        f"3,{number},{1000000 + number},-;NVRM: Xid (PCI:{bus}): {xid}, {text}\n"
        for number, (bus, xid, text) in enumerate(xid_events(state), 1)))
    _write_if_changed(sysroot / "proc" / "cmdline", kernel.get("cmdline", "") + "\n")
    if state.get("cpu"):
        _write_if_changed(sysroot / "proc" / "cpuinfo", cpus.cpuinfo(state["cpu"]))
    _write_if_changed(sysroot / "proc" / "modules",
                  "".join(f"{module} 16384 0 - Live 0x0000000000000000\n" for module in state.get("modules", [])))
    _write_if_changed(sysroot / "proc" / "mounts",
                  "".join(f"{mount['source']} {mount['target']} {mount['fstype']} {','.join(mount['options'])} 0 0\n"
                          for mount in state.get("mounts", [])))
    _write_load_views(sysroot, state)
    # The same directory layout as sysfs, for the port counters and state the fabric checks read.
    # The kernel's formats (drivers/infiniband/core/sysfs.c); appliance.hgx.ib_ports reads these, not ibstat.
    for hca in effective_hcas(state):
        device = sysroot / "sys" / "class" / "infiniband" / hca["device"]
        _write_if_changed(device / "node_guid", sysfs_guid(hca["node_guid"]) + "\n")
        for port in hca["ports"]:
            base = device / "ports" / str(port["port"])
            _write_if_changed(base / "gids" / "0", "fe80:0000:0000:0000:" + sysfs_guid(port["guid"]) + "\n")
            _write_if_changed(base / "state", f"{port['state_code']}: {SYSFS_PORT_STATES.get(port['state'], port['state'].upper())}\n")
            _write_if_changed(base / "phys_state", f"{port['physical_state_code']}: {port['physical_state']}\n")
            _write_if_changed(base / "rate", f"{port['rate_gbps']} Gb/sec ({port['width']} {port['speed']})\n")
            _write_if_changed(base / "link_layer", f"{port['link_layer']}\n")
            for counter, value in port["counters"].items():
                _write_if_changed(base / "counters" / counter, f"{value}\n")
