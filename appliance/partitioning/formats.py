"""A planner result in the formats of the tools that apply or consume it:

- mig_parted_config(result): NVIDIA mig-parted's config file (`version: v1`, `mig-configs`), one named
  config per node (the node's name, what its `nvidia.com/mig.config` label selects) plus `all-disabled`.
  mig-parted places instances itself; the explicit placements stay with the partitioning stage.
- device_plugin_config(result, node, strategy): the k8s-device-plugin config file (`version: v1`,
  flags.migStrategy single|mixed, sharing.timeSlicing.resources with the time-sliced GPUs' indices and
  replicas).
- slurm_gres(result, node): the value of slurm.conf's Gres= for the node, MIG types named as the profile
  (gpu:3g.40gb:1), whole and time-sliced GPUs as the whole type (Slurm does not time-slice a GPU).
- gpu_operator_values(result, strategy): Helm values for the GPU operator: mig.strategy, the MIG
  manager's config (the mig-parted file above as a ConfigMap) and the device plugin's configs per node.

GPU ids are "<node>/gpu<index>" (GPU.__str__). Pure Python, no Django. to_yaml(obj) writes any of them.
"""

from __future__ import annotations

import re

from appliance.core import plainyaml
from appliance.partitioning import profiles as P

GPU_ID = re.compile(r"^(?P<node>[A-Za-z0-9][A-Za-z0-9._-]{0,62})/gpu(?P<index>[0-9]{1,3})$")
NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
STRATEGIES = ("single", "mixed")
DISABLED = "all-disabled"


class FormatError(ValueError):
    """A result that a format cannot express; the message names the node or GPU."""


def split_gpu_id(gpu_id: str) -> tuple[str, int]:
    match = GPU_ID.fullmatch(gpu_id) if isinstance(gpu_id, str) else None
    if not match:
        raise FormatError(f"GPU {gpu_id!r}: not a <node>/gpu<index> id (the formats are per node and GPU index)")
    return match["node"], int(match["index"])


def by_node(result: dict) -> dict[str, list[tuple[int, dict]]]:
    """{node: [(GPU index, the result's GPU entry)] by index}, nodes in order of appearance."""
    nodes: dict[str, list[tuple[int, dict]]] = {}
    for gpu in result.get("gpus", ()):
        node, index = split_gpu_id(gpu["id"])
        if node == DISABLED:
            raise FormatError(f"GPU {gpu['id']}: a node named {DISABLED} would clash with mig-parted's config of that name")
        nodes.setdefault(node, []).append((index, gpu))
    for node, gpus in nodes.items():
        gpus.sort(key=lambda pair: pair[0])
        indices = [index for index, _ in gpus]
        if len(set(indices)) != len(indices):
            raise FormatError(f"node {node}: GPU index listed twice")
    return nodes


def _node_gpus(result: dict, node: str) -> list[tuple[int, dict]]:
    if not isinstance(node, str) or not NODE.fullmatch(node):
        raise FormatError(f"node {node!r}: not a node name ({NODE.pattern})")
    gpus = by_node(result).get(node)
    if not gpus:
        raise FormatError(f"node {node}: no GPU of the plan is on it")
    return gpus


def _profile_order(gpu: dict, name: str) -> tuple:
    profile = P.model(gpu["model"]).profile(name)
    return (profile.compute_slices, profile.memory_slices, profile.media_extensions, name)


