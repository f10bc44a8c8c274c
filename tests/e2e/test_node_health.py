"""Node health in Chromium: after NVML stops listing GPU 5 and acceptance finds its Xid 79, the node page
shows GPU 5 missing with the evidence and the other seven ok; the Overview shows the failed verdict; an
Administrator sets the node Ready by hand with a reason, and it says so."""

import re

import pytest
from playwright.sync_api import expect

from appliance.core.roles import Role
from appliance.inventory.models import GPU
from appliance.provisioning.facts import FactsSink
from appliance.provisioning.models import Run, StageRun
from tests.e2e.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def _stage(inventory, stage, facts):
    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=[stage], state="succeeded")
    stage_run = StageRun.objects.create(run=run, stage=stage, order=1)
    FactsSink(stage_run, {n.name: n for n in inventory.appliance.nodes.all()}, dry_run=False)("gpu-01", facts)


@pytest.fixture
def gpu5_missing(inventory):
    node = inventory.gpu_node
    seen = [g for g in GPU.objects.filter(node=node).order_by("index") if g.index != 5]
    _stage(inventory, "gpu", {"appliance_gpus": [
        {"index": slot, "uuid": g.uuid, "name": g.model, "memory_mib": g.memory_mib, "pci_bus_id": g.pci_bus_id,
         "retired_pages": 0, "retired_pages_dbe": 0, "retired_pages_pending": 0} for slot, g in enumerate(seen)]})
    _stage(inventory, "acceptance", {"appliance_acceptance": [
        {"check": "gpu.xid_errors", "node": "gpu-01", "expected": "<= 0", "measured": 1, "passed": False, "source": "",
         "message": "1 Xid errors: Xid 79 on 0000:68:00.0: pid=0, name=nvidia, GPU has fallen off the bus."}]})
    node.transition("provisioning", "run")
    node.transition("failed", "checks fail: GPU 5 (0000:68:00.0) missing")
    return node


def test_gpu5_missing_then_ready_by_hand(page, log_in, gpu5_missing):
    log_in(Role.ADMINISTRATOR)
    page.wait_for_url(re.compile(r"/$"))
    row = page.get_by_test_id("overview-node-gpu-01")
    expect(row.get_by_test_id("acceptance-verdict")).to_contain_text("failed")
    expect(page.get_by_test_id("gpus-missing")).to_have_text("1")
    row.get_by_role("link", name="gpu-01").click()
    page.wait_for_url(re.compile(r"/inventory/nodes/gpu-01/$"))

    expect(page.get_by_test_id("gpu-health-5")).to_contain_text("failing")
    # The latest measure of its presence is acceptance's (the gpu stage's "NVML does not list it" came first).
    expect(page.get_by_test_id("gpu-health-5")).to_contain_text("GPU 5 (0000:68:00.0) missing: XID 79, fallen off the bus")
    expect(page.get_by_test_id("gpu-health-5")).to_contain_text("XID 79 at 0000:68:00.0")
    for index in (0, 1, 2, 3, 4, 6, 7):
        expect(page.get_by_test_id(f"gpu-health-{index}")).to_have_text("ok")
    screenshot(page, "node-health")

    by_hand = page.get_by_test_id("by-hand")
    by_hand.locator("#id_by_hand_reason").fill("GPU 5 reseated; nvidia-smi lists 8")
    by_hand.locator("button[data-by-hand=ready]").click()
    page.wait_for_url(re.compile(r"/inventory/nodes/gpu-01/$"))
    expect(page.get_by_test_id("node-state")).to_have_text("Ready")
    expect(page.get_by_test_id("state-by-hand").first).to_have_text("set by hand")
    expect(page.get_by_test_id("state-reason")).to_have_text("GPU 5 reseated; nvidia-smi lists 8")
    # The failing checks stay as measured: setting the state by hand does not make a GPU present.
    expect(page.get_by_test_id("gpu-health-5")).to_contain_text("failing")


@pytest.mark.parametrize("width", [1440, 390])
def test_health_pages_have_no_axe_violations(browser, live_server, users, gpu5_missing, width):
    from axe_playwright_python.sync_playwright import Axe

    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.ADMINISTRATOR].username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/$"))
        found = []
        for url in ("/", "/inventory/nodes/", "/inventory/nodes/gpu-01/"):
            page.goto(url)
            found += [f"{url}: {v['id']}: {[n['target'] for n in v['nodes'][:3]]}"
                      for v in Axe().run(page).response["violations"]]
    finally:
        context.close()
    assert not found, "\n".join(found)
