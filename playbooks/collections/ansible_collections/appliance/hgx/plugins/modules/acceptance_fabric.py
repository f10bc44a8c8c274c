#!/usr/bin/python
# Appliance suite: the fabric, GPUDirect and benchmark gates of acceptance (NCCL bus bandwidth,
# ib_write_bw per port, gdscheck, DCGM diagnostics, Xid errors) for one node.

from __future__ import annotations

DOCUMENTATION = r"""
module: acceptance_fabric
short_description: Run the fabric and benchmark acceptance checks of one node and report every check
description:
  - Never fails because a check failed. It appends its records to the ones given in `previous` and
    returns them all in ansible_facts.appliance_acceptance, so one fact holds the node's whole report;
    the acceptance stage's next task fails naming the failed checks.
options:
  node: {description: node name, type: str, required: true}
  sysroot: {description: root of the node's file tree (empty on a real node), type: str, default: ""}
  groups: {description: "check groups: nccl, ib_write_bw, gdscheck, dcgm, xid", type: list, elements: str, required: true}
  platform: {description: the platform file's content, type: dict, required: true}
  platform_file: {description: the platform file named in each check's source, type: str, default: ""}
  filesystem_types: {description: filesystem types GDS must support on this node, type: list, elements: str, default: []}
  previous: {description: records of earlier acceptance tasks to keep, type: list, elements: dict, default: []}
"""

RETURN = r"""
ansible_facts:
  description: appliance_acceptance, [{check, node, expected, measured, passed, source, message}]
  returned: success
  type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_acceptance import FabricContext, run_groups
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "sysroot": {"type": "str", "default": ""},
            "groups": {"type": "list", "elements": "str", "required": True},
            "platform": {"type": "dict", "required": True},
            "platform_file": {"type": "str", "default": ""},
            "filesystem_types": {"type": "list", "elements": "str", "default": []},
            "previous": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    context = FabricContext(p["node"], sysroot=p["sysroot"], platform=p["platform"], platform_file=p["platform_file"],
                            filesystem_types=p["filesystem_types"])
    try:
        records = run_groups(context, p["groups"])
    except ValueError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}")
    # A rerun replaces this module's earlier records instead of listing a check twice.
    mine = {r["check"] for r in records}
    kept = [r for r in p["previous"] if not (r.get("node") == p["node"] and r.get("check") in mine)]
    failed = [r for r in records if not r["passed"]]
    module.exit_json(changed=False, ansible_facts={"appliance_acceptance": kept + records},
                     msg=f"{p['node']}: {len(records) - len(failed)} of {len(records)} fabric checks passed")


if __name__ == "__main__":
    main()