def _mig_counts(gpu: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for instance in sorted(gpu["mig"], key=lambda i: _profile_order(gpu, i["profile"])):
        counts[instance["profile"]] = counts.get(instance["profile"], 0) + 1
    return counts


def mig_parted_config(result: dict) -> dict:
    """mig-parted config v1: `all-disabled` and one config per node; GPUs of a node with the same layout
    share an entry (devices: their indices)."""
    configs: dict[str, list] = {DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for node, gpus in by_node(result).items():
        entries: list[dict] = []
        keys: list[tuple] = []
        for index, gpu in gpus:
            enabled = gpu.get("mig") is not None
            counts = _mig_counts(gpu) if enabled else {}
            key = (enabled, tuple(counts.items()))
            if key in keys:
                entries[keys.index(key)]["devices"].append(index)
                continue
            keys.append(key)
            entry: dict = {"devices": [index], "mig-enabled": enabled}
            if enabled:
                entry["mig-devices"] = counts
            entries.append(entry)
        configs[node] = entries
    return {"version": "v1", "mig-configs": configs}


def time_sliced(slicing) -> dict[int, int]:
    """GPU index -> replicas from a node's `time_slicing` fact (what the partitioning stage records):
    {"replicas": N, "gpus": [index, ...], "per_gpu": {"index": n, ...}}. `per_gpu` gives each GPU its own
    count (N is then their highest, kept for readers of earlier records); a record without it shares
    every listed GPU N ways. None or {} is no time-slicing. Raises ValueError (or TypeError) when the
    record is malformed."""
    if not slicing:
        return {}
    if not isinstance(slicing, dict):
        raise ValueError(f"not a mapping: {slicing!r}")
    per_gpu = slicing.get("per_gpu")
    if per_gpu is not None:
        if not isinstance(per_gpu, dict):
            raise ValueError(f"per_gpu is not a mapping: {per_gpu!r}")
        counts = {int(index): int(replicas) for index, replicas in per_gpu.items()}
    else:
        replicas = int(slicing.get("replicas") or 0)
        counts = {int(index): replicas for index in slicing.get("gpus") or []}
    return {index: replicas for index, replicas in sorted(counts.items()) if replicas > 1}


def device_plugin_config(result: dict, node: str, strategy: str = "mixed") -> dict:
    """The k8s-device-plugin config file (v1) for one node. Time-sliced GPUs are shared by index with the
    replicas the plan gives them (one resource entry per replica count). With the single strategy every
    GPU of the node must be MIG with one profile, or none MIG."""
    if strategy not in STRATEGIES:
        raise FormatError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    gpus = _node_gpus(result, node)
    mig = [(index, gpu) for index, gpu in gpus if gpu.get("mig") is not None]
    shared = [(index, gpu) for index, gpu in gpus if gpu.get("time_slicing")]
    if strategy == "single" and mig:
        profiles = {i["profile"] for _, gpu in mig for i in gpu["mig"]}
        if len(mig) != len(gpus) or len(profiles) > 1:
            raise FormatError(f"node {node}: the single MIG strategy needs every GPU of the node split into one "
                              f"profile; {len(mig)} of {len(gpus)} GPUs are MIG with "
                              f"{', '.join(sorted(profiles)) or 'no instance'} (use the mixed strategy)")
    config: dict = {"version": "v1", "flags": {"migStrategy": strategy}}
    if shared:
        groups: dict[int, list[str]] = {}
        for index, gpu in shared:
            groups.setdefault(int(gpu["time_slicing"]["replicas"]), []).append(str(index))
        config["sharing"] = {"timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "devices": devices, "replicas": replicas}
                          for replicas, devices in groups.items()],
        }}
    return config


def whole_type(model_id: str) -> str:
    """The Slurm/Kubernetes type name of a whole GPU of a profile-table model: `h100` for h100-80gb."""
    return model_id.split("-", 1)[0]


def slurm_gres(result: dict, node: str, *, whole: str | None = None) -> str:
    """slurm.conf's Gres= value for the node: gpu:<type>:<count>, whole GPUs first, then the MIG
    profiles (smallest first). `whole` overrides the whole GPUs' type name."""
    gpus = _node_gpus(result, node)
    counts: dict[str, int] = {}
    mig: dict[str, tuple] = {}
    for _, gpu in gpus:
        if gpu.get("mig") is None:
            name = whole or whole_type(gpu["model"])
            counts[name] = counts.get(name, 0) + 1
            continue
        for instance in gpu["mig"]:
            mig[instance["profile"]] = _profile_order(gpu, instance["profile"])
    parts = [f"gpu:{name}:{n}" for name, n in counts.items()]
    for name in sorted(mig, key=lambda n: mig[n]):
        total = sum(1 for _, gpu in gpus for i in (gpu.get("mig") or ()) if i["profile"] == name)
        parts.append(f"gpu:{name}:{total}")
    if not parts:
        raise FormatError(f"node {node}: MIG is enabled on its GPUs but no instance exists: no GPU for Slurm")
    return ",".join(parts)


def gpu_operator_values(result: dict, strategy: str = "mixed", *, mig_config_map: str = "appliance-mig-parted",
                        plugin_config_map: str = "appliance-device-plugin") -> dict:
    """Helm values for the GPU operator: the MIG strategy, the MIG manager with the plan's mig-parted
    config (nodes select theirs with the label nvidia.com/mig.config=<node>) and the device plugin's
    config per node (label nvidia.com/device-plugin.config=<node>)."""
    if strategy not in STRATEGIES:
        raise FormatError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    nodes = by_node(result)
    return {
        "mig": {"strategy": strategy},
        "migManager": {"enabled": True, "config": {
            "create": True, "name": mig_config_map, "default": DISABLED,
            "data": {"config.yaml": to_yaml(mig_parted_config(result))}}},
        "devicePlugin": {"config": {
            "create": True, "name": plugin_config_map, "default": "",
            "data": {node: to_yaml(device_plugin_config(result, node, strategy)) for node in nodes}}},
    }


def node_labels(result: dict) -> dict[str, dict[str, str]]:
    """{node: the labels that select its configs}."""
    return {node: {"nvidia.com/mig.config": node, "nvidia.com/device-plugin.config": node} for node in by_node(result)}


def to_yaml(data) -> str:
    return plainyaml.dump(data)
