#!/usr/bin/python
# Appliance suite: the GPUs and driver of a node as NVML reports them, checked against the platform.

from __future__ import annotations

DOCUMENTATION = r"""
module: nvml_facts
short_description: Read the GPUs and the driver through NVML and verify them against the platform
version_added: "0.1.0"
description:
  - Opens NVML with pynvml and returns every GPU with its UUID, name, memory, PCI bus id, persistence and
    MIG mode, NVLink peers and health (retired pages, uncorrected ECC errors, PCIe link width), and the
    driver and CUDA versions.
  - Fails when the GPU count, model, memory or driver version contradict the expected values given,
    naming the node, the expected and the measured value. An expected value left out is not checked.
author:
  - Appliance management suite developers (!UNKNOWN)
requirements:
  - The NVML Python binding (C(nvidia-ml-py), module C(pynvml)) in the node's Python.
  - The NVIDIA driver's C(libnvidia-ml.so.1) on the node.
notes:
  - On a simulated node the C(APPLIANCE_SIM_NVML) environment variable names the simulated
    C(libnvidia-ml.so.1), built from NVIDIA's C(nvml.h), which pynvml loads instead of the driver's; it
    picks the node at C(nvmlInit) from C(APPLIANCE_SIM_SYSROOT). pynvml's own code runs unchanged.
  - In check mode, a node where NVML is not available yet (the run would install the driver) is reported
    as skipped, and contradictions are warnings.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: NVML is only read; contradictions are warnings instead of failures.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, for messages.
    type: str
    required: true
  expected_count:
    description: Number of GPUs the platform has.
    type: int
  expected_model:
    description: The name NVML reports for each GPU.
    type: str
  expected_memory_mib:
    description: Total memory of each GPU in MiB.
    type: int
  expected_driver_version:
    description: Driver version that must be loaded.
    type: str
"""

EXAMPLES = r"""
- name: Verify the GPUs and the driver through NVML
  appliance.hgx.nvml_facts:
    node: "{{ inventory_hostname }}"
    expected_count: 8
    expected_model: NVIDIA H100 80GB HBM3
    expected_memory_mib: 81559
    expected_driver_version: "550.127.05"
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and when a value contradicts the expected one
  type: dict
  contains:
    appliance_gpus:
      description:
        - One entry per GPU with C(index), C(uuid), C(name), C(memory_mib), C(pci_bus_id),
          C(persistence_mode), C(mig_mode), C(mig_mode_pending), C(nvlink_peers), C(nvlink_links_up),
          C(nvlink_links_present), C(pcie_link_width), C(retired_pages), C(retired_pages_dbe),
          C(retired_pages_pending) and C(ecc_uncorrected_volatile).
      type: list
      elements: dict
    appliance_driver:
      description: The driver, with C(version) and C(cuda) (the CUDA version it supports).
      type: dict
skipped:
  description: True in check mode when NVML is not available yet.
  returned: when skipped
  type: bool
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
