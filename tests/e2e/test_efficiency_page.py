"""The Efficiency page in Chromium on a 375 px screen: the appliance's bar of GPU-hours by cause and each
pool's and user's, drawn as SVG without script (the Content-Security-Policy reports nothing), the attribution's
accuracy figure, no horizontal scroll, nothing axe-core objects to; a job's link leads to its page."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from appliance.analytics.models import CauseHour
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ledger():
    """Two hours ago: job 4182 of alice on gpu01 (busy 45 min, waiting on input 15), bob's chat service on
    gpu02 holding memory and computing nothing, one GPU of gpu02 unallocated."""
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    PoolMembership.objects.create(pool=training, node=gpu01)
    PoolMembership.objects.create(pool=inference, node=gpu02)
    CauseHour.objects.bulk_create([
        CauseHour(node=gpu01, gpu=0, hour=hour, job="4182", user="alice", pool="training", gpu_seconds=3600,
                  used_seconds=2700, busy_s=2700, input_bound_s=900),
        CauseHour(node=gpu02, gpu=0, hour=hour, job="chat-7b", user="bob", pool="inference", gpu_seconds=3600,
                  used_seconds=144, memory_only_s=3600),
        CauseHour(node=gpu02, gpu=1, hour=hour, pool="inference", gpu_seconds=3600, idle_unallocated_s=3600),
    ])


def test_the_efficiency_page_on_a_phone(browser, live_server, users, ledger):
    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, viewport={"width": 375, "height": 800})
    context.set_default_timeout(20_000)
    page = context.new_page()
    reports = []
    page.on("console", lambda message: reports.append(message.text) if message.type == "error" else None)
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.VIEWER].username)
        page.fill("#id_password", PASSWORD)
        page.click("form.stack button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.goto("/analytics/?range=24h")
        appliance = page.get_by_test_id("efficiency-appliance")
        # 3 GPU-hours: busy 0.75, input-bound 0.25, memory-only 1, unallocated 1 (25 %, 8.3 %, 33.3 %, 33.3 %).
        bar = appliance.locator("svg.cause-bar").first
        expect(bar).to_be_visible()
        assert [(r.get_attribute("data-cause"), r.get_attribute("width")) for r in bar.locator("rect").all()] == [
            ("busy", "25.000"), ("idle-unallocated", "33.333"), ("input-bound", "8.333"), ("memory-only", "33.333")]
        box = bar.bounding_box()
        assert box["width"] > 250 and box["height"] >= 15  # drawn across the screen's width
        expect(page.get_by_test_id("efficiency-summary").locator("[data-part=idle]")).to_have_text("75.0 %")
        expect(page.get_by_test_id("by-pool").locator("tr[data-key=inference] [data-part=idle]")).to_have_text(
            "100.0 %")
        expect(page.get_by_test_id("by-user").locator("tr[data-key=alice] rect")).to_have_count(2)
        expect(page.get_by_test_id("accuracy")).to_contain_text("98.3 % of GPU-seconds on held-out telemetry written apart from the rules")
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"{widths[0]} px wide on a {widths[1]} px screen"
        screenshot(page, "D-efficiency-375")
        assert axe_violations(page) == []
        page.get_by_test_id("top-jobs").get_by_role("link", name="4182").click()
        page.wait_for_url(re.compile(r"/analytics/jobs/4182/$"))
        expect(page.get_by_test_id("job-efficiency").locator("svg.cause-bar rect")).to_have_count(2)
        expect(page.get_by_test_id("job-verdicts")).to_contain_text("No verdict in this window.")  # no rollups
        assert reports == []
    finally:
        context.close()
