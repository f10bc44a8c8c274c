"""Site definition services: validate a file, import it into the inventory.

The import brings the inventory in line with the file in one transaction: it applies only the
differences, returns them as Change objects, and records one `inventory.site.import` event next to
the per-row records AuditedModel writes. What the file owns is overwritten; what provisioning
discovered (GPU UUIDs, PCI addresses, MIG mode, port GUIDs and states, HCA firmware, node facts and
provisioning state) is never touched.

A node removed from the file is retired, not deleted: its provisioning runs, facts and audit trail
stay attached to it; it leaves its pool and gives up its management address so that a replacement
can take it. A node that never left `new` has no history and is deleted. A retired node that comes
back into the file returns to `new`.

BMCs name credentials (appliance.inventory.credentials) bound to their endpoints. Whoever may import
a site may add nodes whose BMC and credential are bound already; changing an existing node's BMC
address or credential, or turning its TLS verification off, needs an Administrator.
"""

from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import models

from appliance import audit
from appliance.core.secrets import MASK

from . import credentials
from .endpoints import endpoint_of
from .models import (
    BMC,
    GPU,
    HCA,
    Appliance,
    Credential,
    Filesystem,
    HCAPort,
    Network,
    Node,
    Platform,
    Pool,
    PoolMembership,
    Switch,
)
from .sitedef import (
    SiteDefinition,
    SiteError,
    SiteValidationError,
    parse_site,
)
from .states import NodeState

SECRET_FIELDS = {"password"}


@dataclass
class Change:
    action: str  # create, update, delete
    model: str  # the model's name: node, bmc, gpu, ...
    name: str
    fields: dict = field(default_factory=dict)  # field -> [old, new]

    def __str__(self):
        head = f"{self.action} {self.model} {self.name}"
        if self.action != "update" or not self.fields:
            return head
        return head + ": " + "; ".join(f"{k} {_show(old)} -> {_show(new)}" for k, (old, new) in self.fields.items())


def _show(value) -> str:
    if value is None or value == "":
        return "(none)"
    return str(value)


@dataclass
class ImportResult:
    appliance: Appliance | None
    changes: list[Change]
    site: SiteDefinition
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        return _counts(self.changes)


def validate_site(text: str, filename: str) -> SiteDefinition:
    """Check a site definition; raises SiteValidationError listing every error. Writes nothing."""
    return parse_site(text, filename)


class _DryRunRollback(Exception):
    pass


def import_site(text: str, filename: str, *, dry_run: bool = False, user=None) -> ImportResult:
    """Bring the inventory in line with the site definition, all or nothing.

    `user` is who imports (the portal's or the API's user; None on the command line): changes of
    BMC bindings need `credentials.manage`. With dry_run the same work runs inside a transaction
    that is rolled back, so the changes shown are exactly those a real import would make."""
    site = parse_site(text, filename)
    importer = _Importer(site, may_change_bmc=credentials.may_manage(user))
    try:
        # One transaction; its records (one per node, GPU, link... changed) are written together.
        with audit.batch():
            importer.run()
            if dry_run:
                raise _DryRunRollback
            audit.record("inventory.site.import", target=importer.appliance, details={
                "file": filename, "sha256": site.sha256, "changes": _counts(importer.changes)})
    except _DryRunRollback:
        return ImportResult(Appliance.objects.filter(name=site.name).first(), importer.changes, site, dry_run=True)
    return ImportResult(importer.appliance, importer.changes, site)


def _counts(changes: list[Change]) -> dict[str, int]:
    return {action: sum(1 for c in changes if c.action == action) for action in ("create", "update", "delete")}


# --------------------------------------------------------------------------------------------------


def _endpoint_or_url(url: str) -> str:
    try:
        return endpoint_of(url)
    except ValueError:
        return url


def _display(field_name: str, value):
    if field_name in SECRET_FIELDS:
        return MASK if value else ""
    if isinstance(value, models.Model):
        return str(value)
    return value


def _same(obj, field_name: str, value) -> bool:
    if isinstance(value, models.Model) or (value is None and _is_relation(obj, field_name)):
        return getattr(obj, f"{field_name}_id") == (value.pk if value is not None else None)
    return getattr(obj, field_name) == value


def _is_relation(obj, field_name: str) -> bool:
    return obj._meta.get_field(field_name).is_relation


