"""Simulated commands of a simulated node.

Each command is a module here with `main(tool: Tool, argv: list[str]) -> int`. They run through
runner.py from small shell wrappers put first on the node's PATH (see appliance.simulation.services),
find their node through APPLIANCE_SIM_SYSROOT and read or change only that node's state file and files
under its sysroot. A request a command does not simulate ends with a clear message and a non-zero
status, never with a silent success.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

from .. import packages
from .. import state as node_state

# command name -> module in this package
COMMANDS = {
    "nvidia-smi": "nvidia_smi",
    "modprobe": "kmod",
    "lsmod": "kmod",
    "rmmod": "kmod",
    "systemctl": "systemctl",
    "apt-get": "apt",
    "dpkg-query": "apt",
    "update-grub": "grub",
    "grub-mkconfig": "grub",
    "sysctl": "sysctl",
    "chronyc": "chronyc",
    "setpci": "pci",
    "lspci": "pci",
    "cpupower": "cpupower",
    "dcgmi": "dcgmi",
    "ibstat": "infiniband",
    "ibstatus": "infiniband",
    "ibv_devinfo": "infiniband",
    "gdscheck": "gdscheck",
    "all_reduce_perf": "benchmarks",
    "all_gather_perf": "benchmarks",
    "ib_write_bw": "benchmarks",
    "ib_read_bw": "benchmarks",
    "fio": "benchmarks",
    "mount": "mounts",
    "umount": "mounts",
    "findmnt": "mounts",
    "lctl": "lctl",
    "reboot": "reboot",
}
# Internal entry point of the simulated NVML library for the calls that change state.
NVML_APPLY = "_nvml-apply"


class ToolError(Exception):
    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.message = message
        self.status = status


class Tool:
    """What a command gets: its name, its node, output streams and the node's state."""

    def __init__(self, name: str, sysroot: Path):
        self.name = name
        self.sysroot = sysroot
        self.out = sys.stdout
        self.err = sys.stderr

    def state(self) -> dict:
        return node_state.load(self.sysroot)

    @contextlib.contextmanager
    def update(self) -> Iterator[dict]:
        with node_state.update(self.sysroot) as current:
            yield current

    def path(self, absolute: str) -> Path:
        """A path of the node (as a real machine names it) inside the sysroot; one that would leave the
        sysroot ('..', a symbolic link) is refused (state.OutsideSysroot, the command fails)."""
        return node_state.node_path(self.sysroot, absolute)

    def print(self, *parts, **kwargs) -> None:
        print(*parts, file=self.out, **kwargs)

    def fail(self, message: str, status: int = 1) -> ToolError:
        return ToolError(message, status)

    def unsupported(self, argv: list[str]) -> ToolError:
        return ToolError(f"the simulated {self.name} does not implement: {' '.join(argv) or '(no arguments)'}", 2)


def run(name: str, argv: list[str]) -> int:
    module_name = COMMANDS.get(name)
    if module_name is None:
        print(f"{name}: not a simulated command", file=sys.stderr)
        return 127
    try:
        sysroot = node_state.sysroot_from_environment()
        current = node_state.load(sysroot)
    except node_state.StateError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    if name not in packages.installed_commands(current):
        print(f"{name}: command not found (the package that ships it is not installed on {current['node']})",
              file=sys.stderr)
        return 127
    if node_state.has_fault(current, "task_fails", tool=name):
        print(f"{name}: failed on {current['node']} (injected fault task_fails)", file=sys.stderr)
        return 1
    tool = Tool(name, sysroot)
    module = importlib.import_module(f"{__name__}.{module_name}")
    try:
        return module.main(tool, argv)
    except ToolError as exc:
        print(f"{name}: {exc.message}", file=sys.stderr)
        return exc.status
    except node_state.StateError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
