#!/usr/bin/python
# Appliance suite: each GPU's nearest RDMA device from `nvidia-smi topo -m`, checked against the
# platform's rails (platform.hcas.ports[].closest_gpu). GPUDirect RDMA is only fast between a GPU and
# an HCA behind the same PCIe switch; a board wired otherwise must not pass as the platform.

from __future__ import annotations

DOCUMENTATION = r"""
module: topo_affinity
short_description: GPU to HCA affinity from nvidia-smi topo -m, verified against the platform
version_added: "0.1.0"
description:
  - Parses the matrix of C(nvidia-smi topo -m) and finds each GPU's nearest RDMA devices (the best
    connection, a shared PCIe switch first).
  - Fails when a GPU's expected device (O(expected), from the platform's rails) is not among its nearest,
    naming the GPU, the expected and the measured device. GPUDirect RDMA is only fast between a GPU and
    an HCA behind the same PCIe switch, so a board wired otherwise must not pass as the platform.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node the play's environment puts the simulated C(nvidia-smi) first on the C(PATH); it
    prints the node's simulated topology.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, for messages.
    type: str
    required: true
  expected:
    description: GPU index to the RDMA device the platform puts next to it; GPUs left out are only recorded.
    type: dict
    default: {}
  sysroot:
    description:
      - Root of the node's file tree, where C(/proc/cpuinfo) is read (each GPU's CPU affinity becomes Slurm
        core ids through it).
      - Empty on a real node.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Record each GPU's nearest HCA and check it against the platform
  appliance.hgx.topo_affinity:
    node: "{{ inventory_hostname }}"
    expected:
      "0": mlx5_0
      "1": mlx5_1
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and on a contradiction
  type: dict
  contains:
    appliance_gpu_hca_affinity:
      description: GPU index (as a string) to its nearest RDMA device.
      type: dict
      sample: {"0": "mlx5_0", "1": "mlx5_1"}
    appliance_gpu_cores:
      description:
        - GPU index (as a string) to the cores next to it, as Slurm's gres.conf C(Cores=) wants them (abstract
          core ids, from the CPU Affinity column and C(/proc/cpuinfo)); GPUs without an affinity are left out.
      type: dict
      sample: {"0": "0-55", "4": "56-111"}
problems:
  description: The contradictions that failed the task.
  returned: failure
  type: list
  elements: str
"""

import os

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import (
    ParseError, affinity, gpu_cores, parse_cpuinfo, parse_topo_matrix)
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "expected": {"type": "dict", "default": {}},
            "sysroot": {"type": "str", "default": ""},
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
        matrix = parse_topo_matrix(out)
        found, problems = affinity(matrix, expected)
        cores = {}
        if matrix["cpu_affinity"]:
            # CPU ids -> Slurm's core ids (gres.conf Cores=) through the node's own CPU topology.
            cpuinfo_path = os.path.join(module.params["sysroot"] or "/", "proc/cpuinfo")
            try:
                with open(cpuinfo_path) as handle:
                    cpuinfo = parse_cpuinfo(handle.read())
            except OSError as exc:
                raise ParseError(f"{cpuinfo_path}: unreadable ({exc.strerror or exc})") from None
            cores = gpu_cores(matrix["cpu_affinity"], cpuinfo)
    except ParseError as exc:
        module.fail_json(msg=f"{node}: {exc}")
    facts = {"appliance_gpu_hca_affinity": {str(index): device for index, device in sorted(found.items())},
             "appliance_gpu_cores": {str(index): ids for index, ids in sorted(cores.items())}}
    if problems:
        module.fail_json(msg=f"{node}: topology contradicts the platform: " + "; ".join(problems),
                         problems=problems, ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts, msg=f"{node}: {len(found)} GPUs next to their rail HCA")


if __name__ == "__main__":
    main()
