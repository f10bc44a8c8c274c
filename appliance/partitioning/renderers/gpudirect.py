"""GPUDirect Storage: cufile.json per node, in the layout of NVIDIA's /usr/local/cuda/gds/cufile.json.

cuFile reads through the RDMA devices named by their IPoIB addresses (`rdma_dev_addr_list`); each
filesystem's mount table narrows a mount to the addresses that reach its servers.
"""

from __future__ import annotations

import json

from .site import NodeView, SiteView
from .storage import storage_network


def _node_rdma_addresses(site: SiteView, node: NodeView) -> list[str]:
    return [node.ipoib_addresses[n.name] for n in site.ipoib_networks if node.ipoib_addresses.get(n.name)]


def cufile_config(site: SiteView, node: NodeView) -> dict:
    gds = dict(site.settings.get("gpudirect_storage") or {})
    addresses = _node_rdma_addresses(site, node)
    storage_addresses = []
    if site.filesystems:
        network = storage_network(site)
        if node.ipoib_addresses.get(network.name):
            storage_addresses = [node.ipoib_addresses[network.name]]
    mounts = {
        kind: {fs.mount_point: {"dev_addr_list": storage_addresses}
               for fs in site.filesystems if fs.type == kind}
        for kind in ("lustre", "nfs-rdma", "beegfs")
    }
    return {
        "logging": {"dir": "/var/log/cufile", "level": str(gds.get("log_level", "ERROR"))},
        "profile": {"nvtx": False, "cufile_stats": 0},
        "execution": {
            "max_io_queue_depth": 128,
            "max_io_threads": int(gds.get("max_io_threads", 4)),
            "parallel_io": True,
            "min_io_threshold_size_kb": 8192,
            "max_request_parallelism": 4,
        },
        "properties": {
            "max_direct_io_size_kb": 16384,
            "max_device_cache_size_kb": 131072,
            "max_device_pinned_mem_size_kb": 33554432,
            "use_poll_mode": bool(gds.get("use_poll_mode", False)),
            "poll_mode_max_size_kb": 4,
            # Without GDS support on a path cuFile falls back to POSIX through bounce buffers; the site
            # may forbid that to make a broken path fail loudly instead of running slow.
            "allow_compat_mode": bool(gds.get("allow_compat_mode", True)),
            "gds_rdma_write_support": True,
            "rdma_dev_addr_list": addresses,
            "rdma_load_balancing_policy": str(gds.get("rdma_load_balancing_policy", "RoundRobin")),
            "rdma_dynamic_routing": False,
        },
        "fs": {
            "generic": {"posix_unaligned_writes": False},
            "lustre": {"posix_gds_min_kb": 0, "mount_table": mounts["lustre"]},
            "nfs": {"rdma_dev_addr_list": storage_addresses if mounts["nfs-rdma"] else [],
                    "mount_table": mounts["nfs-rdma"]},
            "beegfs": {"posix_gds_min_kb": 0, "mount_table": mounts["beegfs"]},
        },
        "denylist": {"drivers": [], "devices": [], "mounts": [], "filesystems": []},
        "miscellaneous": {"api_check_aggressive": False},
    }


def render_cufile_json(site: SiteView, node: NodeView) -> str:
    return json.dumps(cufile_config(site, node), indent=2, sort_keys=True) + "\n"
