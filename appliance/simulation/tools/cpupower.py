"""cpupower frequency-set -g GOVERNOR / frequency-info -p."""

from __future__ import annotations

GOVERNORS = ("performance", "powersave", "ondemand", "schedutil", "conservative", "userspace")


def main(tool, argv: list[str]) -> int:
    if argv[:1] == ["frequency-set"] and len(argv) == 3 and argv[1] in ("-g", "--governor"):
        if argv[2] not in GOVERNORS:
            raise tool.fail(f"Error setting new values. Common errors:\n- governor {argv[2]} not available", 1)
        with tool.update() as state:
            state["cpu_governor"] = argv[2]
        tool.print("Setting cpu: all")
        return 0
    if argv[:1] == ["frequency-info"] and argv[1:] in (["-p"], ["--policy"]):
        governor = tool.state()["cpu_governor"]
        tool.print("analyzing CPU 0:")
        tool.print(f'  current policy: frequency should be within 800 MHz and 3.80 GHz.\n'
                   f'                  The governor "{governor}" may decide which speed to use\n'
                   f'                  within this range.')
        return 0
    raise tool.unsupported(argv)
