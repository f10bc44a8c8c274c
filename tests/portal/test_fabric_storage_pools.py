"""The fabric, storage and pools pages, as the Django test client sees them, on the demo site's inventory."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from appliance.core.roles import Role
from appliance.inventory.models import GPU, HCAPort, Node, Pool
from appliance.inventory.services import import_site
from appliance.simulation.services import demo_site_text, ensure_demo_credential
from tests.access import AccessMatrix, Endpoint
from tests.sample_inventory import build_sample_inventory

pytestmark = pytest.mark.django_db

DEMO_BMC_PASSWORD = "Demo-bmc-Pw-5Lx9-portal-pages"


@pytest.fixture
def demo(settings, tmp_path):
    """The demo site imported, with the files its simulation writes before the import."""
    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    settings.KEYS_DIR = settings.STATE_DIR / "keys"
    (settings.SIMULATION_DIR / "ca").mkdir(parents=True)
    (settings.SIMULATION_DIR / "bmc-password").write_text(DEMO_BMC_PASSWORD + "\n")
    ensure_demo_credential()
    return import_site(demo_site_text(), "demo.yml").appliance


def discover_ports(node_name: str, **overrides) -> None:
    """What the fabric stage writes back: every port Active at NDR, counters read; `overrides` per port."""
    for port in HCAPort.objects.filter(hca__node__name=node_name).select_related("hca"):
        values = {"state": "Active", "physical_state": "LinkUp", "rate_gbps": 400, "guid": f"0x{port.pk:016x}",
                  "counters": {"SymbolErrorCounter": 0, "LinkDownedCounter": 1, "LinkErrorRecoveryCounter": 0}}
        values.update(overrides.get(port.hca.device, {}))
        for name, value in values.items():
            setattr(port, name, value)
        port.save()


def port_row(html: str, node: str, port: str) -> str:
    section = html.split(f'data-node="{node}"', 1)[1].split("</section>", 1)[0]
    return section.split(f'data-port="{port}"', 1)[1].split("</tr>", 1)[0]


def text_of(fragment: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment)).strip()


def card_text(html: str, testid: str) -> str:
    return text_of(html.split(f'data-testid="{testid}">', 1)[1].split("</div>", 1)[0])


class TestPageAccess(AccessMatrix):
    endpoints = [
        Endpoint("/inventory/fabric/", "inventory.view"),
        Endpoint("/inventory/storage/", "inventory.view"),
        Endpoint("/inventory/pools/", "inventory.view"),
        Endpoint("/inventory/pools/demo/files/slurm.conf", "inventory.view"),
        Endpoint("/inventory/pools/demo/files/device-plugin-inference.yaml", "inventory.view"),
    ]

    @pytest.fixture
    def url_values(self, demo):
        return {}


# --- fabric ----------------------------------------------------------------------------------------

def test_fabric_summary_counts_ports_active_at_the_platform_rate(client_for, demo):
    for name in ("gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"):
        discover_ports(name)
    discover_ports("gpu02", mlx5_3={"rate_gbps": 200})  # the wrong rate: still Active, not at rate
    discover_ports("gpu03", mlx5_5={"state": "Down", "physical_state": "Polling", "rate_gbps": 0})
    html = client_for(Role.VIEWER).get("/inventory/fabric/").content.decode()

    # 4 GPU servers x 8 + 2 storage servers x 2 + 1 management node = 37 ports expected.
    summary = card_text(html, "ports-at-rate")
    assert "35 / 37" in summary and "7 nodes" in summary
    assert 'class="card-aside bad">7/8 at rate' in html
    wrong_rate = port_row(html, "gpu02", "mlx5_3/1")
    assert 'class="bad" data-testid="rate">200 Gb/s <span class="muted">/ 400</span>' in wrong_rate
    down = port_row(html, "gpu03", "mlx5_5/1")
    assert '<span class="state state-port-down">Down</span>' in down and "Polling" in down
    assert html.count('class="port-problem"') == 2
    healthy = port_row(html, "gpu01", "mlx5_0/1")
    assert "Active" in healthy and "LinkUp" in healthy and "GPU 0" in healthy and "InfiniBand" in healthy


def test_fabric_highlights_counters_over_the_platform_thresholds(client_for, demo):
    discover_ports("gpu01", mlx5_2={"counters": {"SymbolErrorCounter": 57, "LinkDownedCounter": 1,
                                                 "LinkErrorRecoveryCounter": 3}})
    html = client_for(Role.VIEWER).get("/inventory/fabric/?node=gpu01").content.decode()
    bad = port_row(html, "gpu01", "mlx5_2/1")
    over = re.findall(r'class="counter counter-over" data-counter="(\w+)"', bad)
    assert over == ["SymbolErrorCounter", "LinkErrorRecoveryCounter"]
    assert "<strong>57</strong><span class=\"muted\">/10</span>" in bad
    # At the threshold is not over it: one link-down after boot is normal.
    assert 'class="counter" data-counter="LinkDownedCounter"' in bad
    good = port_row(html, "gpu01", "mlx5_1/1")
    assert "counter-over" not in good
    assert card_text(html, "ports-with-errors").startswith(
        "Ports with error counters over threshold 1")


def test_fabric_lists_a_port_the_platform_expects_but_the_inventory_lacks(client_for, demo):
    discover_ports("gpu04")
    HCAPort.objects.get(hca__node__name="gpu04", hca__device="mlx5_6").delete()
    html = client_for(Role.VIEWER).get("/inventory/fabric/?node=gpu04").content.decode()
    missing = text_of(port_row(html, "gpu04", "mlx5_6/1"))
    assert "missing" in missing and "next to GPU 6" in missing


@pytest.mark.parametrize(("query", "nodes", "ports"), [
    ("?node=gpu02", ["gpu02"], 8),
    ("?state=Down", ["gpu03"], 1),
    ("?state=problem&node=gpu03", ["gpu03"], 1),
    ("?node=gpu01&state=Down", [], 0),
])
def test_fabric_filters_by_node_and_port_state(client_for, demo, query, nodes, ports):
    for name in ("gpu01", "gpu02", "gpu03"):
        discover_ports(name)
    discover_ports("gpu03", mlx5_5={"state": "Down", "physical_state": "Polling"})
    html = client_for(Role.VIEWER).get(f"/inventory/fabric/{query}").content.decode()
    assert re.findall(r'<section class="card node-fabric" data-node="([\w-]+)"', html) == nodes
    assert html.count('data-port="') == ports
    if not nodes:
        assert "No port matches." in html


def test_fabric_shows_subnet_manager_and_ipoib_networks(client_for, demo):
    html = client_for(Role.VIEWER).get("/inventory/fabric/").content.decode()
    sm = card_text(html, "subnet-manager")
    assert "opensm on mgmt01 New" in sm and "priority 15" in sm
    network = text_of(html.split('data-network="ib0">', 1)[1].split("</tr>", 1)[0])
    assert network.split() == ["ib0", "10.10.0.0/16", "0x7fff", "4092", "7"]
    assert '<span class="badge">ib0 10.10.2.1</span>' in html

    demo.settings = {**demo.settings, "fabric": {"subnet_manager": {"kind": "external"}}}
    demo.save()
    html = client_for(Role.VIEWER).get("/inventory/fabric/").content.decode()
    assert "the appliance runs none" in html


def test_fabric_page_queries_do_not_grow_with_the_nodes(client_for, demo, django_assert_max_num_queries):
    client = client_for(Role.VIEWER)
    for name in ("gpu01", "gpu02"):
        discover_ports(name)
    client.get("/inventory/fabric/")  # session and user loaded once, outside the count
    # Summary, switches, topology, networks and one page of nodes with their ports: a fixed number.
    with django_assert_max_num_queries(24) as captured:
        response = client.get("/inventory/fabric/")
    assert response.status_code == 200 and response.content.count(b'data-port="') == 37
    baseline = len(captured.captured_queries)
    # A node more, with its ports: the same number of queries.
    _clone_node("gpu04", "gpu05")
    with django_assert_max_num_queries(baseline):
        response = client.get("/inventory/fabric/")
    assert response.content.count(b'data-port="') == 45


def _clone_node(source: str, name: str) -> Node:
    from appliance.inventory.models import HCA

    original = Node.objects.get(name=source)
    clone = Node.objects.create(appliance=original.appliance, name=name, role=original.role,
                                platform=original.platform, management_address="192.168.100.99")
    gpus = {g.index: GPU.objects.create(node=clone, index=g.index, model=g.model, memory_mib=g.memory_mib)
            for g in original.gpus.all()}
    for hca in original.hcas.prefetch_related("ports__closest_gpu"):
        new = HCA.objects.create(node=clone, device=hca.device, model=hca.model)
        for port in hca.ports.all():
            HCAPort.objects.create(hca=new, port=port.port, rate_gbps=400, state="Active", physical_state="LinkUp",
                                   closest_gpu=gpus.get(port.closest_gpu.index) if port.closest_gpu else None)
    return clone


def test_fabric_of_an_inventory_without_platform_files(client_for, db):
    """The sample inventory has platforms with no spec: ports are shown, nothing is judged against a rate."""
    build_sample_inventory()
    html = client_for(Role.VIEWER).get("/inventory/fabric/").content.decode()
    assert html.count('data-port="') == 16
    assert "not in platform" in html  # no platform file declares them
    assert card_text(html, "ports-at-rate").startswith(
        "Ports active at expected rate 0 / 0")


def test_empty_inventory_pages_say_so(client_for, db):
    for url in ("/inventory/fabric/", "/inventory/storage/", "/inventory/pools/"):
        response = client_for(Role.VIEWER).get(url)
        assert response.status_code == 200
        assert b"No appliance in the inventory yet" in response.content


def test_unknown_appliance_is_not_found(client_for, demo):
    assert client_for(Role.VIEWER).get("/inventory/fabric/?appliance=nope").status_code == 404


# --- storage ---------------------------------------------------------------------------------------

def mount_row(html: str, node: str, mount_point: str) -> str:
    section = html.split(f'<section class="card" data-node="{node}"', 1)[1].split("</section>", 1)[0]
    return section.split(f'data-mount="{mount_point}"', 1)[1].split("</tr>", 1)[0]


def test_storage_lists_filesystems_with_declared_and_implied_options_and_tunables(client_for, demo):
    html = client_for(Role.VIEWER).get("/inventory/storage/").content.decode()
    scratch = html.split('data-filesystem="scratch"', 1)[1].split("</tr>\n", 1)[0]
    assert "Lustre" in scratch and "10.10.1.1@o2ib:/scratch" in scratch and "/mnt/scratch" in scratch
    assert "stor01, stor02" in scratch and "osc.*.max_rpcs_in_flight" in scratch and ">64<" in scratch
    assert '<code class="option">flock</code>' in scratch
    assert 'class="option option-implied" title="added by the storage stage' in scratch  # _netdev
    datasets = html.split('data-filesystem="datasets"', 1)[1].split("</tr>\n", 1)[0]
    assert "NFS over RDMA" in datasets and '<code class="option">proto=rdma</code>' in datasets


def test_storage_shows_mounts_and_smoke_results_from_the_node_facts(client_for, demo):
    gpu01 = Node.objects.get(name="gpu01")
    gpu01.facts = {
        "mounts": [
            {"name": "scratch", "mount_point": "/mnt/scratch", "present": True, "fstype": "lustre",
             "source": "10.10.1.1@o2ib:/scratch", "options": ["rw", "flock", "noatime", "lazystatfs"]},
            {"name": "datasets", "mount_point": "/mnt/datasets", "present": True, "fstype": "nfs",
             "source": "stor02:/export/datasets", "options": ["rw", "vers=4.2", "proto=rdma", "port=20049"]},
        ],
        "storage": {"results": [{"name": "scratch", "mount_point": "/mnt/scratch", "read_mbps": 11876.4,
                                 "write_mbps": 9032.1, "size_mib": 1024}]},
    }
    gpu01.save()
    gpu02 = Node.objects.get(name="gpu02")
    gpu02.facts = {"mounts": [{"name": "scratch", "mount_point": "/mnt/scratch", "present": False, "fstype": "",
                               "source": "", "options": []}]}
    gpu02.save()
    html = client_for(Role.VIEWER).get("/inventory/storage/").content.decode()

    scratch = mount_row(html, "gpu01", "/mnt/scratch")
    assert "mount-problem" not in scratch.split(">", 1)[0]
    assert '<code class="option option-declared">flock</code>' in scratch
    assert '<code class="option">lazystatfs</code>' in scratch and "missing" not in scratch
    assert "read <strong>11876</strong> MB/s" in scratch and "write <strong>9032</strong> MB/s" in scratch
    datasets = mount_row(html, "gpu01", "/mnt/datasets")
    assert 'class="mount-problem"' in html.split('data-mount="/mnt/datasets"', 1)[1][:40]
    assert re.findall(r'option option-absent">([^<]+)<', datasets) == ["nconnect=8"]
    assert "not measured" in datasets
    assert "not mounted" in mount_row(html, "gpu02", "/mnt/scratch")
    # A client the storage stage has not reached yet, and nodes that are no clients at all.
    assert "not verified" in mount_row(html, "gpu03", "/mnt/scratch")
    assert 'data-node="stor01"' not in html and 'data-node="mgmt01"' not in html


def test_storage_highlights_a_wrong_type_source_and_a_smoke_result_below_its_gate(client_for, demo):
    demo.settings = {**demo.settings, "storage": {"smoke_test": {"min_read_mbps": 5000, "min_write_mbps": 100}}}
    demo.save()
    gpu04 = Node.objects.get(name="gpu04")
    gpu04.facts = {
        "mounts": [{"name": "scratch", "mount_point": "/mnt/scratch", "present": True, "fstype": "nfs",
                    "source": "stor01:/scratch", "options": ["flock"]}],
        "storage": {"results": [{"name": "scratch", "mount_point": "/mnt/scratch", "read_mbps": 812.0,
                                 "write_mbps": 640.0, "size_mib": 256}]},
    }
    gpu04.save()
    html = client_for(Role.VIEWER).get("/inventory/storage/").content.decode()
    row = mount_row(html, "gpu04", "/mnt/scratch")
    assert '<td class="bad">nfs <span class="muted">expected lustre</span>' in row
    assert "expected <code>10.10.1.1@o2ib:/scratch</code>" in row
    assert '<span class="bad">read <strong>812</strong> MB/s</span>' in row
    assert '<span class="">write <strong>640</strong> MB/s</span>' in row
    assert "read ≥ 5000 MB/s" in html


def test_storage_shows_the_floors_the_stage_enforces_when_the_site_sets_none(client_for, demo):
    from appliance.partitioning.renderers.stage_vars import DEFAULT_SMOKE_TEST

    demo.settings = {key: value for key, value in demo.settings.items() if key != "storage"}
    demo.save()
    gpu04 = Node.objects.get(name="gpu04")
    gpu04.facts = {"storage": {"results": [{"name": "scratch", "mount_point": "/mnt/scratch", "read_mbps": 1500.0,
                                            "write_mbps": 1200.0, "size_mib": 256}]}}
    gpu04.save()
    html = client_for(Role.VIEWER).get("/inventory/storage/").content.decode()
    assert f"read ≥ {DEFAULT_SMOKE_TEST['min_read_mbps']} MB/s" in html
    assert f"write ≥ {DEFAULT_SMOKE_TEST['min_write_mbps']} MB/s" in html
    row = mount_row(html, "gpu04", "/mnt/scratch")
    assert '<span class="bad">read <strong>1500</strong> MB/s</span>' in row  # below the default floor


def test_storage_shows_a_filesystem_the_renderer_rejects_without_failing(client_for, demo):
    datasets = demo.filesystems.get(name="datasets")
    datasets.options = ["proto=tcp", "nconnect=8"]
    datasets.save()
    response = client_for(Role.VIEWER).get("/inventory/storage/")
    assert response.status_code == 200
    assert "option proto=tcp contradicts NFS over RDMA" in response.content.decode()


# --- pools -----------------------------------------------------------------------------------------

def test_pools_show_training_and_inference_nodes_settings_and_gpu_totals(client_for, demo):
    Node.objects.get(name="gpu02").transition("maintenance", "cable swap")
    GPU.objects.filter(node__name="gpu04", index__in=[6, 7]).update(mig_mode=GPU.MigMode.ENABLED)
    html = client_for(Role.VIEWER).get("/inventory/pools/").content.decode()
    training = html.split('data-kind="training"', 1)[1].split("</section>", 1)[0]
    inference = html.split('data-kind="inference"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<tr data-node="(\w+)"', training) == ["gpu01", "gpu02", "gpu03"]
    assert re.findall(r'<tr data-node="(\w+)"', inference) == ["gpu04"]
    assert '<strong data-testid="gpu-total">24</strong> GPUs on 3 nodes' in training
    assert '<strong data-testid="gpu-total">8</strong> GPUs on 1 node' in inference
    assert "<code>train</code>" in training and "exclusive" in training
    assert text_of(training.split("Node states", 1)[1].split("</dd>", 1)[0]) == "1 × Maintenance, 2 × New"
    assert 'data-testid="replicas">4' in inference and "<code>single</code>" in inference and "shared" in inference
    assert '<span class="state state-mig-enabled">2</span>' in inference


def test_pools_page_queries_do_not_grow_with_the_nodes(client_for, demo, django_assert_max_num_queries):
    client = client_for(Role.VIEWER)
    client.get("/inventory/pools/")  # session and user loaded once, outside the count
    with django_assert_max_num_queries(40) as captured:
        assert client.get("/inventory/pools/").status_code == 200
    baseline = len(captured.captured_queries)
    _clone_node("gpu04", "gpu05")
    with django_assert_max_num_queries(baseline):
        response = client.get("/inventory/pools/")
    assert b"gpu05" in response.content


def test_pools_render_the_generated_configs_live(client_for, demo):
    html = client_for(Role.VIEWER).get("/inventory/pools/").content.decode()
    files = re.findall(r'data-file="([^"]+)"', html)
    assert files == ["slurm.conf", "gres.conf", "cgroup.conf", "gpu-operator-values.yaml",
                     "device-plugin-configmap.yaml", "device-plugin-inference.yaml",
                     "node-labels-taints-inference.yaml"]
    assert "PartitionName=train Nodes=gpu01,gpu02,gpu03 OverSubscribe=EXCLUSIVE" in html
    assert "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in html
    assert "ConstrainDevices=yes" in html
    assert "replicas: 4" in html and "appliance.io/pool: inference" in html
    assert html.count('>download</a>') == 7


def test_pool_config_download_is_plain_text_with_a_file_name(client_for, demo):
    client = client_for(Role.VIEWER)
    response = client.get("/inventory/pools/demo/files/slurm.conf")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="demo-slurm.conf"'
    assert "PartitionName=train" in response.content.decode()
    labels = client.get("/inventory/pools/demo/files/node-labels-taints-inference.yaml").content.decode()
    assert "gpu04:" in labels and "gpu01" not in labels and "NoSchedule" in labels
    assert client.get("/inventory/pools/demo/files/passwd").status_code == 404
    assert client.get("/inventory/pools/other/files/slurm.conf").status_code == 404


def test_a_render_error_shows_its_message_not_a_server_error(client_for, demo):
    inference = Pool.objects.get(name="inference")
    inference.settings = {"time_slicing": {"replicas": 4}, "mig_strategy": "sometimes"}
    inference.save()
    client = client_for(Role.VIEWER)
    response = client.get("/inventory/pools/")
    assert response.status_code == 200
    html = response.content.decode()
    message = "pool inference: settings.mig_strategy &#x27;sometimes&#x27; is not one of none, single, mixed"
    assert f"Cannot generate gpu-operator-values.yaml: {message}" in html
    assert "PartitionName=train" in html  # the Slurm files are unaffected
    download = client.get("/inventory/pools/demo/files/gpu-operator-values.yaml")
    assert download.status_code == 409 and b"sometimes" in download.content


def test_downloaded_slurm_files_are_accepted_by_slurms_own_parser(client_for, demo, tmp_path):
    """What an operator downloads is what Slurm reads: `slurmd -G` parses both files and derives the GRES.
    Missing slurmd, root or mount namespaces fail the test: a skip would pass without Slurm reading them."""
    assert Path("/usr/sbin/slurmd").exists(), "Slurm's parser is not installed (Debian package slurmd, as tests/run does)"
    assert os.geteuid() == 0, "slurmd -G needs the /dev/nvidia* device files: mknod and a private /dev need root"
    client = client_for(Role.VIEWER)
    for name in ("slurm.conf", "gres.conf"):
        (tmp_path / name).write_bytes(client.get(f"/inventory/pools/demo/files/{name}").content)
    devices = tmp_path / "dev"
    devices.mkdir()
    script = (f"mount --bind {devices} /dev && for i in 0 1 2 3 4 5 6 7; do mknod /dev/nvidia$i c 195 $i; done && "
              f"slurmd -G -f {tmp_path / 'slurm.conf'} -N gpu01")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert "Operation not permitted" not in result.stderr, f"mount namespaces are not allowed here: {result.stderr}"
    assert result.returncode == 0, result.stderr
    assert "Gres Name=gpu Type=h100 Count=8" in result.stdout + result.stderr


def test_navigation_offers_the_three_pages_to_every_role_that_sees_the_inventory(client_for, db):
    for role in Role.values:
        html = client_for(role).get("/").content.decode()
        for url_name in ("portal:fabric", "portal:storage", "portal:pools"):
            assert f'data-nav="{url_name}"' in html, (role, url_name)


@pytest.mark.parametrize("page", ["storage", "pools"])
def test_pages_offer_an_appliance_picker_once_there_are_several(demo, client_for, page):
    from appliance.inventory.models import Appliance

    single = client_for(Role.VIEWER).get(f"/inventory/{page}/").content.decode()
    assert 'name="appliance"' not in single
    Appliance.objects.create(name="second")
    several = client_for(Role.VIEWER).get(f"/inventory/{page}/").content.decode()
    assert f'action="/inventory/{page}/"' in several
    assert '<option value="demo" selected>demo</option>' in several
    assert '<option value="second">second</option>' in several
