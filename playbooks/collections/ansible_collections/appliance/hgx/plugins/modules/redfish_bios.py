#!/usr/bin/python
# Appliance suite: BIOS settings of one server over its BMC's Redfish service.

from __future__ import annotations

DOCUMENTATION = r"""
module: redfish_bios
short_description: Bring a server's BIOS attributes to a baseline over Redfish, or read them
description:
  - Reads the BMC's service root, follows its Systems link and picks the system (the one named by
    O(system_id), or the only one), follows the system's Bios link, and reads the attributes.
  - With O(state=present), checks every baseline attribute against the attribute registry before
    anything is sent, PATCHes only the attributes that differ to the target the BMC names in
    C(@Redfish.Settings), then reads back and verifies.
  - Runs where the BMC is reachable (the controller): use C(delegate_to) localhost.
options:
  url: {description: BMC base URL (https://host:port), type: str, required: true}
  username: {description: BMC user, type: str, required: true}
  password: {description: BMC password, type: str, required: true}
  verify_tls: {description: verify the BMC's certificate, type: bool, default: true}
  ca_file: {description: CA bundle that signed the BMC's certificate (default the system's), type: path}
  node: {description: node name used in messages, type: str, required: true}
  system_id: {description: Redfish ComputerSystem Id when the BMC has several, type: str}
  baseline: {description: attribute -> wanted value, type: dict, default: {}}
  registry:
    description:
      - attribute -> {type, values, min, max, max_length}, as firmware/registries/ holds it; checked by
        module_utils/appliance_bios_registry, the validator the controller's pre-flight check runs too.
      - An enumeration's values are ValueNames; a number among them (or in O(baseline)) stands for its
        decimal text and is sent as such. A bound that is absent or null is no bound.
    type: dict
    default: {}
  state: {description: present converges to the baseline; read only reads, type: str, choices: [present, read], default: present}
  timeout: {description: seconds per HTTP request, type: int, default: 30}
"""

RETURN = r"""
ansible_facts:
  description: appliance_bios (attributes read back), appliance_bios_changes ([{attribute, old, new}]),
    appliance_bios_pending (values accepted for the next boot), appliance_bmc ({system_id, system_uri, bios_uri})
  returned: success
  type: dict
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
