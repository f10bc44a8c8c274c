"""The fabric, storage and pools pages in Chromium, on the demo site as the stages leave it."""

import re
from pathlib import Path

import pytest

from appliance.core.roles import Role
from appliance.inventory.models import HCAPort, Node
from appliance.inventory.services import import_site
from appliance.simulation.services import demo_site_text, ensure_demo_credential
from tests.e2e.conftest import screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo(settings, tmp_path, db):
    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    settings.KEYS_DIR = settings.STATE_DIR / "keys"
    (settings.SIMULATION_DIR / "ca").mkdir(parents=True)
    (settings.SIMULATION_DIR / "bmc-password").write_text("Demo-bmc-Pw-e2e-fabric\n")
    ensure_demo_credential()
    appliance = import_site(demo_site_text(), "demo.yml").appliance
    for port in HCAPort.objects.select_related("hca__node"):
        port.state, port.physical_state, port.rate_gbps = "Active", "LinkUp", 400
        port.guid = f"0x58a2e10300{port.pk:06x}"
        port.counters = {"SymbolErrorCounter": 0, "LinkDownedCounter": 1, "LinkErrorRecoveryCounter": 0}
        if (port.hca.node.name, port.hca.device) == ("gpu03", "mlx5_5"):
            port.state, port.physical_state, port.rate_gbps = "Down", "Polling", 0
        if (port.hca.node.name, port.hca.device) == ("gpu02", "mlx5_1"):
            port.counters = {**port.counters, "SymbolErrorCounter": 412}
        port.save()
    for name in ("gpu01", "gpu02", "gpu03", "gpu04"):
        node = Node.objects.get(name=name)
        node.facts = {
            "mounts": [
                {"name": "scratch", "mount_point": "/mnt/scratch", "present": True, "fstype": "lustre",
                 "source": "10.10.1.1@o2ib:/scratch", "options": ["rw", "flock", "noatime", "lazystatfs"]},
                {"name": "datasets", "mount_point": "/mnt/datasets", "present": name != "gpu04", "fstype": "nfs",
                 "source": "stor02:/export/datasets",
                 "options": ["rw", "vers=4.2", "proto=rdma", "port=20049"] + (["nconnect=8"] if name != "gpu02" else [])},
            ],
            "storage": {"results": [{"name": "scratch", "mount_point": "/mnt/scratch", "read_mbps": 11900.0 - 100 * int(name[-1]),
                                     "write_mbps": 9100.0, "size_mib": 1024}]},
        }
        node.save()
    return appliance


def test_fabric_storage_and_pools_pages_in_a_browser(page, log_in, demo):
    log_in(Role.VIEWER)
    page.wait_for_url(re.compile(r"/$"))

    page.locator('nav.mainnav [data-nav="portal:fabric"]').click()
    page.wait_for_url(re.compile(r"/inventory/fabric/$"))
    assert page.get_by_test_id("ports-at-rate").locator(".big").inner_text() == "36 / 37"
    assert page.get_by_test_id("ports-with-errors").locator(".big").inner_text() == "1"
    assert page.locator('[data-port="mlx5_1/1"] .counter-over').count() == 1
    screenshot(page, "fabric")
    page.select_option('select[name="state"]', "problem")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"state=problem"))
    assert page.locator("section.node-fabric").evaluate_all("s => s.map(e => e.dataset.node)") == ["gpu02", "gpu03"]
    assert page.locator("tr[data-port]").count() == 2

    page.locator('nav.mainnav [data-nav="portal:storage"]').click()
    page.wait_for_url(re.compile(r"/inventory/storage/$"))
    assert page.locator('[data-node="gpu02"] [data-mount="/mnt/datasets"] .option-absent').inner_text() == "nconnect=8"
    assert page.locator('[data-node="gpu04"] [data-mount="/mnt/datasets"]').get_by_text("not mounted").is_visible()
    screenshot(page, "storage")

    page.locator('nav.mainnav [data-nav="portal:pools"]').click()
    page.wait_for_url(re.compile(r"/inventory/pools/$"))
    training = page.locator('[data-kind="training"]')
    assert training.locator('[data-pool="training"] tr[data-node]').count() == 3
    assert page.locator('[data-pool="inference"] [data-testid="replicas"]').inner_text().startswith("4")
    slurm_conf = page.locator('[data-file="slurm.conf"]')
    slurm_conf.locator("summary").click()
    assert "OverSubscribe=EXCLUSIVE" in slurm_conf.locator("pre").inner_text()
    screenshot(page, "pools")
    with page.expect_download() as download_info:
        slurm_conf.get_by_role("link", name="download").click()
    download = download_info.value
    assert download.suggested_filename == "demo-slurm.conf"
    assert "PartitionName=train" in Path(download.path()).read_text()
