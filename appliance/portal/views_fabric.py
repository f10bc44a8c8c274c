"""Portal pages of the fabric, the storage and the pools: read-only views over the inventory, the facts
the provisioning stages discovered, and the configuration generated from them.

Each page reads one appliance with a fixed number of queries, whatever its size; the page models are
built by plain functions below, and the views only pick the appliance and hand them to a template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.core.paginator import Paginator
from django.db.models import Count, Prefetch, Q, Sum
from django.db.models.fields.json import KT, KeyTextTransform
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.choices import DEFAULT_OPENSM_PRIORITY, DEFAULT_STORAGE_CLIENT_ROLES
from appliance.inventory.models import (
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
from appliance.inventory.states import NodeState
from appliance.partitioning.renderers import kubernetes, slurm, stage_vars, storage
from appliance.partitioning.renderers.site import FilesystemView, RenderError, site_view

PORT_ACTIVE, PORT_LINK_UP = "Active", "LinkUp"
# The logical port states ibstat reports: the filter offers them all (listing those present cost a scan of
# every port). A port not read yet has none; "any problem" finds it.
PORT_STATES = ("Active", "Armed", "Initializing", "Down")
MISSING, PROBLEM = "missing", "problem"
NODES_PER_PAGE = 10  # 8 rails a GPU server: 80 port rows a page
SWITCHES_PER_PAGE = 25
RACKS_PER_PAGE = 25
MEMBERS_PER_PAGE = 25
INLINE_CONFIG_NODES = 32  # above, the Pools page links each generated file instead of showing it
UNASSIGNED_SHOWN = 50
TOPOLOGY_LABEL = "rack"
COUNTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$")
# Options that mount(8) and systemd act on without handing them to the kernel, so the mount table never
# lists them: the same exemptions the storage stage's mount verification makes.
USERSPACE_OPTIONS = ("_netdev", "nofail", "noauto", "auto", "defaults", "user", "users", "nouser")


def paged(items, per_page: int, query, param: str = "page", label: str = ""):
    """One page of `items` (a queryset is sliced by the database), its links keeping the other query
    parameters. A page number that is not one gives the first page, one past the end the last."""
    page = Paginator(items, per_page).get_page(query.get(param, 1))
    links = query.copy()
    if page.has_previous():
        links[param] = page.previous_page_number()
        page.previous_query = "?" + links.urlencode()
    if page.has_next():
        links[param] = page.next_page_number()
        page.next_query = "?" + links.urlencode()
    page.label = label
    return page


def _appliance_from(request) -> Appliance | None:
    """The appliance named by ?appliance=, else the first one; None when the inventory is empty."""
    name = request.GET.get("appliance", "")
    if name:
        return get_object_or_404(Appliance, name=name)
    return Appliance.objects.order_by("name").first()


class ApplianceScopedPage(CapabilityMixin, TemplateView):
    capability = "inventory.view"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        appliance = _appliance_from(self.request)
        context.update(appliance=appliance, appliances=list(Appliance.objects.values_list("name", flat=True)))
        if appliance is not None:
            # Each page class defines page(appliance) -> its template's context.
            context.update(self.page(appliance))
        return context


# --- fabric ----------------------------------------------------------------------------------------

@dataclass
class CounterCell:
    name: str
    value: int | None
    threshold: int | None

    @property
    def over(self) -> bool:
        return self.value is not None and self.threshold is not None and self.value > self.threshold


@dataclass
class PortRow:
    device: str
    port: int
    found: HCAPort | None
    expected: bool
    expected_rate: int | None
    expected_link_layer: str
    expected_gpu: int | None
    counters: list[CounterCell] = field(default_factory=list)

    @property
    def state(self) -> str:
        return self.found.state if self.found else MISSING

    @property
    def rate_ok(self) -> bool:
        return self.found is not None and (self.expected_rate is None or self.found.rate_gbps == self.expected_rate)

    @property
    def link_layer_ok(self) -> bool:
        return self.found is not None and (not self.expected_link_layer
                                           or self.found.link_layer == self.expected_link_layer)

    @property
    def active_at_rate(self) -> bool:
        return (self.found is not None and self.found.state == PORT_ACTIVE
                and self.found.physical_state == PORT_LINK_UP and self.rate_ok and self.link_layer_ok)

    @property
    def errors_over(self) -> list[str]:
        return [c.name for c in self.counters if c.over]

    @property
    def healthy(self) -> bool:
        return self.active_at_rate and not self.errors_over


@dataclass
class NodeFabric:
    node: Node
    rows: list[PortRow]

    @property
    def expected(self) -> int:
        return sum(1 for r in self.rows if r.expected)

    @property
    def active_at_rate(self) -> int:
        return sum(1 for r in self.rows if r.expected and r.active_at_rate)


def _hca_spec(node: Node) -> dict:
    return (node.platform.spec or {}).get("hcas") or {} if node.platform_id else {}


def _thresholds(spec: dict) -> dict[str, int]:
    # The thresholds the fabric stage enforces: the platform's, over the stage's defaults.
    declared = {**stage_vars.DEFAULT_COUNTER_THRESHOLDS, **(spec.get("error_thresholds") or {})}
    return {str(k): int(v) for k, v in declared.items()}


def _port_rows(node: Node) -> list[PortRow]:
    spec = _hca_spec(node)
    rate = int(spec["rate_gbps"]) if spec.get("rate_gbps") else None
    link_layer = str(spec.get("link_layer") or "")
    thresholds = _thresholds(spec)
    found = {(hca.device, port.port): port for hca in node.hcas.all() for port in hca.ports.all()}
    expected = {(str(p["device"]), int(p.get("port", 1))): p.get("closest_gpu") for p in spec.get("ports") or []}
    rows = []
    for key in sorted(set(found) | set(expected)):
        port = found.get(key)
        counters = dict(port.counters or {}) if port else {}
        names = list(thresholds) + sorted(set(counters) - set(thresholds))
        rows.append(PortRow(
            device=key[0], port=key[1], found=port, expected=key in expected, expected_rate=rate,
            expected_link_layer=link_layer, expected_gpu=expected.get(key),
            counters=[CounterCell(name, counters.get(name), thresholds.get(name)) for name in names],
        ))
    return rows


@dataclass
class PlatformPortRules:
    """What a platform expects of its nodes' ports, as conditions on HCAPort rows: the same judgement as
    PortRow's, made by the database for a whole fleet at once."""

    platform_id: int | None
    spec: dict

    @property
    def expected_ports(self) -> list[tuple[str, int]]:
        return [(str(p["device"]), int(p.get("port", 1))) for p in self.spec.get("ports") or []]

    def on_platform(self) -> Q:
        if self.platform_id is None:
            return Q(hca__node__platform__isnull=True)
        return Q(hca__node__platform_id=self.platform_id)

    def expected(self) -> Q:
        ports = self.expected_ports
        if not ports:
            return Q(pk__in=[])
        condition = Q()
        for device, port in ports:  # as many as the platform file lists: a handful, whatever the fleet
            condition |= Q(hca__device=device, port=port)
        return condition

    def active_at_rate(self) -> Q:
        condition = Q(state=PORT_ACTIVE, physical_state=PORT_LINK_UP)
        if self.spec.get("rate_gbps"):
            condition &= Q(rate_gbps=int(self.spec["rate_gbps"]))
        if self.spec.get("link_layer"):
            condition &= Q(link_layer=str(self.spec["link_layer"]))
        return condition

    def errors_over(self) -> Q:
        condition = Q(pk__in=[])
        for name, threshold in _thresholds(self.spec).items():
            # perfquery's counter names are identifiers (SymbolErrorCounter); one holding the lookup
            # separator could not be a key here, and no counter read by the fabric stage is named so.
            if COUNTER_NAME.fullmatch(name):
                condition |= Q(**{f"counters__{name}__gt": threshold})
        return condition


