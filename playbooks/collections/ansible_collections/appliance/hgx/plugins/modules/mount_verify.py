#!/usr/bin/python
# Appliance suite: every declared filesystem mounted where the site says, with its type, source and
# declared options, as findmnt (from the PATH) lists the node's mounts.

from __future__ import annotations

DOCUMENTATION = r"""
module: mount_verify
short_description: Verify that each declared mount is present with its declared options
options:
  node: {description: node name used in messages, type: str, required: true}
  mounts: {description: "[{name, mount_point, fstype, source, options}] as the storage stage renders them", type: list, elements: dict, required: true}
"""

RETURN = r"""
ansible_facts:
  description: appliance_mounts, [{name, mount_point, present, fstype, source, options}]
  returned: success and when a mount is wrong
  type: dict
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
