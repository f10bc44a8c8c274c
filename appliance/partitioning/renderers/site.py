"""A frozen snapshot of one appliance's inventory, in the shape the renderers need.

The renderers never query the database themselves: `site_view(appliance)` reads every row once, in a fixed
order, and the renderers work on plain values. This keeps rendering deterministic and lets tests build a
site without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RenderError(ValueError):
    """The inventory cannot produce a valid configuration; the message names the node, pool or field."""


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str = ""
    model: str = ""
    memory_mib: int = 0
    pci_bus_id: str = ""


@dataclass(frozen=True)
class PortView:
    device: str
    port: int = 1
    guid: str = ""
    rate_gbps: int = 0
    closest_gpu: int | None = None


@dataclass(frozen=True)
class NodeView:
    name: str
    role: str
    management_address: str
    platform: dict = field(default_factory=dict, compare=False)
    platform_slug: str = ""
    ipoib_addresses: dict = field(default_factory=dict, compare=False)
    labels: dict = field(default_factory=dict, compare=False)
    facts: dict = field(default_factory=dict, compare=False)
    gpus: tuple[GpuView, ...] = ()
    ports: tuple[PortView, ...] = ()
    pool: str | None = None

    @property
    def gpu_count(self) -> int:
        """Discovered GPUs when the gpu stage has run, the platform's count before."""
        if self.gpus:
            return len(self.gpus)
        return int((self.platform.get("gpu") or {}).get("count") or 0)

    @property
    def gpu_type(self) -> str:
        """The Slurm/Kubernetes type name of a whole GPU: `h100` for an H100-SXM5-80GB."""
        gpu = self.platform.get("gpu") or {}
        if gpu.get("slurm_type"):
            return str(gpu["slurm_type"])
        product = str(gpu.get("product") or gpu.get("model") or "gpu")
        for word in product.replace("-", " ").split():
            if any(ch.isdigit() for ch in word):
                return word.lower()
        return product.split()[0].lower()

    @property
    def hca_ports(self) -> tuple[PortView, ...]:
        """Discovered ports, else the ports the platform declares."""
        if self.ports:
            return self.ports
        hcas = self.platform.get("hcas") or {}
        return tuple(
            PortView(device=str(p["device"]), port=int(p.get("port", 1)), rate_gbps=int(hcas.get("rate_gbps") or 0),
                     closest_gpu=p.get("closest_gpu"))
            for p in hcas.get("ports") or []
        )


@dataclass(frozen=True)
class NetworkView:
    name: str
    kind: str
    cidr: str
    pkey: str = ""
    mtu: int | None = None


@dataclass(frozen=True)
class FilesystemView:
    name: str
    type: str
    source: str
    mount_point: str
    servers: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    tunables: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class PoolView:
    name: str
    kind: str
    nodes: tuple[str, ...] = ()
    settings: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SiteView:
    name: str
    settings: dict = field(default_factory=dict, compare=False)
    nodes: tuple[NodeView, ...] = ()
    networks: tuple[NetworkView, ...] = ()
    filesystems: tuple[FilesystemView, ...] = ()
    pools: tuple[PoolView, ...] = ()

    def node(self, name: str) -> NodeView:
        for node in self.nodes:
            if node.name == name:
                return node
        raise RenderError(f"unknown node {name!r} in appliance {self.name}")

    def nodes_with_role(self, role: str) -> list[NodeView]:
        return [n for n in self.nodes if n.role == role]

    def pools_of_kind(self, kind: str) -> list[PoolView]:
        return [p for p in self.pools if p.kind == kind]

    @property
    def management_node(self) -> NodeView:
        managers = self.nodes_with_role("management")
        if not managers:
            raise RenderError(f"appliance {self.name} has no management node (Slurm controller, subnet manager)")
        return managers[0]

    @property
    def ipoib_networks(self) -> list[NetworkView]:
        return [n for n in self.networks if n.kind == "ipoib"]

    @property
    def fabric(self) -> dict:
        return dict(self.settings.get("fabric") or {})