def _port_counts_by_node(appliance: Appliance, rules: list[PlatformPortRules], state: str) -> dict[int, dict]:
    """Per node id: ports found that the platform expects, those of them active at rate, ports with a
    counter over its threshold, unhealthy ports, and (with a state filter) ports in that state: one
    grouped query whatever the number of nodes."""
    expected, active, errors, unhealthy = Q(pk__in=[]), Q(pk__in=[]), Q(pk__in=[]), Q(pk__in=[])
    for rule in rules:
        on = rule.on_platform()
        expected |= on & rule.expected()
        active |= on & rule.expected() & rule.active_at_rate()
        errors |= on & rule.errors_over()
        unhealthy |= on & (~rule.active_at_rate() | rule.errors_over())
    counts = {"found_expected": Count("id", filter=expected), "active": Count("id", filter=active),
              "errors": Count("id", filter=errors), "unhealthy": Count("id", filter=unhealthy),
              "found": Count("id")}
    if state and state not in (PROBLEM, MISSING):
        counts["in_state"] = Count("id", filter=Q(state=state))
    rows = (HCAPort.objects.filter(hca__node__appliance=appliance).order_by()
            .values("hca__node_id").annotate(**counts))
    return {row.pop("hca__node_id"): row for row in rows}


@dataclass
class NodePorts:
    """One node's ports, counted (the fabric summary and the topology are sums of these)."""

    id: int
    name: str
    rack: str
    expected: int
    counts: dict

    def count(self, key: str) -> int:
        return self.counts.get(key, 0)

    @property
    def missing(self) -> int:
        return self.expected - self.count("found_expected")

    @property
    def problems(self) -> int:
        return self.count("unhealthy") + self.missing

    def matches(self, state: str) -> bool:
        if state == PROBLEM:
            return self.problems > 0
        if state == MISSING:
            return self.missing > 0
        return not state or self.count("in_state") > 0


