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
version_added: "0.1.0"
description:
  - Computes a SHA-256 checksum over the paths and contents of O(sources) and compares it with the one
    stored in O(stamp) by the last successful run. When they differ (or O(pending) is true), runs
    O(command) and then writes the new checksum to O(stamp).
  - Unlike a handler, a change is never lost when a run stops between writing a file and applying it;
    the next run still finds the checksum different and applies it.
  - A source that does not exist counts as its own content, so removing a file is a change too.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - The command's executable is looked up on the C(PATH) of the task. On a simulated node the play's
    environment puts the simulated tools (C(systemctl), C(update-grub)) first, and the paths given are
    already joined to the node's directory (with the P(appliance.hgx.node_path#filter) filter).
  - Fails naming the command, its return code and its error output when it fails; the stamp is then
    left as it was.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the command would run, without running it or writing the stamp.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  sources:
    description: Configuration files whose content the command applies.
    type: list
    elements: path
    required: true
  stamp:
    description: File holding the checksum of the sources last applied; its directory is created.
    type: path
    required: true
  command:
    description: Argument vector of the command that applies the sources; the first element is looked up on the C(PATH).
    type: list
    elements: str
    required: true
  pending:
    description:
      - The sources are about to change although they were not written (check mode of the task that
        writes them), so the command must be reported as due.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Write the chrony configuration
  ansible.builtin.template:
    src: chrony.conf.j2
    dest: /etc/chrony/chrony.conf
    mode: "0644"
  register: chrony_config

- name: Restart chrony when its configuration changed
  appliance.hgx.appliance_apply_config:
    sources: [/etc/chrony/chrony.conf]
    stamp: /var/lib/appliance/applied/chrony.sha256
    command: [systemctl, restart, chrony]
    pending: "{{ ansible_check_mode and chrony_config is changed }}"
"""

RETURN = r"""
applied:
  description: Whether the command ran (in check mode, whether it would run).
  returned: always
  type: bool
  sample: true
stdout:
  description: Standard output of the command.
  returned: when the command ran
  type: str
  sample: ""
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
