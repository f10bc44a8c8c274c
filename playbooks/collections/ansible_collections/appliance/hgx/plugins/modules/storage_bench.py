#!/usr/bin/python
# Appliance suite: a throughput smoke test of each mounted filesystem with fio (sequential write then
# read, direct I/O), its result returned so the engine keeps it with the node.

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_bench
short_description: Measure the sequential write and read throughput of each mount with fio
version_added: "0.1.0"
description:
  - Runs C(fio) twice on each mount (sequential write, then read of the same file, 1 MiB blocks, direct
    I/O, C(libaio), queue depth 16) and returns the throughput, so the engine keeps it with the node.
  - Fails when a mount is below O(min_read_mbps) or O(min_write_mbps), naming the node, the mount point,
    the expected and the measured throughput.
  - The test file is removed after the read pass.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node the play's environment puts the simulated C(fio) first on the C(PATH); its
    throughput comes from the node's state.
  - Nothing is measured in check mode (the test writes to the filesystem); the task is reported as skipped.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: The test is not run in check mode and the result is C(skipped).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: Name of the node, for messages and the fio job name.
    type: str
    required: true
  mounts:
    description: The mounts to measure, each a dictionary with C(mount_point) and optionally C(name).
    type: list
    elements: dict
    required: true
  size_mib:
    description: Data written and read per mount, in MiB.
    type: int
    default: 1024
  min_read_mbps:
    description: Lowest read throughput allowed, in MB/s; V(0) records the result without a gate.
    type: int
    default: 0
  min_write_mbps:
    description: Lowest write throughput allowed, in MB/s; V(0) records the result without a gate.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Measure each filesystem's throughput (smoke test, result kept)
  appliance.hgx.storage_bench:
    node: "{{ inventory_hostname }}"
    mounts:
      - {name: scratch, mount_point: /mnt/scratch}
    size_mib: 1024
    min_read_mbps: 2000
    min_write_mbps: 1000
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and when a mount is below its gate
  type: dict
  contains:
    appliance_storage:
      description: The measurements.
      type: dict
      contains:
        results:
          description: One entry per mount with C(name), C(mount_point), C(read_mbps), C(write_mbps) and C(size_mib).
          type: list
          elements: dict
problems:
  description: The mounts below their gate.
  returned: failure
  type: list
  elements: str
skipped:
  description: True in check mode.
  returned: check mode
  type: bool
"""

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import ParseError, parse_fio
from ansible.module_utils.basic import AnsibleModule


def fio(module, binary, mount_point, mode, size_mib, node):
    command = [binary, f"--name=appliance-smoke-{node}", f"--directory={mount_point}", f"--rw={mode}",
               "--bs=1M", f"--size={size_mib}M", "--direct=1", "--ioengine=libaio", "--iodepth=16",
               "--numjobs=1", "--group_reporting", "--output-format=json"]
    if mode == "read":
        command.append("--unlink=1")  # the read pass is the last use of the test file
    rc, out, err = module.run_command(command, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{node} {mount_point}: fio --rw={mode} failed (rc {rc}): {err.strip() or out.strip()}")
    try:
        return parse_fio(out)
    except ParseError as exc:
        module.fail_json(msg=f"{node} {mount_point}: {exc}")


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "mounts": {"type": "list", "elements": "dict", "required": True},
            "size_mib": {"type": "int", "default": 1024},
            "min_read_mbps": {"type": "int", "default": 0},
            "min_write_mbps": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        # The test writes to the filesystem: nothing to measure without doing it.
        module.exit_json(changed=False, skipped=True, msg="throughput test not run in check mode")
    binary = module.get_bin_path("fio", required=True)
    results, problems = [], []
    for mount in p["mounts"]:
        write = fio(module, binary, mount["mount_point"], "write", p["size_mib"], p["node"])
        read = fio(module, binary, mount["mount_point"], "read", p["size_mib"], p["node"])
        entry = {"name": mount.get("name", mount["mount_point"]), "mount_point": mount["mount_point"],
                 "write_mbps": write["write_mbps"], "read_mbps": read["read_mbps"], "size_mib": p["size_mib"]}
        results.append(entry)
        where = f"{p['node']} {mount['mount_point']}"
        if p["min_read_mbps"] and entry["read_mbps"] < p["min_read_mbps"]:
            problems.append(f"{where}: read expected >= {p['min_read_mbps']} MB/s, measured {entry['read_mbps']} MB/s")
        if p["min_write_mbps"] and entry["write_mbps"] < p["min_write_mbps"]:
            problems.append(f"{where}: write expected >= {p['min_write_mbps']} MB/s, measured {entry['write_mbps']} MB/s")
    facts = {"appliance_storage": {"results": results}}
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts,
                     msg="; ".join(f"{r['mount_point']}: read {r['read_mbps']} MB/s, write {r['write_mbps']} MB/s"
                                   for r in results))


if __name__ == "__main__":
    main()