def _topology(nodes: list[NodePorts]) -> list[dict]:
    """Nodes and ports by rack (the `rack` label), in rack order; nodes without one come last."""
    racks: dict[str, dict] = {}
    for node in nodes:
        rack = node.rack
        group = racks.setdefault(rack, {"rack": rack, "nodes": 0, "expected": 0, "active_at_rate": 0,
                                        "problem_nodes": 0, "first": node.name})
        group["nodes"] += 1
        group["expected"] += node.expected
        group["active_at_rate"] += node.count("active")
        group["problem_nodes"] += 1 if node.problems else 0
    return sorted(racks.values(), key=lambda g: (g["rack"] == "", g["rack"]))


def _switches(appliance: Appliance, query) -> dict:
    """The imported switches: counted by kind, tier and model, and listed a page at a time."""
    groups = list(appliance.switches.order_by("kind", "tier", "model").values("kind", "tier", "model")
                  .annotate(count=Count("id"), ports=Sum("port_count")))
    kinds = dict(Switch.Kind.choices)
    for group in groups:
        group["kind_label"] = kinds.get(group["kind"], group["kind"])
    page = paged(appliance.switches.order_by("tier", "name"), SWITCHES_PER_PAGE, query, "switch_page",
                 _("Switch pages"))
    return {"groups": groups, "page": page, "total": sum(g["count"] for g in groups),
            "ports": sum(g["ports"] or 0 for g in groups)}


