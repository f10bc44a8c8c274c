"""setpci (the ACS control register of PCIe bridges) and lspci (devices, -vvv shows ACSCtl)."""

from __future__ import annotations

import re

from ..state import effective_hcas, visible_gpus

ACS_REGISTER = re.compile(r"^(?:ECAP_ACS|ECAP0?D|ECAP0x0?d)\+(?:0x)?6\.w(?:=(?:0x)?([0-9a-fA-F]{1,4})(?::([0-9a-fA-F]{1,4}))?)?$")
ACS_BITS = (("SrcValid", 0x1), ("TransBlk", 0x2), ("ReqRedir", 0x4), ("CmpltRedir", 0x8), ("UpstreamFwd", 0x10),
            ("EgressCtrl", 0x20), ("DirectTrans", 0x40))


def _short(bdf: str) -> str:
    return bdf[5:] if bdf.startswith("0000:") else bdf


def devices(state: dict) -> list[dict]:
    listed = [{"bdf": bridge["bdf"], "class": "0604", "description": "PCI bridge: PLX Technology, Inc. PEX 89144",
               "acs_ctrl": bridge["acs_ctrl"]} for bridge in state.get("pcie_bridges", [])]
    listed += [{"bdf": "0000:" + gpu["pci_bus_id"][9:].lower(), "class": "0302",
                "description": f"3D controller: NVIDIA Corporation GH100 [{gpu['product'] or gpu['name']}] (rev a1)"}
               for gpu in visible_gpus(state)]
    listed += [{"bdf": hca["pci_bus_id"], "class": "0207",
                "description": "Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]"}
               for hca in effective_hcas(state)]
    return sorted(listed, key=lambda device: device["bdf"])


def _matches(device: dict, slot: str | None, vendor_filter: str | None) -> bool:
    if slot is not None and _short(device["bdf"]).lower() != _short(slot).lower():
        return False
    if vendor_filter is not None:
        parts = vendor_filter.split(":")
        wanted_class = parts[2] if len(parts) > 2 else ""
        if wanted_class not in ("", "*") and wanted_class.lower() != device["class"]:
            return False
    return True


def _setpci(tool, argv: list[str]) -> int:
    slot = vendor_filter = None
    operations = []
    iterator = iter(argv)
    for arg in iterator:
        if arg == "-s":
            slot = next(iterator, "")
        elif arg == "-d":
            vendor_filter = next(iterator, "")
        elif arg in ("-v", "-D"):
            continue
        elif arg.startswith("-"):
            raise tool.unsupported(argv)
        else:
            operations.append(arg)
    if not operations or (slot is None and vendor_filter is None):
        raise tool.fail("no device selected (-s SLOT or -d [VENDOR]:[DEVICE][:CLASS])", 1)
    parsed = []
    for operation in operations:
        match = ACS_REGISTER.match(operation)
        if not match:
            raise tool.fail(f"the simulated setpci handles only the ACS control register "
                            f"(ECAP_ACS+0x6.w), not {operation}", 2)
        parsed.append(match.groups())
    with tool.update() as state:
        chosen = [device for device in devices(state) if _matches(device, slot, vendor_filter)]
        for (value, mask) in parsed:
            for device in chosen:
                bridge = next((b for b in state["pcie_bridges"] if b["bdf"] == device["bdf"]), None)
                if bridge is None:
                    raise tool.fail(f"{_short(device['bdf'])}: no ACS capability", 1)
                if value is None:
                    tool.print(bridge["acs_ctrl"])
                    continue
                current, new, keep = int(bridge["acs_ctrl"], 16), int(value, 16), int(mask or "ffff", 16)
                bridge["acs_ctrl"] = f"{(current & ~keep) | (new & keep):04x}"
    return 0


def _lspci(tool, argv: list[str]) -> int:
    verbose = any(arg.startswith("-vv") for arg in argv)
    slot = vendor_filter = None
    iterator = iter(argv)
    for arg in iterator:
        if arg == "-s":
            slot = next(iterator, "")
        elif arg == "-d":
            vendor_filter = next(iterator, "")
        elif arg not in ("-v", "-vv", "-vvv", "-D", "-nn"):
            raise tool.unsupported(argv)
    for device in devices(tool.state()):
        if not _matches(device, slot, vendor_filter):
            continue
        tool.print(f"{_short(device['bdf'])} {device['description']}")
        if verbose and "acs_ctrl" in device:
            value = int(device["acs_ctrl"], 16)
            flags = " ".join(f"{name}{'+' if value & bit else '-'}" for name, bit in ACS_BITS)
            tool.print("\tCapabilities: [220 v1] Access Control Services")
            tool.print(f"\t\tACSCtl:\t{flags}")
    return 0


def main(tool, argv: list[str]) -> int:
    return _setpci(tool, argv) if tool.name == "setpci" else _lspci(tool, argv)
