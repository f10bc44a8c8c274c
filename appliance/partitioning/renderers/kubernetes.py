"""The Kubernetes inference pool: NVIDIA GPU operator Helm values, the device plugin's sharing config,
and node labels and taints per pool.

The driver is installed on the host by the gpu stage (same version as the fabric manager and DCGM), so
the operator's driver container is disabled and the operator uses the host's driver and MOFED.
"""

from __future__ import annotations

from appliance.core import plainyaml

from .site import PoolView, RenderError, SiteView

POOL_LABEL = "appliance.io/pool"
POOL_KIND_LABEL = "appliance.io/pool-kind"
DEVICE_PLUGIN_CONFIG_MAP = "appliance-device-plugin-config"
MIG_STRATEGIES = ("none", "single", "mixed")


def _dump(data) -> str:
    return plainyaml.dump(data, sort_keys=True)


def inference_pools(site: SiteView) -> list[PoolView]:
    return site.pools_of_kind("inference")


def mig_strategy(pool: PoolView) -> str:
    strategy = str(pool.settings.get("mig_strategy", "single"))
    if strategy not in MIG_STRATEGIES:
        raise RenderError(f"pool {pool.name}: settings.mig_strategy {strategy!r} is not one of {', '.join(MIG_STRATEGIES)}")
    return strategy


def replicas(pool: PoolView) -> int:
    slicing = pool.settings.get("time_slicing") or {}
    count = int(slicing.get("replicas", 1))
    if count < 1:
        raise RenderError(f"pool {pool.name}: settings.time_slicing.replicas must be at least 1")
    return count


def config_key(pool: PoolView) -> str:
    """The device plugin config name of a pool (a key of the shared ConfigMap, a node label's value)."""
    return pool.name


def device_plugin_config(pool: PoolView, mig_types: list[str] | None = None) -> dict:
    """The device plugin's config file (`version: v1`) for one pool."""
    strategy = mig_strategy(pool)
    config: dict = {"version": "v1", "flags": {"migStrategy": strategy}}
    count = replicas(pool)
    if count > 1:
        # With the mixed strategy every MIG profile is its own resource and is shared separately.
        names = ["nvidia.com/gpu"]
        if strategy == "mixed" and mig_types:
            names = [f"nvidia.com/mig-{t}" for t in sorted(set(mig_types))]
        config["sharing"] = {"timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": name, "replicas": count} for name in names],
        }}
    return config


def render_device_plugin_config(pool: PoolView, mig_types: list[str] | None = None) -> str:
    return _dump(device_plugin_config(pool, mig_types))


def recorded_layout(node, replicas: int = 0) -> list[dict] | None:
    """The node's GPUs as the partitioning stage recorded them (facts mig_instances and time_slicing), in
    the planner's shape [{id, mig, time_slicing}]; None for a node no partitioning run has laid out: none
    recorded, or no GPU split and every GPU shared as its pool (`replicas`) shares them (every bootstrap's
    partitioning stage records each GPU node's layout; such a node keeps its pool's config)."""
    from appliance.partitioning import formats
    from appliance.partitioning.layout import laid_out

    facts = node.facts or {}
    if not laid_out(facts, node.gpu_count, replicas):
        return None
    instances: dict[int, list[dict]] = {}
    for item in facts.get("mig_instances") or []:
        try:
            instances.setdefault(int(item["gpu"]), []).append({"profile": str(item["profile"]),
                                                               "start": int(item["start"])})
        except (KeyError, TypeError, ValueError):
            raise RenderError(f"node {node.name}: facts.mig_instances is malformed ({item!r})") from None
    slicing = facts.get("time_slicing") or {}
    try:
        sliced = formats.time_sliced(slicing)   # each GPU with its own count
    except (TypeError, ValueError, AttributeError):
        raise RenderError(f"node {node.name}: facts.time_slicing is malformed ({slicing!r})") from None
    return [{"id": f"{node.name}/gpu{index}", "mig": instances.get(index),
             "time_slicing": {"replicas": sliced[index]} if index in sliced and index not in instances else None}
            for index in range(node.gpu_count)]