def fabric_page(appliance: Appliance, query=None) -> dict:
    """The fabric of `appliance` for the query parameters node, state, page and switch_page."""
    query = query if query is not None else QueryDict()
    node_name, state = query.get("node", ""), query.get("state", "")
    # A semi-join: DISTINCT over the join would compare every node's platform document.
    platforms = {p.pk: p for p in Platform.objects.filter(pk__in=appliance.nodes.values("platform_id"))}
    rules = [PlatformPortRules(pk, (p.spec or {}).get("hcas") or {}) for pk, p in platforms.items()]
    if appliance.nodes.filter(platform__isnull=True).exists():
        rules.append(PlatformPortRules(None, {}))
    expected_of = {rule.platform_id: len(rule.expected_ports) for rule in rules}
    counts = _port_counts_by_node(appliance, rules, state)
    fabric = [NodePorts(pk, name, rack or "", expected_of.get(platform_id, 0), counts.get(pk, {}))
              for pk, name, platform_id, rack in appliance.nodes.order_by("name").values_list(
                  "pk", "name", "platform_id", KT(f"labels__{TOPOLOGY_LABEL}"))]
    fabric = [n for n in fabric if n.expected or n.count("found")]
    summary = {
        "nodes": len(fabric),
        "expected": sum(n.expected for n in fabric),
        "active_at_rate": sum(n.count("active") for n in fabric),
        "missing": sum(n.missing for n in fabric),
        "errors_over": sum(n.count("errors") for n in fabric),
        "problem_nodes": sum(1 for n in fabric if n.problems),
    }
    states = [*PORT_STATES, *([MISSING] if summary["missing"] else [])]
    matching = [n for n in fabric if (not node_name or n.name == node_name) and n.matches(state)]
    page = paged(matching, NODES_PER_PAGE, query, "page", _("Node pages"))
    # The page's nodes only, with their ports: as many rows as a page holds, whatever the fleet.
    port_queryset = HCAPort.objects.select_related("closest_gpu").order_by("port")
    nodes = appliance.nodes.filter(pk__in=[n.id for n in page.object_list]).select_related("platform").prefetch_related(
        Prefetch("hcas", queryset=HCA.objects.order_by("device").prefetch_related(
            Prefetch("ports", queryset=port_queryset)))).order_by("name")
    shown = []
    for node in nodes:
        rows = [r for r in _port_rows(node)
                if not state or r.state == state or (state == PROBLEM and not r.healthy)]
        if rows:
            shown.append(NodeFabric(node, rows))
    sm = dict((appliance.settings or {}).get("fabric", {}).get("subnet_manager") or {})
    if sm.get("kind") == "opensm":
        sm.setdefault("priority", DEFAULT_OPENSM_PRIORITY)  # what the fabric stage configures when the site names none
    sm_node = appliance.nodes.filter(name=sm["node"]).first() if sm.get("node") else None
    networks = [n for n in appliance.networks.order_by("name") if n.kind == Network.Kind.IPOIB]
    addressed = appliance.nodes.aggregate(**{
        f"n{i}": Count("pk", filter=Q(ipoib_addresses__has_key=n.name)) for i, n in enumerate(networks)
    }) if networks else {}
    return {
        "fabric": shown, "page_obj": page, "summary": summary, "subnet_manager": sm, "sm_node": sm_node,
        "ipoib_networks": [(n, addressed[f"n{i}"]) for i, n in enumerate(networks)],
        "port_states": states, "switches": _switches(appliance, query),
        "topology": paged(_topology(fabric), RACKS_PER_PAGE, query, "rack_page", _("Rack pages")),
        "selected": {"node": node_name, "state": state},
    }


class FabricView(ApplianceScopedPage):
    template_name = "inventory/fabric.html"

    def page(self, appliance):
        return fabric_page(appliance, self.request.GET)


# --- storage ---------------------------------------------------------------------------------------

def _as_list(options) -> list[str]:
    if isinstance(options, str):
        return [o.strip() for o in options.split(",") if o.strip()]
    return [str(o) for o in options or []]


@dataclass
class FilesystemRow:
    filesystem: Filesystem
    declared: list[str]
    expected: list[str]
    fstype: str
    render_error: str = ""
    clients: dict = field(default_factory=dict)  # how its clients stand: mounted, problems, absent, ...


