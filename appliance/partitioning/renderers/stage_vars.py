"""Vars providers of the fabric, gpudirect, storage and workloads stages.

Each function turns the inventory into the extra variables its stage's playbook reads: rendered
configuration text (per node where it differs by node) and the expectations its checks enforce.
Secrets never travel in these variables: the munge key is a file in the keys directory that the
workloads stage copies with `no_log`.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from django.conf import settings

from appliance.core.files import create_once
from appliance.inventory.choices import DEFAULT_STORAGE_CLIENT_ROLES

from . import fabric, gpudirect, kubernetes, slurm, storage
from .site import RenderError, SiteView, site_view
from .slurm import MigInstance

MUNGE_KEY_BYTES = 1024
DRAIN_CHECKS = 60
DEFAULT_COUNTER_THRESHOLDS = {"SymbolErrorCounter": 10, "LinkDownedCounter": 1, "LinkErrorRecoveryCounter": 1}
# One client streaming 1 GiB from an RDMA filesystem over NDR: below these floors the mount runs over a
# fallback (TCP over IPoIB, a single stripe) or a sick link, whatever its nominal speed.
DEFAULT_SMOKE_TEST = {"size_mib": 1024, "min_read_mbps": 2000, "min_write_mbps": 1000}
FABRIC_PACKAGES = ["rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"]
# NCCL and its tests ride on GPUDirect RDMA; the acceptance stage measures with all_reduce_perf.
GPUDIRECT_PACKAGES = ["nvidia-gds", "nvidia-fs-dkms", "libnccl2", "nccl-tests"]
SLURM_NODE_PACKAGES = slurm.NODE_PACKAGES
SLURM_CONTROLLER_PACKAGES = slurm.CONTROLLER_PACKAGES


def _view(appliance) -> SiteView:
    return appliance if isinstance(appliance, SiteView) else site_view(appliance)


def fabric_vars(appliance) -> dict:
    site = _view(appliance)
    sm = fabric.subnet_manager(site)
    return {"appliance_fabric": {
        "packages": FABRIC_PACKAGES,
        "subnet_manager": {
            "kind": sm["kind"], "node": sm.get("node", ""), "priority": sm.get("priority"),
            "opensm_conf": fabric.render_opensm_conf(site, pin_guid=False) if sm["kind"] == "opensm" else "",
            "partitions_conf": fabric.render_partitions_conf(site),
        },
        "ipoib_files": {node.name: fabric.ipoib_files(site, node) for node in site.nodes},
        "ipoib_interfaces": {n.name: fabric.ipoib_interface(site, n) for n in site.ipoib_networks},
        "counter_thresholds": {
            node.name: dict(sorted({**DEFAULT_COUNTER_THRESHOLDS,
                                    **((node.platform.get("hcas") or {}).get("error_thresholds") or {})}.items()))
            for node in site.nodes
        },
    }}


def gpudirect_vars(appliance) -> dict:
    site = _view(appliance)
    gpu_nodes = [n for n in site.nodes if n.gpu_count]
    return {"appliance_gpudirect": {
        "packages": GPUDIRECT_PACKAGES,
        "cufile_json": {node.name: gpudirect.render_cufile_json(site, node) for node in gpu_nodes},
        # From the platform, not from the inventory: the stage writes the measured affinity back into
        # the inventory, and an expectation read from there would agree with any topology it met.
        "expected_affinity": {node.name: expected_affinity(node) for node in gpu_nodes},
    }}


def expected_affinity(node) -> dict[str, str]:
    """{GPU index: rail HCA device} the node's platform declares (hcas.ports[].closest_gpu)."""
    ports = (node.platform.get("hcas") or {}).get("ports") or []
    return {str(port["closest_gpu"]): str(port["device"]) for port in ports
            if isinstance(port, dict) and port.get("closest_gpu") is not None and port.get("device")}


def storage_client_roles(site: SiteView) -> list[str]:
    return list((site.settings.get("storage") or {}).get("client_roles") or DEFAULT_STORAGE_CLIENT_ROLES)


def smoke_test_gates(appliance_settings: dict) -> dict:
    """The storage smoke test's size and throughput floors: the site's storage.smoke_test over defaults."""
    declared = dict(((appliance_settings or {}).get("storage") or {}).get("smoke_test") or {})
    return {"size_mib": int(declared.get("size_mib", DEFAULT_SMOKE_TEST["size_mib"])),
            "min_read_mbps": int(declared.get("min_read_mbps", DEFAULT_SMOKE_TEST["min_read_mbps"])),
            "min_write_mbps": int(declared.get("min_write_mbps", DEFAULT_SMOKE_TEST["min_write_mbps"]))}


