#!/usr/bin/python
# Appliance suite: GPUDirect Storage readiness from `gdscheck -p`, with the findings that break
# peer-to-peer (IOMMU translation, PCIe ACS, missing nvidia-fs or PeerDirect) enforced.

from __future__ import annotations

DOCUMENTATION = r"""
module: gds_check
short_description: Run gdscheck -p and fail on findings that break GPUDirect Storage
version_added: "0.1.0"
description:
  - Runs C(gdscheck -p) (from the C(PATH) or C(/usr/local/cuda/gds/tools)) and parses its report.
  - Fails on the findings that break GPUDirect Storage peer-to-peer transfers, each named - the platform
    not verified, IOMMU translation on, C(nvidia-fs) not loaded, no GPU supporting GDS, or a filesystem
    type of O(filesystem_types) not Supported.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node the play's environment puts the simulated C(gdscheck) first on the C(PATH); it
    reports the node's simulated state.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: C(gdscheck -p) only reads; it runs in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, for messages.
    type: str
    required: true
  filesystem_types:
    description: Filesystem types the site mounts (V(lustre), V(nfs-rdma), V(beegfs)); each must be Supported.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Verify the GPUDirect Storage platform (gdscheck -p)
  appliance.hgx.gds_check:
    node: "{{ inventory_hostname }}"
    filesystem_types: [lustre]
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and when a finding fails the task
  type: dict
  contains:
    appliance_gds:
      description: The report's verdict.
      type: dict
      contains:
        verified:
          description: Whether gdscheck reports the platform verified (null when it printed no verdict).
          type: bool
        iommu:
          description: The IOMMU state gdscheck reports (for example V(disabled)).
          type: str
        nvidia_fs:
          description: The loaded nvidia-fs driver's version (empty when it is not loaded).
          type: str
        gpus_supported:
          description: Number of GPUs that support GPUDirect Storage.
          type: int
        problems:
          description: The findings that break GPUDirect Storage (empty on success).
          type: list
          elements: str
problems:
  description: The findings that failed the task.
  returned: failure
  type: list
  elements: str
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import ParseError, gdscheck_problems, parse_gdscheck
from ansible.module_utils.basic import AnsibleModule

GDS_TOOLS = ["/usr/local/cuda/gds/tools"]


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "filesystem_types": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    node = module.params["node"]
    gdscheck = module.get_bin_path("gdscheck", required=True, opt_dirs=GDS_TOOLS)
    rc, out, err = module.run_command([gdscheck, "-p"], environ_update={"LC_ALL": "C"})
    if rc != 0 and not out.strip():
        module.fail_json(msg=f"{node}: gdscheck -p failed (rc {rc}): {err.strip()}")
    try:
        report = parse_gdscheck(out)
    except ParseError as exc:
        module.fail_json(msg=f"{node}: {exc}")
    problems = gdscheck_problems(report, module.params["filesystem_types"])
    facts = {"appliance_gds": {
        "verified": report["verified"], "iommu": report["iommu"], "nvidia_fs": report["nvidia_fs"],
        "gpus_supported": sum(1 for g in report["gpus"] if g["supports_gds"]), "problems": problems,
    }}
    if problems:
        module.fail_json(msg=f"{node}: gdscheck -p: " + "; ".join(problems), problems=problems, ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts, msg=f"{node}: GPUDirect Storage platform verified")


if __name__ == "__main__":
    main()
