"""A simulated node's factory state, derived from its platform profile (firmware/platforms/<id>.yaml).

Identifiers are deterministic (derived from the node name), so preparing the same appliance twice, on
any machine, yields the same GPU UUIDs, serials and port GUIDs.
Pure Python, no Django: see state.py.
"""

from __future__ import annotations

import hashlib
import uuid

from . import cpus, packages
from .state import FORMAT_VERSION, idle_load

NAMESPACE = uuid.UUID("5b7c7e4e-9d1c-4f0e-8a53-1a6f0c1e2d3b")

# HGX H100 baseboard: the PCI bus of each GPU (as on a DGX H100), its rail HCA sits behind the same switch.
GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
SM_COUNT = {"hopper": 132, "ampere": 108}
# Field figures of a healthy node (what the acceptance gates are compared with).
NOMINAL_BENCHMARKS = {
    "all_reduce_perf": {"hopper": 482.4, "ampere": 231.0},   # GB/s bus bandwidth, 8 GPUs, 8 GiB messages
    "ib_write_bw": 392.6,                                      # Gb/s per NDR port with GPUDirect
    "storage_read": 21.4,                                      # GB/s per node
}
FACTORY_ACS_CTRL = "001d"  # SrcValid ReqRedir CmpltRedir UpstreamFwd: the kernel's default on PCIe switch ports
FACTORY_CMDLINE = f"BOOT_IMAGE=/boot/vmlinuz-{packages.KERNEL_RELEASE} root=/dev/mapper/vg0-root ro quiet splash"


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(str(part) for part in parts).encode()).hexdigest()


def gpu_uuid(node_name: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(NAMESPACE, f"{node_name}/gpu/{index}"))


def mig_uuid(gpu_uuid_value: str, gi_id: int, ci_id: int) -> str:
    return "MIG-" + str(uuid.uuid5(NAMESPACE, f"{gpu_uuid_value}/{gi_id}/{ci_id}"))


