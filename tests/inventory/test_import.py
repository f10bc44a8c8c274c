"""Import of a site definition into the inventory: complete, idempotent, minimal, atomic, audited."""

import pytest
from django.db import connection

from appliance.audit.models import AuditRecord
from appliance.inventory import credentials, services
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
from appliance.inventory.services import import_site
from appliance.inventory.sitedef import SiteValidationError
from appliance.inventory.states import NodeState

from .conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db

GPU04 = """\
  - name: gpu04
    role: gpu
    platform: hgx-h100-8gpu
    gpus: 8
    management_address: 192.168.100.34
    bmc: {url: "https://127.0.0.1:18444"}
    ipoib: {ib0: 10.10.2.4}
    labels: {rack: r01, slot: 4}
"""


def without_gpu04(demo_text: str) -> str:
    assert GPU04 in demo_text
    return demo_text.replace(GPU04, "").replace("nodes: [gpu04]", "nodes: [gpu03]").replace(
        "nodes: [gpu01, gpu02, gpu03]", "nodes: [gpu01, gpu02]")


def inventory_snapshot() -> dict:
    models = (Platform, Appliance, Network, Node, BMC, GPU, HCA, HCAPort, Switch, Filesystem, Pool, PoolMembership)
    return {m.__name__: sorted(m.objects.values_list("pk", "updated")) for m in models}


def test_import_creates_the_whole_demo_appliance(demo_text, site_env):
    result = import_site(demo_text, "demo.yml")
    assert result.changed and {c.action for c in result.changes} == {"create"}
    appliance = result.appliance
    assert (appliance.name, appliance.simulated, appliance.site_file) == ("demo", True, "demo.yml")
    assert appliance.settings["fabric"] == {"subnet_manager": {"kind": "opensm", "node": "mgmt01", "priority": 15}}

    nodes = {n.name: n for n in Node.objects.all()}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04", "mgmt01", "stor01", "stor02"]
    gpu01 = nodes["gpu01"]
    assert (gpu01.role, gpu01.platform.slug, gpu01.management_address) == ("gpu", "hgx-h100-8gpu", "192.168.100.31")
    assert gpu01.state == NodeState.NEW and gpu01.ipoib_addresses == {"ib0": "10.10.2.1"}
    assert gpu01.sysroot == str(site_env.SIMULATION_DIR / "nodes" / "gpu01")
    assert nodes["stor01"].platform.slug == "storage-server" and nodes["mgmt01"].role == "management"

    bmc = gpu01.bmc
    assert (bmc.url, bmc.credential.name, bmc.verify_tls) == ("https://127.0.0.1:18441", "demo-bmc", True)
    assert (bmc.credential.username, bmc.credential.ca_file) == ("admin", str(site_env.SIMULATION_DIR / "ca" / "ca.pem"))
    assert [n.bmc.url for n in Node.objects.order_by("management_address")][:1]  # every node has its BMC
    assert BMC.objects.count() == 7

    assert GPU.objects.filter(node__role="gpu").count() == 32 and GPU.objects.count() == 32
    gpu3 = gpu01.gpus.get(index=3)
    assert (gpu3.model, gpu3.memory_mib, gpu3.mig_capable) == ("NVIDIA H100 80GB HBM3", 81559, True)
    assert gpu3.nvlink_peers == [0, 1, 2, 4, 5, 6, 7]
    assert HCA.objects.filter(node=gpu01).count() == 8 and HCA.objects.count() == 8 * 4 + 2 * 2 + 1
    port = HCAPort.objects.get(hca__node=gpu01, hca__device="mlx5_5")
    assert (port.port, port.rate_gbps, port.link_layer, port.closest_gpu.index) == (1, 400, "InfiniBand", 5)
    assert HCAPort.objects.get(hca__node=nodes["stor01"], hca__device="mlx5_1").closest_gpu is None

    ib0 = Network.objects.get(name="ib0")
    assert (ib0.kind, ib0.cidr, ib0.pkey, ib0.mtu) == ("ipoib", "10.10.0.0/16", "0x7fff", 4092)
    assert Network.objects.get(name="mgmt").kind == "management"
    assert Switch.objects.get().name == "ib-leaf01"
    scratch = Filesystem.objects.get(name="scratch")
    assert (scratch.type, scratch.servers, scratch.source) == ("lustre", ["stor01", "stor02"], "10.10.1.1@o2ib:/scratch")
    assert (scratch.mount_point, scratch.options) == ("/mnt/scratch", ["flock", "noatime"])
    datasets = Filesystem.objects.get(name="datasets")
    assert (datasets.type, datasets.source, datasets.mount_point) == ("nfs-rdma", "stor02:/export/datasets", "/mnt/datasets")
    assert datasets.options == ["proto=rdma", "port=20049", "nconnect=8", "vers=4.2"]

    training, inference = Pool.objects.get(name="training"), Pool.objects.get(name="inference")
    assert (training.kind, training.scheduler, training.sharing, training.settings) == (
        "training", "slurm", "exclusive", {"partition": "train"})
    assert sorted(training.nodes.values_list("name", flat=True)) == ["gpu01", "gpu02", "gpu03"]
    assert (inference.scheduler, inference.settings) == ("kubernetes", {"time_slicing": {"replicas": 4}})
    assert list(inference.nodes.values_list("name", flat=True)) == ["gpu04"]
    assert Platform.objects.get(slug="hgx-h100-8gpu").gpu_count == 8


