"""The simulated BMC's process: sushy-tools' own Flask application (routes, templates, basic auth) with a
systems driver that behaves like the BMC of a real server in one respect sushy-tools leaves out:
BIOS settings are staged and applied by the next boot.

Run as `python bmc_driver.py --config bmc_emulator_config.py` (appliance.simulation.bmc does); the
arguments are sushy-emulator's own. The config's APPLIANCE_BMC_APPLY picks the behaviour per node:

- "Immediate": sushy-tools' LibvirtDriver as it is: a PATCH of BIOS/Settings changes the BIOS at once.
- "OnReset" (as HGX servers' BMCs do): a PATCH of BIOS/Settings is kept as pending attributes in the
  node's state file (the BMC's NVRAM: they survive an emulator restart); GET BIOS/Settings shows them
  over the current values (sushy-tools renders that resource from the driver's get_bios); GET BIOS
  keeps showing the values in effect. A ComputerSystem.Reset that boots the server (GracefulRestart
  or ForceRestart while on, On or ForceOn while off) applies them. The BIOS resources carry an ETag,
  and a PATCH of BIOS/Settings must send it in If-Match (HTTP 428 without it, 412 when it is stale),
  as BMCs that guard concurrent changes answer.

This module is not imported by the suite: like the emulator's config, it runs in a process of its own
and reads the node's state through state.py loaded from its file, without Django.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
import types
from pathlib import Path

import flask
from sushy_tools import error
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator import memoize
from sushy_tools.emulator.resources.systems import libvirtdriver

# state.py and the pure modules beside it (cpus.py) as a package of their own, without importing the
# suite's package (which loads Django and Celery).
_package = types.ModuleType("appliance_bmc_simulation")
_package.__path__ = [str(Path(__file__).parent)]
sys.modules.setdefault("appliance_bmc_simulation", _package)
_state = importlib.import_module("appliance_bmc_simulation.state")

IMMEDIATE, ON_RESET = "Immediate", "OnReset"
APPLY_TIMES = (IMMEDIATE, ON_RESET)
SETTINGS_ENDPOINT = "bios_settings"  # sushy-tools' view of /redfish/v1/Systems/<identity>/BIOS/Settings
BIOS_ENDPOINTS = ("bios", SETTINGS_ENDPOINT)
BOOTS_WHEN_ON = ("GracefulRestart", "ForceRestart")
BOOTS_WHEN_OFF = ("On", "ForceOn")


def _settings_request() -> bool:
    return flask.has_request_context() and flask.request.endpoint == SETTINGS_ENDPOINT


def etag_of(attributes: dict) -> str:
    digest = hashlib.sha256(json.dumps(attributes, sort_keys=True, default=str).encode()).hexdigest()
    return f'"{digest[:20]}"'


class StagingLibvirtDriver(libvirtdriver.LibvirtDriver):
    """LibvirtDriver whose BIOS changes wait for a boot when the config says OnReset."""

    @property
    def apply_time(self) -> str:
        return self._config.get("APPLIANCE_BMC_APPLY", IMMEDIATE)

    @property
    def sysroot(self) -> Path:
        return Path(self._config["APPLIANCE_BMC_SYSROOT"])

    def pending(self) -> dict:
        return dict(_state.load(self.sysroot)["bmc"].get("bios_pending") or {})

    def get_bios(self, identity):
        current = super().get_bios(identity)
        if _settings_request():
            return {**current, **self.pending()}
        return current

    def set_bios(self, identity, attributes):
        if self.apply_time != ON_RESET:
            return super().set_bios(identity, attributes)
        if not isinstance(attributes, dict) or not attributes:
            raise error.BadRequest("the PATCH names no Attributes")
        current = super().get_bios(identity)
        unknown = sorted(name for name in attributes if name not in current)
        if unknown:
            raise error.BadRequest(f"unknown BIOS attribute(s) {', '.join(unknown)}")
        with _state.update(self.sysroot) as state:
            pending = dict(state["bmc"].get("bios_pending") or {})
            pending.update(attributes)
            state["bmc"]["bios_pending"] = pending
        self._logger.info("BIOS attributes %s staged until the next boot", sorted(attributes))

    def set_power_state(self, identity, state):
        domain = self._get_domain(identity)
        boots = (state in BOOTS_WHEN_ON and domain.isActive()) or (state in BOOTS_WHEN_OFF and not domain.isActive())
        super().set_power_state(identity, state)
        if boots:
            self._apply_pending(identity)

    def _apply_pending(self, identity):
        """The boot's firmware step: staged values become the BIOS in effect, the stage is emptied."""
        pending = self.pending()
        if not pending:
            return
        attributes = {**super().get_bios(identity), **pending}
        self._process_bios(identity, attributes, update_existing_attributes=True)
        with _state.update(self.sysroot) as state:
            state["bmc"]["bios"] = {name: str(value) for name, value in attributes.items()}
            state["bmc"]["bios_pending"] = {}
        self._logger.info("BIOS attributes %s applied at boot", sorted(pending))


class StagingApplication(emulator.Application):
    """sushy-tools' Application with the staging driver as its systems driver (its other drivers,
    routes and templates unchanged)."""

    @property
    @memoize.memoize()
    def systems(self):
        return StagingLibvirtDriver.initialize(self.config, self.logger,
                                               self.config.get("SUSHY_EMULATOR_LIBVIRT_URI", ""))()


def _bios_etag():
    return etag_of(emulator.app.systems.get_bios(flask.request.view_args["identity"]))


def check_if_match():
    """A PATCH of BIOS/Settings must name the version it was computed from (when the BMC stages)."""
    if flask.request.endpoint != SETTINGS_ENDPOINT or flask.request.method != "PATCH":
        return None
    sent = flask.request.headers.get("If-Match")
    if sent is None:
        if emulator.app.systems.apply_time == ON_RESET:
            return emulator._render_error("If-Match with the ETag of BIOS/Settings is required"), 428
        return None
    if sent.strip() not in ("*", _bios_etag(), "W/" + _bios_etag()):
        return emulator._render_error("the ETag in If-Match is stale: read BIOS/Settings again"), 412
    return None


def add_etag(response):
    if flask.request.endpoint in BIOS_ENDPOINTS and flask.request.method == "GET" and response.status_code == 200:
        response.headers["ETag"] = _bios_etag()
    return response


def install(app) -> None:
    app.__class__ = StagingApplication
    app.before_request(check_if_match)
    app.after_request(add_etag)


if __name__ == "__main__":
    install(emulator.app)
    sys.argv[0] = "sushy-emulator"
    emulator.main()
