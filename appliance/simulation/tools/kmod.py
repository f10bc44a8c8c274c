"""modprobe, rmmod, lsmod on the simulated kernel's module list."""

from __future__ import annotations

from .. import packages
from ..state import has_fault


def normalise(name: str) -> str:
    return name.strip().replace("-", "_")


class ModuleError(Exception):
    pass


def load(state: dict, module: str) -> list[str]:
    """Load a module and what it needs; returns the modules newly loaded."""
    module = normalise(module)
    release = state["kernel"]["release"]
    if module in state["modules"]:
        return []
    if module not in packages.loadable_modules(state) or has_fault(state, "module_missing", module=module):
        raise ModuleError(f"FATAL: Module {module} not found in directory /lib/modules/{release}")
    loaded = []
    for dependency in packages.MODULE_DEPENDENCIES.get(module, ()):
        loaded += load(state, dependency)
    if module == "nvidia" and "nouveau" in state["modules"]:
        # nouveau has bound the GPUs: the NVIDIA probe finds no device left to drive.
        raise ModuleError("ERROR: could not insert 'nvidia': No such device "
                          "(NVRM: the GPUs are driven by nouveau; blacklist it and unload it first)")
    if module == "nouveau" and "nvidia" in state["modules"]:
        raise ModuleError("ERROR: could not insert 'nouveau': No such device")
    state["modules"].append(module)
    if module == "nvidia":
        _driver_loaded(state)
    return loaded + [module]


def _driver_loaded(state: dict) -> None:
    software = state.get("software", {})
    version = next((version for name, version in state["packages"].items()
                    if (package := packages.find(name)) and "nvidia" in package.modules), software.get("driver_version"))
    cuda = str(software.get("cuda_version", "12.4")).split(".")
    state["driver"] = {"version": version.split("-")[0], "cuda_version": ".".join(cuda[:2]),
                       "cuda_version_int": int(cuda[0]) * 1000 + int(cuda[1] if len(cuda) > 1 else 0) * 10}


def users(state: dict, module: str) -> list[str]:
    return [other for other in state["modules"] if module in packages.MODULE_DEPENDENCIES.get(other, ())]


def unload(state: dict, module: str) -> list[str]:
    module = normalise(module)
    if module not in state["modules"]:
        raise ModuleError(f"FATAL: Module {module} is not currently loaded")
    holders = users(state, module)
    if holders:
        raise ModuleError(f"FATAL: Module {module} is in use by: {' '.join(holders)}")
    if module == "nvidia" and any(unit in state["services"] and state["services"][unit]["active"]
                                  for unit, needed in packages.UNIT_NEEDS_MODULE.items() if needed == "nvidia"):
        raise ModuleError("FATAL: Module nvidia is in use.")
    state["modules"].remove(module)
    if module == "nvidia":
        state["driver"] = {}
    return [module]


def main(tool, argv: list[str]) -> int:
    if tool.name == "lsmod":
        if argv:
            raise tool.unsupported(argv)
        tool.print("Module                  Size  Used by")
        current = tool.state()
        for module in reversed(current["modules"]):
            holders = users(current, module)
            tool.print(f"{module:<24}{16384:>8}  {len(holders)} {','.join(holders)}".rstrip())
        return 0
    remove = tool.name == "rmmod"
    quiet = dry_run = False
    names = []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-n", "--dry-run", "--show"):
            dry_run = True
        elif arg in ("-a", "--all", "-v", "--verbose", "-b", "--use-blacklist"):
            continue
        elif arg.startswith("-"):
            raise tool.unsupported(argv)
        elif "=" in arg and names:
            continue  # a module parameter: accepted, parameters have no simulated effect
        else:
            names.append(arg)
    if not names:
        raise tool.fail("missing module name", 1)
    prefix = "" if tool.name == "rmmod" else "modprobe: "
    try:
        with tool.update() as current:
            for name in names:
                if remove:
                    if normalise(name) in current["modules"] or tool.name == "rmmod":
                        unload(current, name)
                else:
                    load(current, name)
            if dry_run:
                raise _DryRun
    except _DryRun:
        return 0
    except ModuleError as exc:
        if not quiet:
            tool.err.write(f"{prefix}{exc}\n")
        return 1
    return 0


class _DryRun(Exception):
    """Leaves the state unchanged: the update block is abandoned."""
