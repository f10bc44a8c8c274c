"""gdscheck -p: GPUDirect Storage platform check from the node's modules, cufile.json, IOMMU and ACS.

Lines a check can rely on: ` IOMMU: ...`, ` ACS: ...`, ` --Mellanox PeerDirect : Enabled|Disabled`,
` --rdma_device_status  : Up: N Down: M`, and the verdict `Platform verification succeeded` or
`Platform verification error :` followed by one indented reason per line (exit status 1).
"""

from __future__ import annotations

import json
import re

from .. import packages
from ..state import effective_hcas, visible_gpus

CUFILE = "/etc/cufile.json"


def _cufile(tool) -> tuple[dict | None, str]:
    path = tool.path(CUFILE)
    if not path.is_file():
        return None, f"{CUFILE} not found"
    # cufile.json carries // comments, as NVIDIA ships it.
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.MULTILINE)
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as exc:
        return None, f"{CUFILE}:{exc.lineno}: {exc.msg}"


def main(tool, argv: list[str]) -> int:
    if argv != ["-p"]:
        raise tool.unsupported(argv)
    state = tool.state()
    errors = []
    if "nvidia" not in state["modules"]:
        raise tool.fail("ERR: GPU driver not loaded (nvidia)", 1)
    if "nvidia_fs" not in state["modules"]:
        errors.append("nvidia_fs driver is not loaded")
    peerdirect = "nvidia_peermem" in state["modules"]
    config, config_error = _cufile(tool)
    if config_error:
        errors.append(config_error)
    properties = (config or {}).get("properties", {})
    addresses = properties.get("rdma_dev_addr_list", [])
    hcas = effective_hcas(state)
    up = sum(1 for hca in hcas for port in hca["ports"] if port["state"] == "Active")
    down = sum(1 for hca in hcas for port in hca["ports"] if port["state"] != "Active")
    cmdline = state["kernel"]["cmdline"].split()
    iommu_on = any(arg in cmdline for arg in ("intel_iommu=on", "amd_iommu=on")) and "iommu=pt" not in cmdline
    acs_enabled = [bridge["bdf"] for bridge in state.get("pcie_bridges", []) if int(bridge["acs_ctrl"], 16) & 0x1c]
    tool.print(" GDS release version: 1.9.1.3")
    tool.print(f" nvidia_fs version:  {'2.20' if 'nvidia_fs' in state['modules'] else 'not loaded'} libcufile version: 2.12")
    tool.print(" Platform: x86_64")
    tool.print(" =====================\n DRIVER CONFIGURATION:\n =====================")
    # A parallel filesystem is supported once its GDS-enabled client modules are installed; NFS over
    # RDMA needs only the in-box kernel.
    loadable = packages.loadable_modules(state)
    for label, module in (("NVMe", None), ("NVMeOF", None), ("SCSI", None), ("DDN EXAScaler", "lustre"),
                          ("IBM Spectrum Scale", None), ("NFS", "rpcrdma"), ("BeeGFS", "beegfs"), ("WekaFS", None)):
        tool.print(f" {label:<19}: {'Supported' if module and module in loadable else 'Unsupported'}")
    tool.print(f" Userspace RDMA     : {'Supported' if peerdirect and addresses else 'Unsupported'}")
    tool.print(f" --Mellanox PeerDirect : {'Enabled' if peerdirect else 'Disabled'}")
    tool.print(f" --rdma library        : {'Loaded (libcufile_rdma.so)' if addresses else 'Not Loaded'}")
    tool.print(f" --rdma devices        : {'Configured' if addresses else 'Not configured'}")
    tool.print(f" --rdma_device_status  : Up: {up} Down: {down}")
    tool.print(" =====================\n CUFILE CONFIGURATION:\n =====================")
    for key in sorted(properties):
        value = properties[key]
        tool.print(f" properties.{key} : {' '.join(map(str, value)) if isinstance(value, list) else json.dumps(value)}")
    tool.print(" =========\n GPU INFO:\n =========")
    for gpu in visible_gpus(state):
        tool.print(f" GPU index {gpu['index']} {gpu['name']} bar:1 bar size (MiB):131072 supports GDS, "
                   f"IOMMU State: {'Enabled' if iommu_on else 'Disabled'}")
    tool.print(" ==============\n PLATFORM INFO:\n ==============")
    tool.print(f" IOMMU: {'enabled' if iommu_on else 'Pass-through or disabled'}")
    tool.print(f" ACS: {'enabled on ' + str(len(acs_enabled)) + ' PCIe bridge(s): ' + ', '.join(acs_enabled) if acs_enabled else 'disabled on all PCIe bridges'}")
    tool.print(" Nvidia Driver Info Status: Supported(Nvidia Open Driver Installed)")
    tool.print(f" Cuda Driver Version Installed:  {state['driver'].get('cuda_version_int', 0)}")
    if iommu_on:
        errors.append("IOMMU is enabled without passthrough: set iommu=pt for GPUDirect peer-to-peer DMA")
    if acs_enabled:
        errors.append(f"ACS is enabled on {len(acs_enabled)} PCIe bridge(s) ({acs_enabled[0]}, ...): peer-to-peer "
                      "traffic is redirected to the root complex")
    if not peerdirect:
        errors.append("nvidia_peermem is not loaded: GPUDirect RDMA is unavailable")
    if down:
        errors.append(f"{down} RDMA port(s) down")
    if errors:
        tool.print(" Platform verification error :")
        for error in errors:
            tool.print(f"   {error}")
        return 1
    tool.print(" Platform verification succeeded")
    return 0
