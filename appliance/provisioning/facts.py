"""Facts the stages discover, written back to the inventory and the acceptance report.

The playbooks' own modules return them as ansible_facts keys prefixed `appliance_` (interfaces
contract, section 2). A BIOS attribute a stage changed is recorded as one audit event per attribute
per node, old -> new: that is the evidence an auditor asks for.
"""


from appliance import audit
from appliance.inventory import health
from appliance.inventory.health import Observation
from appliance.inventory.models import BMC, GPU, HCA, HCAPort, Node

from . import health_facts
from .models import AcceptanceCheck, AcceptanceReport, StageRun

# Facts that describe a node are kept whole in Node.facts under the name without the prefix (the
# portal's storage page reads "mounts", "storage" and "gds"; the workloads stage "mig_instances").
_NODE_FACTS_SKIP = {"appliance_bios_changes", "appliance_acceptance", "appliance_bmc_reset"}
_MIG_MODES = {"enabled": GPU.MigMode.ENABLED, "disabled": GPU.MigMode.DISABLED, "pending": GPU.MigMode.PENDING,
              "1": GPU.MigMode.ENABLED, "0": GPU.MigMode.DISABLED, "true": GPU.MigMode.ENABLED,
              "false": GPU.MigMode.DISABLED}


def _save_if_changed(obj, **values) -> None:
    changed = [name for name, value in values.items() if getattr(obj, name) != value]
    for name in changed:
        setattr(obj, name, values[name])
    if obj.pk is None:
        obj.save()
    elif changed:
        obj.save(update_fields=changed + ["updated"])


def _mig_mode(value) -> str:
    if isinstance(value, dict):
        value = value.get("current")
    return _MIG_MODES.get(str(value).lower(), GPU.MigMode.DISABLED)


def apply_gpus(node: Node, gpus: list) -> list[Observation]:
    """Update the inventory's GPUs from NVML's list; returns what the list says of each GPU's health (a
    GPU the inventory has and NVML does not list is missing)."""
    items = [item for item in gpus or [] if isinstance(item, dict) and "index" in item]
    present = {}
    for gpu, item in health_facts.identify_gpus(node, items):
        if gpu is None:
            gpu = GPU(node=node, index=int(item["index"]))
        _save_if_changed(
            gpu,
            uuid=str(item.get("uuid") or gpu.uuid or ""),
            model=str(item.get("name") or gpu.model or ""),
            memory_mib=int(item.get("memory_mib") or gpu.memory_mib or 0),
            pci_bus_id=str(item.get("pci_bus_id") or gpu.pci_bus_id or ""),
            mig_mode=_mig_mode(item.get("mig_mode", gpu.mig_mode)),
            # Behind NVSwitch, NVML names the switch, not the GPU, as a link's remote end, so a module may
            # report no GPU peers; the platform's topology (set at import) is kept rather than erased.
            nvlink_peers=list(item.get("nvlink_peers") or gpu.nvlink_peers or []),
        )
        present[gpu.pk] = item
    return health_facts.gpu_observations(node, list(GPU.objects.filter(node=node)), present)


def apply_hcas(node: Node, ports: list) -> None:
    for item in ports or []:
        if not isinstance(item, dict) or not item.get("device"):
            continue
        hca = HCA.objects.filter(node=node, device=item["device"]).first() or HCA(node=node, device=item["device"])
        if hca.pk is None:
            hca.save()
        port = HCAPort.objects.filter(hca=hca, port=int(item.get("port") or 1)).first() \
            or HCAPort(hca=hca, port=int(item.get("port") or 1))
        link_layer = item.get("link_layer") or port.link_layer
        _save_if_changed(
            port,
            guid=str(item.get("guid") or port.guid or ""),
            state=str(item.get("state") or ""),
            physical_state=str(item.get("physical_state") or ""),
            rate_gbps=int(float(item.get("rate_gbps") or 0)),
            link_layer=link_layer if link_layer in HCAPort.LinkLayer.values else port.link_layer,
            counters=_counters(item.get("counters"), port.counters),
        )


def _counters(found, kept) -> dict:
    if not isinstance(found, dict):
        return dict(kept or {})
    counters = {}
    for name, value in found.items():
        try:
            counters[str(name)] = int(value)
        except (TypeError, ValueError):
            continue
    return counters


def apply_gpu_hca_affinity(node: Node, affinity: dict) -> None:
    """{GPU index: HCA device} measured from the topology: each port of a listed device gets that GPU as
    its closest; a port of a device no GPU sits next to gets none."""
    if not isinstance(affinity, dict):
        return
    gpus = {gpu.index: gpu for gpu in GPU.objects.filter(node=node)}
    closest = {}
    for index, device in affinity.items():
        try:
            gpu = gpus.get(int(index))
        except (TypeError, ValueError):
            continue
        if gpu is not None and device:
            closest[str(device)] = gpu
    for port in HCAPort.objects.filter(hca__node=node).select_related("hca"):
        gpu = closest.get(port.hca.device)
        if port.closest_gpu_id != (gpu.pk if gpu else None):
            port.closest_gpu = gpu
            port.save(update_fields=["closest_gpu", "updated"])


