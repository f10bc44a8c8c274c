"""The two values the pre-flight check once passed and the redfish_bios module then refused
(`NumaNodesPerSocket: 1 is not one of 1, 2`) or crashed on (`min: null`), taken through the real
firmware stage to the node's Redfish emulator: the pre-flight check passes them, and the module
applies them."""

import copy

import pytest

from appliance.provisioning import baseline
from tests.playbooks.conftest import NODE

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

NUMBERS = [0, 30, 60, 90]


def firmware_files(tmp_path, registry: dict, values: dict):
    """The platform and registry as firmware/ files, for the pre-flight check."""
    from ruamel.yaml import YAML

    (tmp_path / "platforms").mkdir(exist_ok=True)
    (tmp_path / "registries").mkdir(exist_ok=True)
    with (tmp_path / "registries" / "edited.yaml").open("w") as handle:
        YAML(typ="safe").dump(registry, handle)
    with (tmp_path / "platforms" / "edited.yaml").open("w") as handle:
        YAML(typ="safe").dump({"id": "edited", "bios": {"registry": "edited.yaml", "baseline": values}}, handle)
    return tmp_path / "platforms" / "edited.yaml"


def run_firmware(sim, settings, tmp_path, definition: dict, value):
    registry = copy.deepcopy(sim.registry)
    registry["attributes"]["AcPwrRcvryDelay"] = definition
    platform = copy.deepcopy(sim.platform)
    platform["bios"]["baseline"] = {"AcPwrRcvryDelay": value}
    settings.FIRMWARE_DIR = tmp_path
    assert baseline.validate_platform_file(firmware_files(tmp_path, registry, {"AcPwrRcvryDelay": value})) == []
    return sim.run("stages/firmware.yml", host_vars={"platform": platform, "bios_registry": registry})


def test_a_number_of_an_enumeration_of_numbers_reaches_the_bmc(simulated_appliance, settings, tmp_path):
    # AcPwrRcvryDelay as a registry may publish it: an enumeration of numbers, the baseline's value a number.
    run = run_firmware(simulated_appliance, settings, tmp_path, {"type": "Enumeration", "values": NUMBERS}, 30)
    assert run.returncode == 0, run.output
    assert "is not one of" not in run.output
    assert simulated_appliance.redfish_bios()["AcPwrRcvryDelay"] == "30"  # sent as its ValueName
    assert run.facts[NODE]["appliance_bios_changes"] == [{"attribute": "AcPwrRcvryDelay", "old": "0", "new": "30"}]


def test_a_registry_bound_of_null_is_no_bound_on_the_bmc(simulated_appliance, settings, tmp_path):
    run = run_firmware(simulated_appliance, settings, tmp_path, {"type": "Integer", "min": None, "max": 240}, 60)
    assert run.returncode == 0, run.output
    assert str(simulated_appliance.redfish_bios()["AcPwrRcvryDelay"]) == "60"
