"""Health rows from what stages report: NVML's GPU list (a GPU the inventory has and NVML does not list
is missing, whatever NVML's shifted indexes say), ibstat's ports, findmnt's mounts, and acceptance
checks landing on the GPU or port they name. A stage that did not check something leaves it alone."""

from appliance.inventory import health
from appliance.inventory.models import GPU, HealthCheck
from appliance.provisioning.facts import FactsSink
from appliance.provisioning.models import Run, StageRun


def _sink(inventory, stage, run=None):
    run = run or Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=[stage])
    stage_run = StageRun.objects.create(run=run, stage=stage, order=StageRun.objects.filter(run=run).count() + 1)
    nodes = {n.name: n for n in inventory.appliance.nodes.all()}
    return FactsSink(stage_run, nodes, dry_run=False), run


def _nvml_list(node, without=(), **health_of):
    """What nvml_facts reports: the GPUs it sees numbered from 0, with their health."""
    listed = [gpu for gpu in GPU.objects.filter(node=node).order_by("index") if gpu.index not in without]
    return [{"index": slot, "uuid": gpu.uuid, "name": gpu.model, "memory_mib": gpu.memory_mib,
             "pci_bus_id": "0000" + gpu.pci_bus_id.upper(), "mig_mode": "disabled",
             "nvlink_links_up": 18, "nvlink_links_present": 18, "retired_pages": 0, "retired_pages_dbe": 0,
             "retired_pages_pending": 0, **health_of.get(f"gpu{gpu.index}", {})}
            for slot, gpu in enumerate(listed)]


def _status(node, kind, component, name):
    return HealthCheck.objects.filter(node=node, component_kind=kind, component_id=component, name=name) \
        .values_list("status", "evidence").first()


def test_a_gpu_nvml_does_not_list_is_missing_and_the_others_keep_their_identity(inventory):
    node = inventory.gpu_node
    uuids = dict(GPU.objects.filter(node=node).values_list("index", "uuid"))
    sink, run = _sink(inventory, "gpu")
    sink(node.name, {"appliance_gpus": _nvml_list(node, without={5})})

    assert _status(node, "gpu", "5", "present") == ("failing", "GPU 5 (0000:68:00.0) missing: NVML does not list it")
    for index in (0, 1, 2, 3, 4, 6, 7):
        assert _status(node, "gpu", str(index), "present")[0] == "ok"
    # NVML called GPU 6 "index 5": the inventory's GPU 5 did not take its UUID.
    assert dict(GPU.objects.filter(node=node).values_list("index", "uuid")) == uuids
    assert GPU.objects.filter(node=node).count() == 8
    assert health.open_failures(node) == ["GPU 5 (0000:68:00.0) missing: NVML does not list it"]
    row = HealthCheck.objects.get(node=node, component_id="5", name="present")
    assert (row.source, row.run_id) == (f"stage gpu, run #{run.pk}", run.pk)
    assert health.open_failures(inventory.gpu_node_2) == []


def test_retired_pages_ecc_and_nvlink_are_per_gpu(inventory):
    node = inventory.gpu_node
    sink, _ = _sink(inventory, "gpu")
    sink(node.name, {"appliance_gpus": _nvml_list(node, gpu2={"retired_pages": 3, "retired_pages_pending": 1},
                                                  gpu3={"retired_pages": 2, "retired_pages_dbe": 2},
                                                  gpu4={"nvlink_links_up": 16},
                                                  gpu1={"ecc_uncorrected_volatile": 4})})
    assert _status(node, "gpu", "2", "retired_pages") == ("failing", "GPU 2 (0000:38:00.0) retired pages pending: 3")
    assert _status(node, "gpu", "3", "ecc") == ("failing", "GPU 3 (0000:48:00.0) ECC DBE 2 (pages retired)")
    assert _status(node, "gpu", "1", "ecc") == ("failing", "GPU 1 (0000:28:00.0) ECC DBE 4 since the driver loaded")
    assert _status(node, "gpu", "4", "nvlink") == ("failing", "GPU 4 (0000:58:00.0) NVLink 16 of 18 links up")
    assert _status(node, "gpu", "0", "retired_pages")[0] == "ok"
    assert health.summary(node)["failing_gpus"] == [1, 2, 3, 4]


