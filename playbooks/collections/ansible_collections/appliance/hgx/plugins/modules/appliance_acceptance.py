#!/usr/bin/python
# Appliance suite: measure one node against its platform's expectations and report every check.

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_acceptance
short_description: Run the acceptance check groups of one node and return every check's result
version_added: "0.1.0"
description:
  - Measures one node against its platform's expectations, by check group. V(bios) compares the values
    read from the BMC with the baseline, V(os) checks the running kernel's command line, the memlock
    limit and that nouveau is unloaded, V(services) checks that units are active, and V(gpu) reads the
    GPUs through NVML (count, model, memory, driver, persistence mode, NVLinks, PCIe width, retired pages).
  - Never fails because a check failed; it returns them all in C(ansible_facts.appliance_acceptance) so
    the whole report is kept, and the acceptance stage's last task fails naming the failed checks.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node O(sysroot) is the node's directory (its C(/proc) and C(/etc) files are read
    there), C(systemctl) is the simulated one first on the C(PATH), and NVML is the simulated library
    named by the C(APPLIANCE_SIM_NVML) environment variable.
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
      - Known groups are V(bios), V(os), V(services), V(gpu) and V(collector) (the telemetry collector answers on its
        C(/metrics) with one C(DCGM_FI_DEV_GPU_UTIL) series per GPU), and V(mig_layout) (each GPU's MIG instances
        through NVML equal the partition plan's).
    type: list
    elements: str
    required: true
  platform:
    description: The platform file's content (GPU model and count, driver, acceptance gates).
    type: dict
    required: true
  platform_file:
    description: The platform file named as the source of each check's expected value.
    type: str
    default: ""
  bios_baseline:
    description: BIOS attribute name to the baseline value the V(bios) group expects.
    type: dict
    default: {}
  bios_measured:
    description:
      - BIOS attribute name to the value read from the BMC (for example by M(appliance.hgx.redfish_bios)
        with O(appliance.hgx.redfish_bios#module:state=read)).
      - Left out when the BIOS could not be read; O(bios_error) then says why.
    type: dict
  bios_error:
    description: Why the BIOS could not be read, shown in the V(bios) group's failed records.
    type: str
    default: ""
  services:
    description: Units that must be active (V(services) group).
    type: list
    elements: str
    default: []
  kernel_cmdline:
    description: Parameters the running kernel's command line must hold (V(os) group).
    type: list
    elements: str
    default: []
  memlock:
    description: The memlock limit every user must get (V(os) group).
    type: str
    default: unlimited
  mig_layout:
    description:
      - The partition plan's layout of the node's GPUs (V(mig_layout) group), as the partitioning stage's
        target - C(gpus) (GPU index to C(mig), a list of C(profile) and C(start), or null) and C(profiles)
        (profile name to C(nvml_profile) and C(compute_slices)); GPUs marked C(keep) are not checked.
    type: dict
"""

EXAMPLES = r"""
- name: Read the BIOS values over Redfish
  appliance.hgx.redfish_bios:
    url: "{{ bmc.url }}"
    username: "{{ bmc.username }}"
    password: "{{ bmc_password }}"
    node: "{{ inventory_hostname }}"
    state: read
  delegate_to: localhost
  no_log: true
  register: bios_read

- name: Measure the node against its platform
  appliance.hgx.appliance_acceptance:
    node: "{{ inventory_hostname }}"
    sysroot: "{{ sysroot | default('') }}"
    groups: [bios, os, services, gpu]
    platform: "{{ platform }}"
    platform_file: firmware/platforms/hgx-h100-8gpu.yaml
    bios_baseline: "{{ platform.bios.baseline }}"
    bios_measured: "{{ bios_read.ansible_facts.appliance_bios }}"
    services: [chrony, nvidia-persistenced, nvidia-dcgm]
    kernel_cmdline: [iommu=pt]
    memlock: unlimited
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    appliance_acceptance:
      description: One record per check.
      type: list
      elements: dict
      contains:
        check:
          description: Name of the check, for example V(os.kernel_cmdline) or V(service.chrony).
          type: str
        node:
          description: The node measured.
          type: str
        expected:
          description: The expected value.
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
  description: How many checks passed.
  returned: success
  type: str
  sample: "gpu01: 31 of 31 checks passed"
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
            "mig_layout": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p = module.params
    context = Context(p["node"], sysroot=p["sysroot"], platform=p["platform"], platform_file=p["platform_file"],
                      bios_baseline=p["bios_baseline"], bios_measured=p["bios_measured"],
                      bios_error=p["bios_error"], services=p["services"], kernel_cmdline=p["kernel_cmdline"],
                      memlock=p["memlock"], mig_layout=p["mig_layout"])
    try:
        records = run_groups(context, p["groups"])
    except ValueError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}")
    failed = [r for r in records if not r["passed"]]
    module.exit_json(changed=False, ansible_facts={"appliance_acceptance": records},
                     msg=f"{p['node']}: {len(records) - len(failed)} of {len(records)} checks passed")


if __name__ == "__main__":
    main()