class _Importer:
    def __init__(self, site: SiteDefinition, may_change_bmc: bool):
        self.site = site
        self.may_change_bmc = may_change_bmc
        self.changes: list[Change] = []
        self.appliance: Appliance | None = None
        self.original_addresses: dict[str, str | None] = {}

    # one row

    def sync(self, model, lookup: dict, values: dict, name: str):
        """Create or update one row; record the Change. Returns (row, change or None)."""
        model_name = model._meta.model_name
        obj = model.objects.filter(**lookup).first()
        if obj is None:
            obj = model(**lookup, **values)
            obj.save()
            change = Change("create", model_name, name,
                            {k: [None, _display(k, v)] for k, v in values.items()})
            self.changes.append(change)
            return obj, change
        diffs = {}
        for key, value in values.items():
            if _same(obj, key, value):
                continue
            old = getattr(obj, key)
            new = f"{MASK} (changed)" if key in SECRET_FIELDS else _display(key, value)
            diffs[key] = [_display(key, old), new]
            setattr(obj, key, value)
        if not diffs:
            return obj, None
        obj.save()
        change = Change("update", model_name, name, diffs)
        self.changes.append(change)
        return obj, change

    def delete(self, obj, name: str) -> None:
        self.changes.append(Change("delete", obj._meta.model_name, name))
        obj.delete()

    def prune(self, queryset, keep: set, key: str, name=lambda obj: str(obj)) -> None:
        for obj in queryset.exclude(**{f"{key}__in": keep}):
            self.delete(obj, name(obj))

    # the whole site

    def run(self) -> None:
        self.check_against_database()
        platforms = {slug: self.sync(Platform, {"slug": slug}, spec.row_values(), slug)[0]
                     for slug, spec in sorted(self.site.platforms.items())}
        self.sync_appliance()
        self.sync_networks()
        self.remove_nodes()
        for node_def in self.site.nodes:
            node = self.sync_node(node_def, platforms[node_def.platform])
            self.sync_bmc(node, node_def)
            self.sync_hardware(node, self.site.platforms[node_def.platform])
        self.sync_switches()
        self.sync_filesystems()
        self.sync_pools()
        # Where the inventory came from: bookkeeping, not a change of the appliance itself.
        appliance = self.appliance
        if (appliance.site_file, appliance.site_digest) != (self.site.filename, self.site.sha256):
            appliance.site_file, appliance.site_digest = self.site.filename, self.site.sha256
            appliance.save()

    def error(self, line: int, path: str, message: str) -> SiteError:
        return SiteError(self.site.filename, line, path, message)

    def check_against_database(self) -> None:
        """Conflicts with rows the file does not own (another appliance's nodes, a node mid-provisioning)."""
        errors = []
        site_names = {n.name for n in self.site.nodes}
        for index, node_def in enumerate(self.site.nodes):
            holder = Node.objects.filter(name=node_def.name).exclude(appliance__name=self.site.name).first()
            if holder is not None:
                errors.append(self.error(node_def.line, f"nodes[{index}].name",
                                         f"node {node_def.name} belongs to appliance {holder.appliance.name}"))
            holder = (Node.objects.filter(management_address=node_def.management_address)
                      .exclude(appliance__name=self.site.name).first())
            if holder is not None:
                errors.append(self.error(node_def.line, f"nodes[{index}].management_address",
                                         f"{node_def.management_address} is the address of node {holder.name} "
                                         f"of appliance {holder.appliance.name}"))
        for index, switch in enumerate(self.site.switches):
            if switch.management_address is None:
                continue
            holder = (Switch.objects.filter(management_address=switch.management_address)
                      .exclude(appliance__name=self.site.name).first())
            if holder is not None:
                errors.append(self.error(self.site.lines.get("switches", 1), f"switches[{index}].management_address",
                                         f"{switch.management_address} is the address of switch {holder.name} "
                                         f"of appliance {holder.appliance.name}"))
        leaving = (Node.objects.filter(appliance__name=self.site.name, state=NodeState.PROVISIONING)
                   .exclude(name__in=site_names))
        for node in leaving:
            errors.append(self.error(self.site.lines.get("nodes", 1), "nodes",
                                     f"node {node.name} is being provisioned and cannot be removed now; "
                                     "keep it in the file until its run ends"))
        if not self.may_change_bmc:
            errors.extend(self.bmc_changes_needing_an_administrator())
        if errors:
            raise SiteValidationError(errors)

    def bmc_changes_needing_an_administrator(self) -> list[SiteError]:
        """An existing node's BMC address, credential or TLS verification changed by the file, or the
        appliance turned simulated or real (which decides whether http and unverified TLS are allowed)."""
        errors = []
        existing = Appliance.objects.filter(name=self.site.name).first()
        if existing is not None and existing.simulated != self.site.simulation:
            errors.append(self.error(self.site.lines.get("simulation", 1), "simulation",
                                     f"changing whether appliance {existing.name} is simulated needs an "
                                     "Administrator"))
        rows = BMC.objects.filter(node__appliance__name=self.site.name, node__name__in=[n.name for n in self.site.nodes])
        current = {bmc.node.name: bmc for bmc in rows.select_related("node", "credential")}
        for index, node_def in enumerate(self.site.nodes):
            bmc, wanted, where = current.get(node_def.name), node_def.bmc, f"nodes[{index}].bmc"
            if bmc is None:
                continue
            old_endpoint, new_endpoint = _endpoint_or_url(bmc.url), _endpoint_or_url(wanted.url)
            if old_endpoint != new_endpoint:
                errors.append(self.error(wanted.line, f"{where}.url", f"changing the BMC address of {node_def.name} "
                                         f"needs an Administrator ({old_endpoint} -> {new_endpoint})"))
            if bmc.credential.name != wanted.credential:
                errors.append(self.error(wanted.line, f"{where}.credential",
                                         f"changing the BMC credential of {node_def.name} needs an Administrator "
                                         f"({bmc.credential.name} -> {wanted.credential})"))
            if bmc.verify_tls and not wanted.verify_tls:
                errors.append(self.error(wanted.line, f"{where}.verify_tls",
                                         f"turning off TLS verification of the BMC of {node_def.name} needs an "
                                         "Administrator"))
        return errors

    def sync_appliance(self) -> None:
        site = self.site
        existing = Appliance.objects.select_for_update().filter(name=site.name).first()
        merged_settings = {**(existing.settings if existing else {}), "fabric": site.fabric}
        # Sections the site leaves out are not kept as empty ones (nor left over from an earlier import).
        for key, value in (("maintenance", site.maintenance), ("package_repository", site.package_repository),
                           ("ssh", site.ssh), ("telemetry", site.telemetry)):
            if value:
                merged_settings[key] = value
            else:
                merged_settings.pop(key, None)
        self.appliance, _ = self.sync(Appliance, {"name": site.name}, {
            "description": site.description, "simulated": site.simulation, "settings": merged_settings,
        }, site.name)

    def sync_networks(self) -> None:
        scope = Network.objects.filter(appliance=self.appliance)
        self.prune(scope, {n.name for n in self.site.networks}, "name", lambda obj: obj.name)
        for net in self.site.networks:
            self.sync(Network, {"appliance": self.appliance, "name": net.name},
                      {"kind": net.kind, "cidr": net.cidr, "pkey": net.pkey, "mtu": net.mtu}, net.name)

    def remove_nodes(self) -> None:
        site_nodes = {n.name: n for n in self.site.nodes}
        stale = Node.objects.filter(appliance=self.appliance).exclude(name__in=site_nodes)
        for node in stale:
            if node.state == NodeState.NEW:
                self.delete(node, node.name)
            elif node.state != NodeState.RETIRED:
                self.retire(node)
        # An address moving between two nodes of the file: free it before the node taking it is saved.
        wanted = {n.management_address: n.name for n in self.site.nodes}
        for node in Node.objects.filter(appliance=self.appliance, name__in=site_nodes):
            self.original_addresses[node.name] = node.management_address
            taker = wanted.get(node.management_address)
            if taker is not None and taker != node.name:
                node.management_address = None
                node.save()

    def retire(self, node: Node) -> None:
        previous_state, previous_address = node.state, node.management_address
        for membership in PoolMembership.objects.filter(node=node).select_related("pool"):
            self.delete(membership, f"{node.name} in {membership.pool.name}")
        node.transition(NodeState.RETIRED, reason=f"removed from site definition {self.site.filename}")
        node.management_address = None
        node.save()
        self.changes.append(Change("update", "node", node.name, {
            "state": [previous_state, NodeState.RETIRED.value], "management_address": [previous_address, None]}))

    def sync_node(self, node_def, platform: Platform) -> Node:
        sysroot = str(Path(settings.SIMULATION_DIR) / "nodes" / node_def.name) if self.site.simulation else ""
        node, change = self.sync(Node, {"name": node_def.name}, {
            "appliance": self.appliance, "role": node_def.role, "platform": platform,
            "management_address": node_def.management_address, "ipoib_addresses": node_def.ipoib,
            "labels": node_def.labels, "sysroot": sysroot,
        }, node_def.name)
        if change is not None and change.action == "update" and "management_address" in change.fields:
            change.fields["management_address"][0] = self.original_addresses.get(node.name)
        if node.state == NodeState.RETIRED:
            node.transition(NodeState.NEW, reason=f"back in site definition {self.site.filename}")
            if change is None:
                change = Change("update", "node", node.name)
                self.changes.append(change)
            change.fields["state"] = [NodeState.RETIRED.value, NodeState.NEW.value]
        return node

    def sync_bmc(self, node: Node, node_def) -> None:
        bmc = node_def.bmc
        self.sync(BMC, {"node": node}, {
            "url": bmc.url, "credential": Credential.objects.get(name=bmc.credential), "verify_tls": bmc.verify_tls,
        }, node.name)

    def sync_hardware(self, node: Node, spec) -> None:
        """GPUs, HCAs and ports as the platform describes them; discovered fields are left alone."""
        self.prune(GPU.objects.filter(node=node), set(range(spec.gpu_count)), "index")
        gpus = {}
        for index in range(spec.gpu_count):
            gpus[index], _ = self.sync(GPU, {"node": node, "index": index}, {
                "model": spec.gpu_model, "memory_mib": spec.gpu_memory_mib, "mig_capable": spec.mig_capable,
                "nvlink_peers": spec.nvlink_peers(index),
            }, f"{node.name}/gpu{index}")
        self.prune(HCA.objects.filter(node=node), set(spec.hca_devices), "device")
        for device in spec.hca_devices:
            hca, _ = self.sync(HCA, {"node": node, "device": device}, {"model": spec.hca_model}, f"{node.name}/{device}")
            ports = [p for p in spec.ports if p.device == device]
            self.prune(HCAPort.objects.filter(hca=hca), {p.port for p in ports}, "port")
            for port in ports:
                self.sync(HCAPort, {"hca": hca, "port": port.port}, {
                    "rate_gbps": spec.hca_rate_gbps, "link_layer": spec.hca_link_layer,
                    "closest_gpu": gpus.get(port.closest_gpu) if port.closest_gpu is not None else None,
                }, f"{node.name}/{device}/{port.port}")

    def sync_switches(self) -> None:
        scope = Switch.objects.filter(appliance=self.appliance)
        self.prune(scope, {s.name for s in self.site.switches}, "name", lambda obj: obj.name)
        for switch in self.site.switches:
            self.sync(Switch, {"appliance": self.appliance, "name": switch.name}, {
                "kind": switch.kind, "model": switch.model, "tier": switch.tier,
                "management_address": switch.management_address, "port_count": switch.port_count,
            }, switch.name)

    def sync_filesystems(self) -> None:
        scope = Filesystem.objects.filter(appliance=self.appliance)
        self.prune(scope, {f.name for f in self.site.filesystems}, "name", lambda obj: obj.name)
        for fs in self.site.filesystems:
            self.sync(Filesystem, {"appliance": self.appliance, "name": fs.name}, {
                "type": fs.type, "servers": fs.servers, "source": fs.source, "mount_point": fs.mount_point,
                "options": fs.options, "tunables": fs.tunables,
            }, fs.name)

    def sync_pools(self) -> None:
        scope = Pool.objects.filter(appliance=self.appliance)
        self.prune(scope, {p.name for p in self.site.pools}, "name", lambda obj: obj.name)
        wanted = {member: pool.name for pool in self.site.pools for member in pool.nodes}
        memberships = PoolMembership.objects.filter(node__appliance=self.appliance).select_related("node", "pool")
        for membership in memberships:
            if membership.node.name not in wanted:
                self.delete(membership, f"{membership.node.name} in {membership.pool.name}")
        for pool_def in self.site.pools:
            pool, _ = self.sync(Pool, {"appliance": self.appliance, "name": pool_def.name},
                                {"kind": pool_def.kind, "settings": pool_def.settings}, pool_def.name)
            for member in pool_def.nodes:
                node = Node.objects.get(name=member)
                self.sync(PoolMembership, {"node": node}, {"pool": pool}, f"{member} in {pool.name}")
