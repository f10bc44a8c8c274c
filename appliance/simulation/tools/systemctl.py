"""systemctl: units from installed packages and unit files under the sysroot's systemd directories.

Starting a unit changes the simulated hardware where the real daemon would: nvidia-persistenced turns
persistence mode on for every GPU, a .mount unit mounts. A unit file of the node's own whose
ExecStart runs a simulated command (setpci, cpupower, modprobe, sysctl, ...) runs it; one that runs
anything else cannot start in the simulation and says so.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .. import packages
from .. import state as node_state
from . import COMMANDS, ToolError, kmod, mounts

UNIT_DIRECTORIES = ("etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
UNIT_SUFFIXES = (".service", ".mount", ".timer", ".target", ".socket", ".path")
# Daemons that refuse to start without their configuration file.
# Units whose process the simulation runs itself, outside any unit (appliance.simulation.collectors starts
# the collectors after the monitoring stage, with the node's own venv and package): starting one checks
# that what its ExecStart names was deployed, and marks it active.
SIMULATION_RUN_UNITS = ("appliance-collector.service",)
UNIT_NEEDS_FILE = {
    "slurmd.service": "/etc/slurm/slurm.conf",
    "slurmctld.service": "/etc/slurm/slurm.conf",
    "munge.service": "/etc/munge/munge.key",
}


def unit_name(name: str) -> str:
    return name if name.endswith(UNIT_SUFFIXES) else name + ".service"


def unit_file(sysroot: Path, unit: str) -> Path | None:
    for directory in UNIT_DIRECTORIES:
        candidate = node_state.node_path(sysroot, f"/{directory}/{unit}")
        if candidate.is_file():
            return candidate
    return None


def parse_unit(path: Path) -> dict[str, dict[str, str]]:
    """Sections of a unit file; a repeated key (ExecStart=) keeps every value, newline-separated."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif current is not None and "=" in line:
            key, value = line.split("=", 1)
            current.setdefault(key.strip(), []).append(value.strip())
    return {section: {key: "\n".join(values) for key, values in keys.items()} for section, keys in sections.items()}


def known(state: dict, sysroot: Path, unit: str) -> bool:
    return unit in packages.known_units(state) or unit_file(sysroot, unit) is not None


class UnitError(Exception):
    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def run_exec(tool, unit: str, command_line: str) -> None:
    ignore_failure = command_line.startswith("-")
    argv = shlex.split(command_line.lstrip("-@+!:"))
    command = Path(argv[0]).name if argv else ""
    if command not in COMMANDS:
        raise UnitError(f"Job for {unit} failed: ExecStart runs {argv[0] if argv else '(nothing)'}, which a simulated "
                        "node does not provide (only its simulated commands run)")
    from . import run  # a nested command sees the node's state as the unit left it so far

    status = run(command, argv[1:])
    if status != 0 and not ignore_failure:
        raise UnitError(f"Job for {unit} failed because the control process exited with error code "
                        f"(ExecStart {' '.join(argv)} exited {status}).")


def start(tool, state: dict, unit: str) -> None:
    """Start a unit in `state` (loaded under the lock). A unit of the node's own whose ExecStart runs
    simulated commands raises Nested after writing the state: the caller runs them outside the lock."""
    if not known(state, tool.sysroot, unit):
        raise UnitError(f"Failed to start {unit}: Unit {unit} not found.", 5)
    entry = state["services"].setdefault(unit, {"enabled": False, "active": False})
    if entry.get("masked"):
        raise UnitError(f"Failed to start {unit}: Unit {unit} is masked.", 1)
    if entry["active"]:
        return
    needed = packages.UNIT_NEEDS_MODULE.get(unit)
    if needed and needed not in state["modules"]:
        raise UnitError(f"Job for {unit} failed because the control process exited with error code "
                        f"(kernel module {needed} is not loaded).")
    needed_file = UNIT_NEEDS_FILE.get(unit)
    if needed_file and not tool.path(needed_file).is_file():
        raise UnitError(f"Job for {unit} failed because the control process exited with error code "
                        f"({needed_file} is missing).")
    path = unit_file(tool.sysroot, unit)
    if unit.endswith(".mount"):
        if path is None:
            raise UnitError(f"Failed to start {unit}: Unit {unit} not found.", 5)
        mount_section = parse_unit(path).get("Mount", {})
        where = mount_section.get("Where", "")
        expected = where.strip("/").replace("-", "\\x2d").replace("/", "-") + ".mount"
        if unit != expected:
            raise UnitError(f"Failed to start {unit}: Where={where} does not match the unit name (expected {expected})")
        options = [option for option in mount_section.get("Options", "").split(",")
                   if option and option not in ("defaults", "_netdev")] or ["rw"]
        try:
            mounts.mount(state, tool.sysroot, mount_section.get("What", ""), where, mount_section.get("Type", ""), options)
        except mounts.MountError as exc:
            raise UnitError(f"Job for {unit} failed. {exc}") from None
    elif path is not None and unit in SIMULATION_RUN_UNITS:
        check_deployed(tool, unit, parse_unit(path).get("Service", {}))
    elif path is not None and unit not in packages.known_units(state):
        service = parse_unit(path).get("Service", {})
        commands = [line for key in ("ExecStartPre", "ExecStart", "ExecStartPost")
                    for line in service.get(key, "").splitlines() if line.strip()]
        if commands:
            # The nested commands lock and write the state themselves: hand it back first, re-read after.
            node_state.write_locked(tool.sysroot, state)
            raise Nested(unit, commands)
    elif unit == "nvidia-persistenced.service":
        for gpu in state["gpus"]:
            gpu["persistence_mode"] = True
    elif unit == "chrony.service":
        state["time"] = {"synchronised": True, "source": "chrony"}
    elif unit == "systemd-timesyncd.service":
        state["time"] = {"synchronised": True, "source": "systemd-timesyncd"}
    entry["active"] = True


