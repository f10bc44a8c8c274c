"""A generated site of N HGX H100 nodes (8 GPUs, 8 ConnectX-7 rails each), for the fleet-scale tests and
the benchmark in tests/bench/bench_fleet.py. Fleets numbered apart (`site`) have names and addresses of their
own, so several can share one inventory.

The site is a real site definition (YAML text) that `site validate` accepts, laid out the way such a
machine is built: four GPU servers a rack (labels rack, slot), scalable units of 32 servers with one
InfiniBand leaf switch per rail (8 a unit) and a spine layer, a management node running opensm, two
storage servers serving Lustre, three quarters of the servers in the training pool and the rest in
the inference pool. Every BMC names one credential, bound to every BMC endpoint of the fleet.

Two ways to bring it into the inventory:
- `import_fleet(n)`: through `appliance.inventory.services.import_site`, as an operator would (one
  audit record per object: about 26 s for 1,000 nodes on SQLite);
- `bulk_fleet(n)`: the same rows written with bulk_create from the same layout, for tests that need a
  large inventory fast. `tests/inventory/test_fleet_generator.py` proves both give the same
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


def node_name(i: int, site: int = 0) -> str:
    """The i-th GPU server (from 0) of fleet number `site` (several fleets may share one inventory)."""
    return f"gpu{i + 1:04d}" if site == 0 else f"gpu{site}-{i + 1:04d}"


def service_name(base: str, site: int = 0) -> str:
    return base if site == 0 else f"{base}-{site}"


def credential_name(site: int = 0) -> str:
    return service_name(FLEET_CREDENTIAL, site)


def _host(block: int, i: int, site: int = 0) -> str:
    """Address i (from 0) in 10.<10 x site + block>.0.0/16, skipping .0 and .255 of each /24."""
    return f"10.{10 * site + block}.{i // 254}.{i % 254 + 1}"


def bmc_endpoint(i: int, site: int = 0) -> str:
    return f"https://{_host(1, i, site)}"


def switch_count(n: int) -> tuple[int, int]:
    """Leaf and spine switches of a fleet of n GPU servers."""
    leaves = RAILS * math.ceil(n / SERVERS_PER_UNIT)
    return leaves, max(1, math.ceil(leaves / LEAVES_PER_SPINE))


def training_size(n: int) -> int:
    return max(1, (n * 3) // 4) if n > 1 else n


def fleet_layout(n: int, name: str = "fleet", site: int = 0) -> dict:
    """The fleet as plain data, section by section as the site definition has them: the YAML of
    `fleet_site` is written from it, and `bulk_fleet` writes the same rows from it without parsing."""
    if not 1 <= n <= 60_000:
        raise ValueError(f"a fleet has 1 to 60,000 GPU servers, not {n}")
    if not 0 <= site <= 24:
        raise ValueError(f"fleets are numbered 0 to 24 (their address blocks), not {site}")
    leaves, spines = switch_count(n)
    switches = [{"name": f"ib-spine{s + 1:03d}", "kind": "infiniband", "model": "NVIDIA QM9700", "tier": "spine",
                 "management_address": _host(9, s, site), "ports": 64} for s in range(spines)]
    for leaf in range(leaves):
        unit, rail = divmod(leaf, RAILS)
        switches.append({"name": f"ib-su{unit + 1:03d}-rail{rail}", "kind": "infiniband", "model": "NVIDIA QM9700",
                         "tier": "leaf", "management_address": _host(9, spines + leaf, site), "ports": 64})
    nodes = []
    for i in range(n):
        rack, slot = divmod(i, SERVERS_PER_RACK)
        nodes.append({"name": node_name(i, site), "role": "gpu", "platform": GPU_PLATFORM, "gpus": 8,
                      "management_address": _host(0, i, site), "bmc": {"url": bmc_endpoint(i, site)},
                      "ipoib": {"ib0": _host(2, i, site)},
                      "labels": {"rack": f"r{rack + 1:03d}", "slot": slot + 1, "su": f"su{i // SERVERS_PER_UNIT + 1:03d}"}})
    services = [("stor01", "storage", "storage-server", {"rack": "s01", "lustre": "mgs-mds-oss"}),
                ("stor02", "storage", "storage-server", {"rack": "s01", "lustre": "oss"}),
                ("mgmt01", "management", "management-server", {"rack": "s01"})]
    for offset, (service, role, platform, labels) in enumerate(services):
        i = 60_000 + offset
        nodes.append({"name": service_name(service, site), "role": role, "platform": platform,
                      "management_address": _host(0, i, site), "bmc": {"url": bmc_endpoint(i, site)},
                      "ipoib": {"ib0": _host(2, i, site)}, "labels": labels})
    names = [node_name(i, site) for i in range(n)]
    trained = training_size(n)
    pools = [{"name": "training", "kind": "training", "settings": {"partition": "train"}, "nodes": names[:trained]}]
    if names[trained:]:
        pools.append({"name": "inference", "kind": "inference", "settings": {"time_slicing": {"replicas": 4}},
                      "nodes": names[trained:]})
    return {
        "appliance": {"name": name, "description": f"Generated fleet of {n} HGX H100 servers"},
        "simulation": False,
        "defaults": {"bmc": {"credential": credential_name(site), "verify_tls": True}},
        "networks": [{"name": "mgmt", "kind": "management", "cidr": f"10.{10 * site}.0.0/16", "mtu": 1500},
                     {"name": "bmc", "kind": "bmc", "cidr": f"10.{10 * site + 1}.0.0/16"},
                     {"name": "ib0", "kind": "ipoib", "cidr": f"10.{10 * site + 2}.0.0/16", "pkey": "0x7fff",
                      "mtu": 4092}],
        "fabric": {"subnet_manager": {"kind": "opensm", "node": service_name("mgmt01", site), "priority": 15}},
        "switches": switches,
        "nodes": nodes,
        "filesystems": [{"name": "scratch", "type": "lustre",
                         "servers": [service_name("stor01", site), service_name("stor02", site)],
                         "source": f"{_host(2, 60_000, site)}@o2ib:/scratch", "mount_point": "/mnt/scratch",
                         "options": ["flock", "noatime"]}],
        "pools": pools,
    }


def _flow(value) -> str:
    """A value in YAML flow style, strings quoted where YAML would read them otherwise."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and (value.startswith(("0x", "https:")) or ":" in value):
        return '"' + value + '"'
    return str(value)


