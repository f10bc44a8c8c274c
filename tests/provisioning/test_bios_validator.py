"""One BIOS validator: the pre-flight check of a platform file and the redfish_bios module answer
the same, because both run playbooks/collections/ansible_collections/appliance/hgx/plugins/module_utils/appliance_bios_registry.py. The cases are the
two the pre-flight once passed and the module then refused or crashed on."""

import sys
from pathlib import Path

import pytest
from django.conf import settings

from appliance.provisioning import baseline

sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))
import appliance_bios  # noqa: E402

sys.path.pop(0)

REGISTRY = """id: test-bios
attributes:
  NumaNodesPerSocket: {type: Enumeration, values: [1, 2, 4], factory: 1}
  SubNumaCluster: {type: Enumeration, values: [Disabled, "2Way", "4Way"], factory: Disabled}
  SerialComm: {type: Enumeration, values: ["Off", OnConRedirCom1], factory: "Off"}
  AcPwrRcvryDelay: {type: Integer, min: null, max: 240, factory: 0}
  BootRetryCount: {type: Integer, min: 1, max: null, factory: 3}
  AssetTag: {type: String, max_length: null, factory: ""}
"""


@pytest.fixture
def firmware(settings, tmp_path):
    (tmp_path / "platforms").mkdir()
    (tmp_path / "registries").mkdir()
    (tmp_path / "registries" / "test-bios.yaml").write_text(REGISTRY)
    settings.FIRMWARE_DIR = tmp_path
    return tmp_path


def preflight(firmware, baseline_text: str) -> list[str]:
    path = firmware / "platforms" / "test.yaml"
    path.write_text("id: test\nbios:\n  registry: test-bios.yaml\n  baseline:\n" + baseline_text)
    return [str(error) for error in baseline.validate_platform_file(path)]


def module_errors(firmware, values: dict) -> list[str]:
    registry = baseline.load_registry({"bios": {"registry": "test-bios.yaml"}})["attributes"]
    return appliance_bios.validate_baseline(values, registry)


def test_a_number_in_an_enumeration_of_numbers_passes_both_and_is_sent_as_its_name(firmware):
    assert preflight(firmware, "    NumaNodesPerSocket: 1\n") == []
    assert module_errors(firmware, {"NumaNodesPerSocket": 1}) == []
    assert module_errors(firmware, {"NumaNodesPerSocket": "2"}) == []
    registry = baseline.load_registry({"bios": {"registry": "test-bios.yaml"}})["attributes"]
    assert appliance_bios.wire_baseline({"NumaNodesPerSocket": 1, "AcPwrRcvryDelay": 30}, registry) == {
        "NumaNodesPerSocket": "1", "AcPwrRcvryDelay": 30}
    # The BMC may report it back as the name or as a number: the same value either way.
    assert appliance_bios.differences({"NumaNodesPerSocket": "1"}, {"NumaNodesPerSocket": 1}) == []
    assert appliance_bios.differences({"NumaNodesPerSocket": 1}, {"NumaNodesPerSocket": "1"}) == []


def test_a_null_bound_is_no_bound_for_both(firmware):
    assert preflight(firmware, "    AcPwrRcvryDelay: -5\n    BootRetryCount: 1000\n") == []
    assert module_errors(firmware, {"AcPwrRcvryDelay": -5, "BootRetryCount": 1000, "AssetTag": "x" * 300}) == []


@pytest.mark.parametrize("line, values, message", [
    ("    NumaNodesPerSocket: 3\n", {"NumaNodesPerSocket": 3}, "NumaNodesPerSocket: 3 is not one of 1, 2, 4"),
    ("    NumaNodesPerSocket: true\n", {"NumaNodesPerSocket": True},
     "NumaNodesPerSocket: True is not one of 1, 2, 4"),
    ("    SerialComm: false\n", {"SerialComm": False}, "SerialComm: False is not one of Off, OnConRedirCom1"),
    ("    AcPwrRcvryDelay: 241\n", {"AcPwrRcvryDelay": 241}, "AcPwrRcvryDelay: 241 is above the maximum 240"),
    ("    BootRetryCount: 0\n", {"BootRetryCount": 0}, "BootRetryCount: 0 is below the minimum 1"),
    ("    AcPwrRcvryDelay: '30'\n", {"AcPwrRcvryDelay": "30"}, "AcPwrRcvryDelay: '30' is not an integer"),
    ("    TurboBoostX: Enabled\n", {"TurboBoostX": "Enabled"},
     "TurboBoostX: unknown attribute (not in the BIOS attribute registry)"),
])
def test_both_refuse_the_same_values_with_the_same_message(firmware, line, values, message):
    assert preflight(firmware, line) == [
        f"{firmware}/platforms/test.yaml:5: BIOS attribute {message} ({firmware}/registries/test-bios.yaml)"]
    assert module_errors(firmware, values) == [message]


def test_an_unusable_registry_definition_is_an_error_not_a_crash(firmware):
    (firmware / "registries" / "test-bios.yaml").write_text(
        "attributes:\n  AcPwrRcvryDelay: {type: Integer, min: low, max: 240}\n"
        "  SysProfile: {type: Enumeration, values: []}\n")
    expected_delay = "AcPwrRcvryDelay: the registry's min 'low' is not a whole number or null"
    expected_profile = "SysProfile: the registry lists no values for this enumeration"
    assert preflight(firmware, "    AcPwrRcvryDelay: 5\n    SysProfile: Custom\n") == [
        f"{firmware}/platforms/test.yaml:5: BIOS attribute {expected_delay} ({firmware}/registries/test-bios.yaml)",
        f"{firmware}/platforms/test.yaml:6: BIOS attribute {expected_profile} ({firmware}/registries/test-bios.yaml)"]
    assert module_errors(firmware, {"AcPwrRcvryDelay": 5, "SysProfile": "Custom"}) == [
        expected_delay, expected_profile]


def test_the_controller_and_the_module_run_one_validator():
    validator = Path(settings.COLLECTION_DIR) / "plugins" / "module_utils" / "appliance_bios_registry.py"
    controller = baseline.bios_rules()
    assert Path(controller.__file__) == validator
    module_validator = appliance_bios.validate_baseline
    assert Path(module_validator.__code__.co_filename) == validator
    # ...and the per-value check it calls is the same file's too.
    assert Path(module_validator.__globals__["validate_value"].__code__.co_filename) == validator
