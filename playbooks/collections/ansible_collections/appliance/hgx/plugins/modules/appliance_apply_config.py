#!/usr/bin/python
# Appliance suite: run the command that makes a configuration take effect (update-grub, a service
# restart) whenever the configuration differs from the one last applied.
#
# A handler would do this only in the run that changed the file: a run killed between writing the
# file and running the handler would leave the change unapplied for ever, since the next run finds
# the file already right. A stamp holding the checksum of the sources last applied survives that.

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_apply_config
short_description: Run a command when configuration files differ from the ones last applied
options:
  sources: {description: configuration files whose content the command applies, type: list, elements: path, required: true}
  stamp: {description: file holding the checksum of the sources last applied, type: path, required: true}
  command: {description: argv of the command that applies them (looked up on the PATH), type: list, elements: str, required: true}
  pending: {description: the sources are about to change (check mode, where they were not written), type: bool, default: false}
"""

RETURN = r"""
applied:
  description: whether the command ran (or would run in check mode)
  returned: always
  type: bool
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule


def checksum(paths):
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode() + b"\0")
        try:
            with open(path, "rb") as handle:
                digest.update(handle.read())
        except FileNotFoundError:
            digest.update(b"(absent)")
        digest.update(b"\0")
    return digest.hexdigest()


def main():
    module = AnsibleModule(
        argument_spec={
            "sources": {"type": "list", "elements": "path", "required": True},
            "stamp": {"type": "path", "required": True},
            "command": {"type": "list", "elements": "str", "required": True},
            "pending": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    current = checksum(p["sources"])
    try:
        with open(p["stamp"]) as handle:
            applied = handle.read().strip()
    except FileNotFoundError:
        applied = ""
    needed = p["pending"] or applied != current
    if not needed or module.check_mode:
        module.exit_json(changed=needed, applied=needed)

    executable = module.get_bin_path(p["command"][0], required=True)
    rc, out, err = module.run_command([executable, *p["command"][1:]])
    if rc != 0:
        module.fail_json(msg=f"{' '.join(p['command'])} failed (rc {rc}): {err.strip() or out.strip()}",
                         stdout=out, stderr=err)
    os.makedirs(os.path.dirname(p["stamp"]), exist_ok=True)
    temporary = p["stamp"] + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(current + "\n")
    os.replace(temporary, p["stamp"])
    module.exit_json(changed=True, applied=True, stdout=out)


if __name__ == "__main__":
    main()
