#!/usr/bin/python
# Appliance suite: InfiniBand ports of a node, read from the kernel's sysfs (state, rate, counters), checked
# against the platform: every expected port Active and LinkUp at the platform's rate, error counters
# below their thresholds.

from __future__ import annotations

DOCUMENTATION = r"""
module: ib_ports
short_description: Read and verify the InfiniBand ports of a node (sysfs state, rate and counters)
version_added: "0.1.0"
description:
  - Lists every HCA port from C(/sys/class/infiniband/<device>/ports/<port>) under O(sysroot) - C(state),
    C(phys_state), C(rate), C(link_layer), C(gids/0) - and reads its error counters from C(counters/) there.
    No C(ibstat) text is parsed, and the node needs no C(infiniband-diags).
  - Checks every port of O(expected_ports) - present, state V(Active), physical state V(LinkUp), running at
    O(rate_gbps) with O(link_layer), and each counter of O(thresholds) at or below its maximum.
  - Fails listing every contradiction, each naming the node, the port, the expected and the measured value.
author:
  - Appliance management suite developers (!UNKNOWN)
notes:
  - On a simulated node O(sysroot) is the node's directory; the simulation writes its sysfs files in the
    kernel's format and rewrites them when a fault takes a port down or changes its rate.
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
  sysroot:
    description:
      - Root of the node's file tree, where the counters are read.
      - Empty on a real node.
    type: str
    default: ""
  expected_ports:
    description:
      - The ports the platform declares, each a dictionary with C(device) (for example V(mlx5_0)) and
        C(port) (default V(1)).
    type: list
    elements: dict
    required: true
  rate_gbps:
    description: The rate in Gb/s every expected port must run at.
    type: int
    required: true
  link_layer:
    description: Link layer of the expected ports.
    type: str
    default: InfiniBand
  thresholds:
    description:
      - Counter name to the highest value allowed.
      - Known counters are V(SymbolErrorCounter), V(LinkDownedCounter) and V(LinkErrorRecoveryCounter).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Verify every InfiniBand port (state, rate, error counters)
  appliance.hgx.ib_ports:
    node: "{{ inventory_hostname }}"
    sysroot: "{{ sysroot | default('') }}"
    expected_ports:
      - {device: mlx5_0, port: 1}
      - {device: mlx5_1, port: 1}
    rate_gbps: 400
    thresholds:
      SymbolErrorCounter: 10
      LinkDownedCounter: 0
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success and when a port fails its check
  type: dict
  contains:
    appliance_hcas:
      description: Every port sysfs lists.
      type: list
      elements: dict
      contains:
        device:
          description: The HCA's device name.
          type: str
        port:
          description: The port number.
          type: int
        guid:
          description: The port GUID.
          type: str
        state:
          description: The logical state (V(Active) when up).
          type: str
        physical_state:
          description: The physical state (V(LinkUp) when up).
          type: str
        rate_gbps:
          description: The rate in Gb/s.
          type: int
        link_layer:
          description: The link layer (V(InfiniBand) or V(Ethernet)).
          type: str
        counters:
          description: Counter name to its value (null when it could not be read).
          type: dict
problems:
  description: The contradictions that failed the task.
  returned: failure
  type: list
  elements: str
msg:
  description: One line summing up the ports verified.
  returned: success
  type: str
  sample: "gpu01: 8 ports Active at 400 Gb/s"
"""

import os

from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import (
    ParseError, read_infiniband_sysfs)
from ansible.module_utils.basic import AnsibleModule

# perfquery's names (what operators know) -> the kernel's counter files.
COUNTER_FILES = {
    "SymbolErrorCounter": "symbol_error",
    "LinkDownedCounter": "link_downed",
    "LinkErrorRecoveryCounter": "link_error_recovery",
}


def read_counter(sysroot, device, port, name):
    path = os.path.join(sysroot or "/", f"sys/class/infiniband/{device}/ports/{port}/counters/{COUNTER_FILES[name]}")
    with open(path) as handle:
        return int(handle.read().strip())


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "sysroot": {"type": "str", "default": ""},
            "expected_ports": {"type": "list", "elements": "dict", "required": True},
            "rate_gbps": {"type": "int", "required": True},
            "link_layer": {"type": "str", "default": "InfiniBand"},
            "thresholds": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    node = p["node"]
    unknown = sorted(set(p["thresholds"]) - set(COUNTER_FILES))
    if unknown:
        module.fail_json(msg=f"{node}: unknown counter threshold(s) {', '.join(unknown)} (known: {', '.join(COUNTER_FILES)})")
    # The kernel's own view of the ports (what ibstat prints is read from these same files).
    try:
        cas = read_infiniband_sysfs(p["sysroot"])
    except ParseError as exc:
        module.fail_json(msg=f"{node}: {exc}")

    ports, problems = [], []
    for ca_name in sorted(cas):
        for number, port in sorted(cas[ca_name]["ports"].items()):
            counters = {}
            for name in COUNTER_FILES:
                try:
                    counters[name] = read_counter(p["sysroot"], ca_name, number, name)
                except (OSError, ValueError) as exc:
                    counters[name] = None
                    if name in p["thresholds"]:
                        problems.append(f"{node} {ca_name}/{number}: {name} unreadable ({exc})")
            ports.append({"device": ca_name, "port": number, "guid": port.get("port_guid", ""),
                          "state": port.get("state", ""), "physical_state": port.get("physical_state", ""),
                          "rate_gbps": port.get("rate_gbps", 0), "link_layer": port.get("link_layer", ""),
                          "counters": counters})
    by_key = {(port["device"], port["port"]): port for port in ports}
    for expected in p["expected_ports"]:
        key = (str(expected["device"]), int(expected.get("port", 1)))
        where = f"{node} {key[0]}/{key[1]}"
        port = by_key.get(key)
        if port is None:
            listed = ", ".join(f"{d}/{n}" for d, n in sorted(by_key)) or "none"
            problems.append(f"{where}: port missing (/sys/class/infiniband lists {listed})")
            continue
        if port["state"] != "Active":
            problems.append(f"{where}: state expected Active, measured {port['state'] or 'unknown'}")
        if port["physical_state"] != "LinkUp":
            problems.append(f"{where}: physical state expected LinkUp, measured {port['physical_state'] or 'unknown'}")
        if port["rate_gbps"] != p["rate_gbps"]:
            problems.append(f"{where}: rate expected {p['rate_gbps']} Gb/s, measured {port['rate_gbps']} Gb/s")
        if port["link_layer"] != p["link_layer"]:
            problems.append(f"{where}: link layer expected {p['link_layer']}, measured {port['link_layer']}")
        for name, maximum in sorted(p["thresholds"].items()):
            value = port["counters"].get(name)
            if value is not None and value > int(maximum):
                problems.append(f"{where}: {name} expected <= {maximum}, measured {value}")
    facts = {"appliance_hcas": ports}
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts,
                     msg=f"{node}: {len(p['expected_ports'])} ports Active at {p['rate_gbps']} Gb/s")


if __name__ == "__main__":
    main()
