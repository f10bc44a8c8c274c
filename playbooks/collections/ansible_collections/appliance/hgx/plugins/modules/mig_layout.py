#!/usr/bin/python
# Appliance suite: bring each GPU of a node to its planned MIG layout through NVML.

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_layout
short_description: Reconcile each GPU's MIG instances with a target layout through NVML
version_added: "0.1.0"
description:
  - Compares each GPU's GPU instances, as NVML reports them, with the target as a set of (profile, first
    memory slice). Destroys the instances the target does not have (their compute instances first),
    enables or disables MIG mode, creates each missing GPU instance at its explicit placement
    (C(nvmlDeviceCreateGpuInstanceWithPlacement)) with one compute instance taking all of it.
  - Works from what NVML reports, never from what a previous run meant to do, so a run killed halfway
    finishes on the next one; a GPU already at its target is left alone (changed is false).
  - Returns the instances found afterwards and the node's time-slicing as facts.
author:
  - Appliance management suite developers (!UNKNOWN)
requirements:
  - The NVML Python binding (C(nvidia-ml-py), module C(pynvml)) in the node's Python.
notes:
  - On a simulated node C(APPLIANCE_SIM_NVML) names the simulated C(libnvidia-ml.so.1) (see nvml_facts).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Returns the instance diff per GPU and changes nothing.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, for messages.
    type: str
    required: true
  gpus:
    description:
      - GPU index (as a string) to its target - C(mig), a list of C(profile) and C(start) (the first
        memory slice), or null for a whole GPU (MIG mode off); C(keep) true only reads the GPU.
    type: dict
    required: true
  profiles:
    description: Profile name to its C(nvml_profile) and C(compute_slices), for the node's GPU model.
    type: dict
    required: true
  time_slicing:
    description:
      - The node's time-slicing (C(replicas), C(gpus) and C(per_gpu), each GPU index to its own replica
        count), recorded as a fact (the device plugin applies it).
    type: dict
"""

EXAMPLES = r"""
- name: MIG layout
  appliance.hgx.mig_layout:
    node: gpu04
    gpus:
      "0": {mig: [{profile: 3g.40gb, start: 0}, {profile: 2g.20gb, start: 4}, {profile: 1g.10gb, start: 6}]}
      "1": {mig: null}
    profiles:
      1g.10gb: {nvml_profile: 0, compute_slices: 1}
    time_slicing: {replicas: 4, gpus: [1], per_gpu: {"1": 4}}
"""

RETURN = r"""
changes:
  description: Per GPU index, C(destroy), C(create), C(complete) and C(mig_mode) - what was done, or in check mode would be.
  returned: always
  type: dict
diff:
  description: The changed GPUs' layouts before and after, one line each (shown with --diff).
  returned: always
  type: dict
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    appliance_mig_instances:
      description: One entry per compute instance, C(gpu), C(profile), C(start), C(gpu_instance), C(compute_instance), C(uuid).
      type: list
      elements: dict
    appliance_time_slicing:
      description: The node's time-slicing (C(replicas) and C(gpus)), or null.
      type: dict
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_nvml import (
    MigLayoutError,
    NvmlUnavailable,
    gpu_diff,
    gpu_instances,
    mig_enabled,
    mig_records,
    nvml_session,
    reconcile_gpu,
)
from ansible.module_utils.basic import AnsibleModule


def _target_errors(gpus, profiles):
    errors = []
    for index, target in gpus.items():
        if not str(index).isdigit() or not isinstance(target, dict):
            errors.append(f"gpus.{index}: a GPU index with a dict target")
            continue
        for n, instance in enumerate(target.get("mig") or []):
            if not isinstance(instance, dict) or instance.get("profile") not in profiles \
                    or not isinstance(instance.get("start"), int):
                errors.append(f"gpus.{index}.mig[{n}]: {{profile, start}} with a profile of this GPU model")
    return errors


def _line(index, enabled, instances):
    if not enabled:
        return f"GPU {index}: whole (MIG off)\n"
    placed = " ".join(f"{i['profile']}@{i['start']}" for i in sorted(instances, key=lambda i: i["start"]))
    return f"GPU {index}: MIG {placed or '(no instances)'}\n"


def _empty(diff):
    return not (diff["destroy"] or diff["create"] or diff["complete"] or diff["mig_mode"])


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "gpus": {"type": "dict", "required": True},
            "profiles": {"type": "dict", "required": True},
            "time_slicing": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p = module.params
    errors = _target_errors(p["gpus"], p["profiles"])
    if errors:
        module.fail_json(msg=f"{p['node']}: " + "; ".join(errors))
    diffs, records, before, after = {}, [], [], []
    try:
        with nvml_session() as pynvml:
            for key in sorted(p["gpus"], key=int):
                target = p["gpus"][key]
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(key))
                if not target.get("keep"):
                    was = _line(key, mig_enabled(pynvml, handle), gpu_instances(pynvml, handle, p["profiles"]))
                    if module.check_mode:
                        diff = gpu_diff(pynvml, handle, target, p["profiles"])
                    else:
                        diff = reconcile_gpu(pynvml, handle, int(key), target, p["profiles"])
                    if not _empty(diff):
                        diffs[key] = diff
                        before.append(was)
                        after.append(_line(key, target.get("mig") is not None, target.get("mig") or []))
                records += mig_records(pynvml, handle, int(key), p["profiles"])
    except NvmlUnavailable as exc:
        module.fail_json(msg=f"{p['node']}: NVML: {exc}")
    except MigLayoutError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}", changes=diffs)
    except Exception as exc:  # an NVMLError in the middle of a query: name the call's failure
        module.fail_json(msg=f"{p['node']}: NVML: {exc}", changes=diffs)
    slicing = p["time_slicing"] or None
    module.exit_json(changed=bool(diffs), changes=diffs, diff={
        "before_header": f"{p['node']} MIG layout", "after_header": f"{p['node']} MIG layout",
        "before": "".join(before), "after": "".join(after)}, ansible_facts={
        "appliance_mig_instances": records, "appliance_time_slicing": slicing})


if __name__ == "__main__":
    main()