@dataclass
class MountRow:
    filesystem: FilesystemRow | None
    mount_point: str
    fact: dict | None
    smoke: dict | None

    @property
    def status(self) -> str:
        if self.filesystem is None:
            return "undeclared"
        if self.fact is None:
            return "unverified"
        return "mounted" if self.fact.get("present") else "absent"

    @property
    def present_options(self) -> list[str]:
        return _as_list((self.fact or {}).get("options"))

    @property
    def missing_options(self) -> list[str]:
        if self.status != "mounted":
            return []
        present = set(self.present_options)
        return [o for o in self.filesystem.expected
                if o not in present and o not in USERSPACE_OPTIONS and not o.startswith("x-")]

    @property
    def option_cells(self) -> list[tuple[str, bool]]:
        """Present options, each marked True when the site declared it."""
        declared = set(self.filesystem.expected) if self.filesystem else set()
        return [(o, o in declared) for o in self.present_options]

    @property
    def fstype_differs(self) -> bool:
        return self.status == "mounted" and self.fact.get("fstype", "") != self.filesystem.fstype

    @property
    def source_differs(self) -> bool:
        fs = self.filesystem
        # BeeGFS mounts name no source (the client config holds the management host).
        return (self.status == "mounted" and fs.filesystem.type != Filesystem.Type.BEEGFS
                and self.fact.get("source", "") != fs.filesystem.source)


def _fs_view(fs: Filesystem) -> FilesystemView:
    return FilesystemView(name=fs.name, type=fs.type, source=fs.source, mount_point=fs.mount_point,
                          servers=tuple(fs.servers or ()), options=tuple(_as_list(fs.options)),
                          tunables=dict(fs.tunables or {}))


def _filesystem_row(fs: Filesystem) -> FilesystemRow:
    declared = _as_list(fs.options)
    view = _fs_view(fs)
    try:
        return FilesystemRow(fs, declared, storage.mount_options(view), storage.mount_type(view))
    except RenderError as exc:
        return FilesystemRow(fs, declared, declared, fs.type, render_error=str(exc))


def _by_mount_point(entries) -> dict[str, dict]:
    return {str(e.get("mount_point")): e for e in entries or [] if isinstance(e, dict) and e.get("mount_point")}


def _smoke_below(smoke: dict | None, min_read, min_write) -> bool:
    def below(value, floor):
        return bool(floor) and isinstance(value, int | float) and value < floor

    return smoke is not None and (below(smoke.get("read_mbps"), min_read) or below(smoke.get("write_mbps"), min_write))