def _deployed(tool, absolute: str) -> bool:
    # Existence only, without following links: the venv's interpreter links to the host's Python.
    parts = Path(absolute).parts
    return absolute.startswith("/") and ".." not in parts and os.path.lexists(Path(tool.sysroot, *parts[1:]))


def check_deployed(tool, unit: str, service: dict[str, str]) -> None:
    """The program, the --config file and the PYTHONPATH folders of the unit's ExecStart exist on the node."""
    argv = shlex.split(service.get("ExecStart", "").splitlines()[0] if service.get("ExecStart") else "")
    needed = argv[:1]
    if "--config" in argv[:-1]:
        needed.append(argv[argv.index("--config") + 1])
    for assignment in shlex.split(service.get("Environment", "").replace("\n", " ")):
        name, _, value = assignment.partition("=")
        if name == "PYTHONPATH":
            needed.extend(folder for folder in value.split(":") if folder)
    if not argv:
        raise UnitError(f"Failed to start {unit}: Unit {unit} has no ExecStart.", 1)
    missing = [path for path in needed if not _deployed(tool, path)]
    if missing:
        raise UnitError(f"Job for {unit} failed because the control process exited with error code "
                        f"({', '.join(missing)} missing).")


class Nested(Exception):
    """Raised (after the state was written) to leave the lock so a unit's commands can run."""


def stop(tool, state: dict, unit: str) -> None:
    if not known(state, tool.sysroot, unit):
        raise UnitError(f"Failed to stop {unit}: Unit {unit} not loaded.", 5)
    entry = state["services"].setdefault(unit, {"enabled": False, "active": False})
    if not entry["active"]:
        return
    if unit.endswith(".mount"):
        path = unit_file(tool.sysroot, unit)
        where = parse_unit(path).get("Mount", {}).get("Where", "") if path else ""
        try:
            mounts.unmount(state, where)
        except mounts.MountError:
            pass
    elif unit == "nvidia-persistenced.service":
        for gpu in state["gpus"]:
            gpu["persistence_mode"] = False
    elif unit in ("chrony.service", "systemd-timesyncd.service"):
        state["time"]["synchronised"] = False
    entry["active"] = False


PROPERTIES = {
    "ActiveState": lambda entry, loaded: "active" if entry.get("active") else "inactive",
    "SubState": lambda entry, loaded: "running" if entry.get("active") else "dead",
    "UnitFileState": lambda entry, loaded: "masked" if entry.get("masked") else (
        "enabled" if entry.get("enabled") else "disabled"),
    "LoadState": lambda entry, loaded: "masked" if entry.get("masked") else ("loaded" if loaded else "not-found"),
}


def _with_unit_transaction(tool, action, units: list[str]) -> int:
    """Apply `action(state, unit)` to each unit under the lock; a unit whose ExecStart runs
    simulated commands is finished outside the lock, after them."""
    pending = list(units)
    while pending:
        nested = None
        try:
            with tool.update() as state:
                while pending:
                    action(state, pending[0])
                    pending.pop(0)
        except Nested as exc:
            nested = exc.args
        except UnitError:
            raise
        if nested:
            unit, commands = nested
            for command_line in commands:
                run_exec(tool, unit, command_line)
            with tool.update() as state:
                state["services"].setdefault(unit, {"enabled": False, "active": False})["active"] = True
            pending.pop(0)
    return 0


