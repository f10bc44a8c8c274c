"""sysctl: --system (reads the sysroot's sysctl.d), -p FILE, -w KEY=VALUE, -n KEY, KEY."""

from __future__ import annotations

import re

SYSTEM_DIRECTORIES = ("/usr/lib/sysctl.d", "/lib/sysctl.d", "/etc/sysctl.d")
_KEY = re.compile(r"^[a-z0-9_][a-z0-9_.\-/*]*$")


def read_file(tool, absolute: str) -> list[tuple[str, str]]:
    path = tool.path(absolute)
    settings = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        key, sep, value = stripped.lstrip("-").partition("=")
        key = key.strip().replace("/", ".")
        if not sep or not _KEY.match(key):
            raise tool.fail(f"{absolute}:{number}: invalid syntax, continuing...", 1)
        settings.append((key, value.strip()))
    return settings


def system_files(tool) -> list[str]:
    chosen: dict[str, str] = {}
    for directory in SYSTEM_DIRECTORIES:
        path = tool.path(directory)
        if path.is_dir():
            for conf in sorted(path.glob("*.conf")):
                chosen[conf.name] = f"{directory}/{conf.name}"  # /etc overrides /usr/lib with the same name
    files = [chosen[name] for name in sorted(chosen)]
    if tool.path("/etc/sysctl.conf").is_file():
        files.append("/etc/sysctl.conf")
    return files


def main(tool, argv: list[str]) -> int:
    quiet = "-q" in argv or "--quiet" in argv
    value_only = "-n" in argv or "--values" in argv
    args = [arg for arg in argv if arg not in ("-q", "--quiet", "-n", "--values", "-e", "--ignore")]
    if args[:1] == ["--system"]:
        settings = []
        for absolute in system_files(tool):
            if not quiet:
                tool.print(f"* Applying {absolute} ...")
            settings += read_file(tool, absolute)
        return _apply(tool, settings, quiet)
    if args[:1] in (["-p"], ["--load"]) or (args and args[0].startswith("--load=")):
        absolute = args[1] if len(args) > 1 and args[0] in ("-p", "--load") else (
            args[0].split("=", 1)[1] if "=" in args[0] else "/etc/sysctl.conf")
        return _apply(tool, read_file(tool, absolute), quiet)
    if args[:1] == ["-w"]:
        settings = []
        for assignment in args[1:]:
            key, sep, value = assignment.partition("=")
            if not sep or not _KEY.match(key.strip()):
                raise tool.fail(f'"{assignment}" must be of the form name=value', 1)
            settings.append((key.strip().replace("/", "."), value.strip()))
        return _apply(tool, settings, quiet)
    if args and not any(arg.startswith("-") for arg in args):
        current = tool.state()["sysctls"]
        status = 0
        for key in args:
            key = key.replace("/", ".")
            if key not in current:
                tool.err.write(f"sysctl: cannot stat /proc/sys/{key.replace('.', '/')}: No such file or directory\n")
                status = 255
            else:
                tool.print(current[key] if value_only else f"{key} = {current[key]}")
        return status
    raise tool.unsupported(argv)


def _apply(tool, settings: list[tuple[str, str]], quiet: bool) -> int:
    with tool.update() as state:
        for key, value in settings:
            state["sysctls"][key] = " ".join(value.split())
    if not quiet:
        for key, value in settings:
            tool.print(f"{key} = {value}")
    return 0
