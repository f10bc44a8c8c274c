"""The Kubernetes inference pool: NVIDIA GPU operator Helm values, the device plugin's sharing config,
and node labels and taints per pool.

The driver is installed on the host by the gpu stage (same version as the fabric manager and DCGM), so
the operator's driver container is disabled and the operator uses the host's driver and MOFED.
"""

from __future__ import annotations

import yaml

from .site import PoolView, RenderError, SiteView

POOL_LABEL = "appliance.io/pool"
POOL_KIND_LABEL = "appliance.io/pool-kind"
DEVICE_PLUGIN_CONFIG_MAP = "appliance-device-plugin-config"
MIG_STRATEGIES = ("none", "single", "mixed")


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=True, default_flow_style=False)


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


def render_device_plugin_config_map(site: SiteView, mig_types: dict[str, list[str]] | None = None) -> str:
    """One ConfigMap holding every inference pool's config; nodes pick theirs through a label."""
    pools = inference_pools(site)
    data = {config_key(p): render_device_plugin_config(p, (mig_types or {}).get(p.name)) for p in pools}
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
    for pool in site.pools:
        for name in sorted(pool.nodes):
            node = site.node(name)
            labels = {POOL_LABEL: pool.name, POOL_KIND_LABEL: pool.kind, "nvidia.com/gpu.present": "true",
                      "nvidia.com/gpu.product": node.gpu_type}
            if pool.kind == "inference":
                labels["nvidia.com/device-plugin.config"] = config_key(pool)
                labels["nvidia.com/mig.config"] = str(pool.settings.get("mig_config", "all-disabled"))
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
