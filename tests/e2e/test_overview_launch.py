"""The Overview as a launch pad in Chromium, at 1440 px in English and 390 px in Russian: each figure is a
link that leads to its list, the idle figure to the idle GPUs and one of them to its GPU page; the
recommendations page says the detectors have not run yet and offers an Operator to run them. No horizontal
scroll, nothing axe-core objects to, no console error."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from appliance.analytics.models import CauseHour, Finding
from appliance.core.roles import Role
from appliance.telemetry.models import GpuRollup
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations
from tests.sample_inventory import build_sample_inventory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet():
    """The sample inventory; in the newest minute job 4182 busy on GPU 0 and holding GPU 1 idle, GPU 2 free
    (half an hour before, GPU 0 at 50 %); half a GPU-hour allocated but idle this hour; one open
    recommendation."""
    inventory = build_sample_inventory()
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    GpuRollup.objects.bulk_create([
        GpuRollup(node=inventory.gpu_node, gpu=gpu, step=60, start=minute, samples=60, util=util, job=job,
                  fb_used_mib=1024.0, fb_total_mib=81559.0, power_w=100.0)
        for gpu, util, job in [(0, 97.0, "4182"), (1, 1.0, "4182"), (2, 0.0, "")]]
        + [GpuRollup(node=inventory.gpu_node, gpu=0, step=60, start=minute - timedelta(minutes=30), samples=60,
                     util=50.0, job="4182")])  # half an hour before: the hour's line has two points
    CauseHour.objects.create(node=inventory.gpu_node, gpu=1, hour=minute.replace(minute=0), job="4182",
                             pool="training", gpu_seconds=1800, allocated_idle_s=1800)
    Finding.objects.create(key="allocated-idle:4182", kind=Finding.Kind.ALLOCATED_IDLE, subject="4182",
                           summary="job 4182 held 1 GPU idle", proposal="release it", window_start=minute,
                           window_end=minute, first_seen=minute, last_seen=minute)
    return inventory


def signed_in(browser, live_server, user, width, locale):
    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, locale=locale, viewport={"width": width, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return context, page, errors


def no_sideways_scroll(page):
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{widths[0]} px wide on a {widths[1]} px screen"


@pytest.mark.parametrize(("width", "locale", "texts"), [
    (1440, "en-US", {"findings": "open recommendations", "idle": "Idle GPUs in this minute"}),
    (390, "ru-RU", {"findings": "открытые рекомендации", "idle": "Простаивающие GPU в эту минуту"}),
])
def test_the_overview_leads_to_the_lists_behind_its_figures(browser, live_server, users, fleet, width, locale, texts):
    context, page, errors = signed_in(browser, live_server, users[Role.OPERATOR], width, locale)
    try:
        page.goto("/")
        pad = page.get_by_test_id("overview-launch")
        expect(pad.locator("[data-figure=findings]")).to_have_text(f"1 {texts['findings']}")
        expect(pad.locator("[data-figure=jobs] .big")).to_have_text("1")
        expect(page.get_by_test_id("overview-trend").locator("polyline")).to_have_count(1)
        expect(page.get_by_test_id("overview-idle-causes").locator("[data-cause=allocated-idle]")).to_contain_text(
            "0.50")
        page.get_by_test_id("gpu-live-idle").click()  # 2 idle: GPU 1 held by 4182, GPU 2 free
        assert page.url.endswith("/#idle-gpus")
        expect(page.locator("#idle-gpus")).to_have_text(texts["idle"])  # the link's target is the list's heading
        expect(page.locator("#idle-gpus")).to_be_in_viewport()
        expect(page.get_by_test_id("idle-gpus").locator("a")).to_have_count(2)
        no_sideways_scroll(page)
        screenshot(page, f"overview-launch-{width}")
        assert axe_violations(page) == []
        page.get_by_test_id("idle-gpus").locator("a").last.click()
        page.wait_for_url(f"**/telemetry/nodes/{fleet.gpu_node.name}/gpus/2/**")
        page.goto("/")
        page.get_by_test_id("overview-launch").locator("[data-figure=findings]").click()
        page.wait_for_url("**/analytics/recommendations/")
        expect(page.locator("[data-finding]")).to_have_count(1)
        expect(page.get_by_test_id("run-detectors")).to_be_visible()
        no_sideways_scroll(page)
        screenshot(page, f"recommendations-schedule-{width}")
        assert axe_violations(page) == []
        assert errors == []
    finally:
        context.close()
