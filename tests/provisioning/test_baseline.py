from pathlib import Path

import pytest

from appliance.provisioning import baseline, services
from appliance.provisioning.catalogue import DEFAULT
from appliance.provisioning.models import Run


def test_the_shipped_baselines_are_valid(settings):
    for path in sorted((Path(settings.FIRMWARE_DIR) / "platforms").glob("*.yaml")):
        assert baseline.validate_platform_file(path) == [], path


@pytest.fixture
def firmware(settings, tmp_path):
    shipped = Path(settings.FIRMWARE_DIR)
    (tmp_path / "platforms").mkdir()
    (tmp_path / "registries").mkdir()
    for registry in (shipped / "registries").glob("*.yaml"):
        (tmp_path / "registries" / registry.name).write_text(registry.read_text())
    settings.FIRMWARE_DIR = tmp_path
    return tmp_path


def write_platform(firmware, text_of_baseline: str) -> Path:
    path = firmware / "platforms" / "hgx-h100-8gpu.yaml"
    path.write_text("id: hgx-h100-8gpu\nname: test\nbios:\n  registry: dell-xe9680-bios.yaml\n  baseline:\n"
                    + text_of_baseline)
    return path


def test_an_unknown_attribute_names_file_and_line(firmware):
    path = write_platform(firmware, "    BootMode: Uefi\n    TurboBoostX: Enabled\n")
    errors = baseline.validate_platform_file(path)
    assert len(errors) == 1
    assert str(errors[0]).endswith("hgx-h100-8gpu.yaml:7: BIOS attribute TurboBoostX: unknown attribute (not in the "
                                   f"BIOS attribute registry) ({firmware}/registries/dell-xe9680-bios.yaml)")


def test_a_value_the_registry_does_not_allow_names_file_and_line(firmware):
    path = write_platform(firmware, "    SysProfile: Fastest\n    AcPwrRcvryDelay: 999\n")
    errors = [str(e) for e in baseline.validate_platform_file(path)]
    assert errors[0].split(": ", 1)[0].endswith("hgx-h100-8gpu.yaml:6")
    assert "SysProfile: 'Fastest' is not one of PerfPerWattOptimizedDapc, PerfPerWattOptimizedOs, PerfOptimized, " \
        "Custom" in errors[0]
    assert errors[1].split(": ", 1)[0].endswith("hgx-h100-8gpu.yaml:7")
    assert "AcPwrRcvryDelay: 999 is above the maximum 240" in errors[1]


def test_a_bad_baseline_refuses_the_run_before_anything_starts(firmware, appliance, settings):
    write_platform(firmware, "    NoSuchKnob: Enabled\n")
    with pytest.raises(services.RunRefused) as refused:
        services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=DEFAULT)
    assert any("hgx-h100-8gpu.yaml:6: BIOS attribute NoSuchKnob: unknown attribute" in e
               for e in refused.value.errors)
    assert not Run.objects.exists()
