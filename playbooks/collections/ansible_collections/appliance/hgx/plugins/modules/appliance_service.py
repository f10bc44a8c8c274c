#!/usr/bin/python
# Appliance suite: systemd units through the systemctl found on the PATH.
#
# ansible.builtin.systemd talks to systemd over D-Bus when it can, which reaches the host's systemd
# even for a simulated node; the systemctl command line is what a simulated node intercepts.

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_service
short_description: Enable, start, stop or restart a systemd unit with systemctl from the PATH
version_added: "0.1.0"
description:
  - Reads whether the unit is enabled and active with C(systemctl is-enabled) and C(systemctl is-active),
    runs C(systemctl enable), C(disable), C(start), C(stop) or C(restart) as needed, and verifies the
    result.
  - With O(daemon_reload=true), runs C(systemctl daemon-reload) first; that alone is not reported as a
    change.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - Unlike M(ansible.builtin.systemd_service), which talks to systemd over D-Bus when it can, this module
    only runs the C(systemctl) found on the C(PATH) of the task. On a simulated node the play's
    environment puts the simulated C(systemctl) first, so the host's systemd is never reached.
  - Fails naming the node, the unit, the expected and the measured state when C(systemctl) fails or a
    unit that must run is not active afterwards.
  - One of O(enabled), O(state) and O(daemon_reload) is required.
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
    description: Unit name (V(.service) may be left out).
    type: str
    required: true
  enabled:
    description: Whether the unit starts at boot.
    type: bool
  state:
    description:
      - Wanted run state. V(restarted) always restarts the unit.
    type: str
    choices: [started, stopped, restarted]
  daemon_reload:
    description: Run C(systemctl daemon-reload) first (after a unit file changed).
    type: bool
    default: false
  node:
    description: Name of the node, for messages.
    type: str
    default: ""
  missing_ok:
    description:
      - A unit the node does not have (C(systemctl show -p LoadState) says V(not-found), as for a daemon
        of a package the node never had) is left as it is, unchanged, instead of failing.
      - Only with O(state=stopped) or O(enabled=false), which such a unit already is.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Enable and start chrony
  appliance.hgx.appliance_service:
    name: chrony
    enabled: true
    state: started
    node: "{{ inventory_hostname }}"

- name: Stop and disable slurmd where it was installed (a node that left the Slurm cluster)
  appliance.hgx.appliance_service:
    name: slurmd
    enabled: false
    state: stopped
    missing_ok: true

- name: Reload the unit files and start the new mount unit
  appliance.hgx.appliance_service:
    name: mnt-lustre.mount
    daemon_reload: true
    enabled: true
    state: started
"""

RETURN = r"""
actions:
  description: The C(systemctl) verbs run (in check mode, the ones that would run).
  returned: always
  type: list
  elements: str
  sample: [enable, start]
missing:
  description: With O(missing_ok), the node has no such unit (nothing was done).
  returned: when the unit is not found
  type: bool
  sample: true
status:
  description: C(enabled) and C(active) as C(systemctl) reports them after the task (empty in check mode).
  returned: always
  type: dict
  sample: {"enabled": true, "active": true}
"""

from ansible.module_utils.basic import AnsibleModule


class Systemctl:
    def __init__(self, module):
        self.module = module
        self.binary = module.get_bin_path("systemctl", required=True)

    def run(self, *arguments, check=True):
        rc, out, err = self.module.run_command([self.binary, *arguments], environ_update={"LC_ALL": "C"})
        if check and rc != 0:
            self.module.fail_json(msg=f"systemctl {' '.join(arguments)} failed (rc {rc}): {err.strip() or out.strip()}")
        return rc, out.strip()

    def is_enabled(self, unit):
        # is-enabled answers non-zero for disabled units; the text tells disabled from unknown.
        rc, out = self.run("is-enabled", unit, check=False)
        if rc != 0 and out not in ("disabled", "masked", "static", "indirect", "linked"):
            if self.module.check_mode:
                # A dry run on a node where this run's packages or unit files were not written yet.
                return False
            self.module.fail_json(msg=f"systemctl is-enabled {unit}: {out or 'unknown unit'} (rc {rc})")
        return out in ("enabled", "enabled-runtime", "alias")

    def is_active(self, unit):
        _rc, out = self.run("is-active", unit, check=False)
        return out in ("active", "activating", "reloading")


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "enabled": {"type": "bool"},
            "state": {"type": "str", "choices": ["started", "stopped", "restarted"]},
            "daemon_reload": {"type": "bool", "default": False},
            "node": {"type": "str", "default": ""},
            "missing_ok": {"type": "bool", "default": False},
        },
        required_one_of=[["enabled", "state", "daemon_reload"]],
        supports_check_mode=True,
    )
    p = module.params
    unit = p["name"]
    systemctl = Systemctl(module)
    actions = []
    if p["daemon_reload"] and not module.check_mode:
        # daemon-reload only rereads unit files: it is not a change of the node's state by itself.
        systemctl.run("daemon-reload")

    if p["missing_ok"]:
        if p["state"] in ("started", "restarted") or p["enabled"]:
            module.fail_json(msg="missing_ok: only for a unit to be stopped or disabled (a unit that does not "
                                 "exist cannot start)")
        _rc, load_state = systemctl.run("show", "-p", "LoadState", "--value", unit, check=False)
        if load_state == "not-found":
            module.exit_json(changed=False, actions=[], status={}, missing=True,
                             diff={"before": f"{unit}: not found\n", "after": f"{unit}: not found\n"})

    enabled = systemctl.is_enabled(unit) if p["enabled"] is not None else None
    active = systemctl.is_active(unit) if p["state"] else None

    if p["enabled"] is not None and enabled != p["enabled"]:
        actions.append("enable" if p["enabled"] else "disable")
    if p["state"] == "started" and not active:
        actions.append("start")
    elif p["state"] == "stopped" and active:
        actions.append("stop")
    elif p["state"] == "restarted":
        actions.append("restart")

    where = f"{p['node']}: " if p["node"] else ""
    if not module.check_mode:
        for action in actions:
            rc, out, err = module.run_command([systemctl.binary, action, unit], environ_update={"LC_ALL": "C"})
            if rc != 0:
                wanted, measured = {"start": ("active", "failed"), "restart": ("active", "failed"),
                                    "stop": ("inactive", "active"), "enable": ("enabled", "disabled"),
                                    "disable": ("disabled", "enabled")}[action]
                module.fail_json(msg=f"{where}unit {unit}: expected {wanted}, measured {measured} "
                                     f"(systemctl {action} {unit}, rc {rc}: {err.strip() or out.strip() or 'no message'})")
    status = {}
    if not module.check_mode:
        if p["enabled"] is not None:
            status["enabled"] = systemctl.is_enabled(unit)
        if p["state"]:
            status["active"] = systemctl.is_active(unit)
        if p["state"] in ("started", "restarted") and not status["active"]:
            module.fail_json(msg=f"{where}unit {unit}: expected active, measured inactive after systemctl "
                                 f"{actions[-1] if actions else 'start'}",
                             status=status)
    diff = {"before": f"{unit}: enabled={enabled} active={active}\n",
            "after": f"{unit}: " + (", ".join(actions) or "unchanged") + "\n"}
    module.exit_json(changed=bool(actions), actions=actions, status=status, diff=diff)


if __name__ == "__main__":
    main()
