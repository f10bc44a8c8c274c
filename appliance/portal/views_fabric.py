"""Portal pages of the fabric, the storage and the pools: read-only views over the inventory, the facts
the provisioning stages discovered, and the configuration generated from them.

Each page reads one appliance with a fixed number of queries, whatever its size; the page models are
built by plain functions below, and the views only pick the appliance and hand them to a template.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.models import (
    GPU,
    HCA,
    Appliance,
    Filesystem,
    HCAPort,
    Network,
    Node,
    Pool,
    PoolMembership,
)
from appliance.partitioning.renderers import kubernetes, slurm, stage_vars, storage
from appliance.partitioning.renderers.site import FilesystemView, RenderError, site_view

PORT_ACTIVE, PORT_LINK_UP = "Active", "LinkUp"
MISSING = "missing"
# Options that mount(8) and systemd act on without handing them to the kernel, so the mount table never
# lists them: the same exemptions the storage stage's mount verification makes.
USERSPACE_OPTIONS = ("_netdev", "nofail", "noauto", "auto", "defaults", "user", "users", "nouser")
DEFAULT_STORAGE_CLIENT_ROLES = ("gpu", "login")


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


def _port_rows(node: Node) -> list[PortRow]:
    spec = _hca_spec(node)
    rate = int(spec["rate_gbps"]) if spec.get("rate_gbps") else None
    link_layer = str(spec.get("link_layer") or "")
    # The thresholds the fabric stage enforces: the platform's, over the stage's defaults.
    declared = {**stage_vars.DEFAULT_COUNTER_THRESHOLDS, **(spec.get("error_thresholds") or {})}
    thresholds = {str(k): int(v) for k, v in declared.items()}
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


def fabric_page(appliance: Appliance, node_name: str = "", state: str = "") -> dict:
    port_queryset = HCAPort.objects.select_related("closest_gpu").order_by("port")
    nodes = list(appliance.nodes.select_related("platform").prefetch_related(
        Prefetch("hcas", queryset=HCA.objects.order_by("device").prefetch_related(
            Prefetch("ports", queryset=port_queryset)))).order_by("name"))
    fabric = [NodeFabric(node, rows) for node in nodes if (rows := _port_rows(node))]
    all_rows = [r for nf in fabric for r in nf.rows]
    summary = {
        "nodes": len(fabric),
        "expected": sum(nf.expected for nf in fabric),
        "active_at_rate": sum(nf.active_at_rate for nf in fabric),
        "missing": sum(1 for r in all_rows if r.found is None),
        "errors_over": sum(1 for r in all_rows if r.errors_over),
    }
    states = sorted({r.state for r in all_rows})
    shown = []
    for nf in fabric:
        if node_name and nf.node.name != node_name:
            continue
        rows = [r for r in nf.rows if not state or r.state == state or (state == "problem" and not r.healthy)]
        if rows:
            shown.append(NodeFabric(nf.node, rows))
    sm = dict((appliance.settings or {}).get("fabric", {}).get("subnet_manager") or {})
    if sm.get("kind") == "opensm":
        sm.setdefault("priority", 15)  # what the fabric stage configures when the site names none
    sm_node = next((n for n in nodes if n.name == sm.get("node")), None)
    networks = [n for n in appliance.networks.all() if n.kind == Network.Kind.IPOIB]
    addressed = {n.name: sum(1 for node in nodes if n.name in (node.ipoib_addresses or {})) for n in networks}
    return {
        "fabric": shown, "summary": summary, "subnet_manager": sm, "sm_node": sm_node,
        "ipoib_networks": [(n, addressed[n.name]) for n in networks],
        "node_names": [nf.node.name for nf in fabric], "port_states": states,
        "selected": {"node": node_name, "state": state},
    }


class FabricView(ApplianceScopedPage):
    template_name = "inventory/fabric.html"

    def page(self, appliance):
        return fabric_page(appliance, self.request.GET.get("node", ""), self.request.GET.get("state", ""))


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


def storage_page(appliance: Appliance) -> dict:
    settings = dict((appliance.settings or {}).get("storage") or {})
    client_roles = set(settings.get("client_roles") or DEFAULT_STORAGE_CLIENT_ROLES)
    # The floors the storage stage enforces: the site's own, or the stage's defaults.
    gates = stage_vars.smoke_test_gates(appliance.settings)
    min_read, min_write = gates["min_read_mbps"], gates["min_write_mbps"]
    filesystems = [_filesystem_row(fs) for fs in appliance.filesystems.order_by("name")]
    by_mount = {row.filesystem.mount_point: row for row in filesystems}
    nodes = []
    for node in appliance.nodes.select_related("platform").order_by("name"):
        facts = node.facts or {}
        mounts = _by_mount_point(facts.get("mounts"))
        smoke = _by_mount_point((facts.get("storage") or {}).get("results") if isinstance(facts.get("storage"), dict)
                                else None)
        if node.role not in client_roles and not mounts and not smoke:
            continue
        points = list(by_mount) + sorted((set(mounts) | set(smoke)) - set(by_mount))
        rows = [MountRow(by_mount.get(p), p, mounts.get(p), smoke.get(p)) for p in points]
        nodes.append({"node": node, "rows": rows, "verified": bool(mounts), "measured": bool(smoke)})
    return {"filesystems": filesystems, "storage_nodes": nodes, "client_roles": sorted(client_roles),
            "min_read_mbps": min_read, "min_write_mbps": min_write}


class StorageView(ApplianceScopedPage):
    template_name = "inventory/storage.html"

    def page(self, appliance):
        return storage_page(appliance)


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


def rendered_configs(appliance: Appliance) -> dict[str, list[RenderedFile]]:
    """The files the workloads stage generates for this appliance, by scheduler ("slurm", "kubernetes");
    a rendering error is kept with the file it stops, so one broken file leaves the others readable."""
    try:
        site = site_view(appliance)
    except RenderError as exc:
        return {"error": [RenderedFile("", "inventory", error=str(exc))]}
    result: dict[str, list[RenderedFile]] = {}
    if slurm.training_pools(site):
        def plan_and_instances():
            instances = stage_vars.mig_instances(site)
            return stage_vars.partition_plan(site, instances), instances

        result["slurm"] = [
            _render("slurm.conf", "nodes, GPUs and the exclusive training partitions", lambda: slurm.render_slurm_conf(site, plan_and_instances()[0])),
            _render("gres.conf", "explicit GPU device files per node", lambda: slurm.render_gres_conf(site, *plan_and_instances())),
            _render("cgroup.conf", "jobs confined to their GPUs (ConstrainDevices)", slurm.render_cgroup_conf),
        ]
    pools = kubernetes.inference_pools(site)
    if pools:
        result["kubernetes"] = [
            _render("gpu-operator-values.yaml", "GPU operator Helm values",
                    lambda: kubernetes.render_gpu_operator_values(site)),
            _render("device-plugin-configmap.yaml", "Device plugin ConfigMap (every inference pool)",
                    lambda: kubernetes.render_device_plugin_config_map(site)),
        ]
        node_settings: dict | RenderError
        try:
            node_settings = kubernetes.node_settings(site)
        except RenderError as exc:
            node_settings = exc
        for pool in pools:
            def labels(pool=pool):
                if isinstance(node_settings, RenderError):
                    raise node_settings
                return kubernetes.render_node_settings_for(
                    {"nodes": {name: node_settings[name] for name in pool.nodes if name in node_settings}})

            result["kubernetes"] += [
                _render(f"device-plugin-{pool.name}.yaml", f"Pool {pool.name}: device plugin sharing config",
                        lambda pool=pool: kubernetes.render_device_plugin_config(pool)),
                _render(f"node-labels-taints-{pool.name}.yaml", f"Pool {pool.name}: node labels and taints", labels),
            ]
    return result


def pools_page(appliance: Appliance) -> dict:
    memberships = PoolMembership.objects.select_related("node__platform").annotate(
        gpus_found=Count("node__gpus", distinct=True),
        mig_enabled=Count("node__gpus", filter=Q(node__gpus__mig_mode=GPU.MigMode.ENABLED), distinct=True),
    ).order_by("node__name")
    pools = list(appliance.pools.prefetch_related(Prefetch("memberships", queryset=memberships)).order_by("kind", "name"))
    configs = rendered_configs(appliance)
    summaries = []
    for pool in pools:
        members = list(pool.memberships.all())
        for member in members:
            # Before the gpu stage has run, the platform's count stands in for the discovered GPUs.
            member.gpu_total = member.gpus_found or (member.node.platform.gpu_count if member.node.platform_id else 0)
            member.gpus_from_platform = not member.gpus_found and member.gpu_total > 0
        states: dict[str, int] = {}
        for member in members:
            label = member.node.get_state_display()
            states[label] = states.get(label, 0) + 1
        settings = dict(pool.settings or {})
        summaries.append({
            "pool": pool, "members": members, "gpu_total": sum(m.gpu_total for m in members),
            "states": sorted(states.items()), "settings": settings,
            "partition": settings.get("partition") or pool.name,
            "replicas": (settings.get("time_slicing") or {}).get("replicas", 1),
            "mig_strategy": settings.get("mig_strategy", "single"),
        })
    unassigned = list(appliance.nodes.filter(role=Node.Role.GPU, pool_membership__isnull=True)
                      .order_by("name").values_list("name", flat=True))
    kinds = [
        {"kind": Pool.Kind.TRAINING, "title": "Training", "subtitle": "Slurm · exclusive GPUs",
         "files_title": "Slurm configuration", "files": configs.get("slurm", [])},
        {"kind": Pool.Kind.INFERENCE, "title": "Inference", "subtitle": "Kubernetes · shared GPUs",
         "files_title": "Kubernetes configuration", "files": configs.get("kubernetes", [])},
    ]
    for kind in kinds:
        kind["pools"] = [s for s in summaries if s["pool"].kind == kind["kind"]]
    return {"kinds": kinds, "inventory_error": configs.get("error", [None])[0], "unassigned": unassigned}


class PoolsView(ApplianceScopedPage):
    template_name = "inventory/pools.html"

    def page(self, appliance):
        return pools_page(appliance)


class PoolConfigDownloadView(CapabilityMixin, View):
    """One generated file as text, to save and compare with what a node holds."""

    capability = "inventory.view"
    http_method_names = ["get"]

    def get(self, request, appliance, filename):
        appliance = get_object_or_404(Appliance, name=appliance)
        files = {f.filename: f for group in rendered_configs(appliance).values() for f in group if f.filename}
        rendered = files.get(filename)
        if rendered is None:
            raise Http404(f"no generated file {filename!r} for appliance {appliance.name}")
        if rendered.error:
            return HttpResponse(f"{filename}: {rendered.error}\n", status=409, content_type="text/plain; charset=utf-8")
        response = HttpResponse(rendered.text, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{appliance.name}-{filename}"'
        return response