def storage_page(appliance: Appliance, query=None) -> dict:
    """Filesystems with how their clients stand (counted over every client), and the clients' mounts a
    page at a time. Only the two parts of each node's facts the page shows are read (mounts, storage
    results), not the whole document."""
    query = query if query is not None else QueryDict()
    problems_only = query.get("show") == PROBLEM
    settings = dict((appliance.settings or {}).get("storage") or {})
    client_roles = set(settings.get("client_roles") or DEFAULT_STORAGE_CLIENT_ROLES)
    # The floors the storage stage enforces: the site's own, or the stage's defaults.
    gates = stage_vars.smoke_test_gates(appliance.settings)
    min_read, min_write = gates["min_read_mbps"], gates["min_write_mbps"]
    filesystems = [_filesystem_row(fs) for fs in appliance.filesystems.order_by("name")]
    by_mount = {row.filesystem.mount_point: row for row in filesystems}
    tally = {point: {"mounted": 0, "problems": 0, "absent": 0, "unverified": 0, "slow": 0} for point in by_mount}
    nodes = []
    rows = appliance.nodes.order_by("name").values_list("pk", "name", "role", "state", "facts__mounts",
                                                        "facts__storage__results")
    for pk, name, role, state, mount_facts, smoke_facts in rows:
        mounts, smoke = _by_mount_point(mount_facts), _by_mount_point(smoke_facts)
        if role not in client_roles and not mounts and not smoke:
            continue
        points = list(by_mount) + sorted((set(mounts) | set(smoke)) - set(by_mount))
        mount_rows = [MountRow(by_mount.get(p), p, mounts.get(p), smoke.get(p)) for p in points]
        problem = False
        for row in mount_rows:
            row.problem = (row.status == "absent" or bool(row.missing_options) or row.fstype_differs
                           or row.source_differs)
            row.slow = _smoke_below(row.smoke, min_read, min_write)
            problem = problem or row.problem or row.slow
            counts = tally.get(row.mount_point)
            if counts is None:
                continue
            if row.status in ("absent", "unverified"):
                counts[row.status] += 1
            elif row.problem:
                counts["problems"] += 1
            else:
                counts["mounted"] += 1
            counts["slow"] += 1 if row.slow else 0
        if problems_only and not problem:
            continue
        nodes.append({"node": Node(pk=pk, name=name, role=role, state=state), "rows": mount_rows,
                      "verified": bool(mounts), "measured": bool(smoke), "problem": problem})
    for row in filesystems:
        row.clients = tally[row.filesystem.mount_point]
    page = paged(nodes, NODES_PER_PAGE, query, "page", _("Node pages"))
    return {"filesystems": filesystems, "storage_nodes": page, "client_roles": sorted(client_roles),
            "min_read_mbps": min_read, "min_write_mbps": min_write, "problems_only": problems_only,
            "client_count": len(nodes) if not problems_only else None}


class StorageView(ApplianceScopedPage):
    template_name = "inventory/storage.html"

    def page(self, appliance):
        return storage_page(appliance, self.request.GET)


# --- pools -----------------------------------------------------------------------------------------

@dataclass
class RenderedFile:
    filename: str
    title: str
    text: str = ""
    error: str = ""


def _render(filename: str, title: str, render) -> RenderedFile:
    try:
        return RenderedFile(filename, title, text=render())
    except RenderError as exc:
        return RenderedFile(filename, title, error=str(exc))


@dataclass
class ConfigFiles:
    groups: dict[str, list[tuple[str, str, object]]]
    site: object  # () -> SiteView, taken once


def config_files(appliance: Appliance) -> ConfigFiles:
    """The files the workloads stage generates for this appliance, by scheduler ("slurm", "kubernetes"):
    (filename, title, render) each, `render()` giving the text or raising RenderError. Nothing is read or
    rendered until a file's render is called; the inventory snapshot is then taken once for all."""
    pools = list(appliance.pools.order_by("name").values_list("name", "kind"))
    snapshot: list = []

    def site():
        if not snapshot:
            snapshot.append(site_view(appliance))
        return snapshot[0]

    def plan_and_instances():
        instances = stage_vars.mig_instances(site())
        return stage_vars.partition_plan(site(), instances), instances

    result: dict[str, list] = {}
    if any(kind == Pool.Kind.TRAINING for _, kind in pools):
        result["slurm"] = [
            ("slurm.conf", _("nodes, GPUs and the exclusive training partitions"),
             lambda: slurm.render_slurm_conf(site(), plan_and_instances()[0])),
            ("gres.conf", _("explicit GPU device files per node"),
             lambda: slurm.render_gres_conf(site(), *plan_and_instances())),
            ("cgroup.conf", _("jobs confined to their GPUs (ConstrainDevices)"), slurm.render_cgroup_conf),
        ]
    inference = [name for name, kind in pools if kind == Pool.Kind.INFERENCE]
    if inference:
        def pool_view(name):
            return next(p for p in kubernetes.inference_pools(site()) if p.name == name)

        def labels(name):
            settings = kubernetes.node_settings(site())
            return kubernetes.render_node_settings_for(
                {"nodes": {node: settings[node] for node in pool_view(name).nodes if node in settings}})

        result["kubernetes"] = [
            ("gpu-operator-values.yaml", _("GPU operator Helm values"),
             lambda: kubernetes.render_gpu_operator_values(site())),
            ("device-plugin-configmap.yaml", _("Device plugin ConfigMap (every inference pool)"),
             lambda: kubernetes.render_device_plugin_config_map(site())),
        ]
        for name in inference:
            result["kubernetes"] += [
                (f"device-plugin-{name}.yaml", _("Pool %(pool)s: device plugin sharing config") % {"pool": name},
                 lambda name=name: kubernetes.render_device_plugin_config(pool_view(name))),
                (f"node-labels-taints-{name}.yaml", _("Pool %(pool)s: node labels and taints") % {"pool": name},
                 lambda name=name: labels(name)),
            ]
    return ConfigFiles(result, site)


