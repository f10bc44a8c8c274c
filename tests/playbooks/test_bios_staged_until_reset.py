"""A BMC that stages BIOS values until the next boot, as real servers' BMCs do: the node's simulated BMC
runs with apply time OnReset (sushy-tools' application with the simulation's staging driver), and the
real firmware stage, through Ansible, stages the baseline, restarts the server inside the site's
maintenance window and verifies the values in effect; outside the window it refuses and resets nothing.

The emulator also requires If-Match with the ETag of BIOS/Settings on a PATCH (428 without it), so a
stage that passes has sent the right ETag through sushy. sushy-emulator has no SessionService: the
client's session attempt falls back to basic auth, and the module says so (appliance_bmc.auth)."""

import datetime
import sys
from pathlib import Path

import pytest
from django.conf import settings

from appliance.simulation import bmc, services
from tests.playbooks.conftest import NODE

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ALWAYS = {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "start": "00:00", "end": "24:00",
          "timezone": "UTC"}


def closed_window() -> dict:
    """One minute on a day that is neither today nor yesterday (UTC): closed whenever the test runs."""
    today = datetime.datetime.now(datetime.UTC).weekday()
    day = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][(today + 3) % 7]
    return {"days": [day], "start": "03:00", "end": "03:01", "timezone": "UTC"}


def maintenance(window: dict) -> dict:
    return {"appliance": {"name": "pbtest", "settings": {"maintenance": {"window": window, "reset_timeout": 60}}}}


@pytest.fixture(scope="module")
def staging(simulated_appliance):
    sim = simulated_appliance
    appliance = sim.node.appliance
    services.stop_bmcs(appliance)
    bmc.set_apply_time(sim.node, "OnReset")
    services.start_bmcs(appliance)
    return sim


def module_utils():
    """The collection's module_utils as the tests' helpers import them (plain modules on sys.path)."""
    sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))
    try:
        import appliance_bios
        import appliance_redfish
    finally:
        sys.path.pop(0)
    return appliance_redfish, appliance_bios


def client(sim):
    host = sim.host_vars["bmc"]
    return module_utils()[0].RedfishClient(host["url"], host["username"], sim.bmc_password, NODE,
                                           ca_file=host["ca_file"], timeout=10)


def test_staged_values_are_applied_by_the_stages_reset_inside_the_window_only(staging):
    sim = staging
    baseline = {name: str(value) for name, value in sim.platform["bios"]["baseline"].items()}
    factory = sim.redfish_bios()
    to_change = {name: value for name, value in baseline.items() if factory[name] != value}
    assert to_change, "the factory BIOS already has the baseline: nothing to stage"

    refused = sim.run("stages/firmware.yml", extra_vars=maintenance(closed_window()))

    assert refused.returncode != 0
    line = next(line for line in refused.output.splitlines() if "outside the maintenance window" in line)
    assert f"{NODE}: outside the maintenance window ({closed_window()['days'][0]} 03:00-03:01 UTC)" in line
    assert "nothing was reset" in line and sim.bmc_password not in refused.output
    # Staged, not applied: no reset happened (a reset applies everything staged).
    assert sim.redfish_bios() == factory
    assert sim.state()["bmc"]["bios_pending"] == to_change

    checked = sim.run("stages/firmware.yml", "--check", extra_vars=maintenance(ALWAYS))
    assert checked.returncode == 0, checked.output
    assert sim.state()["bmc"]["bios_pending"] == to_change  # check mode never resets

    applied = sim.run("stages/firmware.yml", extra_vars=maintenance(ALWAYS))

    assert applied.returncode == 0, applied.output
    assert f"restarted {NODE} (GracefulRestart) to apply" in applied.output
    bios = sim.redfish_bios()
    assert {name: bios[name] for name in baseline} == baseline
    assert sim.state()["bmc"]["bios_pending"] == {}
    assert sim.state()["bmc"]["power"] == "On"
    facts = applied.facts[NODE]
    assert facts["appliance_bios_pending"] == {}
    assert facts["appliance_bmc_reset"]["reset_type"] == "GracefulRestart"  # the engine's audit record
    assert facts["appliance_bmc_reset"]["applied"] == to_change
    assert {name: facts["appliance_bios"][name] for name in baseline} == baseline
    assert facts["appliance_bmc"]["auth"] == "basic"  # no SessionService on sushy-emulator: the fallback ran


def test_a_patch_without_the_current_etag_is_refused_and_stages_nothing(staging):
    sim = staging
    with client(sim) as redfish:
        system = redfish.system()
        bios_path = system["Bios"]["@odata.id"]
        bios = redfish.get(bios_path)
        settings_path = bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
        _, etag = redfish.get_with_etag(settings_path)
        assert etag and etag.startswith('"')
        before = sim.state()["bmc"].get("bios_pending", {})

        # A stale ETag: the BMC answers 412, sushy retries once without If-Match, the BMC wants one (428).
        with pytest.raises(Exception, match=r"PATCH .*/BIOS/Settings answered HTTP 428"):
            redfish.patch(settings_path, {"Attributes": {"SerialComm": "OnConRedir"}}, etag='"stale"')
        assert sim.state()["bmc"].get("bios_pending", {}) == before

        redfish.patch(settings_path, {"Attributes": {"SerialComm": "OnConRedir"}}, etag=etag)
        assert sim.state()["bmc"]["bios_pending"] == {**before, "SerialComm": "OnConRedir"}
        _, after = redfish.get_with_etag(settings_path)
        assert after != etag  # the staged change is a new version of BIOS/Settings

        # A server that is off is booted (On), not restarted, and the boot applies what is staged.
        redfish.post(system["Actions"]["#ComputerSystem.Reset"]["target"], {"ResetType": "ForceOff"})
        applied = module_utils()[1].apply_staged(redfish, {"SerialComm": "OnConRedir"}, timeout=30, interval=0.2)
        assert applied["reset_type"] == "On"
        assert applied["attributes"]["SerialComm"] == "OnConRedir"
        assert redfish.get(system["@odata.id"])["PowerState"] == "On"
        assert sim.state()["bmc"]["bios_pending"] == {}