def test_second_import_reports_and_writes_nothing(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    before = inventory_snapshot()
    records = AuditRecord.objects.count()
    result = import_site(demo_text, "demo.yml")
    assert result.changes == [] and not result.changed
    assert inventory_snapshot() == before
    # Only the import event itself: no row was saved.
    assert list(AuditRecord.objects.filter(sequence__gt=records).values_list("event", flat=True)) == [
        "inventory.site.import"]


def test_one_changed_field_is_exactly_one_change(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    changed = demo_text.replace("{ib0: 10.10.2.3}", "{ib0: 10.10.2.33}")
    result = import_site(changed, "demo.yml")
    assert [(c.action, c.model, c.name, c.fields) for c in result.changes] == [
        ("update", "node", "gpu03", {"ipoib_addresses": [{"ib0": "10.10.2.3"}, {"ib0": "10.10.2.33"}]})]
    assert str(result.changes[0]) == "update node gpu03: ipoib_addresses {'ib0': '10.10.2.3'} -> {'ib0': '10.10.2.33'}"
    assert Node.objects.get(name="gpu03").ipoib_addresses == {"ib0": "10.10.2.33"}
    record = AuditRecord.objects.filter(event="inventory.node.update").latest("sequence")
    assert record.details["changes"] == {"ipoib_addresses": [{"ib0": "10.10.2.3"}, {"ib0": "10.10.2.33"}]}


def test_discovered_facts_survive_reimport(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    gpu = GPU.objects.get(node__name="gpu02", index=1)
    gpu.uuid, gpu.pci_bus_id, gpu.mig_mode = "GPU-5e7c1a2b-0001", "0000:29:00.0", GPU.MigMode.ENABLED
    gpu.save()
    port = HCAPort.objects.get(hca__node__name="gpu02", hca__device="mlx5_1")
    port.guid, port.state, port.physical_state = "0x946dae0300a1b2c3", "Active", "LinkUp"
    port.save()
    node = Node.objects.get(name="gpu02")
    node.facts = {"kernel": "6.1.0-18-amd64"}
    node.save()
    node.transition(NodeState.PROVISIONING)
    node.transition(NodeState.READY)

    assert import_site(demo_text, "demo.yml").changes == []
    gpu.refresh_from_db()
    port.refresh_from_db()
    node.refresh_from_db()
    assert (gpu.uuid, gpu.pci_bus_id, gpu.mig_mode) == ("GPU-5e7c1a2b-0001", "0000:29:00.0", "enabled")
    assert (port.guid, port.state, port.physical_state) == ("0x946dae0300a1b2c3", "Active", "LinkUp")
    assert node.state == NodeState.READY and node.facts == {"kernel": "6.1.0-18-amd64"}


def test_removed_new_node_is_deleted(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    result = import_site(without_gpu04(demo_text), "demo.yml")
    summary = [(c.action, c.model, c.name) for c in result.changes]
    assert ("delete", "node", "gpu04") in summary
    assert ("delete", "poolmembership", "gpu03 in training") not in summary
    assert ("update", "poolmembership", "gpu03 in inference") in summary
    assert not Node.objects.filter(name="gpu04").exists()
    assert not GPU.objects.filter(node__name="gpu04").exists()
    assert list(Pool.objects.get(name="inference").nodes.values_list("name", flat=True)) == ["gpu03"]
    assert AuditRecord.objects.filter(event="inventory.node.delete", target_name="gpu04").exists()


def test_removed_provisioned_node_is_retired_and_can_come_back(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    node = Node.objects.get(name="gpu04")
    node.transition(NodeState.PROVISIONING)
    node.transition(NodeState.READY)
    gpu = node.gpus.get(index=0)
    gpu.uuid = "GPU-kept-after-retire"
    gpu.save()

    result = import_site(without_gpu04(demo_text), "demo.yml")
    retire = next(c for c in result.changes if c.name == "gpu04" and c.model == "node")
    assert retire.action == "update"
    assert retire.fields == {"state": ["ready", "retired"], "management_address": ["192.168.100.34", None]}
    node.refresh_from_db()
    assert node.state == NodeState.RETIRED and node.management_address is None
    assert not PoolMembership.objects.filter(node=node).exists()
    assert node.gpus.get(index=0).uuid == "GPU-kept-after-retire"
    assert import_site(without_gpu04(demo_text), "demo.yml").changes == []

    # A replacement server takes the retired node's address (its BMC bound to the credential first).
    credentials.bind("demo-bmc", ["https://127.0.0.1:18448"])
    replacement = without_gpu04(demo_text).replace("  - name: stor01", GPU04.replace("gpu04", "gpu05").replace(
        "18444", "18448") + "  - name: stor01")
    import_site(replacement, "demo.yml")
    assert Node.objects.get(name="gpu05").management_address == "192.168.100.34"

    back = import_site(demo_text.replace("192.168.100.34", "192.168.100.44"), "demo.yml")
    returned = next(c for c in back.changes if c.name == "gpu04" and c.model == "node")
    assert returned.fields["state"] == ["retired", "new"]
    assert returned.fields["management_address"] == [None, "192.168.100.44"]
    assert Node.objects.get(name="gpu04").state == NodeState.NEW
    assert not Node.objects.filter(name="gpu05").exists()  # never provisioned: deleted


def test_failing_import_leaves_the_database_unchanged(demo_text, site_env, monkeypatch):
    import_site(demo_text, "demo.yml")
    before, records = inventory_snapshot(), AuditRecord.objects.count()
    changed = demo_text.replace("mtu: 4092", "mtu: 2044").replace("slot: 2", "slot: 7")

    def fail(self):
        raise RuntimeError("disk full")

    # The pools come last: everything else of the import is written when this fails.
    monkeypatch.setattr(services._Importer, "sync_pools", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        import_site(changed, "demo.yml")
    assert inventory_snapshot() == before and AuditRecord.objects.count() == records
    assert Network.objects.get(name="ib0").mtu == 4092


def test_conflict_with_another_appliance_is_an_error_and_writes_nothing(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    before, records = inventory_snapshot(), AuditRecord.objects.count()
    other = demo_text.replace("name: demo", "name: other").replace("192.168.100.250", "192.168.100.251")
    with pytest.raises(SiteValidationError) as caught:
        import_site(other, "other.yml")
    messages = [str(e) for e in caught.value.errors]
    line = other.splitlines().index("  - name: gpu01") + 1
    assert f"other.yml:{line}: nodes[0].name: node gpu01 belongs to appliance demo" in messages
    assert f"other.yml:{line}: nodes[0].management_address: 192.168.100.31 is the address of node gpu01 of appliance demo" in messages
    assert inventory_snapshot() == before and AuditRecord.objects.count() == records


def test_swapping_addresses_between_nodes(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    swapped = (demo_text.replace("192.168.100.31", "@swap@").replace("192.168.100.32", "192.168.100.31")
               .replace("@swap@", "192.168.100.32"))
    result = import_site(swapped, "demo.yml")
    assert sorted((c.name, tuple(c.fields["management_address"])) for c in result.changes) == [
        ("gpu01", ("192.168.100.31", "192.168.100.32")), ("gpu02", ("192.168.100.32", "192.168.100.31"))]
    assert Node.objects.get(name="gpu01").management_address == "192.168.100.32"


def test_bmc_password_is_encrypted_at_rest_and_never_recorded(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM inventory_credential WHERE name = 'demo-bmc'")
        stored = [row[0] for row in cursor.fetchall()]
    assert len(stored) == 1
    assert stored[0].startswith("enc:v1:") and DEMO_PASSWORD not in stored[0]
    assert BMC.objects.get(node__name="gpu01").credential.secret == DEMO_PASSWORD
    for record in AuditRecord.objects.all():
        assert DEMO_PASSWORD not in str(record.details)


def test_a_new_secret_is_a_credential_change_not_a_site_change(demo_text, site_env):
    result = import_site(demo_text, "demo.yml")
    assert DEMO_PASSWORD not in "\n".join(str(c) + str(c.fields) for c in result.changes)
    records = AuditRecord.objects.count()
    credentials.update("demo-bmc", secret="Rotated-pw-2")
    update = AuditRecord.objects.get(sequence__gt=records, event="inventory.credential.update")
    assert update.details == {"changes": {"secret": "[redacted]"}}
    assert import_site(demo_text, "demo.yml").changes == []
    assert BMC.objects.get(node__name="stor02").credential.secret == "Rotated-pw-2"


def test_import_records_one_site_event_with_counts(demo_text, site_env):
    records = AuditRecord.objects.count()
    result = import_site(demo_text, "demo.yml")
    events = AuditRecord.objects.filter(sequence__gt=records)
    site_events = events.filter(event="inventory.site.import")
    assert site_events.count() == 1
    event = site_events.get()
    counts = result.counts()
    assert event.details["file"] == "demo.yml" and len(event.details["sha256"]) == 64
    assert event.details["changes"] == counts and counts["create"] == len(result.changes)
    assert event.target_name == "demo"
    assert events.filter(event="inventory.node.create").count() == 7
    assert events.filter(event="inventory.gpu.create").count() == 32


def test_dry_run_shows_changes_and_writes_nothing(demo_text, site_env):
    records = AuditRecord.objects.count()
    result = import_site(demo_text, "demo.yml", dry_run=True)
    assert result.appliance is None and result.dry_run and len(result.changes) > 100
    assert not Appliance.objects.exists() and AuditRecord.objects.count() == records
    import_site(demo_text, "demo.yml")
    result = import_site(demo_text.replace("mtu: 4092", "mtu: 2044"), "demo.yml", dry_run=True)
    assert [str(c) for c in result.changes] == ["update network ib0: mtu 4092 -> 2044"]
    assert result.appliance.name == "demo" and Network.objects.get(name="ib0").mtu == 4092
