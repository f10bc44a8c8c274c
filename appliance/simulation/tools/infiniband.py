"""ibstat, ibstatus, ibv_devinfo: the HCAs and ports of the state, injected faults applied."""

from __future__ import annotations

from ..state import effective_hcas

CAPABILITY_MASK = "0xa751e848"


def _hcas(tool, argv: list[str]) -> list[dict]:
    state = tool.state()
    if "mlx5_ib" not in state["modules"]:
        raise tool.fail("No IB devices found (kernel module mlx5_ib is not loaded)", 1)
    hcas = effective_hcas(state)
    names = [arg for arg in argv if not arg.startswith("-")]
    if names:
        hcas = [hca for hca in hcas if hca["device"] == names[0]]
        if not hcas:
            raise tool.fail(f"ibpanic: [{names[0]}] main: '{names[0]}' IB device can't be found", 255)
        if len(names) > 1:
            port = int(names[1])
            hcas = [{**hcas[0], "ports": [p for p in hcas[0]["ports"] if p["port"] == port]}]
    return hcas


def _lid(hca: dict, port: dict, position: int) -> int:
    return 0 if port["state"] == "Down" else 10 + position


def _ibstat(tool, argv: list[str]) -> int:
    if "-l" in argv or "--list_of_cas" in argv:
        for hca in _hcas(tool, []):
            tool.print(hca["device"])
        return 0
    if any(arg.startswith("-") for arg in argv):
        raise tool.unsupported(argv)
    for position, hca in enumerate(_hcas(tool, argv)):
        tool.print(f"CA '{hca['device']}'\n\tCA type: MT4129\n\tNumber of ports: {len(hca['ports'])}\n"
                   f"\tFirmware version: {hca['firmware_version']}\n\tHardware version: 0\n"
                   f"\tNode GUID: {hca['node_guid']}\n\tSystem image GUID: {hca['node_guid']}")
        for port in hca["ports"]:
            tool.print(f"\tPort {port['port']}:\n\t\tState: {port['state']}\n\t\tPhysical state: {port['physical_state']}\n"
                       f"\t\tRate: {port['rate_gbps']}\n\t\tBase lid: {_lid(hca, port, position)}\n\t\tLMC: 0\n"
                       f"\t\tSM lid: {port['sm_lid']}\n\t\tCapability mask: {CAPABILITY_MASK}\n"
                       f"\t\tPort GUID: {port['guid']}\n\t\tLink layer: {port['link_layer']}")
    return 0


def _gid(guid: str) -> str:
    digits = guid.removeprefix("0x").rjust(16, "0")
    return "fe80:0000:0000:0000:" + ":".join(digits[i:i + 4] for i in range(0, 16, 4))


def _ibstatus(tool, argv: list[str]) -> int:
    if any(arg.startswith("-") for arg in argv):
        raise tool.unsupported(argv)
    for position, hca in enumerate(_hcas(tool, argv)):
        for port in hca["ports"]:
            tool.print(f"Infiniband device '{hca['device']}' port {port['port']} status:\n"
                       f"\tdefault gid:\t {_gid(port['guid'])}\n\tbase lid:\t {hex(_lid(hca, port, position))}\n"
                       f"\tsm lid:\t\t {hex(port['sm_lid'])}\n\tstate:\t\t {port['state_code']}: {port['state'].upper()}\n"
                       f"\tphys state:\t {port['physical_state_code']}: {port['physical_state']}\n"
                       f"\trate:\t\t {port['rate_gbps']} Gb/sec ({port['width']} {port['speed']})\n"
                       f"\tlink_layer:\t {port['link_layer']}\n")
    return 0


def _ibv_devinfo(tool, argv: list[str]) -> int:
    names = []
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-d", "--ib-dev"):
            names.append(next(iterator, ""))
        else:
            raise tool.unsupported(argv)
    for hca in _hcas(tool, names):
        tool.print(f"hca_id:\t{hca['device']}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t{hca['firmware_version']}\n"
                   f"\tnode_guid:\t\t\t{hca['node_guid'][2:6]}:{hca['node_guid'][6:10]}:{hca['node_guid'][10:14]}:"
                   f"{hca['node_guid'][14:18]}\n\tvendor_id:\t\t\t0x02c9\n\tvendor_part_id:\t\t\t4129")
        for port in hca["ports"]:
            tool.print(f"\t\tport:\t{port['port']}\n\t\t\tstate:\t\t\tPORT_{port['state'].upper()} ({port['state_code']})\n"
                       f"\t\t\tlink_layer:\t\t{port['link_layer']}")
    return 0


def main(tool, argv: list[str]) -> int:
    return {"ibstat": _ibstat, "ibstatus": _ibstatus, "ibv_devinfo": _ibv_devinfo}[tool.name](tool, argv)