def apply_bmc(node: Node, facts: dict) -> None:
    system_id = (facts or {}).get("system_id")
    bmc = BMC.objects.filter(node=node).first()
    if bmc is not None and system_id:
        _save_if_changed(bmc, system_id=str(system_id))


def record_bios_changes(node: Node, changes: list, stage_run: StageRun) -> None:
    for change in changes or []:
        if not isinstance(change, dict) or not change.get("attribute"):
            continue
        audit.record("provisioning.bios.change", target=node,
                     details={"attribute": change["attribute"], "old": change.get("old"), "new": change.get("new"),
                              "run": stage_run.run_id, "stage": stage_run.stage})


def record_bmc_reset(node: Node, reset: dict, stage_run: StageRun) -> None:
    """The firmware stage restarted the server to apply the BIOS values its BMC had staged."""
    audit.record("provisioning.bmc.reset", target=node,
                 details={"reset_type": reset.get("reset_type"), "seconds": reset.get("seconds"),
                          "window": reset.get("window"), "applied": reset.get("applied"),
                          "run": stage_run.run_id, "stage": stage_run.stage})


def record_acceptance(stage_run: StageRun, host: str, node: Node | None, results: list) -> None:
    report, _ = AcceptanceReport.objects.get_or_create(run_id=stage_run.run_id)
    for item in results or []:
        if not isinstance(item, dict) or not item.get("check"):
            continue
        check_host = str(item.get("node") or host)
        check = AcceptanceCheck.objects.filter(report=report, host=check_host, name=str(item["check"])).first() \
            or AcceptanceCheck(report=report, host=check_host, name=str(item["check"]), passed=False)
        check.node = node if check_host == host else Node.objects.filter(name=check_host).first()
        _save_if_changed(check, expected=item.get("expected"), measured=item.get("measured"),
                         passed=bool(item.get("passed")), source=str(item.get("source") or ""),
                         message=str(item.get("message") or ""))
    checks = list(report.checks.all())
    _save_if_changed(report, checks_total=len(checks), checks_failed=sum(1 for c in checks if not c.passed),
                     passed=bool(checks) and all(c.passed for c in checks))


def _checks_of(host: str, results) -> list[dict]:
    """The acceptance records about `host` itself (a record may name another node)."""
    return [item for item in results or [] if isinstance(item, dict) and item.get("check")
            and str(item.get("node") or host) == host]


class FactsSink:
    """Called by the event ingestor with (host, {appliance_*: value}) for every task that returned facts."""

    def __init__(self, stage_run: StageRun, nodes: dict[str, Node], dry_run: bool):
        self.stage_run = stage_run
        self.nodes = nodes
        self.dry_run = dry_run

    def __call__(self, host: str, facts: dict) -> None:
        node = self.nodes.get(host)
        observations: list[Observation] = []
        # One transaction per host's facts; its records (a GPU, an HCA, a port... each) written together.
        with audit.batch():
            if "appliance_acceptance" in facts:
                record_acceptance(self.stage_run, host, node, facts["appliance_acceptance"])
            if node is None or self.dry_run:
                # Check mode reports what would change; the inventory describes what is.
                return
            if "appliance_acceptance" in facts:
                observations += health_facts.acceptance_observations(node, _checks_of(host, facts["appliance_acceptance"]))
            if "appliance_bios_changes" in facts:
                record_bios_changes(node, facts["appliance_bios_changes"], self.stage_run)
            if isinstance(facts.get("appliance_bmc_reset"), dict):
                record_bmc_reset(node, facts["appliance_bmc_reset"], self.stage_run)
            if "appliance_gpus" in facts:
                observations += apply_gpus(node, facts["appliance_gpus"])
            if "appliance_hcas" in facts:
                apply_hcas(node, facts["appliance_hcas"])
                observations += health_facts.port_observations(facts["appliance_hcas"] or [])
            if isinstance(facts.get("appliance_mounts"), list):
                observations += health_facts.mount_observations(facts["appliance_mounts"])
            if "appliance_gpu_hca_affinity" in facts:
                apply_gpu_hca_affinity(node, facts["appliance_gpu_hca_affinity"])
            if "appliance_bmc" in facts:
                apply_bmc(node, facts["appliance_bmc"])
            kept = {k[len("appliance_"):]: v for k, v in facts.items() if k not in _NODE_FACTS_SKIP}
            if kept:
                merged = {**(node.facts or {}), **kept}
                if merged != node.facts:
                    node.facts = merged
                    node.save(update_fields=["facts", "updated"])
            health.record(node, observations, run_id=self.stage_run.run_id,
                          source=f"stage {self.stage_run.stage}, run #{self.stage_run.run_id}")