def storage_vars(appliance) -> dict:
    site = _view(appliance)
    mounts = []
    for fs in site.filesystems:
        mounts.append({
            "name": fs.name, "type": fs.type, "fstype": storage.mount_type(fs), "source": storage.mount_source(fs),
            "mount_point": fs.mount_point, "options": storage.mount_options(fs),
            "unit_name": storage.unit_name_for_path(fs.mount_point), "unit": storage.render_mount_unit(fs),
            "tunables_unit_name": storage.tunables_unit_name(fs) if storage.lctl_tunables(fs) else "",
            "tunables_unit": storage.render_lustre_tunables_unit(fs) or "",
            "beegfs_conf_path": storage.beegfs_client_conf_path(fs) if fs.type == "beegfs" else "",
            "beegfs_conf": storage.render_beegfs_client_conf(fs) if fs.type == "beegfs" else "",
        })
    bench = smoke_test_gates(site.settings)
    return {"appliance_storage_config": {
        "client_roles": storage_client_roles(site),
        "packages": storage.client_packages(site),
        "lnet_conf": storage.render_lnet_conf(site) if any(fs.type == "lustre" for fs in site.filesystems) else "",
        "mounts": mounts,
        "smoke_test": bench,
    }}


def mig_instances(site: SiteView) -> dict[str, list[MigInstance]]:
    """MIG instances the partitioning stage found on each node (its fact `appliance_mig_instances`, kept in
    Node.facts as `mig_instances`)."""
    result = {}
    for node in site.nodes:
        found = node.facts.get("mig_instances") or []
        try:
            result[node.name] = [MigInstance(gpu=int(i["gpu"]), profile=str(i["profile"]),
                                             gpu_instance=int(i["gpu_instance"]),
                                             compute_instance=int(i.get("compute_instance", 0))) for i in found]
        except (KeyError, TypeError, ValueError) as exc:
            raise RenderError(f"node {node.name}: facts.mig_instances is malformed ({exc})") from None
    return {name: found for name, found in result.items() if found}


def partition_plan(site: SiteView, instances: dict[str, list[MigInstance]]) -> dict[str, dict[str, int]]:
    """node -> {GPU type: count} for nodes that have MIG instances (whole GPUs keep the GPU's type)."""
    plan = {}
    for name, found in instances.items():
        node = site.node(name)
        counts: dict[str, int] = {}
        for instance in found:
            counts[instance.profile] = counts.get(instance.profile, 0) + 1
        whole = node.gpu_count - len({i.gpu for i in found})
        if whole:
            counts[node.gpu_type] = whole
        plan[name] = counts
    return plan


def munge_key_path() -> Path:
    return Path(settings.KEYS_DIR) / "munge.key"


def ensure_munge_key() -> Path:
    """The cluster's munge key, generated once (0600) and kept in the keys directory."""
    path = munge_key_path()
    if path.exists():
        return path
    from appliance import audit

    # Never replaced: a key another process made first (and may have distributed) wins.
    if not create_once(path, secrets.token_bytes(MUNGE_KEY_BYTES)):
        return path
    audit.record("provisioning.secret.create", target_type="secret", target_id="munge.key",
                 target_name="Slurm munge key", details={"bytes": MUNGE_KEY_BYTES})
    return path


def workloads_vars(appliance) -> dict:
    site = _view(appliance)
    result: dict = {}
    if slurm.training_pools(site):
        instances = mig_instances(site)
        plan = partition_plan(site, instances)
        slurm_nodes = [n.name for n in slurm.slurm_nodes(site)]
        result["appliance_slurm"] = {
            "controller": site.management_node.name,
            "nodes": slurm_nodes,
            "node_packages": SLURM_NODE_PACKAGES,
            "controller_packages": SLURM_CONTROLLER_PACKAGES,
            "slurm_conf": slurm.render_slurm_conf(site, plan),
            "gres_conf": slurm.render_gres_conf(site, plan, instances),
            "cgroup_conf": slurm.render_cgroup_conf(),
            "nhc_conf": slurm.render_nhc_conf(site),
            "device_files": {name: slurm.device_files(site, name, instances) for name in slurm_nodes},
            "munge_key_file": str(ensure_munge_key()),
        }
    if kubernetes.inference_pools(site):
        nodes = kubernetes.node_settings(site)
        result["appliance_kubernetes"] = {
            "nodes": sorted(n for p in kubernetes.inference_pools(site) for n in p.nodes),
            "gpu_operator_values": kubernetes.render_gpu_operator_values(site),
            "device_plugin_config_map": kubernetes.render_device_plugin_config_map(site),
            "node_settings": {name: kubernetes.render_node_settings_for(nodes[name]) for name in nodes},
        }
    if not result:
        raise RenderError(f"appliance {site.name} has no pool: the workloads stage has nothing to configure")
    return result


# The provisioning catalogue calls a vars provider with (run, nodes); these adapt the functions above.

def fabric_stage_vars(run, nodes) -> dict:
    return fabric_vars(run.appliance)


def gpudirect_stage_vars(run, nodes) -> dict:
    return gpudirect_vars(run.appliance)


def storage_stage_vars(run, nodes) -> dict:
    return storage_vars(run.appliance)


def workloads_stage_vars(run, nodes) -> dict:
    return workloads_vars(run.appliance)


