"""Facts the fabric, GPUDirect and storage stages return land in the inventory: port state, rate, GUID
and error counters; each GPU's nearest HCA; mounts, smoke tests and gdscheck in Node.facts (the keys the
storage page reads). A failed check's measurements are kept too."""

from appliance.inventory.models import GPU, HCA, HCAPort, Node
from appliance.provisioning.facts import FactsSink
from appliance.provisioning.models import Run, StageRun


def _sink(appliance, dry_run=False):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["fabric"])
    stage_run = StageRun.objects.create(run=run, stage="fabric", order=1)
    return FactsSink(stage_run, {n.name: n for n in appliance.nodes.all()}, dry_run=dry_run)


def test_ports_affinity_and_storage_facts_update_the_inventory(appliance):
    node = Node.objects.get(name="gpu01")
    gpus = [GPU.objects.create(node=node, index=i, model="NVIDIA H100 80GB HBM3", memory_mib=81559) for i in range(2)]
    for device in ("mlx5_0", "mlx5_1"):
        HCAPort.objects.create(hca=HCA.objects.create(node=node, device=device), port=1, closest_gpu=gpus[0])
    sink = _sink(appliance)
    sink("gpu01", {"appliance_hcas": [
        {"device": "mlx5_0", "port": 1, "guid": "0xa1", "state": "Active", "physical_state": "LinkUp",
         "rate_gbps": 400, "link_layer": "InfiniBand", "counters": {"SymbolErrorCounter": "3", "LinkDownedCounter": 0}},
        {"device": "mlx5_1", "port": 1, "guid": "0xa2", "state": "Down", "physical_state": "Polling",
         "rate_gbps": 200, "link_layer": "InfiniBand", "counters": {}},
    ]})
    sink("gpu01", {"appliance_gpu_hca_affinity": {"1": "mlx5_1"}})
    sink("gpu01", {"appliance_mounts": [{"name": "scratch", "mount_point": "/mnt/scratch", "present": True}],
                   "appliance_storage": {"results": [{"name": "scratch", "mount_point": "/mnt/scratch",
                                                      "read_mbps": 9000, "write_mbps": 7000}]},
                   "appliance_gds": {"verified": True, "problems": []}})

    first, second = HCAPort.objects.filter(hca__node=node).order_by("hca__device")
    assert (first.guid, first.state, first.physical_state, first.rate_gbps) == ("0xa1", "Active", "LinkUp", 400)
    assert first.counters == {"SymbolErrorCounter": 3, "LinkDownedCounter": 0}
    assert (second.state, second.physical_state, second.rate_gbps) == ("Down", "Polling", 200)
    assert first.closest_gpu is None and second.closest_gpu == gpus[1]
    node.refresh_from_db()
    assert node.facts["mounts"][0]["mount_point"] == "/mnt/scratch"
    assert node.facts["storage"]["results"][0]["read_mbps"] == 9000
    assert node.facts["gds"] == {"verified": True, "problems": []}
    assert node.facts["hcas"][1]["state"] == "Down"


def test_a_dry_run_leaves_the_inventory_alone(appliance):
    node = Node.objects.get(name="gpu01")
    port = HCAPort.objects.create(hca=HCA.objects.create(node=node, device="mlx5_0"), port=1, state="Active")
    _sink(appliance, dry_run=True)("gpu01", {"appliance_hcas": [{"device": "mlx5_0", "port": 1, "state": "Down"}]})
    port.refresh_from_db()
    node.refresh_from_db()
    assert port.state == "Active" and "hcas" not in node.facts
