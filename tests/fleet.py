"""A generated site of N HGX H100 nodes (8 GPUs, 8 ConnectX-7 rails each), for the fleet-scale tests and
the benchmark in tests/bench/bench_fleet.py.

The site is a real site definition (YAML text) that `site validate` accepts, laid out the way such a
machine is built: four GPU servers a rack (labels rack, slot), scalable units of 32 servers with one
InfiniBand leaf switch per rail (8 a unit) and a spine layer, a management node running opensm, two
storage servers serving Lustre, three quarters of the servers in the training pool and the rest in
the inference pool. Every BMC names one credential, bound to every BMC endpoint of the fleet.

Two ways to bring it into the inventory:
- `import_fleet(n)`: through `appliance.inventory.services.import_site`, as an operator would (one
  audit record per object: about 26 s for 1,000 nodes on SQLite);
- `bulk_fleet(n)`: the same rows written with bulk_create from the parsed definition, for tests that
  need a large inventory fast. `tests/inventory/test_fleet_generator.py` proves both give the same
  inventory.
"""

from __future__ import annotations

import math

GPU_PLATFORM = "hgx-h100-8gpu"
FLEET_CREDENTIAL = "fleet-bmc"
FLEET_PASSWORD = "Fleet-bmc-Pw-4Tz8-not-for-output"
SERVERS_PER_RACK = 4
SERVERS_PER_UNIT = 32  # a scalable unit: 32 servers x 8 rails = 256 leaf ports, one 64-port leaf a rail
RAILS = 8
LEAVES_PER_SPINE = 4


def node_name(i: int) -> str:
    return f"gpu{i + 1:04d}"


def _host(prefix: int, i: int) -> str:
    """Address i (from 0) in 10.<prefix>.0.0/16, skipping .0 and .255 of each /24."""
    return f"10.{prefix}.{i // 254}.{i % 254 + 1}"


def bmc_endpoint(i: int) -> str:
    return f"https://{_host(1, i)}"


def switch_count(n: int) -> tuple[int, int]:
    """Leaf and spine switches of a fleet of n GPU servers."""
    leaves = RAILS * math.ceil(n / SERVERS_PER_UNIT)
    return leaves, max(1, math.ceil(leaves / LEAVES_PER_SPINE))


