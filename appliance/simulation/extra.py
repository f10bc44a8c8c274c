"""The simulated appliance's own packages: the `simulation` extra of the appliance-suite distribution.

A production controller installs without it (`pip install appliance-suite`); the simulated appliance
needs sushy-tools (the BMC emulators), libvirt-python (their systems driver's interface), bcrypt (their
htpasswd) and nvidia-nvml-dev (nvml.h, which simnvml.c is compiled against). Everything that would start
the simulation asks `require()` first, so that a missing package is one clear message naming the
extra, not an ImportError from deep inside a run.
"""

from importlib.util import find_spec
from pathlib import Path

# Module imported -> the distribution that provides it.
MODULES = {"sushy_tools": "sushy-tools", "libvirt": "libvirt-python", "bcrypt": "bcrypt"}
INSTALL_HINT = ("pip install 'appliance-suite[simulation]' (in a checkout: pip install -e '.[simulation]', "
                "or from the lock file as README \"Set-up commands\" says)")


class SimulationExtraMissing(Exception):
    pass


def _has_nvml_header() -> bool:
    spec = find_spec("nvidia")
    if spec is None:
        return False
    return any(any(Path(base).glob("*/include/nvml.h")) for base in spec.submodule_search_locations or ())


def missing() -> list[str]:
    """The distributions of the extra that this interpreter cannot use, in the extra's order."""
    absent = [distribution for module, distribution in MODULES.items() if find_spec(module) is None]
    if not _has_nvml_header():
        absent.append("nvidia-nvml-dev")
    return absent


def require() -> None:
    absent = missing()
    if absent:
        raise SimulationExtraMissing(
            f"the simulated appliance needs the packages of the extra 'simulation', and {', '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} not installed: {INSTALL_HINT}")
