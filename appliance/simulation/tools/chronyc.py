"""chronyc: tracking, sources, waitsync; answers only while chrony.service runs."""

from __future__ import annotations

import re


def _servers(tool) -> list[str]:
    servers = []
    for absolute in ("/etc/chrony/chrony.conf", "/etc/chrony.conf"):
        path = tool.path(absolute)
        if path.is_file():
            servers += re.findall(r"^\s*(?:server|pool)\s+(\S+)", path.read_text(), re.MULTILINE)
    conf_d = tool.path("/etc/chrony/conf.d")
    if conf_d.is_dir():
        for path in sorted(conf_d.glob("*.conf")):
            servers += re.findall(r"^\s*(?:server|pool)\s+(\S+)", path.read_text(), re.MULTILINE)
    return servers


def main(tool, argv: list[str]) -> int:
    state = tool.state()
    if not state["services"].get("chrony.service", {}).get("active"):
        raise tool.fail("506 Cannot talk to daemon", 1)
    servers = _servers(tool)
    command = [arg for arg in argv if not arg.startswith("-")]
    if command[:1] == ["waitsync"]:
        if not servers:
            raise tool.fail("no time source configured in /etc/chrony/chrony.conf", 1)
        tool.print("try: 1, refid: 0A000001, correction: 0.000000012, skew: 0.004")
        return 0
    if command == ["tracking"]:
        if not servers:
            tool.print("Reference ID    : 7F7F0101 ()\nStratum         : 10\nLeap status     : Not synchronised")
            return 0
        tool.print(f"Reference ID    : 0A000001 ({servers[0]})\nStratum         : 3\n"
                   "Ref time (UTC)  : Mon Nov 30 04:00:00 2026\nSystem time     : 0.000000012 seconds fast of NTP time\n"
                   "Last offset     : +0.000000009 seconds\nRMS offset      : 0.000000231 seconds\n"
                   "Frequency       : 1.204 ppm slow\nResidual freq   : +0.000 ppm\nSkew            : 0.004 ppm\n"
                   "Root delay      : 0.000412 seconds\nRoot dispersion : 0.000075 seconds\n"
                   "Update interval : 16.1 seconds\nLeap status     : Normal")
        return 0
    if command == ["sources"]:
        tool.print("MS Name/IP address         Stratum Poll Reach LastRx Last sample")
        tool.print("===============================================================================")
        for position, server in enumerate(servers):
            tool.print(f"^{'*' if position == 0 else '-'} {server:<27} 2   4   377    12   +0ns[+0ns] +/- 120us")
        return 0
    raise tool.unsupported(argv)