def partitioning_targets(appliance, nodes, plan_result: dict | None) -> dict:
    """Each GPU node's target layout for the partitioning stage: {node: {gpus: {index: {mig: [{profile,
    start}] | None}}, time_slicing: {replicas, gpus} | None, slurm_node, profiles: {name: {nvml_profile,
    compute_slices}}}}. From the plan's result for the GPUs it names; every other GPU keeps the layout
    the node's facts recorded (a rerun with no plan changes nothing)."""
    from appliance.inventory.models import Node
    from appliance.partitioning import profiles
    from appliance.partitioning.layout import current_layout

    layout = current_layout(appliance)
    planned = {g["id"]: g for g in (plan_result or {}).get("gpus") or []}
    # A node no partitioning run has recorded yet keeps whatever NVML shows on GPUs no plan names: the
    # stage only reads and records them (nothing is destroyed on the strength of a missing fact).
    recorded = {n.name for n in Node.objects.filter(appliance=appliance, name__in=[n.name for n in nodes])
                if "mig_instances" in (n.facts or {})}
    site = _view(appliance)
    slurm_names = {n.name for n in slurm.slurm_nodes(site)} if slurm.training_pools(site) else set()
    wanted = {n.name for n in nodes}
    targets: dict[str, dict] = {}
    for gpu in layout["gpus"]:
        if gpu["node"] not in wanted:
            continue
        source = planned.get(gpu["id"], gpu)
        node = targets.setdefault(gpu["node"], {"gpus": {}, "sliced": {}, "slurm_node": gpu["node"] in slurm_names,
                                                "profiles": {}})
        mig = source.get("mig")
        if gpu["id"] not in planned and gpu["node"] not in recorded:
            node["gpus"][str(gpu["index"])] = {"keep": True, "mig": None}
            # Its time-slicing is recorded as the layout says it is now (its pool's, until a plan changes it).
            if int((gpu.get("time_slicing") or {}).get("replicas") or 0) > 1 and not gpu.get("mig"):
                node["sliced"][gpu["index"]] = int(gpu["time_slicing"]["replicas"])
            continue
        node["gpus"][str(gpu["index"])] = {
            "mig": None if mig is None else sorted(({"profile": str(i["profile"]), "start": int(i["start"])}
                                                    for i in mig), key=lambda i: i["start"])}
        replicas = int((source.get("time_slicing") or {}).get("replicas") or 0) if mig is None else 0
        if replicas > 1:
            node["sliced"][gpu["index"]] = replicas
        if gpu["model"]:
            node["profiles"] = {p.name: {"nvml_profile": p.nvml_profile, "compute_slices": p.compute_slices}
                                for p in profiles.model(gpu["model"]).profiles}
    for node in targets.values():
        sliced = node.pop("sliced")
        # Each GPU keeps the replicas its plan gives it (the device plugin's config has one resource entry
        # per count, with its devices: formats.device_plugin_config); "replicas" is their highest, for
        # readers of records made before counts were kept per GPU.
        node["time_slicing"] = ({"replicas": max(sliced.values()), "gpus": sorted(sliced),
                                 "per_gpu": {str(index): count for index, count in sorted(sliced.items())}}
                                if sliced else None)
    return dict(sorted(targets.items()))


def partitioning_stage_vars(run, nodes) -> dict:
    """The partitioning stage's targets: the plan the run carries (Plan.runs), or the recorded layout."""
    from appliance.partitioning.services import plan_for_run

    plan = plan_for_run(run)
    environment: dict[str, str] = {}
    if run.appliance.simulated:
        # The simulated appliance's Slurm is real and runs on this host (appliance/simulation/slurm.py).
        from appliance.simulation import slurm as simulated_slurm

        environment = simulated_slurm.environment()
    return {"appliance_partitioning": {
        "plan": plan.number if plan else None,
        "scontrol": shutil.which("scontrol") or "scontrol",
        "squeue": shutil.which("squeue") or "squeue",
        "slurm_environment": environment,
        # Checks 5 s apart before the jobs still on a drained node are requeued.
        "drain_checks": DRAIN_CHECKS,
        "targets": partitioning_targets(run.appliance, nodes, plan.result if plan else None),
    }}


def acceptance_stage_vars(run, nodes) -> dict:
    """The acceptance stage's expectation of each GPU node's MIG layout: the applied partition plan's for
    the GPUs it names, the recorded layout for the others; nodes never partitioned are not checked. And
    the Slurm nodes, whose `srun --mpi=list` is checked against slurm.conf's MpiDefault."""
    from appliance.partitioning.services import applied_plan

    plan = applied_plan(run.appliance)
    targets = partitioning_targets(run.appliance, [n for n in nodes if n.role == "gpu"], plan.result if plan else None)
    expected = {}
    for name, target in targets.items():
        gpus = {index: gpu for index, gpu in target["gpus"].items() if not gpu.get("keep")}
        if gpus:
            expected[name] = {"gpus": gpus, "profiles": target["profiles"]}
    site = _view(run.appliance)
    # The training pool's Slurm nodes: their srun must have the MPI type slurm.conf makes the default.
    slurm_nodes = [node.name for node in slurm.slurm_nodes(site)] if slurm.training_pools(site) else []
    return {"appliance_partitioning_expected": expected, "appliance_slurm_nodes": slurm_nodes}