def training_size(n: int) -> int:
    return max(1, (n * 3) // 4) if n > 1 else n


def fleet_site(n: int, name: str = "fleet") -> str:
    """The site definition of a fleet of n GPU servers (plus 2 storage servers and a management node)."""
    if not 1 <= n <= 60_000:
        raise ValueError(f"a fleet has 1 to 60,000 GPU servers, not {n}")
    lines = [
        f"# Generated fleet: {n} HGX H100 servers ({n * 8} GPUs), tests/fleet.py",
        "appliance:",
        f"  name: {name}",
        f"  description: Generated fleet of {n} HGX H100 servers",
        "simulation: false",
        "defaults:",
        f"  bmc: {{credential: {FLEET_CREDENTIAL}, verify_tls: true}}",
        "networks:",
        "  - {name: mgmt, kind: management, cidr: 10.0.0.0/16, mtu: 1500}",
        "  - {name: bmc, kind: bmc, cidr: 10.1.0.0/16}",
        '  - {name: ib0, kind: ipoib, cidr: 10.2.0.0/16, pkey: "0x7fff", mtu: 4092}',
        "fabric:",
        "  subnet_manager: {kind: opensm, node: mgmt01, priority: 15}",
        "switches:",
    ]
    leaves, spines = switch_count(n)
    for s in range(spines):
        lines.append(f"  - {{name: ib-spine{s + 1:03d}, kind: infiniband, model: NVIDIA QM9700, tier: spine, "
                     f"management_address: {_host(250, s)}, ports: 64}}")
    for leaf in range(leaves):
        unit, rail = divmod(leaf, RAILS)
        lines.append(f"  - {{name: ib-su{unit + 1:03d}-rail{rail}, kind: infiniband, model: NVIDIA QM9700, "
                     f"tier: leaf, management_address: {_host(250, spines + leaf)}, ports: 64}}")
    lines.append("nodes:")
    for i in range(n):
        rack, slot = divmod(i, SERVERS_PER_RACK)
        lines.append(f"  - {{name: {node_name(i)}, role: gpu, platform: {GPU_PLATFORM}, gpus: 8, "
                     f"management_address: {_host(0, i)}, bmc: {{url: \"{bmc_endpoint(i)}\"}}, "
                     f"ipoib: {{ib0: {_host(2, i)}}}, labels: {{rack: r{rack + 1:03d}, slot: {slot + 1}, "
                     f"su: su{i // SERVERS_PER_UNIT + 1:03d}}}}}")
    services = [("stor01", "storage", "storage-server", {"rack": "s01", "lustre": "mgs-mds-oss"}),
                ("stor02", "storage", "storage-server", {"rack": "s01", "lustre": "oss"}),
                ("mgmt01", "management", "management-server", {"rack": "s01"})]
    for offset, (service, role, platform, labels) in enumerate(services):
        i = 60_000 + offset
        label_text = ", ".join(f"{key}: {value}" for key, value in labels.items())
        lines.append(f"  - {{name: {service}, role: {role}, platform: {platform}, management_address: {_host(0, i)}, "
                     f"bmc: {{url: \"{bmc_endpoint(i)}\"}}, ipoib: {{ib0: {_host(2, i)}}}, labels: {{{label_text}}}}}")
    stor01 = _host(2, 60_000)
    lines += [
        "filesystems:",
        f"  - {{name: scratch, type: lustre, servers: [stor01, stor02], source: \"{stor01}@o2ib:/scratch\", "
        "mount_point: /mnt/scratch, options: [flock, noatime]}",
        "pools:",
    ]
    names = [node_name(i) for i in range(n)]
    trained = training_size(n)
    lines.append(f"  - {{name: training, kind: training, settings: {{partition: train}}, "
                 f"nodes: [{', '.join(names[:trained])}]}}")
    if names[trained:]:
        lines.append(f"  - {{name: inference, kind: inference, settings: {{time_slicing: {{replicas: 4}}}}, "
                     f"nodes: [{', '.join(names[trained:])}]}}")
    return "\n".join(lines) + "\n"


def fleet_endpoints(n: int) -> list[str]:
    return [bmc_endpoint(i) for i in range(n)] + [bmc_endpoint(60_000 + k) for k in range(3)]


def create_fleet_credential(n: int):
    """The credential every BMC of the fleet names, bound to their endpoints, as an Administrator makes it."""
    from appliance.inventory import credentials

    return credentials.create(FLEET_CREDENTIAL, username="root", secret=FLEET_PASSWORD, endpoints=fleet_endpoints(n))


def import_fleet(n: int, name: str = "fleet"):
    """Create the credential and import the generated site through the site import service."""
    from appliance.inventory.services import import_site

    create_fleet_credential(n)
    return import_site(fleet_site(n, name), f"{name}.yml")


def bulk_fleet(n: int, name: str = "fleet"):
    """The inventory `import_fleet(n)` makes, written with bulk_create (seconds instead of minutes, no audit
    records: a fixture, not an action). Returns the Appliance."""
    from django.db import transaction

    from appliance.inventory.models import (
        BMC,
        GPU,
        HCA,
        Appliance,
        Filesystem,
        HCAPort,
        Network,
        Node,
        Platform,
        Pool,
        PoolMembership,
        Switch,
    )
    from appliance.inventory.sitedef import parse_site

    credential = create_fleet_credential(n)
    site = parse_site(fleet_site(n, name), f"{name}.yml")
    with transaction.atomic():
        platforms = {}
        for slug, spec in sorted(site.platforms.items()):
            platforms[slug], _ = Platform.objects.update_or_create(slug=slug, defaults=spec.row_values())
        appliance = Appliance.objects.create(
            name=site.name, description=site.description, simulated=site.simulation,
            settings={"fabric": site.fabric}, site_file=site.filename, site_digest=site.sha256)
        Network.objects.bulk_create(Network(appliance=appliance, name=net.name, kind=net.kind, cidr=net.cidr,
                                            pkey=net.pkey, mtu=net.mtu) for net in site.networks)
        Switch.objects.bulk_create(Switch(appliance=appliance, name=s.name, kind=s.kind, model=s.model, tier=s.tier,
                                          management_address=s.management_address, port_count=s.port_count)
                                   for s in site.switches)
        Node.objects.bulk_create(
            Node(appliance=appliance, name=d.name, role=d.role, platform=platforms[d.platform],
                 management_address=d.management_address, ipoib_addresses=d.ipoib, labels=d.labels)
            for d in site.nodes)
        nodes = dict(Node.objects.filter(appliance=appliance).values_list("name", "pk"))
        BMC.objects.bulk_create(BMC(node_id=nodes[d.name], url=d.bmc.url, credential=credential,
                                    verify_tls=d.bmc.verify_tls) for d in site.nodes)
        specs = {d.name: site.platforms[d.platform] for d in site.nodes}
        GPU.objects.bulk_create(
            GPU(node_id=nodes[name], index=index, model=spec.gpu_model, memory_mib=spec.gpu_memory_mib,
                mig_capable=spec.mig_capable, nvlink_peers=spec.nvlink_peers(index))
            for name, spec in specs.items() for index in range(spec.gpu_count))
        HCA.objects.bulk_create(HCA(node_id=nodes[name], device=device, model=spec.hca_model)
                                for name, spec in specs.items() for device in spec.hca_devices)
        gpus = {(node_id, index): pk for pk, node_id, index in
                GPU.objects.filter(node__appliance=appliance).values_list("pk", "node_id", "index")}
        hcas = {(node_id, device): pk for pk, node_id, device in
                HCA.objects.filter(node__appliance=appliance).values_list("pk", "node_id", "device")}
        HCAPort.objects.bulk_create(
            HCAPort(hca_id=hcas[(nodes[name], port.device)], port=port.port, rate_gbps=spec.hca_rate_gbps,
                    link_layer=spec.hca_link_layer,
                    closest_gpu_id=gpus.get((nodes[name], port.closest_gpu)) if port.closest_gpu is not None else None)
            for name, spec in specs.items() for port in spec.ports)
        Filesystem.objects.bulk_create(
            Filesystem(appliance=appliance, name=fs.name, type=fs.type, servers=fs.servers, source=fs.source,
                       mount_point=fs.mount_point, options=fs.options, tunables=fs.tunables)
            for fs in site.filesystems)
        for pool_def in site.pools:
            pool = Pool.objects.create(appliance=appliance, name=pool_def.name, kind=pool_def.kind,
                                       settings=pool_def.settings)
            PoolMembership.objects.bulk_create(PoolMembership(pool=pool, node_id=nodes[member])
                                               for member in pool_def.nodes)
    return appliance


def inventory_dump(appliance_name: str) -> dict:
    """Every row of an appliance's inventory as plain values (no ids, no timestamps), to compare two ways
    of building it."""
    from appliance.inventory.models import (
        BMC,
        GPU,
        HCA,
        Appliance,
        Filesystem,
        HCAPort,
        Network,
        Node,
        PoolMembership,
        Switch,
    )

    appliance = Appliance.objects.get(name=appliance_name)
    scope = {"node__appliance": appliance}
    return {
        "appliance": list(Appliance.objects.filter(pk=appliance.pk).values(
            "name", "description", "simulated", "settings", "site_file", "site_digest")),
        "networks": list(Network.objects.filter(appliance=appliance).order_by("name").values(
            "name", "kind", "cidr", "pkey", "mtu")),
        "switches": list(Switch.objects.filter(appliance=appliance).order_by("name").values(
            "name", "kind", "model", "tier", "management_address", "port_count")),
        "nodes": list(Node.objects.filter(appliance=appliance).order_by("name").values(
            "name", "role", "platform__slug", "management_address", "ipoib_addresses", "labels", "state",
            "sysroot")),
        "bmcs": list(BMC.objects.filter(**scope).order_by("node__name").values(
            "node__name", "url", "credential__name", "verify_tls")),
        "gpus": list(GPU.objects.filter(**scope).order_by("node__name", "index").values(
            "node__name", "index", "model", "memory_mib", "mig_capable", "mig_mode", "nvlink_peers")),
        "hcas": list(HCA.objects.filter(**scope).order_by("node__name", "device").values(
            "node__name", "device", "model")),
        "ports": list(HCAPort.objects.filter(hca__node__appliance=appliance).order_by(
            "hca__node__name", "hca__device", "port").values(
            "hca__node__name", "hca__device", "port", "rate_gbps", "link_layer", "closest_gpu__index")),
        "filesystems": list(Filesystem.objects.filter(appliance=appliance).order_by("name").values(
            "name", "type", "servers", "source", "mount_point", "options", "tunables")),
        "memberships": list(PoolMembership.objects.filter(**scope).order_by("node__name").values(
            "node__name", "pool__name", "pool__kind", "pool__settings")),
    }
