#!/usr/bin/python
# Appliance suite: each GPU's nearest RDMA device from `nvidia-smi topo -m`, checked against the
# platform's rails (platform.hcas.ports[].closest_gpu). GPUDirect RDMA is only fast between a GPU and
# an HCA behind the same PCIe switch; a board wired otherwise must not pass as the platform.

from __future__ import annotations

DOCUMENTATION = r"""
module: topo_affinity
short_description: GPU to HCA affinity from nvidia-smi topo -m, verified against the platform
options:
  node: {description: node name used in messages, type: str, required: true}
  expected: {description: "GPU index -> RDMA device the platform puts next to it", type: dict, default: {}}
"""

RETURN = r"""
ansible_facts:
  description: appliance_gpu_hca_affinity, {gpu_index: device}
  returned: success and on a contradiction
  type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import ParseError, affinity, parse_topo_matrix
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "expected": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    node = module.params["node"]
    try:
        expected = {int(k): str(v) for k, v in module.params["expected"].items()}
    except ValueError:
        module.fail_json(msg=f"{node}: expected maps GPU indexes to devices, got {module.params['expected']}")
    nvidia_smi = module.get_bin_path("nvidia-smi", required=True)
    rc, out, err = module.run_command([nvidia_smi, "topo", "-m"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{node}: nvidia-smi topo -m failed (rc {rc}): {err.strip() or out.strip()}")
    try:
        found, problems = affinity(parse_topo_matrix(out), expected)
    except ParseError as exc:
        module.fail_json(msg=f"{node}: {exc}")
    facts = {"appliance_gpu_hca_affinity": {str(index): device for index, device in sorted(found.items())}}
    if problems:
        module.fail_json(msg=f"{node}: topology contradicts the platform: " + "; ".join(problems),
                         problems=problems, ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts, msg=f"{node}: {len(found)} GPUs next to their rail HCA")


if __name__ == "__main__":
    main()
