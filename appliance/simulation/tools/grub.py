"""update-grub / grub-mkconfig: the kernel command line from <sysroot>/etc/default/grub and grub.d/*.cfg.

The simulation applies the new command line at once (`kernel.cmdline`, <sysroot>/proc/cmdline), as if
the node had rebooted into it; `kernel.cmdline_configured` keeps what GRUB was configured with.
"""

from __future__ import annotations

import re
import shlex

from ..hardware import FACTORY_CMDLINE

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(.*)$")


def read_grub_defaults(tool) -> dict[str, str]:
    variables: dict[str, str] = {}
    files = [tool.path("/etc/default/grub")]
    directory = tool.path("/etc/default/grub.d")
    if directory.is_dir():
        files += sorted(directory.glob("*.cfg"))
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = _ASSIGNMENT.match(line)
            if not match or line.lstrip().startswith("#"):
                continue
            name, raw = match.groups()
            expanded = re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: variables.get(m.group(1), ""), raw)
            try:
                words = shlex.split(expanded, comments=True)
            except ValueError as exc:
                raise tool.fail(f"{path.relative_to(tool.sysroot)}:{number}: {exc}", 1) from None
            variables[name] = " ".join(words)
    return variables


def main(tool, argv: list[str]) -> int:
    output = None
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-o", "--output"):
            output = next(iterator, "")
        elif arg.startswith("--output="):
            output = arg.split("=", 1)[1]
        else:
            raise tool.unsupported(argv)
    variables = read_grub_defaults(tool)
    base = FACTORY_CMDLINE.split(" quiet")[0]
    extra = " ".join(part for part in (variables.get("GRUB_CMDLINE_LINUX", ""),
                                       variables.get("GRUB_CMDLINE_LINUX_DEFAULT", "")) if part)
    cmdline = f"{base} {extra}".strip()
    with tool.update() as state:
        state["kernel"]["cmdline_configured"] = cmdline
        state["kernel"]["cmdline"] = cmdline
    config = tool.path(output or "/boot/grub/grub.cfg")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"menuentry 'Ubuntu' {{\n\tlinux /boot/vmlinuz-{state['kernel']['release']} "
                      f"{cmdline.split(' ', 1)[1]}\n}}\n")
    tool.err.write("Generating grub configuration file ...\ndone\n")
    return 0