def node_layout_configs(site: SiteView) -> dict[str, dict]:
    """node -> its own device plugin config (v1) from the layout the partitioning stage recorded, for the
    inference nodes it has partitioned: time-slicing of the GPUs it time-slices, MIG resources with the
    mixed strategy (one node's GPUs may carry several profiles). Nodes select theirs by label."""
    from appliance.partitioning import formats

    pool_names = {p.name for p in site.pools}
    configs = {}
    for pool in inference_pools(site):
        for name in sorted(pool.nodes):
            gpus = recorded_layout(site.node(name), replicas(pool) if replicas(pool) > 1 else 0)
            if gpus is None:
                continue
            if name in pool_names:
                raise RenderError(f"node {name}: its device plugin config would take the key of pool {name}")
            strategy = "mixed" if any(g["mig"] for g in gpus) else "single"
            try:
                configs[name] = formats.device_plugin_config({"gpus": gpus}, name, strategy)
            except formats.FormatError as exc:
                raise RenderError(f"node {name}: {exc}") from None
    return configs


def render_device_plugin_config_map(site: SiteView, mig_types: dict[str, list[str]] | None = None) -> str:
    """One ConfigMap holding every inference pool's config and the config of each node the partitioning
    stage laid out; nodes pick theirs through a label."""
    pools = inference_pools(site)
    data = {config_key(p): render_device_plugin_config(p, (mig_types or {}).get(p.name)) for p in pools}
    data.update({name: _dump(config) for name, config in node_layout_configs(site).items()})
    return _dump({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIG_MAP, "namespace": "gpu-operator"},
        "data": data,
    })


def gpu_operator_values(site: SiteView) -> dict:
    pools = inference_pools(site)
    if not pools:
        raise RenderError(f"appliance {site.name} has no inference pool: nothing for Kubernetes to serve")
    strategies = {mig_strategy(p) for p in pools}
    # The operator runs one MIG strategy per cluster; pools asking for different ones cannot share it.
    if len(strategies) > 1:
        raise RenderError("inference pools ask for different MIG strategies "
                          f"({', '.join(f'{p.name}: {mig_strategy(p)}' for p in pools)}); the GPU operator takes one")
    strategy = strategies.pop()
    rdma = bool((site.settings.get("kubernetes") or {}).get("rdma", True))
    return {
        "driver": {"enabled": False, "rdma": {"enabled": rdma, "useHostMofed": True}},
        "toolkit": {"enabled": True},
        "mig": {"strategy": "single" if strategy == "none" else strategy},
        "migManager": {"enabled": strategy != "none"},
        "devicePlugin": {"enabled": True, "config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": config_key(pools[0])}},
        "dcgm": {"enabled": False},
        "dcgmExporter": {"enabled": True},
        "gfd": {"enabled": True},
        "nfd": {"enabled": True},
        "gds": {"enabled": False},
        "operator": {"defaultRuntime": "containerd"},
        "daemonsets": {"tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"},
        ]},
    }


def render_gpu_operator_values(site: SiteView) -> str:
    return _dump(gpu_operator_values(site))


def node_settings(site: SiteView) -> dict[str, dict]:
    """node -> {labels, taints} for every pool member (training nodes are labelled too, and tainted so that
    no Kubernetes pod lands on a Slurm node)."""
    result: dict[str, dict] = {}
    laid_out = node_layout_configs(site)
    for pool in site.pools:
        for name in sorted(pool.nodes):
            node = site.node(name)
            labels = {POOL_LABEL: pool.name, POOL_KIND_LABEL: pool.kind, "nvidia.com/gpu.present": "true",
                      "nvidia.com/gpu.product": node.gpu_type}
            if pool.kind == "inference":
                labels["nvidia.com/device-plugin.config"] = config_key(pool)
                labels["nvidia.com/mig.config"] = str(pool.settings.get("mig_config", "all-disabled"))
                if name in laid_out:
                    # The node's own configs: its device plugin config above, its mig-parted config
                    # (formats.mig_parted_config names each node's after the node).
                    labels["nvidia.com/device-plugin.config"] = name
                    labels["nvidia.com/mig.config"] = name
                taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            else:
                taints = [{"key": POOL_LABEL, "value": pool.name, "effect": "NoExecute"}]
            result[name] = {"labels": dict(sorted(labels.items())), "taints": taints}
    return dict(sorted(result.items()))


def render_node_settings(site: SiteView) -> str:
    return _dump({"nodes": node_settings(site)})


def render_node_settings_for(settings: dict) -> str:
    """One node's labels and taints as a YAML document (what the node's agent applies at registration)."""
    return _dump(settings)
