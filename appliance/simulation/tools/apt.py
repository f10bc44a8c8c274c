"""apt-get (update, install, remove, purge; -s simulates) and dpkg-query (-W with -f/--showformat)."""

from __future__ import annotations

import re

from .. import packages


class AptError(Exception):
    pass


def _resolve(state: dict, requests: list[str]) -> list[tuple[str, str]]:
    """(name, version) for each requested package and its dependencies, in install order."""
    software = state.get("software", {})
    plan: list[tuple[str, str]] = []
    for request in requests:
        name, _, pinned = request.partition("=")
        package = packages.find(name)
        if package is None:
            raise AptError(f"E: Unable to locate package {name}")
        candidate = packages.candidate_version(package, software)
        if pinned and not (pinned == candidate or pinned.startswith(candidate.split(":")[-1] + "-")
                           or pinned.split(":")[-1].startswith(candidate.split(":")[-1])):
            raise AptError(f"E: Version '{pinned}' for '{name}' was not found (candidate: {candidate})")
        for dependency in package.depends:
            if dependency not in state["packages"] and all(dependency != planned for planned, _ in plan):
                plan += _resolve(state, [dependency])
        plan.append((name, pinned or candidate))
    return plan


def install(state: dict, requests: list[str]) -> list[str]:
    lines = []
    for name, version in _resolve(state, requests):
        if state["packages"].get(name) == version:
            lines.append(f"{name} is already the newest version ({version}).")
            continue
        package = packages.find(name)
        for conflict in package.conflicts:
            if conflict in state["packages"]:
                remove(state, [conflict])
                lines.append(f"Removing {conflict} ...")
        state["packages"][name] = version
        lines.append(f"Setting up {name} ({version}) ...")
        for unit in package.units:
            state["services"].setdefault(unit, {"enabled": False, "active": False})
        for unit in package.enabled_units:
            state["services"][unit] = {"enabled": True, "active": True}
            if unit == "chrony.service":
                state["time"] = {"synchronised": True, "source": "chrony"}
    return lines


def remove(state: dict, names: list[str]) -> list[str]:
    lines = []
    for name in names:
        if name not in state["packages"]:
            lines.append(f"Package '{name}' is not installed, so not removed")
            continue
        package = packages.find(name)
        del state["packages"][name]
        still_provided = packages.known_units(state)
        shipped = set(package.units if package else ()) | {
            unit for unit, owner in packages.FACTORY_UNIT_PACKAGES.items() if owner == name}
        for unit in shipped - still_provided:
            state["services"].pop(unit, None)
        lines.append(f"Removing {name} ({package.version if package else ''}) ...")
    return lines


def _apt_get(tool, argv: list[str]) -> int:
    simulate = bool({"-s", "--simulate", "--dry-run", "--just-print", "--no-act"} & set(argv))
    args = [arg for arg in argv if not arg.startswith("-")]
    unknown = [arg for arg in argv if arg.startswith("-") and not re.fullmatch(
        r"-[yqs]+|--yes|--assume-yes|--quiet|--no-install-recommends|--simulate|--dry-run|--just-print|--no-act|"
        r"--allow-downgrades|--allow-change-held-packages|-o|--fix-broken|--reinstall", arg)]
    if unknown or not args:
        raise tool.unsupported(argv)
    # "-o Dpkg::Options::=..." takes a value: drop it from the package list.
    values_of_o = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-o"}
    verb, names = args[0], [arg for arg in args[1:] if arg not in values_of_o]
    if verb == "update":
        tool.print("Reading package lists... Done")
        return 0
    if verb not in ("install", "remove", "purge"):
        raise tool.unsupported(argv)
    try:
        with tool.update() as state:
            lines = install(state, names) if verb == "install" else remove(state, names)
            if simulate:
                raise _Simulated(lines)
    except _Simulated as simulated:
        for line in simulated.lines:
            tool.print(line.replace("Setting up", "Inst").replace("Removing", "Remv"))
        return 0
    except AptError as exc:
        raise tool.fail(str(exc).removeprefix("E: "), 100) from None
    tool.print("Reading package lists... Done")
    for line in lines:
        tool.print(line)
    return 0


class _Simulated(Exception):
    def __init__(self, lines):
        super().__init__("simulated")
        self.lines = lines


def _dpkg_query(tool, argv: list[str]) -> int:
    fmt = "${Package}\t${Version}\n"
    names, show = [], False
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-W", "--show"):
            show = True
        elif arg in ("-f", "--showformat"):
            fmt = next(iterator, "")
        elif arg.startswith(("-f=", "--showformat=")):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            raise tool.unsupported(argv)
        else:
            names.append(arg)
    if not show or not names:
        raise tool.unsupported(argv)
    installed = tool.state()["packages"]
    status = 0
    for name in names:
        if name not in installed:
            tool.err.write(f"dpkg-query: no packages found matching {name}\n")
            status = 1
            continue
        values = {"Package": name, "Version": installed[name], "Status": "install ok installed",
                  "db:Status-Abbrev": "ii ", "binary:Package": name}
        text = re.sub(r"\$\{([^}]+)\}", lambda match, values=values: values.get(match.group(1), ""), fmt)
        tool.out.write(text.replace("\\n", "\n").replace("\\t", "\t"))
    return status


def main(tool, argv: list[str]) -> int:
    return _apt_get(tool, argv) if tool.name == "apt-get" else _dpkg_query(tool, argv)
