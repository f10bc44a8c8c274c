"""lctl: the Lustre client's parameters (set_param, get_param).

A client parameter (osc.*, llite.*, mdc.*, ...) only exists while a Lustre filesystem is mounted, as on
a real client: set_param before the mount fails with lctl's own message. Values are kept in the
state under `lustre_params`, so a check can read back what the tunables unit applied.
"""

from __future__ import annotations

import fnmatch

CLIENT_PREFIXES = ("osc.", "llite.", "mdc.", "lov.", "lmv.", "ldlm.")


def _lustre_mounted(state: dict) -> bool:
    return any(mount.get("fstype") == "lustre" for mount in state.get("mounts", []))


def _check_available(tool, state: dict, name: str) -> None:
    if "lnet" not in state["modules"]:
        raise tool.fail(f"error: {name}: LNet is not loaded (modprobe lnet)", 19)
    if name.startswith(CLIENT_PREFIXES) and not _lustre_mounted(state):
        raise tool.fail(f"error: set_param: param_path '{name.replace('.', '/')}': No such file or directory", 2)


def _set(tool, assignments: list[str]) -> int:
    if not assignments:
        raise tool.fail("set_param: no parameter given (usage: lctl set_param [-P] NAME=VALUE ...)", 2)
    with tool.update() as state:
        for assignment in assignments:
            name, separator, value = assignment.partition("=")
            if not separator or not name:
                raise tool.fail(f"set_param: '{assignment}' is not NAME=VALUE", 22)
            _check_available(tool, state, name)
            state.setdefault("lustre_params", {})[name] = value
            tool.print(f"{name}={value}")
    return 0


def _get(tool, patterns: list[str]) -> int:
    state = tool.state()
    params = state.get("lustre_params", {})
    found = False
    for pattern in patterns:
        _check_available(tool, state, pattern)
        for name in sorted(params):
            if name == pattern or fnmatch.fnmatchcase(name, pattern):
                tool.print(f"{name}={params[name]}")
                found = True
    if not found:
        raise tool.fail(f"error: get_param: param_path '{' '.join(patterns)}': No such file or directory", 2)
    return 0


def main(tool, argv: list[str]) -> int:
    command, *rest = argv or [""]
    # -P makes a setting persistent on the MGS; a client applies it the same way.
    rest = [arg for arg in rest if arg not in ("-P", "-n")]
    if command == "set_param":
        return _set(tool, rest)
    if command == "get_param" and rest:
        return _get(tool, rest)
    raise tool.unsupported(argv)
