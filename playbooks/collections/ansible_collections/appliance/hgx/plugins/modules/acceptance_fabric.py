#!/usr/bin/python
# Appliance suite: the fabric, GPUDirect and benchmark gates of acceptance (NCCL bus bandwidth,
# ib_write_bw per port, gdscheck, DCGM diagnostics, Xid errors) for one node.

from __future__ import annotations

DOCUMENTATION = r"""
module: acceptance_fabric
short_description: Run the fabric and benchmark acceptance checks of one node and report every check
version_added: "0.1.0"
description:
  - Runs the fabric, GPUDirect and benchmark gates of acceptance on one node, by check group.
    V(nccl) runs C(all_reduce_perf) against the platform's bus bandwidth, V(ib_write_bw) measures every
    InfiniBand port the platform declares, V(gdscheck) runs C(gdscheck -p), V(dcgm) runs the DCGM
    diagnostics, and V(xid) reads the kernel log for NVIDIA Xid errors.
  - Never fails because a check failed. It appends its records to the ones given in O(previous) and
    returns them all in C(ansible_facts.appliance_acceptance), so one fact holds the node's whole report;
    the acceptance stage's next task fails naming the failed checks.
  - A record that this module made in an earlier run (same node and check) is replaced, not repeated.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - The tools are the ones found on the C(PATH) of the task. On a simulated node the play's
    environment puts the simulated C(all_reduce_perf), C(ib_write_bw), C(gdscheck) and C(dcgmi) first,
    and O(sysroot) is the node's directory, where the kernel log and sysfs files are read.
  - Fails only on an unknown check group.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The checks only measure; they run in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, written into every record and message.
    type: str
    required: true
  sysroot:
    description:
      - Root of the node's file tree, joined to every file the checks read.
      - Empty on a real node.
    type: str
    default: ""
  groups:
    description:
      - Check groups to run, in order.
      - Known groups are V(nccl), V(ib_write_bw), V(gdscheck), V(dcgm) and V(xid).
    type: list
    elements: str
    required: true
  platform:
    description: The platform file's content (GPU, HCA and benchmark expectations).
    type: dict
    required: true
  platform_file:
    description: The platform file named as the source of each check's expected value.
    type: str
    default: ""
  filesystem_types:
    description: Filesystem types GPUDirect Storage must support on this node (for example V(lustre)).
    type: list
    elements: str
    default: []
  previous:
    description: Records of earlier acceptance tasks of this run, kept ahead of this module's records.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Measure the fabric, GPUDirect and benchmark gates
  appliance.hgx.acceptance_fabric:
    node: "{{ inventory_hostname }}"
    sysroot: "{{ sysroot | default('') }}"
    groups: [nccl, ib_write_bw, gdscheck, dcgm, xid]
    platform: "{{ platform }}"
    platform_file: firmware/platforms/hgx-h100-8gpu.yaml
    filesystem_types: [lustre]
    previous: "{{ appliance_acceptance | default([]) }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    appliance_acceptance:
      description: The records of O(previous) followed by this module's, one per check.
      type: list
      elements: dict
      contains:
        check:
          description: Name of the check, for example V(nccl.all_reduce_busbw).
          type: str
        node:
          description: The node measured.
          type: str
        expected:
          description: The expected value, as the platform states it.
          type: raw
        measured:
          description: The measured value (null when nothing could be measured).
          type: raw
        passed:
          description: Whether the measured value meets the expected one.
          type: bool
        source:
          description: Where the expected value comes from (platform file and key).
          type: str
        message:
          description: One line explaining the result.
          type: str
msg:
  description: How many of this module's checks passed.
  returned: success
  type: str
  sample: "gpu01: 12 of 12 fabric checks passed"
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