def main(tool, argv: list[str]) -> int:
    flags = {arg for arg in argv if arg.startswith("-") and arg not in ("-p",)}
    args = [arg for arg in argv if not arg.startswith("-") or arg == "-p"]
    now = "--now" in flags
    quiet = bool(flags & {"-q", "--quiet"})
    if not args:
        raise tool.unsupported(argv)
    verb, names = args[0], args[1:]
    try:
        if verb == "daemon-reload":
            return 0
        if verb in ("start", "restart", "try-restart", "reload", "reload-or-restart"):
            units = [unit_name(name) for name in names]

            def do_start(state, unit):
                if verb in ("restart", "reload-or-restart", "try-restart", "reload"):
                    if verb == "try-restart" and not state["services"].get(unit, {}).get("active"):
                        return
                    if verb in ("restart", "reload-or-restart") or verb == "try-restart":
                        stop(tool, state, unit)
                    elif not state["services"].get(unit, {}).get("active"):
                        raise UnitError(f"Failed to reload {unit}: Job type reload is not applicable for unit {unit}.")
                start(tool, state, unit)
            return _with_unit_transaction(tool, do_start, units)
        if verb == "stop":
            with tool.update() as state:
                for name in names:
                    stop(tool, state, unit_name(name))
            return 0
        if verb in ("enable", "disable", "mask", "unmask"):
            units = [unit_name(name) for name in names]

            def do_enable(state, unit):
                if not known(state, tool.sysroot, unit):
                    raise UnitError(f"Failed to {verb} unit: Unit file {unit} does not exist.", 1)
                entry = state["services"].setdefault(unit, {"enabled": False, "active": False})
                if verb in ("mask", "unmask"):
                    entry["masked"] = verb == "mask"
                    return
                entry["enabled"] = verb == "enable"
                if now:
                    if verb == "enable":
                        start(tool, state, unit)
                    else:
                        stop(tool, state, unit)
            return _with_unit_transaction(tool, do_enable, units)
        state = tool.state()
        if verb in ("is-active", "is-enabled", "is-failed"):
            status = 0
            for name in names:
                unit = unit_name(name)
                entry = state["services"].get(unit, {})
                if verb == "is-active":
                    text, ok = ("active", True) if entry.get("active") else ("inactive", False)
                elif verb == "is-failed":
                    text, ok = "inactive" if not entry.get("active") else "active", False
                elif not known(state, tool.sysroot, unit):
                    text, ok = "not-found", False
                else:
                    text = PROPERTIES["UnitFileState"](entry, True)
                    ok = text == "enabled"
                if not quiet:
                    tool.print(text)
                if not ok:
                    status = 1 if verb == "is-enabled" else 3
            return status
        if verb == "show":
            properties = []
            names_only = []
            iterator = iter(args[1:])
            for arg in iterator:
                if arg == "-p":
                    properties += next(iterator, "").split(",")
                else:
                    names_only.append(arg)
            properties += [flag.split("=", 1)[1] for flag in flags if flag.startswith(("--property=", "-p="))]
            for flag in flags:
                if flag.startswith("-p") and flag not in ("-p",) and "=" not in flag:
                    properties += flag[2:].split(",")
            value_only = "--value" in flags
            for name in names_only:
                unit = unit_name(name)
                entry = state["services"].get(unit, {})
                for prop in properties or list(PROPERTIES):
                    if prop not in PROPERTIES:
                        raise tool.fail(f"the simulated systemctl show knows only {', '.join(PROPERTIES)}", 2)
                    value = PROPERTIES[prop](entry, known(state, tool.sysroot, unit))
                    tool.print(value if value_only else f"{prop}={value}")
            return 0
        if verb == "status":
            status = 0
            for name in names:
                unit = unit_name(name)
                if not known(state, tool.sysroot, unit):
                    tool.err.write(f"Unit {unit} could not be found.\n")
                    status = 4
                    continue
                entry = state["services"].get(unit, {})
                active = "active (running)" if entry.get("active") else "inactive (dead)"
                tool.print(f"* {unit}\n     Loaded: loaded ({PROPERTIES['UnitFileState'](entry, True)})\n"
                           f"     Active: {active}")
                if not entry.get("active"):
                    status = max(status, 3)
            return status
    except (UnitError, kmod.ModuleError) as exc:
        if not quiet or verb not in ("is-active", "is-enabled"):
            tool.err.write(f"{exc}\n")
        return getattr(exc, "status", 1)
    except ToolError:
        raise
    raise tool.unsupported(argv)