def test_acceptance_checks_land_on_the_gpu_and_port_they_name(inventory):
    node = inventory.gpu_node
    sink, _ = _sink(inventory, "acceptance")
    sink(node.name, {"appliance_acceptance": [
        {"check": "gpu.xid_errors", "node": node.name, "expected": "<= 0", "measured": 1, "passed": False,
         "source": "", "message": "1 Xid errors: Xid 79 on 0000:68:00.0: pid=0, name=nvidia, GPU has fallen off the bus."},
        {"check": "gpu.count", "node": node.name, "expected": 8, "measured": 7, "passed": False, "source": "",
         "message": "NVML reports 7 GPUs"},
        {"check": "ib_write_bw.mlx5_3", "node": node.name, "expected": ">= 380 Gb/s", "measured": 120.5,
         "passed": False, "source": "", "message": "mlx5_3/1: 120.5 Gb/s average, below 380"},
        {"check": "os.memlock", "node": node.name, "expected": "unlimited", "measured": "soft unlimited, hard unlimited",
         "passed": True, "source": "", "message": "memlock unlimited"},
    ]})
    assert _status(node, "gpu", "5", "xid") == (
        "failing", "GPU 5 (0000:68:00.0) XID 79 at 0000:68:00.0: pid=0, name=nvidia, GPU has fallen off the bus.")
    assert _status(node, "gpu", "5", "present") == ("failing", "GPU 5 (0000:68:00.0) missing: XID 79, fallen off the bus")
    assert _status(node, "gpu", "4", "xid")[0] == "ok"
    assert _status(node, "hca_port", "mlx5_3/1", "acceptance ib_write_bw") == (
        "failing", "mlx5_3/1: 120.5 Gb/s average, below 380")
    assert _status(node, "node", "", "acceptance gpu.count") == ("failing", "gpu.count: NVML reports 7 GPUs")
    assert _status(node, "node", "", "acceptance os.memlock")[0] == "ok"
    # One reason per part: GPU 5's presence, not once more for the Xid that showed it.
    assert health.open_failures(node) == [
        "GPU 5 (0000:68:00.0) missing: XID 79, fallen off the bus (and 1 more failing check)",
        "mlx5_3/1: 120.5 Gb/s average, below 380",
        "gpu.count: NVML reports 7 GPUs",
    ]


def test_a_stage_that_did_not_check_a_gpu_does_not_clear_it(inventory):
    node = inventory.gpu_node
    sink, run = _sink(inventory, "gpu")
    sink(node.name, {"appliance_gpus": _nvml_list(node, without={5})})
    # The os stage reports no GPU facts; the fabric stage only ports, the storage stage only mounts.
    os_sink, _ = _sink(inventory, "os", run)
    os_sink(node.name, {"appliance_kernel": {"cmdline": "quiet"}})
    fabric_sink, _ = _sink(inventory, "fabric", run)
    fabric_sink(node.name, {"appliance_hcas": [
        {"device": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400},
        {"device": "mlx5_1", "port": 1, "state": "Down", "physical_state": "Polling", "rate_gbps": 10}]})
    storage_sink, _ = _sink(inventory, "storage", run)
    storage_sink(node.name, {"appliance_mounts": [{"name": "lustre", "mount_point": "/mnt/lustre", "present": False}]})
    assert health.open_failures(node) == [
        "GPU 5 (0000:68:00.0) missing: NVML does not list it",
        "mlx5_1/1 link down (Down, Polling)",
        "/mnt/lustre not mounted",
    ]
    # Once NVML lists it again, it is present.
    again, _ = _sink(inventory, "gpu")
    again(node.name, {"appliance_gpus": _nvml_list(node)})
    assert _status(node, "gpu", "5", "present")[0] == "ok"


def test_a_dry_run_writes_no_health(inventory):
    node = inventory.gpu_node
    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["gpu"], dry_run=True)
    stage_run = StageRun.objects.create(run=run, stage="gpu", order=1)
    FactsSink(stage_run, {node.name: node}, dry_run=True)(node.name, {"appliance_gpus": _nvml_list(node, without={5})})
    assert not HealthCheck.objects.filter(node=node).exists()


def test_acceptance_seeing_every_gpu_again_clears_missing_but_a_short_count_names_none(inventory):
    node = inventory.gpu_node
    sink, _ = _sink(inventory, "gpu")
    sink(node.name, {"appliance_gpus": _nvml_list(node, without={5})})
    short, _ = _sink(inventory, "acceptance")
    short(node.name, {"appliance_acceptance": [{"check": "gpu.count", "node": node.name, "expected": 8,
                                                "measured": 7, "passed": False, "message": "NVML reports 7 GPUs"}]})
    assert _status(node, "gpu", "5", "present")[0] == "failing" and _status(node, "gpu", "4", "present")[0] == "ok"
    full, _ = _sink(inventory, "acceptance")
    full(node.name, {"appliance_acceptance": [{"check": "gpu.count", "node": node.name, "expected": 8,
                                               "measured": 8, "passed": True, "message": "NVML reports 8 GPUs"}]})
    assert _status(node, "gpu", "5", "present") == ("ok", "GPU 5 (0000:68:00.0): NVML lists all 8 GPUs")
    assert health.open_failures(node) == []
