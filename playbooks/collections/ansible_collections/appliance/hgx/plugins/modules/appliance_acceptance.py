#!/usr/bin/python
# Appliance suite: measure one node against its platform's expectations and report every check.

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_acceptance
short_description: Run the acceptance check groups of one node and return every check's result
description:
  - Never fails because a check failed; it returns them all in ansible_facts.appliance_acceptance so
    the whole report is kept, and the next task fails naming the failed checks.
options:
  node: {description: node name, type: str, required: true}
  sysroot: {description: root of the node's file tree (empty on a real node), type: str, default: ""}
  groups: {description: check groups to run (bios, os, services, gpu), type: list, elements: str, required: true}
  platform: {description: the platform file's content, type: dict, required: true}
  platform_file: {description: the platform file named in each check's source, type: str, default: ""}
  bios_baseline: {description: attribute -> baseline value, type: dict, default: {}}
  bios_measured: {description: attribute -> value read from the BMC (null when it could not be read), type: dict}
  bios_error: {description: why the BIOS could not be read, type: str, default: ""}
  services: {description: units that must be active, type: list, elements: str, default: []}
  kernel_cmdline: {description: parameters the running kernel must have, type: list, elements: str, default: []}
  memlock: {description: memlock limit every user must get, type: str, default: unlimited}
"""

RETURN = r"""
ansible_facts:
  description: appliance_acceptance, [{check, node, expected, measured, passed, source, message}]
  returned: success
  type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_acceptance import Context, run_groups
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "sysroot": {"type": "str", "default": ""},
            "groups": {"type": "list", "elements": "str", "required": True},
            "platform": {"type": "dict", "required": True},
            "platform_file": {"type": "str", "default": ""},
            "bios_baseline": {"type": "dict", "default": {}},
            "bios_measured": {"type": "dict"},
            "bios_error": {"type": "str", "default": ""},
            "services": {"type": "list", "elements": "str", "default": []},
            "kernel_cmdline": {"type": "list", "elements": "str", "default": []},
            "memlock": {"type": "str", "default": "unlimited"},
        },
        supports_check_mode=True,
    )
    p = module.params
    context = Context(p["node"], sysroot=p["sysroot"], platform=p["platform"], platform_file=p["platform_file"],
                      bios_baseline=p["bios_baseline"], bios_measured=p["bios_measured"],
                      bios_error=p["bios_error"], services=p["services"], kernel_cmdline=p["kernel_cmdline"],
                      memlock=p["memlock"])
    try:
        records = run_groups(context, p["groups"])
    except ValueError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}")
    failed = [r for r in records if not r["passed"]]
    module.exit_json(changed=False, ansible_facts={"appliance_acceptance": records},
                     msg=f"{p['node']}: {len(records) - len(failed)} of {len(records)} checks passed")


if __name__ == "__main__":
    main()