def system_uuid(node_name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{node_name}/system"))


def guid(node_name: str, device: str) -> str:
    # Mellanox OUI 0x248a07, the rest from the node and device.
    return "0x248a07" + _digest(node_name, device)[:10]


class PlatformError(ValueError):
    """A platform profile the simulated hardware cannot be built from; the message names the field."""


def mig_profiles(gpu_spec: dict) -> list[dict]:
    """The MIG profiles of one GPU of the platform, as the node's state holds them (what nvidia-smi and
    the simulated NVML read), from the one profile table (appliance/partitioning/profiles.py) by the
    platform's `gpu.mig_model`. Memory per instance is the board's memory times memory slices / 8.

    profiles.py is imported here, not at the top: the node's copy of the simulated commands imports this
    module (gpu_ops uses mig_uuid) but never builds a factory state, and carries only the simulation."""
    from appliance.partitioning import profiles as table

    model_id = gpu_spec.get("mig_model")
    if not model_id:
        raise PlatformError("gpu.mig_model: missing, and gpu.mig_capable is true (name the MIG profile table's "
                            f"model: {', '.join(table.MODELS)})")
    try:
        gpu_model = table.model(str(model_id))
    except table.UnknownModel as exc:
        raise PlatformError(f"gpu.mig_model: {exc.args[0]}") from None
    memory_mib = int(gpu_spec.get("memory_mib", 0))
    whole_sms = SM_COUNT.get(gpu_spec.get("architecture", "hopper"), 132)
    return [{
        "name": profile.name, "nvml_profile": profile.nvml_profile, "id": profile.profile_id,
        "compute_slices": profile.compute_slices, "memory_slices": profile.memory_slices,
        "max": profile.max_instances, "placements": list(profile.placements),
        "memory_mib": memory_mib * profile.memory_slices // table.MEMORY_SLICES,
        # The table leaves out counts NVIDIA does not publish (B200): the compute share of the board's SMs.
        "multiprocessors": (profile.multiprocessors if profile.multiprocessors is not None
                            else whole_sms * profile.compute_slices // table.COMPUTE_SLICES),
        "media_extensions": profile.media_extensions,
    } for profile in gpu_model.profiles]


def _gpu(node_name: str, index: int, spec: dict, software: dict) -> dict:
    bus = GPU_BUSES[index % len(GPU_BUSES)] + 0x100 * (index // len(GPU_BUSES))
    memory_bytes = int(spec["memory_mib"]) * 2**20
    pcie = spec.get("pcie", {})
    nvlink = spec.get("nvlink", {})
    architecture = spec.get("architecture", "hopper")
    capability = str(spec.get("compute_capability", "9.0")).split(".")
    return {
        "index": index,
        "name": spec["model"],
        "product": spec.get("product", ""),
        "uuid": gpu_uuid(node_name, index),
        "serial": str(1650000000000 + int(_digest(node_name, "serial", index)[:8], 16) % 10**9),
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "pci_device_id": 0x233010DE,
        "pci_subsystem_id": 0x16C110DE,
        "memory_total_bytes": memory_bytes,
        "memory_reserved_bytes": 0,
        "memory_used_bytes": 0,
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "power_draw_mw": 71000 + 1000 * (index % 3),
        "power_limit_mw": int(spec.get("power_limit_w", 700)) * 1000,
        "temperature_c": 31 + index % 4,
        "persistence_mode": False,
        "multiprocessors": SM_COUNT.get(architecture, 132),
        "compute_capability": [int(capability[0]), int(capability[1]) if len(capability) > 1 else 0],
        "pcie": {"generation_current": int(pcie.get("generation", 5)), "generation_max": int(pcie.get("generation", 5)),
                 "width_current": int(pcie.get("width", 16)), "width_max": int(pcie.get("width", 16))},
        "nvlinks": ["up"] * int(nvlink.get("links_per_gpu", 0)),
        "retired_pages": {"single_bit": [], "double_bit": [], "pending": False},
        "xid_errors": [],
        "mig": {"capable": bool(spec.get("mig_capable")), "current": False, "pending": False,
                "profiles": mig_profiles(spec) if spec.get("mig_capable") else [], "gpu_instances": []},
        "numa_node": 0 if index < 4 else 1,
        **idle_load(),
    }


def _hca(node_name: str, port_spec: dict, hca_spec: dict, gpu_count: int, position: int) -> dict:
    closest = port_spec.get("closest_gpu")
    if closest is not None and gpu_count:
        bus = GPU_BUSES[int(closest) % len(GPU_BUSES)] + 2
    else:
        bus = 0x41 + 0x20 * position
    node_guid = guid(node_name, port_spec["device"])
    return {
        "device": port_spec["device"],
        "model": hca_spec.get("model", "ConnectX-7"),
        "firmware_version": "28.41.1000",
        "node_guid": node_guid,
        "pci_bus_id": f"0000:{bus:02x}:00.0",
        "closest_gpu": closest,
        "numa_node": 0 if closest is None or int(closest) < 4 else 1,
        "ports": [{
            "port": int(port_spec.get("port", 1)),
            "guid": node_guid,
            # The fabric's subnet manager (opensm on the management node, or the site's external one)
            # brings a cabled port up: the simulated fabric is cabled and managed from the start, and
            # faults take a port down or train it at a lower rate.
            "state": "Active",
            "physical_state": "LinkUp",
            "rate_gbps": int(hca_spec.get("rate_gbps", 400)),
            "link_layer": hca_spec.get("link_layer", "InfiniBand"),
            "lid": 0,
            "sm_lid": 1,
            # Data counters count 4-octet words, as the kernel's port_xmit_data/port_rcv_data do.
            "counters": {"symbol_error": 0, "link_downed": 0, "link_error_recovery": 0,
                         "port_rcv_errors": 0, "port_xmit_discards": 0, "excessive_buffer_overrun_errors": 0,
                         "port_xmit_data": 0, "port_rcv_data": 0, "port_xmit_packets": 0, "port_rcv_packets": 0,
                         "port_xmit_wait": 0},
        }],
    }


def _pcie_bridges(gpu_count: int, hca_count: int) -> list[dict]:
    """The PCIe switch ports between the CPUs and each GPU/HCA pair: ACS is on at the factory (the
    kernel default on Ubuntu), which forces peer-to-peer traffic up to the root complex."""
    bridges = []
    for slot in range(max(gpu_count, hca_count, 1) if (gpu_count or hca_count) else 0):
        bus = GPU_BUSES[slot % len(GPU_BUSES)] - 1
        for device in (0, 1, 2):
            bridges.append({"bdf": f"0000:{bus:02x}:{device:02x}.0", "class": "0604", "acs_ctrl": FACTORY_ACS_CTRL})
    return bridges


def factory_state(node_name: str, role: str, platform: dict, bios_factory: dict) -> dict:
    gpu_spec = platform.get("gpu") or {}
    gpu_count = int(gpu_spec.get("count", 0) or 0)
    hca_spec = platform.get("hcas") or {}
    software = dict(platform.get("software") or {})
    gpus = [_gpu(node_name, index, gpu_spec, software) for index in range(gpu_count)]
    hcas = [_hca(node_name, port, hca_spec, gpu_count, position)
            for position, port in enumerate(hca_spec.get("ports") or [])]
    for gpu in gpus:
        gpu["nvlink_peers"] = [other["index"] for other in gpus if other is not gpu] if gpu["nvlinks"] else []
    architecture = gpu_spec.get("architecture", "hopper")
    return {
        "format": FORMAT_VERSION,
        "node": node_name,
        "role": role,
        "platform": platform.get("id", ""),
        "software": software,
        "nvswitch_count": int(gpu_spec.get("nvswitch_count") or 0),
        "nvlink_topology": (gpu_spec.get("nvlink") or {}).get("topology", ""),
        "cpu": cpus.topology(platform),
        "kernel": {"release": packages.KERNEL_RELEASE, "cmdline": FACTORY_CMDLINE, "cmdline_configured": ""},
        "driver": {},
        "gpus": gpus,
        "hcas": hcas,
        "pcie_bridges": _pcie_bridges(gpu_count, len(hcas)),
        "packages": dict(packages.FACTORY_PACKAGES),
        # A factory Ubuntu loads the in-box drivers of the hardware it finds: nouveau grabs the GPUs.
        "modules": (["drm", "nouveau"] if gpu_count else []) + (["ib_core", "mlx5_core", "mlx5_ib"] if hcas else []),
        "services": {unit: dict(value) for unit, value in packages.FACTORY_UNITS.items()},
        "unit_files": {},
        "mounts": [
            {"source": "/dev/mapper/vg0-root", "target": "/", "fstype": "ext4", "options": ["rw", "relatime"]},
        ],
        "sysctls": {"vm.swappiness": "60", "net.core.rmem_max": "212992", "net.core.wmem_max": "212992",
                    "kernel.numa_balancing": "1"},
        "cpu_governor": "powersave",
        "time": {"synchronised": False, "source": "systemd-timesyncd"},
        "benchmarks": {
            "all_reduce_perf": NOMINAL_BENCHMARKS["all_reduce_perf"].get(architecture, 0.0) if gpu_count >= 2 else 0.0,
            "ib_write_bw": NOMINAL_BENCHMARKS["ib_write_bw"] * int(hca_spec.get("rate_gbps", 400)) / 400,
            "storage_read": NOMINAL_BENCHMARKS["storage_read"],
        },
        "bmc": {"system_uuid": system_uuid(node_name), "bios": dict(bios_factory), "power": "On"},
        "faults": [],
    }
