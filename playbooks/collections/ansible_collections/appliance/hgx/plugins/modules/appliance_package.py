#!/usr/bin/python
# Appliance suite: Debian packages through apt-get and dpkg-query found on the PATH.
#
# ansible.builtin.apt uses python-apt, which reads and writes the host's dpkg database directly; a
# simulated node intercepts package work only through the tools first on its PATH, so this module
# never goes around them.

from __future__ import annotations

DOCUMENTATION = r"""
module: appliance_package
short_description: Install or remove Debian packages with apt-get and dpkg-query from the PATH
version_added: "0.1.0"
description:
  - Reads each package's installed version with C(dpkg-query), installs the missing ones (or the ones
    at another version than O(version)) with C(apt-get install --no-install-recommends), or removes
    the installed ones with C(apt-get remove), and verifies the result.
  - A version is compared by its upstream part when the installed one carries an epoch or a Debian
    revision (V(1:550.127.05-0ubuntu1) matches V(550.127.05)).
  - C(apt-get) runs non-interactively and keeps configuration files the node changed.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - Unlike M(ansible.builtin.apt), which reads and writes the dpkg database through python-apt, this
    module only runs the C(apt-get) and C(dpkg-query) found on the C(PATH) of the task. On a simulated
    node the play's environment puts the simulated tools first, so package work never reaches the host.
  - The packages come from the APT sources the node is configured with (on an appliance, the site's own
    repository).
  - Fails naming the packages and the versions found when C(apt-get) fails or a package is not at the
    wanted version afterwards.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: debian
options:
  name:
    description: Package names; at least one.
    type: list
    elements: str
    required: true
  version:
    description:
      - Upstream version every named package must have (epoch and Debian revision ignored).
      - Only with O(state=present).
    type: str
  state:
    description: Whether the packages must be installed (V(present)) or not (V(absent)).
    type: str
    choices: [present, absent]
    default: present
"""

EXAMPLES = r"""
- name: Install chrony
  appliance.hgx.appliance_package:
    name: [chrony]

- name: Install the NVIDIA driver of the platform
  appliance.hgx.appliance_package:
    name: [nvidia-driver-550-server, nvidia-utils-550-server]
    version: "550.127.05"

- name: Remove the in-tree RDMA tools
  appliance.hgx.appliance_package:
    name: [rdma-core]
    state: absent
"""

RETURN = r"""
packages:
  description: Package name to its installed version after the task (null when not installed).
  returned: always
  type: dict
  sample: {"chrony": "4.2-2ubuntu2"}
"""

from ansible.module_utils.basic import AnsibleModule


def upstream(version):
    """'1:3.3.7-1ubuntu2' -> '3.3.7': the part a platform file names."""
    if ":" in version:
        version = version.split(":", 1)[1]
    if "-" in version:
        version = version.rsplit("-", 1)[0]
    return version


def version_matches(installed, wanted):
    return installed == wanted or upstream(installed) == wanted


class Packages:
    def __init__(self, module):
        self.module = module
        self.dpkg_query = module.get_bin_path("dpkg-query", required=True)
        self.apt_get = module.get_bin_path("apt-get", required=True)
        self.environment = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def installed_version(self, name):
        rc, out, err = self.module.run_command([self.dpkg_query, "-W", "-f=${Status} ${Version}", name],
                                               environ_update=self.environment)
        if rc != 0:
            # dpkg-query answers 1 for a package it has never heard of: not installed.
            if rc == 1:
                return None
            self.module.fail_json(msg=f"dpkg-query -W {name} failed (rc {rc}): {err.strip() or out.strip()}")
        fields = out.strip().split()
        if len(fields) >= 4 and fields[:3] == ["install", "ok", "installed"]:
            return fields[3]
        return None

    def apt(self, verb, *arguments):
        command = [self.apt_get, verb, "-y", "-q", "-o", "Dpkg::Options::=--force-confold", *arguments]
        rc, out, err = self.module.run_command(command, environ_update=self.environment)
        if rc != 0:
            self.module.fail_json(msg=f"{' '.join(command[1:])} failed (rc {rc}): {err.strip() or out.strip()}",
                                  stdout=out, stderr=err)
        return out


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "version": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )
    names, wanted, state = module.params["name"], module.params["version"], module.params["state"]
    if state == "absent" and wanted:
        module.fail_json(msg="version applies to state=present only")
    if not names:
        module.fail_json(msg="name lists no package")
    packages = Packages(module)
    before = {name: packages.installed_version(name) for name in names}

    if state == "present":
        todo = [n for n in names if before[n] is None or (wanted and not version_matches(before[n], wanted))]
    else:
        todo = [n for n in names if before[n] is not None]

    diff = {"before": "".join(f"{n} {before[n] or '(absent)'}\n" for n in names)}
    if state == "present":
        diff["after"] = "".join(f"{n} {(wanted or before[n] or 'latest') if n in todo else before[n]}\n" for n in names)
    else:
        diff["after"] = "".join(f"{n} (absent)\n" for n in names)
    if not todo or module.check_mode:
        module.exit_json(changed=bool(todo), packages=before, diff=diff)

    if state == "present":
        packages.apt("install", "--no-install-recommends", *[f"{n}={wanted}" if wanted else n for n in todo])
    else:
        packages.apt("remove", *todo)
    after = {name: packages.installed_version(name) for name in names}
    if state == "present":
        wrong = [f"{n} {after[n] or '(absent)'}" for n in names
                 if after[n] is None or (wanted and not version_matches(after[n], wanted))]
        if wrong:
            module.fail_json(msg=f"after apt-get install, wanted {wanted or 'installed'}: {', '.join(wrong)}",
                             packages=after)
    module.exit_json(changed=True, packages=after, diff=diff)


if __name__ == "__main__":
    main()