def fleet_site(n: int, name: str = "fleet", site: int = 0) -> str:
    """The site definition (YAML) of a fleet of n GPU servers, 2 storage servers and a management node."""
    layout = fleet_layout(n, name, site)
    lines = [f"# Generated fleet: {n} HGX H100 servers ({n * 8} GPUs), tests/fleet.py"]
    for section, value in layout.items():
        if isinstance(value, list):
            lines.append(f"{section}:")
            lines += [f"  - {_flow(item)}" for item in value]
        elif isinstance(value, dict):
            lines.append(f"{section}:")
            lines += [f"  {key}: {_flow(item)}" for key, item in value.items()]
        else:
            lines.append(f"{section}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def fleet_endpoints(n: int, site: int = 0) -> list[str]:
    return [bmc_endpoint(i, site) for i in range(n)] + [bmc_endpoint(60_000 + k, site) for k in range(3)]


def create_fleet_credential(n: int, site: int = 0):
    """The credential every BMC of the fleet names, bound to their endpoints, as an Administrator makes it."""
    from appliance.inventory import credentials

    return credentials.create(credential_name(site), username="root", secret=FLEET_PASSWORD,
                              endpoints=fleet_endpoints(n, site))


def import_fleet(n: int, name: str = "fleet", site: int = 0):
    """Create the credential and import the generated site through the site import service."""
    from appliance.inventory.services import import_site

    create_fleet_credential(n, site)
    return import_site(fleet_site(n, name, site), f"{name}.yml")


def bulk_fleet(n: int, name: str = "fleet", site: int = 0):
    """The inventory `import_fleet(n)` makes, written with Django's plain bulk_create from `fleet_layout`
    (seconds instead of minutes). A fixture, not an action: it records no audit events, which is why it
    goes around the audited managers. Returns the Appliance."""
    from django.db import transaction
    from django.db.models import QuerySet

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
    from appliance.inventory.platforms import load_platform

    def bulk(model, rows):
        QuerySet(model).bulk_create(list(rows), batch_size=500)

    credential = create_fleet_credential(n, site)
    layout = fleet_layout(n, name, site)
    specs = {slug: load_platform(slug) for slug in sorted({d["platform"] for d in layout["nodes"]})}
    with transaction.atomic():
        platforms = {}
        for slug, spec in specs.items():
            platforms[slug] = Platform.objects.filter(slug=slug).first()
            if platforms[slug] is None:
                platforms[slug] = QuerySet(Platform).create(slug=slug, **spec.row_values())
        appliance = QuerySet(Appliance).create(
            name=name, description=layout["appliance"]["description"], simulated=False,
            settings={"fabric": layout["fabric"]}, site_file=f"{name}.yml", site_digest=site_digest(n, name, site))
        bulk(Network, (Network(appliance=appliance, name=net["name"], kind=net["kind"], cidr=net["cidr"],
                               pkey=net.get("pkey", ""), mtu=net.get("mtu")) for net in layout["networks"]))
        bulk(Switch, (Switch(appliance=appliance, name=s["name"], kind=s["kind"], model=s["model"], tier=s["tier"],
                             management_address=s["management_address"], port_count=s["ports"])
                      for s in layout["switches"]))
        bulk(Node, (Node(appliance=appliance, name=d["name"], role=d["role"], platform=platforms[d["platform"]],
                         management_address=d["management_address"], ipoib_addresses=d["ipoib"], labels=d["labels"])
                    for d in layout["nodes"]))
        nodes = dict(Node.objects.filter(appliance=appliance).values_list("name", "pk"))
        bulk(BMC, (BMC(node_id=nodes[d["name"]], url=d["bmc"]["url"], credential=credential, verify_tls=True)
                   for d in layout["nodes"]))
        hardware = [(nodes[d["name"]], specs[d["platform"]]) for d in layout["nodes"]]
        bulk(GPU, (GPU(node_id=node_id, index=index, model=spec.gpu_model, memory_mib=spec.gpu_memory_mib,
                       mig_capable=spec.mig_capable, nvlink_peers=spec.nvlink_peers(index))
                   for node_id, spec in hardware for index in range(spec.gpu_count)))
        bulk(HCA, (HCA(node_id=node_id, device=device, model=spec.hca_model)
                   for node_id, spec in hardware for device in spec.hca_devices))
        gpus = {(node_id, index): pk for pk, node_id, index in
                GPU.objects.filter(node__appliance=appliance).values_list("pk", "node_id", "index")}
        hcas = {(node_id, device): pk for pk, node_id, device in
                HCA.objects.filter(node__appliance=appliance).values_list("pk", "node_id", "device")}
        bulk(HCAPort, (HCAPort(hca_id=hcas[(node_id, port.device)], port=port.port, rate_gbps=spec.hca_rate_gbps,
                               link_layer=spec.hca_link_layer, closest_gpu_id=gpus.get((node_id, port.closest_gpu)))
                       for node_id, spec in hardware for port in spec.ports))
        bulk(Filesystem, (Filesystem(appliance=appliance, name=fs["name"], type=fs["type"], servers=fs["servers"],
                                     source=fs["source"], mount_point=fs["mount_point"], options=fs["options"],
                                     tunables=fs.get("tunables", {})) for fs in layout["filesystems"]))
        for pool_def in layout["pools"]:
            pool = QuerySet(Pool).create(appliance=appliance, name=pool_def["name"], kind=pool_def["kind"],
                                         settings=pool_def["settings"])
            bulk(PoolMembership, (PoolMembership(pool=pool, node_id=nodes[member]) for member in pool_def["nodes"]))
    return appliance


def site_digest(n: int, name: str = "fleet", site: int = 0) -> str:
    import hashlib

    return hashlib.sha256(fleet_site(n, name, site).encode()).hexdigest()


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
