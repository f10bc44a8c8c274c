#!/usr/bin/python
# Appliance suite: the GPUs and driver of a node as NVML reports them, checked against the platform.

from __future__ import annotations

DOCUMENTATION = r"""
module: nvml_facts
short_description: Read GPUs and the driver through NVML and verify them against the platform
description:
  - Opens NVML with pynvml (on a simulated node, the library named by APPLIANCE_SIM_NVML) and returns
    every GPU with its UUID, name, memory, PCI bus id, persistence and MIG mode and NVLink peers.
  - Fails when the GPU count, model, memory or driver version contradict the expected values given.
options:
  node: {description: node name used in messages, type: str, required: true}
  expected_count: {description: number of GPUs the platform has, type: int}
  expected_model: {description: the name NVML reports for each GPU, type: str}
  expected_memory_mib: {description: total memory of each GPU in MiB, type: int}
  expected_driver_version: {description: driver version that must be loaded, type: str}
"""

RETURN = r"""
ansible_facts:
  description: appliance_gpus ([{index, uuid, name, memory_mib, pci_bus_id, persistence_mode, mig_mode,
    mig_mode_pending, nvlink_peers, nvlink_links_up, nvlink_links_present, pcie_link_width, retired_pages,
    retired_pages_dbe, retired_pages_pending, ecc_uncorrected_volatile}]) and appliance_driver ({version, cuda})
  returned: success and on a contradiction
  type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_nvml import (
    NvmlUnavailable,
    contradictions,
    driver_record,
    gpu_records,
    nvml_session,
)
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "expected_count": {"type": "int"},
            "expected_model": {"type": "str"},
            "expected_memory_mib": {"type": "int"},
            "expected_driver_version": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        with nvml_session() as pynvml:
            # With their health (retired pages, NVLinks up): the inventory keeps a verdict per GPU.
            gpus = gpu_records(pynvml, health=True)
            driver = driver_record(pynvml)
    except NvmlUnavailable as exc:
        if module.check_mode:
            # A dry run on a node whose driver this very run would install: nothing to verify yet.
            module.exit_json(changed=False, skipped=True,
                             msg=f"{p['node']}: NVML not available yet ({exc}); verified in a real run")
        module.fail_json(msg=f"{p['node']}: NVML: {exc}")
    except Exception as exc:  # an NVMLError in the middle of a query: name the call's failure
        module.fail_json(msg=f"{p['node']}: NVML query failed: {exc}")

    facts = {"appliance_gpus": gpus, "appliance_driver": driver}
    problems = contradictions(gpus, driver, {
        "count": p["expected_count"], "model": p["expected_model"],
        "memory_mib": p["expected_memory_mib"], "driver_version": p["expected_driver_version"],
    })
    if problems and module.check_mode:
        # In a dry run the packages that would fix this were not installed: report, do not fail.
        for problem in problems:
            module.warn(f"{p['node']}: {problem} (before this run's changes)")
    elif problems:
        module.fail_json(msg=f"{p['node']}: " + "; ".join(problems), ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