def rendered_configs(appliance: Appliance, only: str = "") -> dict[str, list[RenderedFile]]:
    """The generated files rendered (`only`: that file alone); a rendering error is kept with the file it
    stops, so one broken file leaves the others readable."""
    result: dict[str, list[RenderedFile]] = {}
    catalog = config_files(appliance)
    try:
        if catalog.groups:
            catalog.site()
        for scheduler, files in catalog.groups.items():
            result[scheduler] = [_render(filename, title, render) for filename, title, render in files
                                 if not only or filename == only]
    except RenderError as exc:
        return {"error": [RenderedFile("", "inventory", error=str(exc))]}
    return result


def _pool_summaries(appliance: Appliance, query) -> list[dict]:
    """Each pool counted by the database (nodes, GPUs, MIG, node states, racks) and its members a page at
    a time: the same queries for 4 nodes or 1,000."""
    totals = {row.pop("pool_id"): row for row in PoolMembership.objects.filter(pool__appliance=appliance)
              .order_by().values("pool_id").annotate(
                  nodes=Count("id", distinct=True),
                  gpus_found=Count("node__gpus", distinct=True),
                  # Before the gpu stage has run, the platform's count stands in for a node's GPUs.
                  gpus_from_platform=Sum("node__platform__gpu_count", filter=Q(node__gpus__isnull=True)),
                  mig_enabled=Count("node__gpus", filter=Q(node__gpus__mig_mode=GPU.MigMode.ENABLED), distinct=True),
                  racks=Count(KeyTextTransform(TOPOLOGY_LABEL, "node__labels"), distinct=True))}
    states: dict[int, dict[str, int]] = {}
    for pool_id, state, count in (PoolMembership.objects.filter(pool__appliance=appliance).order_by()
                                  .values_list("pool_id", "node__state").annotate(count=Count("id"))):
        label = str(NodeState(state).label)
        states.setdefault(pool_id, {})[label] = states.setdefault(pool_id, {}).get(label, 0) + count
    members = PoolMembership.objects.select_related("node__platform").order_by("node__name")
    pools = list(appliance.pools.order_by("kind", "name"))
    pages = {pool.pk: paged(members.filter(pool=pool), MEMBERS_PER_PAGE, query, f"pool_{pool.pk}_page",
                            _("Pages of pool %(pool)s") % {"pool": pool.name}) for pool in pools}
    # GPUs of the shown members only: one query for every pool's page (counting over the whole join
    # before the page is cut costs a fleet's worth of rows).
    # Each page as a subquery, so the statement does not grow with the page either.
    shown = Q(pk__in=[])
    for page in pages.values():
        shown |= Q(node_id__in=page.object_list.values("node_id"))
    gpus = {row.pop("node_id"): row for row in GPU.objects.filter(shown).order_by()
            .values("node_id").annotate(found=Count("id"),
                                        mig=Count("id", filter=Q(mig_mode=GPU.MigMode.ENABLED)))} if pages else {}
    summaries = []
    for pool in pools:
        total = totals.get(pool.pk, {})
        page = pages[pool.pk]
        for member in page:
            counted = gpus.get(member.node_id, {})
            member.gpus_found, member.mig_enabled = counted.get("found", 0), counted.get("mig", 0)
            # Before the gpu stage has run, the platform's count stands in for the discovered GPUs.
            member.gpu_total = member.gpus_found or (member.node.platform.gpu_count if member.node.platform_id else 0)
            member.gpus_from_platform = not member.gpus_found and member.gpu_total > 0
        settings = dict(pool.settings or {})
        summaries.append({
            "pool": pool, "members": page, "node_count": total.get("nodes", 0),
            "gpu_total": total.get("gpus_found", 0) + (total.get("gpus_from_platform") or 0),
            "mig_enabled": total.get("mig_enabled", 0), "racks": total.get("racks", 0),
            "states": sorted(states.get(pool.pk, {}).items()), "settings": settings,
            "partition": settings.get("partition") or pool.name,
            "replicas": (settings.get("time_slicing") or {}).get("replicas", 1),
            "mig_strategy": settings.get("mig_strategy", "single"),
        })
    return summaries


