"""reboot: the node boots again from what is configured on disk.

Modules: the hardware's in-box drivers (nouveau unless blacklisted in /etc/modprobe.d or on the
kernel command line; the NVIDIA driver once installed and nouveau is out of the way) plus
/etc/modules-load.d. Services: the enabled ones start. Mounts: the root and enabled .mount units.
Sysctls: /etc/sysctl.d. PCIe bridges: ACS back on (the kernel default). MIG mode survives, MIG instances and persistence mode do not.
"""

from __future__ import annotations

import re

from .. import packages
from ..hardware import FACTORY_ACS_CTRL
from . import kmod, mounts, systemctl
from .sysctl import read_file, system_files


def _blacklisted(tool, cmdline: str) -> set[str]:
    names = set()
    for argument in cmdline.split():
        if argument.startswith("modprobe.blacklist="):
            names.update(kmod.normalise(name) for name in argument.split("=", 1)[1].split(","))
    directory = tool.path("/etc/modprobe.d")
    if directory.is_dir():
        for conf in directory.glob("*.conf"):
            names.update(kmod.normalise(name) for name in re.findall(r"^\s*blacklist\s+(\S+)", conf.read_text(), re.M))
            names.update(kmod.normalise(name) for name in
                         re.findall(r"^\s*install\s+(\S+)\s+/bin/(?:false|true)", conf.read_text(), re.M))
    return names


def _modules_load(tool) -> list[str]:
    names = []
    for directory in ("/etc/modules-load.d", "/usr/lib/modules-load.d"):
        path = tool.path(directory)
        if path.is_dir():
            for conf in sorted(path.glob("*.conf")):
                names += [line.strip() for line in conf.read_text().splitlines()
                          if line.strip() and not line.strip().startswith(("#", ";"))]
    return names


def main(tool, argv: list[str]) -> int:
    if any(arg not in ("-f", "--force", "now") for arg in argv):
        raise tool.unsupported(argv)
    messages = []
    deferred = []
    with tool.update() as state:
        state["kernel"]["cmdline"] = state["kernel"].get("cmdline_configured") or state["kernel"]["cmdline"]
        blacklisted = _blacklisted(tool, state["kernel"]["cmdline"])
        state["modules"], state["driver"] = [], {}
        hardware = (["drm", "nouveau"] if state["gpus"] else []) + (["ib_core", "mlx5_core", "mlx5_ib"] if state["hcas"] else [])
        if state["gpus"] and "nvidia" in packages.loadable_modules(state):
            hardware += ["nvidia"]
        for module in hardware + _modules_load(tool):
            if kmod.normalise(module) in blacklisted and module not in _modules_load(tool):
                continue
            try:
                kmod.load(state, module)
            except kmod.ModuleError as exc:
                messages.append(f"systemd-modules-load: {exc}")
        for bridge in state.get("pcie_bridges", []):
            bridge["acs_ctrl"] = FACTORY_ACS_CTRL
        for gpu in state["gpus"]:
            gpu["persistence_mode"] = False
            gpu["mig"]["gpu_instances"] = []
        state["mounts"] = [mount for mount in state["mounts"] if mount["target"] == "/"]
        settings = []
        for absolute in system_files(tool):
            settings += read_file(tool, absolute)
        for key, value in settings:
            state["sysctls"][key] = value
        for entry in state["services"].values():
            entry["active"] = False
        state["time"]["synchronised"] = False
        for unit, entry in sorted(state["services"].items(), key=lambda item: item[0].endswith(".mount"), reverse=True):
            if not entry.get("enabled") or entry.get("masked"):
                continue
            try:
                systemctl.start(tool, state, unit)
            except (systemctl.UnitError, mounts.MountError) as exc:
                messages.append(f"systemd: {unit}: {exc}")
            except systemctl.Nested as nested:
                deferred.append(nested.args)
    # Units of the node's own run their simulated commands once the lock is released, as after boot.
    for unit, commands in deferred:
        try:
            for command_line in commands:
                systemctl.run_exec(tool, unit, command_line)
        except systemctl.UnitError as exc:
            messages.append(f"systemd: {unit}: {exc}")
            continue
        with tool.update() as state:
            state["services"][unit]["active"] = True
    for message in messages:
        tool.err.write(message + "\n")
    return 0
