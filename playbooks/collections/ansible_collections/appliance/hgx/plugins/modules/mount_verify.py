#!/usr/bin/python
# Appliance suite: every declared filesystem mounted where the site says, with its type, source and
# declared options, as findmnt (from the PATH) lists the node's mounts.

from __future__ import annotations

DOCUMENTATION = r"""
module: mount_verify
short_description: Verify that each declared mount is present with its declared type, source and options
version_added: "0.1.0"
description:
  - Lists the node's mounts with C(findmnt -J) and checks each of O(mounts) - mounted at its mount point,
    with its filesystem type, its source (not compared for V(beegfs), whose source is the client
    configuration) and at least its declared options.
  - Fails listing every contradiction, each naming the node, the mount point, the expected and the measured
    value.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node the play's environment puts the simulated C(findmnt) first on the C(PATH); it lists
    the node's simulated mounts.
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
  mounts:
    description:
      - The declared mounts, as the storage stage renders them, each a dictionary with C(mount_point),
        C(fstype) and C(source), and optionally C(name) and C(options) (a list).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Verify each mount and its declared options
  appliance.hgx.mount_verify:
    node: "{{ inventory_hostname }}"
    mounts:
      - name: scratch
        mount_point: /mnt/scratch
        fstype: lustre
        source: 10.0.4.10@o2ib:/scratch
        options: [flock]
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and when a mount is wrong
  type: dict
  contains:
    appliance_mounts:
      description: One entry per declared mount, as found.
      type: list
      elements: dict
      contains:
        name:
          description: The mount's name (its mount point when it has none).
          type: str
        mount_point:
          description: The declared mount point.
          type: str
        present:
          description: Whether something is mounted there.
          type: bool
        fstype:
          description: The mounted filesystem type (empty when not mounted).
          type: str
        source:
          description: The mounted source (empty when not mounted).
          type: str
        options:
          description: The mount options in effect.
          type: list
          elements: str
problems:
  description: The contradictions that failed the task.
  returned: failure
  type: list
  elements: str
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import ParseError, missing_options, parse_findmnt
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "mounts": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    node = module.params["node"]
    findmnt = module.get_bin_path("findmnt", required=True)
    rc, out, err = module.run_command([findmnt, "-J", "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"],
                                      environ_update={"LC_ALL": "C"})
    if rc not in (0, 1):  # 1: no mount matched, which the checks below report per mount
        module.fail_json(msg=f"{node}: findmnt failed (rc {rc}): {err.strip() or out.strip()}")
    try:
        present = parse_findmnt(out)
    except ParseError as exc:
        module.fail_json(msg=f"{node}: {exc}")
    facts, problems = [], []
    for wanted in module.params["mounts"]:
        target = wanted["mount_point"]
        found = present.get(target)
        entry = {"name": wanted.get("name", target), "mount_point": target, "present": found is not None,
                 "fstype": found["fstype"] if found else "", "source": found["source"] if found else "",
                 "options": found["options"] if found else []}
        facts.append(entry)
        where = f"{node} {target}"
        if found is None:
            problems.append(f"{where}: not mounted (expected {wanted['fstype']} from {wanted['source']})")
            continue
        if found["fstype"] != wanted["fstype"]:
            problems.append(f"{where}: type expected {wanted['fstype']}, measured {found['fstype']}")
        if wanted.get("source") and wanted["fstype"] != "beegfs" and found["source"] != wanted["source"]:
            problems.append(f"{where}: source expected {wanted['source']}, measured {found['source']}")
        missing = missing_options(wanted.get("options") or [], found["options"])
        if missing:
            problems.append(f"{where}: options expected to include {','.join(missing)}, measured {','.join(found['options'])}")
    result = {"appliance_mounts": facts}
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, ansible_facts=result)
    module.exit_json(changed=False, ansible_facts=result, msg=f"{node}: {len(facts)} mounts as declared")


if __name__ == "__main__":
    main()