def site_view(appliance) -> SiteView:
    """Snapshot `appliance` (an inventory.models.Appliance) with every collection in a fixed order."""
    pool_of = {}
    pools = []
    # Members of every pool in one joined query: a prefetch would send the pools' members back as an IN
    # list (and, on SQLite, one OR term per row) that grows with the fleet.
    from appliance.inventory.models import PoolMembership

    members_of: dict[int, list[str]] = {}
    memberships = PoolMembership.objects.filter(pool__appliance=appliance).values_list("pool_id", "node__name")
    for pool_id, node_name in memberships:
        members_of.setdefault(pool_id, []).append(node_name)
    for pool in appliance.pools.order_by("name"):
        members = tuple(sorted(members_of.get(pool.pk, ())))
        for member in members:
            pool_of[member] = pool.name
        pools.append(PoolView(name=pool.name, kind=pool.kind, nodes=members, settings=dict(pool.settings or {})))

    # GPUs and ports of all nodes in one query each: the snapshot costs the same for 4 nodes or 512.
    gpus_of, ports_of = _gpus_by_node(appliance), _ports_by_node(appliance)
    nodes = []
    from appliance.inventory.models import Platform

    # Each platform once (its spec parsed once, not once per node), and no node timestamps.
    platforms = {platform.pk: platform for platform in Platform.objects.filter(nodes__appliance=appliance).distinct()}
    for node in appliance.nodes.order_by("name").defer("created", "updated"):
        platform = platforms.get(node.platform_id)
        gpus = tuple(
            GpuView(index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, pci_bus_id=g.pci_bus_id)
            for g in gpus_of.get(node.pk, ())
        )
        ports = tuple(
            PortView(device=p.hca.device, port=p.port, guid=p.guid, rate_gbps=p.rate_gbps,
                     closest_gpu=p.closest_gpu.index if p.closest_gpu_id else None)
            for p in ports_of.get(node.pk, ())
        )
        nodes.append(NodeView(
            name=node.name, role=node.role, management_address=node.management_address,
            platform=dict(platform.spec) if platform else {},
            platform_slug=platform.slug if platform else "",
            ipoib_addresses=dict(node.ipoib_addresses or {}), labels=dict(node.labels or {}),
            facts=dict(node.facts or {}), gpus=gpus, ports=ports, pool=pool_of.get(node.name),
        ))

    networks = tuple(
        NetworkView(name=n.name, kind=n.kind, cidr=n.cidr, pkey=n.pkey, mtu=n.mtu)
        for n in appliance.networks.order_by("name")
    )
    filesystems = tuple(
        FilesystemView(name=f.name, type=f.type, source=f.source, mount_point=f.mount_point,
                       servers=tuple(f.servers or ()), options=tuple(f.options or ()), tunables=dict(f.tunables or {}))
        for f in appliance.filesystems.order_by("name")
    )
    return SiteView(name=appliance.name, settings=dict(appliance.settings or {}), nodes=tuple(nodes),
                    networks=networks, filesystems=filesystems, pools=tuple(pools))


def _by_node(rows, node_id) -> dict[int, list]:
    grouped: dict[int, list] = {}
    for row in rows:
        grouped.setdefault(node_id(row), []).append(row)
    return grouped


def _gpus_by_node(appliance) -> dict[int, list]:
    from appliance.inventory.models import GPU

    # Only the fields the snapshot keeps: at fleet scale, loading the rest (timestamps, facts) is most of the cost.
    return _by_node(GPU.objects.filter(node__appliance=appliance).order_by("node_id", "index")
                    .only("node_id", "index", "uuid", "model", "memory_mib", "pci_bus_id"),
                    lambda gpu: gpu.node_id)


def _ports_by_node(appliance) -> dict[int, list]:
    from appliance.inventory.models import HCAPort

    return _by_node(HCAPort.objects.filter(hca__node__appliance=appliance).select_related("hca", "closest_gpu")
                    .order_by("hca__node_id", "hca__device", "port")
                    .only("port", "guid", "rate_gbps", "closest_gpu_id", "hca__node_id", "hca__device",
                          "closest_gpu__index"), lambda port: port.hca.node_id)
