"""A site view like the demo appliance (4 HGX H100 nodes, 2 storage, 1 management), built from the real
platform files without a database, for the renderer tests."""

from pathlib import Path

import yaml

from appliance.partitioning.renderers import FilesystemView, NetworkView, NodeView, PoolView, SiteView

PLATFORMS = Path(__file__).resolve().parents[2] / "firmware" / "platforms"


def platform(slug: str) -> dict:
    return yaml.safe_load((PLATFORMS / f"{slug}.yaml").read_text())


def demo_site(gpu_platform: str = "hgx-h100-8gpu", **settings) -> SiteView:
    gpu, storage, management = platform(gpu_platform), platform("storage-server"), platform("management-server")
    nodes = [NodeView(name="mgmt01", role="management", management_address="10.0.0.10", platform=management,
                      platform_slug="management-server",
                      ipoib_addresses={"ib-compute": "172.16.0.10", "ib-storage": "172.17.0.10"})]
    pools = {"gpu01": "train", "gpu02": "train", "gpu03": "serve", "gpu04": "serve"}
    for number in range(1, 5):
        name = f"gpu{number:02d}"
        nodes.append(NodeView(name=name, role="gpu", management_address=f"10.0.0.{10 + number}", platform=gpu,
                              platform_slug=gpu_platform, pool=pools[name],
                              ipoib_addresses={"ib-compute": f"172.16.0.{10 + number}",
                                               "ib-storage": f"172.17.0.{10 + number}"}))
    for number in range(1, 3):
        nodes.append(NodeView(name=f"stor{number:02d}", role="storage", management_address=f"10.0.0.{20 + number}",
                              platform=storage, platform_slug="storage-server",
                              ipoib_addresses={"ib-storage": f"172.17.0.{20 + number}"}))
    return SiteView(
        name="demo",
        settings={"fabric": {"subnet_manager": {"kind": "opensm", "node": "mgmt01", "priority": 14}},
                  "storage": {"network": "ib-storage"}, **settings},
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        networks=(NetworkView("ib-compute", "ipoib", "172.16.0.0/16", "0x7fff", None),
                  NetworkView("ib-storage", "ipoib", "172.17.0.0/16", "0x0002", 4092),
                  NetworkView("mgmt", "management", "10.0.0.0/24")),
        filesystems=(
            FilesystemView("lustre", "lustre", "172.17.0.21@o2ib:/lustre", "/mnt/lustre", ("stor01",),
                           ("flock", "noatime"), {"osc.*.max_rpcs_in_flight": 64, "ko2iblnd.peer_credits": 32}),
            FilesystemView("home", "nfs-rdma", "172.17.0.22:/export/home", "/home/shared", ("stor02",),
                           ("vers=4.2", "nconnect=16"), {}),
            FilesystemView("scratch", "beegfs", "172.17.0.22", "/mnt/beegfs", ("stor02",), (), {}),
        ),
        pools=(PoolView("serve", "inference", ("gpu03", "gpu04"),
                        {"time_slicing": {"replicas": 4}, "mig_strategy": "single"}),
               PoolView("train", "training", ("gpu01", "gpu02"), {"partition": "training"})),
    )
