#!/usr/bin/python
# Appliance suite: load or unload kernel modules with the modprobe found on the PATH, reading what is
# loaded from {sysroot}/proc/modules (the running kernel's list; a simulated node keeps its own).

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_kernel_module
short_description: Load or unload kernel modules with modprobe from the PATH
version_added: "0.1.0"
description:
  - Reads the loaded modules from C(/proc/modules) under O(sysroot), then loads the missing ones in the
    order given (O(state=present)) or unloads the loaded ones in reverse order (O(state=absent)) with
    C(modprobe), and verifies the result.
  - Names are compared the way the kernel lists them (dashes read as underscores).
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - Unlike C(community.general.modprobe), C(modprobe) is the one found on the C(PATH) of the task. On a
    simulated node the play's environment puts the simulated C(modprobe) first, and O(sysroot) is the
    node's directory, whose C(proc/modules) the simulated tool keeps.
  - Fails naming the node, the module, the expected and the measured state when C(modprobe) fails or the
    module is not in the wanted state afterwards.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  name:
    description: Kernel module names, in load order.
    type: list
    elements: str
    required: true
  state:
    description: Whether the modules must be loaded (V(present)) or not (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  sysroot:
    description:
      - Root of the node's file tree, where C(proc/modules) is read.
      - Empty on a real node.
    type: str
    default: ""
  node:
    description: Name of the node, for messages.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Load the NVIDIA kernel modules now
  appliance.hgx.appliance_kernel_module:
    name: [nvidia, nvidia_uvm, nvidia_modeset]
    sysroot: "{{ sysroot | default('') }}"
    node: "{{ inventory_hostname }}"

- name: Unload nouveau
  appliance.hgx.appliance_kernel_module:
    name: [nouveau]
    state: absent
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
loaded:
  description: The named modules that are loaded after the task, as the kernel names them.
  returned: always
  type: list
  elements: str
  sample: [nvidia, nvidia_modeset, nvidia_uvm]
"""

import os

from ansible.module_utils.basic import AnsibleModule


def loaded_modules(sysroot):
    path = os.path.join(sysroot or "/", "proc/modules")
    with open(path) as handle:
        return {line.split()[0] for line in handle if line.strip()}


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "sysroot": {"type": "str", "default": ""},
            "node": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    names, state, sysroot = module.params["name"], module.params["state"], module.params["sysroot"]
    # The kernel lists modules with underscores whatever name modprobe was given.
    canonical = {name: name.replace("-", "_") for name in names}
    try:
        before = loaded_modules(sysroot)
    except OSError as exc:
        module.fail_json(msg=f"cannot read the loaded kernel modules: {exc}")
    if state == "present":
        todo = [n for n in names if canonical[n] not in before]
    else:
        # Unload in reverse order: later modules depend on earlier ones (nvidia_uvm on nvidia).
        todo = [n for n in reversed(names) if canonical[n] in before]
    diff = {"before": "".join(f"{n}: {'loaded' if canonical[n] in before else 'not loaded'}\n" for n in names),
            "after": "".join(f"{n}: {'loaded' if state == 'present' else 'not loaded'}\n" for n in names)}
    where = f"{module.params['node']}: " if module.params["node"] else ""
    wanted = "loaded" if state == "present" else "not loaded"
    if todo and not module.check_mode:
        modprobe = module.get_bin_path("modprobe", required=True)
        for name in todo:
            command = [modprobe, name] if state == "present" else [modprobe, "-r", name]
            rc, out, err = module.run_command(command)
            if rc != 0:
                module.fail_json(msg=f"{where}kernel module {canonical[name]}: expected {wanted}, measured "
                                     f"{'loaded' if state == 'absent' else 'not loaded'} "
                                     f"({' '.join(['modprobe'] + command[1:])} failed, rc {rc}: "
                                     f"{err.strip() or out.strip()})")
        after = loaded_modules(sysroot)
        wrong = [n for n in names if (canonical[n] in after) != (state == "present")]
        if wrong:
            module.fail_json(msg=f"{where}kernel module(s) {', '.join(wrong)}: expected {wanted}, measured "
                                 f"{'not loaded' if state == 'present' else 'loaded'} after modprobe")
    else:
        after = before
    module.exit_json(changed=bool(todo), loaded=sorted(canonical[n] for n in names if canonical[n] in after),
                     diff=diff)


if __name__ == "__main__":
    main()
