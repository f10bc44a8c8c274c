#!/usr/bin/python
# Appliance suite: load or unload kernel modules with the modprobe found on the PATH, reading what is
# loaded from {sysroot}/proc/modules (the running kernel's list; a simulated node keeps its own).

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_kernel_module
short_description: Load or unload kernel modules with modprobe from the PATH
options:
  name: {description: module names, in load order, type: list, elements: str, required: true}
  state: {description: wanted state, type: str, choices: [present, absent], default: present}
  sysroot: {description: root of the node's file tree (empty on a real node), type: str, default: ""}
  node: {description: the node's name, for messages, type: str, default: ""}
"""

RETURN = r"""
loaded:
  description: the named modules that are loaded after the task
  returned: always
  type: list
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
