"""Each simulated BMC is a real Redfish server (sushy-emulator) over TLS with basic auth."""

import os
import time
from pathlib import Path

import pytest
import requests

from appliance.simulation import bmc, services
from appliance.simulation import state as node_state

pytestmark = pytest.mark.slow


@pytest.fixture
def running(prepared):
    appliance = prepared.appliance
    services.start_bmcs(appliance)
    yield prepared
    services.stop_bmcs(appliance)


def session() -> requests.Session:
    http = requests.Session()
    # REQUESTS_CA_BUNDLE in the environment would otherwise win over Session.verify.
    http.trust_env = False
    http.auth = ("admin", bmc.password())
    http.verify = str(bmc.ca_path())
    return http


def eventually(check, seconds: float = 3.0) -> bool:
    """The emulator writes BIOS and power changes to the state from libvirt's event thread."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def system_url(node, http) -> str:
    members = http.get(f"{node.bmc.url}/redfish/v1/Systems", timeout=10)
    assert members.status_code == 200
    [member] = members.json()["Members"]
    return node.bmc.url + member["@odata.id"]


def test_credentials_exist_before_any_inventory(sim_settings):
    services.ensure_credentials()
    assert bmc.ca_path().read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert oct(bmc.password_path().stat().st_mode & 0o777) == "0o600"
    first = bmc.password()
    services.ensure_credentials()
    assert bmc.password() == first


def test_bios_over_redfish_follows_links_and_persists(running):
    http = session()
    system = http.get(system_url(running, http), timeout=10).json()
    assert system["UUID"] == node_state.load(running.sysroot)["bmc"]["system_uuid"]
    assert system["PowerState"] == "On"
    bios_url = running.bmc.url + system["Bios"]["@odata.id"]
    bios = http.get(bios_url, timeout=10).json()
    assert bios["Attributes"]["SysProfile"] == "PerfPerWattOptimizedDapc"  # the registry's factory value
    assert bios["Attributes"]["SerialComm"] == "Off"
    settings_url = running.bmc.url + bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
    change = {"Attributes": {"SysProfile": "PerfOptimized", "ProcCStates": "Disabled"}}
    # The platform's BMC stages BIOS changes until the next boot (bios.apply_time OnReset) and guards
    # them with the ETag of BIOS/Settings.
    assert http.patch(settings_url, json=change, timeout=10).status_code == 428
    etag = http.get(settings_url, timeout=10).headers["ETag"]
    assert http.patch(settings_url, json=change, headers={"If-Match": etag}, timeout=10).status_code in (200, 204)
    assert http.get(settings_url, timeout=10).json()["Attributes"]["SysProfile"] == "PerfOptimized"
    assert http.get(bios_url, timeout=10).json()["Attributes"]["SysProfile"] == "PerfPerWattOptimizedDapc"
    reset = running.bmc.url + system["Actions"]["#ComputerSystem.Reset"]["target"]
    assert http.post(reset, json={"ResetType": "GracefulRestart"}, timeout=10).status_code in (200, 204)
    after = http.get(bios_url, timeout=10).json()["Attributes"]
    assert (after["SysProfile"], after["ProcCStates"]) == ("PerfOptimized", "Disabled")
    # The BMC's memory is the node's state: a restarted emulator still has the values.
    assert eventually(lambda: node_state.load(running.sysroot)["bmc"]["bios"]["SysProfile"] == "PerfOptimized")
    assert node_state.load(running.sysroot)["bmc"]["bios_pending"] == {}
    services.stop_bmcs(running.appliance)
    bmc.set_apply_time(running, "Immediate")  # the node's own choice over its platform's
    services.start_bmcs(running.appliance)
    again = http.get(bios_url, timeout=10).json()["Attributes"]
    assert again["SysProfile"] == "PerfOptimized"
    at_once = http.patch(settings_url, json={"Attributes": {"SerialComm": "OnConRedir"}}, timeout=10)
    assert at_once.status_code in (200, 204)
    assert http.get(bios_url, timeout=10).json()["Attributes"]["SerialComm"] == "OnConRedir"


def test_power_and_boot_override(running):
    http = session()
    url = system_url(running, http)
    system = http.get(url, timeout=10).json()
    reset = running.bmc.url + system["Actions"]["#ComputerSystem.Reset"]["target"]
    assert http.post(reset, json={"ResetType": "ForceOff"}, timeout=10).status_code in (200, 204)
    assert http.get(url, timeout=10).json()["PowerState"] == "Off"
    assert eventually(lambda: node_state.load(running.sysroot)["bmc"]["power"] == "Off")
    boot = {"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}
    assert http.patch(url, json=boot, timeout=10).status_code in (200, 204)
    assert http.get(url, timeout=10).json()["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert http.post(reset, json={"ResetType": "On"}, timeout=10).status_code in (200, 204)
    assert http.get(url, timeout=10).json()["PowerState"] == "On"
    assert eventually(lambda: node_state.load(running.sysroot)["bmc"]["power"] == "On")


def test_wrong_password_and_tls(running):
    http = session()
    http.auth = ("admin", "not-the-password")
    assert http.get(f"{running.bmc.url}/redfish/v1/Systems", timeout=10).status_code == 401
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{running.bmc.url}/redfish/v1/Systems", auth=("admin", bmc.password()), timeout=10)
    services.inject_fault(running, "bmc_wrong_password")
    assert session().get(f"{running.bmc.url}/redfish/v1/Systems", timeout=10).status_code == 401
    services.clear_faults(running, "bmc_wrong_password")
    assert session().get(f"{running.bmc.url}/redfish/v1/Systems", timeout=10).status_code == 200


def test_stop_kills_and_ensure_restarts(running):
    appliance = running.appliance
    status = services.bmc_status(appliance)[running.name]
    assert status["running"] and status["answering"]
    pid = status["pid"]
    assert Path(f"/proc/{pid}").exists()
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert not services.bmc_status(appliance)[running.name]["running"]
    restarted = services.ensure_bmcs(appliance)[running.name]
    assert restarted != pid and services.bmc_status(appliance)[running.name]["answering"]
    services.stop_bmcs(appliance)
    assert not Path(f"/proc/{restarted}/cmdline").exists() or \
        str(bmc.CONFIG).encode() not in Path(f"/proc/{restarted}/cmdline").read_bytes()
    services.inject_fault(running, "bmc_down")
    assert services.start_bmcs(appliance)[running.name] is None
    with pytest.raises(requests.exceptions.ConnectionError):
        session().get(f"{running.bmc.url}/redfish/v1/", timeout=5)
    services.clear_faults(running, "bmc_down")
    assert services.bmc_status(appliance)[running.name]["answering"]
