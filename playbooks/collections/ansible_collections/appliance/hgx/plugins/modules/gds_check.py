#!/usr/bin/python
# Appliance suite: GPUDirect Storage readiness from `gdscheck -p`, with the findings that break
# peer-to-peer (IOMMU translation, PCIe ACS, missing nvidia-fs or PeerDirect) enforced.

from __future__ import annotations

DOCUMENTATION = r"""
module: gds_check
short_description: Run gdscheck -p and fail on findings that break GPUDirect Storage
options:
  node: {description: node name used in messages, type: str, required: true}
  filesystem_types: {description: "filesystem types the site mounts (lustre, nfs-rdma, beegfs): each must be Supported", type: list, elements: str, default: []}
"""

RETURN = r"""
ansible_facts:
  description: appliance_gds, {verified, iommu, nvidia_fs, gpus_supported, problems}
  returned: success and on failing findings
  type: dict
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
