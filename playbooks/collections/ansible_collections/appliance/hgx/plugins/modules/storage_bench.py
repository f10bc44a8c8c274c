#!/usr/bin/python
# Appliance suite: a throughput smoke test of each mounted filesystem with fio (sequential write then
# read, direct I/O), its result returned so the engine keeps it with the node.

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_bench
short_description: Measure sequential write and read throughput of each mount with fio
options:
  node: {description: node name used in messages, type: str, required: true}
  mounts: {description: "[{name, mount_point}] to measure", type: list, elements: dict, required: true}
  size_mib: {description: data written and read per mount, type: int, default: 1024}
  min_read_mbps: {description: minimum read throughput (MB/s); 0 records without a gate, type: int, default: 0}
  min_write_mbps: {description: minimum write throughput (MB/s); 0 records without a gate, type: int, default: 0}
"""

RETURN = r"""
ansible_facts:
  description: appliance_storage, {results: [{name, mount_point, read_mbps, write_mbps, size_mib}]}
  returned: success and when a mount is below its gate
  type: dict
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
