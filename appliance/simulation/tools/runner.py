"""Entry point of the simulated commands: `python -I runner.py <command> [arguments...]`.

Run as a script, not as `python -m appliance...`: importing the `appliance` package loads the Celery
application (about 150 ms), which every simulated command call would pay. The package is registered
here as a bare namespace instead, so only the simulation's own pure-Python modules load.
"""

import sys
import types
from pathlib import Path


def _register_namespace() -> None:
    package_root = Path(__file__).resolve().parents[2]
    if "appliance" not in sys.modules:
        namespace = types.ModuleType("appliance")
        namespace.__path__ = [str(package_root)]
        sys.modules["appliance"] = namespace


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: runner.py COMMAND [ARGUMENTS...]", file=sys.stderr)
        return 2
    _register_namespace()
    from appliance.simulation import tools

    command, argv = sys.argv[1], sys.argv[2:]
    if command == tools.NVML_APPLY:
        from appliance.simulation import nvml_apply

        return nvml_apply.main(argv)
    return tools.run(command, argv)


if __name__ == "__main__":
    sys.exit(main())
