#!/usr/bin/python
# Appliance suite: restart a server over its BMC so that staged BIOS values take effect.

from __future__ import annotations

DOCUMENTATION = r"""
module: redfish_reset
short_description: Restart a server over Redfish to apply its staged BIOS values, inside a maintenance window
description:
  - BMCs of real servers stage BIOS changes in the Bios Settings resource and apply them at the next
    boot. This module restarts the system with the best restart its BMC allows
    (C(GracefulRestart), else C(ForceRestart), else C(PowerCycle), from the
    C(ResetType@Redfish.AllowableValues) of C(ComputerSystem.Reset)), waits until the system is powered
    on again with the staged values in effect and nothing left staged, and returns the values in effect.
  - Refuses, before anything is sent, when the current time is outside O(window); the message names the
    window. Nothing is reset then.
  - In check mode nothing is reset; the module reports whether it would restart.
  - Runs where the BMC is reachable (the controller); restart one server at a time (C(throttle=1) on the task).
version_added: "0.1.0"
author:
  - Appliance management suite developers (!UNKNOWN)
options:
  url: {description: BMC base URL (https://host:port)., type: str, required: true}
  username: {description: BMC user., type: str, required: true}
  password: {description: BMC password., type: str, required: true}
  verify_tls: {description: Verify the BMC's certificate., type: bool, default: true}
  ca_file: {description: CA bundle that signed the BMC's certificate (default the system's)., type: path}
  node: {description: Node name used in messages., type: str, required: true}
  system_id: {description: Redfish ComputerSystem Id when the BMC has several., type: str}
  expected:
    description: The staged values (attribute -> value) that must be in effect after the restart.
    type: dict
    required: true
  window:
    description:
      - The site's maintenance window, C({days, start, end, timezone}) as in the site definition's
        C(appliance.maintenance.window). Days are mon..sun (default every day), times HH:MM (an end not
        after the start runs past midnight), the timezone an IANA name (default UTC).
      - Without a window the module refuses, since restarting a production server needs one.
    type: dict
  timeout: {description: Seconds to wait for the system to come back with the values in effect., type: int, default: 900}
  request_timeout: {description: Seconds per HTTP request., type: int, default: 30}
  poll_interval: {description: Seconds between checks while waiting., type: float, default: 2.0}
requirements: [sushy]
notes:
  - On a simulated appliance the BMC is sushy-tools' emulator run with the simulation's staging driver
    (appliance/simulation/bmc_driver.py) when the node's apply time is OnReset; a restart there takes
    about a second.
  - sushy-emulator has no SessionService, so the client's session attempt falls back to basic auth there.
"""

EXAMPLES = r"""
- name: Restart the server to apply its staged BIOS values
  appliance.hgx.redfish_reset:
    url: "{{ bmc.url }}"
    username: "{{ bmc.username }}"
    password: "{{ bmc_password }}"
    ca_file: "{{ bmc.ca_file }}"
    node: "{{ inventory_hostname }}"
    expected: "{{ appliance_bios_pending }}"
    window: {days: [sat, sun], start: "22:00", end: "06:00", timezone: Europe/Moscow}
    timeout: 900
  delegate_to: localhost
  throttle: 1
  no_log: true
"""

RETURN = r"""
reset_type:
  description: The ResetType sent to the BMC (empty in check mode).
  returned: success
  type: str
  sample: GracefulRestart
seconds:
  description: Seconds from the reset request until the values were seen in effect.
  returned: success
  type: float
window:
  description: The maintenance window, as text.
  returned: always
  type: str
  sample: "sat,sun 22:00-06:00 Europe/Moscow"
ansible_facts:
  description:
    - appliance_bios (attributes in effect after the restart), appliance_bios_pending ({}),
      appliance_bmc_reset ({reset_type, seconds, window, applied}), which the provisioning engine records
      as the audit event provisioning.bmc.reset.
  returned: success, not in check mode
  type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_bios import apply_staged
from ansible_collections.appliance.hgx.plugins.module_utils.appliance_redfish import RedfishClient, RedfishError, missing_requirements
from ansible_collections.appliance.hgx.plugins.module_utils import appliance_window
from ansible.module_utils.basic import AnsibleModule, missing_required_lib


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "username": {"type": "str", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "verify_tls": {"type": "bool", "default": True},
            "ca_file": {"type": "path"},
            "node": {"type": "str", "required": True},
            "system_id": {"type": "str"},
            "expected": {"type": "dict", "required": True},
            "window": {"type": "dict"},
            "timeout": {"type": "int", "default": 900},
            "request_timeout": {"type": "int", "default": 30},
            "poll_interval": {"type": "float", "default": 2.0},
        },
        supports_check_mode=True,
    )
    if missing_requirements():
        module.fail_json(msg=missing_required_lib("sushy"))
    p = module.params
    node, window = p["node"], p["window"]
    if not window:
        module.fail_json(msg=f"{node}: BIOS values are staged on BMC {p['url']} until the server restarts, and the "
                             "site has no maintenance window to restart it in: set appliance.maintenance.window "
                             "in the site definition; nothing was reset")
    problems = appliance_window.problems(window)
    if problems:
        module.fail_json(msg=f"{node}: the maintenance window is invalid: {'; '.join(problems)}")
    text = appliance_window.describe(window)
    staged = ", ".join(f"{k}={v}" for k, v in sorted(p["expected"].items()))
    if not appliance_window.is_open(window):
        module.fail_json(msg=f"{node}: outside the maintenance window ({text}): the BIOS values staged on BMC "
                             f"{p['url']} ({staged}) wait for a restart inside it; nothing was reset", window=text)
    if module.check_mode:
        module.exit_json(changed=True, reset_type="", seconds=0.0, window=text,
                         msg=f"would restart {node} to apply {staged}")
    try:
        with RedfishClient(p["url"], p["username"], p["password"], node, verify_tls=p["verify_tls"],
                           ca_file=p["ca_file"] or None, timeout=p["request_timeout"]) as client:
            result = apply_staged(client, p["expected"], p["timeout"], system_id=p["system_id"],
                                  interval=p["poll_interval"])
    except RedfishError as exc:
        module.fail_json(msg=str(exc), window=text)
    module.exit_json(changed=True, reset_type=result["reset_type"], seconds=result["seconds"], window=text,
                     msg=f"restarted {node} ({result['reset_type']}) to apply {staged}; in effect after "
                         f"{result['seconds']} s",
                     ansible_facts={"appliance_bios": result["attributes"], "appliance_bios_pending": {},
                                    "appliance_bmc_reset": {"reset_type": result["reset_type"],
                                                            "seconds": result["seconds"], "window": text,
                                                            "applied": p["expected"]}})


if __name__ == "__main__":
    main()