def pools_page(appliance: Appliance, query=None) -> dict:
    query = query if query is not None else QueryDict()
    summaries = _pool_summaries(appliance, query)
    node_count = appliance.nodes.count()
    # A small appliance shows its generated files inline; a fleet's (a gres.conf of thousands of lines)
    # are each one link away, rendered when asked for.
    inline = node_count <= INLINE_CONFIG_NODES
    if inline:
        configs = rendered_configs(appliance)
        files = {k: v for k, v in configs.items() if k != "error"}
        inventory_error = configs.get("error", [None])[0]
    else:
        files = {scheduler: [RenderedFile(filename, title) for filename, title, _render_ in entries]
                 for scheduler, entries in config_files(appliance).groups.items()}
        inventory_error = None
    unassigned_nodes = appliance.nodes.filter(role=Node.Role.GPU, pool_membership__isnull=True).order_by("name")
    unassigned_count = unassigned_nodes.count()
    unassigned = list(unassigned_nodes.values_list("name", flat=True)[:UNASSIGNED_SHOWN])
    kinds = [
        {"kind": Pool.Kind.TRAINING, "title": _("Training"), "subtitle": _("Slurm · exclusive GPUs"),
         "files_title": _("Slurm configuration"), "files": files.get("slurm", [])},
        {"kind": Pool.Kind.INFERENCE, "title": _("Inference"), "subtitle": _("Kubernetes · shared GPUs"),
         "files_title": _("Kubernetes configuration"), "files": files.get("kubernetes", [])},
    ]
    for kind in kinds:
        kind["pools"] = [s for s in summaries if s["pool"].kind == kind["kind"]]
    return {"kinds": kinds, "inventory_error": inventory_error, "unassigned": unassigned,
            "unassigned_count": unassigned_count, "files_inline": inline}


class PoolsView(ApplianceScopedPage):
    template_name = "inventory/pools.html"

    def page(self, appliance):
        return pools_page(appliance, self.request.GET)


class PoolConfigDownloadView(CapabilityMixin, View):
    """One generated file as text, to save and compare with what a node holds."""

    capability = "inventory.view"
    http_method_names = ["get"]

    def get(self, request, appliance, filename):
        appliance = get_object_or_404(Appliance, name=appliance)
        files = {f.filename: f for group in rendered_configs(appliance, only=filename).values() for f in group
                 if f.filename}
        rendered = files.get(filename)
        if rendered is None:
            raise Http404(f"no generated file {filename!r} for appliance {appliance.name}")
        if rendered.error:
            return HttpResponse(f"{filename}: {rendered.error}\n", status=409, content_type="text/plain; charset=utf-8")
        response = HttpResponse(rendered.text, content_type="text/plain; charset=utf-8")
        # ?view=1 shows the file in the browser; otherwise it is saved under the appliance's name.
        if request.GET.get("view") != "1":
            response["Content-Disposition"] = f'attachment; filename="{appliance.name}-{filename}"'
        return response
