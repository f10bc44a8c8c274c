#!/usr/bin/python
# Appliance suite: BIOS settings of one server over its BMC's Redfish service.

from __future__ import annotations

DOCUMENTATION = r"""
module: redfish_bios
short_description: Bring a server's BIOS attributes to a baseline over Redfish, or read them
version_added: "0.1.0"
description:
  - Reads the BMC's service root, follows its Systems link and picks the system (the one named by
    O(system_id), or the only one), follows the system's Bios link, and reads the attributes in effect
    and the ones the BMC has staged for the next boot (its C(@Redfish.Settings) object).
  - With O(state=present), checks every baseline attribute against O(registry) before anything is sent,
    then PATCHes only the attributes that differ (from the values in effect or staged) to the Settings
    object the BMC names, with C(If-Match) and its ETag, and reads back.
  - Where the BMC lists V(OnReset) among its supported apply times, the values are sent with
    C(@Redfish.SettingsApplyTime) V(OnReset), so the BMC never restarts the server at a moment of its
    choosing. Values the BMC stages are returned in C(appliance_bios_pending), and
    M(appliance.hgx.redfish_reset) applies them by a restart inside the maintenance window.
  - With O(state=read), only reads (the acceptance stage compares the values in effect with the baseline).
  - The transport is OpenStack's sushy - a Redfish session where the BMC offers a SessionService, else basic
    authentication, task monitors and retries.
author:
  - Appliance management suite developers (!UNKNOWN)
requirements:
  - sushy (on the controller, where the module runs)
notes:
  - Runs where the BMC is reachable, the controller; use C(delegate_to=localhost) and C(no_log=true) since
    O(password) is a task argument.
  - Many BMCs publish no attribute registry, or accept any value and fail later, so the values are checked
    against the platform's registry (C(firmware/registries/)) with the same validator as the controller's
    pre-flight check. A value it refuses fails the task before anything is sent, naming the attribute.
  - On a simulated node the BMC is sushy-tools' emulator on libvirt's test driver, served over TLS with basic
    authentication (it has no SessionService). Platforms whose apply time is V(OnReset) get the
    simulation's staging driver, which keeps the values staged until M(appliance.hgx.redfish_reset)
    restarts the system, as real BMCs do.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads and reports the changes it would make; nothing is sent.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  url:
    description: The BMC's base URL, C(https://host:port).
    type: str
    required: true
  username:
    description: The BMC user.
    type: str
    required: true
  password:
    description: The BMC user's password.
    type: str
    required: true
  verify_tls:
    description: Verify the BMC's certificate.
    type: bool
    default: true
  ca_file:
    description: CA bundle that signed the BMC's certificate (default the system's).
    type: path
  node:
    description: Name of the node, for messages.
    type: str
    required: true
  system_id:
    description: The Redfish ComputerSystem C(Id), when the BMC has several systems.
    type: str
  baseline:
    description: BIOS attribute name to its wanted value (O(state=present)).
    type: dict
    default: {}
  registry:
    description:
      - Attribute name to C({type, values, min, max, max_length}), as C(firmware/registries/) holds it;
        checked by C(module_utils/appliance_bios_registry), the validator the controller's pre-flight
        check runs too.
      - An enumeration's values are ValueNames; a number among them (or in O(baseline)) stands for its
        decimal text and is sent as such. A bound that is absent or null is no bound.
    type: dict
    default: {}
  state:
    description: V(present) converges to O(baseline); V(read) only reads.
    type: str
    choices: [present, read]
    default: present
  timeout:
    description: Seconds per HTTP request.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Bring the BIOS to the platform's baseline
  appliance.hgx.redfish_bios:
    url: "{{ bmc.url }}"
    username: "{{ bmc.username }}"
    password: "{{ bmc_password }}"
    ca_file: /etc/appliance/bmc-ca.pem
    node: "{{ inventory_hostname }}"
    baseline:
      SriovEnable: Enabled
      NumaNodesPerSocket: 1
    registry: "{{ bios_registry }}"
  delegate_to: localhost
  no_log: true

- name: Read the BIOS values in effect
  appliance.hgx.redfish_bios:
    url: "{{ bmc.url }}"
    username: "{{ bmc.username }}"
    password: "{{ bmc_password }}"
    node: "{{ inventory_hostname }}"
    state: read
  delegate_to: localhost
  no_log: true
  register: bios_read
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    appliance_bios:
      description: Attribute name to value, as in effect after the task.
      type: dict
    appliance_bios_changes:
      description: The attributes changed (in check mode, that would change), each with C(attribute), C(old) and C(new).
      type: list
      elements: dict
    appliance_bios_pending:
      description: Attribute name to the value the BMC staged for the next boot (applied by M(appliance.hgx.redfish_reset)).
      type: dict
    appliance_bmc:
      description:
        - The system read - C(system_id), C(system_uri), C(bios_uri), and C(auth), what the BMC accepted
          (V(session), its SessionService, or V(basic)).
      type: dict
msg:
  description: The changes made (or that would be made) and the values staged until the next reset.
  returned: when something changed or is staged
  type: str
  sample: "changed SriovEnable Disabled -> Enabled; staged until the next reset: SriovEnable=Enabled"
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_bios import BaselineError, converge, read_bios
from ansible_collections.appliance.hgx.plugins.module_utils.appliance_redfish import RedfishClient, RedfishError, missing_requirements
from ansible.module_utils.basic import AnsibleModule, missing_required_lib


def _render(attributes):
    return "".join(f"{name}: {attributes[name]}\n" for name in sorted(attributes))


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
            "baseline": {"type": "dict", "default": {}},
            "registry": {"type": "dict", "default": {}},
            "state": {"type": "str", "choices": ["present", "read"], "default": "present"},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    if missing_requirements():
        module.fail_json(msg=missing_required_lib("sushy"))
    p = module.params
    try:
        with RedfishClient(p["url"], p["username"], p["password"], p["node"], verify_tls=p["verify_tls"],
                           ca_file=p["ca_file"] or None, timeout=p["timeout"]) as client:
            if p["state"] == "read":
                system, bios, current, pending = read_bios(client, p["system_id"])
                result = {"system_id": system.get("Id", ""), "system_uri": system.get("@odata.id", ""),
                          "bios_uri": bios.get("@odata.id", ""), "attributes": current, "pending": pending,
                          "changes": [], "changed": False, "auth": client.auth_mode}
            else:
                result = converge(client, p["baseline"], p["registry"], check_mode=module.check_mode,
                                  system_id=p["system_id"])
    except (RedfishError, BaselineError) as exc:
        module.fail_json(msg=str(exc))

    facts = {
        "appliance_bios": result["attributes"],
        "appliance_bios_changes": result["changes"],
        "appliance_bios_pending": result["pending"],
        # auth: what the BMC accepted, "session" (its SessionService) or "basic" (no SessionService).
        "appliance_bmc": {k: result[k] for k in ("system_id", "system_uri", "bios_uri", "auth")},
    }
    output = {"changed": result["changed"], "ansible_facts": facts}
    if result["changes"]:
        changed_names = [c["attribute"] for c in result["changes"]]
        before = {name: result["before"].get(name) for name in changed_names}
        after = {c["attribute"]: c["new"] for c in result["changes"]}
        output["diff"] = {"before_header": f"{p['url']} BIOS", "after_header": f"{p['url']} BIOS",
                          "before": _render(before), "after": _render(after)}
        output["msg"] = ("would change " if module.check_mode else "changed ") + ", ".join(
            f"{c['attribute']} {c['old']} -> {c['new']}" for c in result["changes"])
    if result["pending"]:
        # Staged by the BMC until the server restarts: the firmware stage's redfish_reset task applies them.
        output["msg"] = (output.get("msg", "") + "; " if output.get("msg") else "") + \
            "staged until the next reset: " + ", ".join(f"{k}={v}" for k, v in sorted(result["pending"].items()))
    module.exit_json(**output)


if __name__ == "__main__":
    main()
