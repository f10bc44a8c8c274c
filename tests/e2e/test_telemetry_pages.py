"""The telemetry pages in Chromium: the charts are drawn in the browser from the API (uPlot and the heatmap
canvas, served by the appliance: the Content-Security-Policy reports nothing), the numbers read with
their units, a node without a collector says so, a job page shows its GPUs and their use, an Operator
acknowledges an alert, and a 390 px screen has no horizontal scroll.

Rows are written by hand a minute before the real clock (tests/telemetry/rows.py), plus an hour of
history so that the charts have lines to draw."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from appliance.core.roles import Role
from tests.e2e.conftest import screenshot
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import event, gpu_row, minutes_before, node_row, sample_telemetry

pytestmark = pytest.mark.django_db(transaction=True)

LOADED = "[data-telemetry][data-loaded]"


@pytest.fixture
def telemetry():
    inventory = build_sample_inventory()
    now = timezone.now()
    one, two = sample_telemetry(inventory, now=now)
    for minute in range(3, 61):
        start = minutes_before(now, minute)
        for gpu in range(8):
            if (gpu, minute) != (1, 5):  # sample_telemetry's own row
                gpu_row(one, gpu, start, util=(minute * 7 + gpu * 13) % 100, fb_used_mib=20000 + gpu * 1000,
                        power_w=150 + gpu * 20, job="4242" if gpu == 0 else "")
        node_row(one, start, gpu_util=(minute * 7) % 100, gpu_power_w=2400, ib_tx_bps=2e9, ib_rx_bps=1e9, fs_read_bps=3e9,
                 fs_write_bps=1e8, cpu_busy=0.3, cpu_iowait=0.1,
                 mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 3e9, "write_bps": 1e8}})
        node_row(two, start, gpu_util=15, ib_tx_bps=5e8, ib_rx_bps=5e8, fs_read_bps=1e8, fs_write_bps=0)
    event(one, "xid", minutes_before(now, 1), gpu=2, message="Xid 79: GPU has fallen off the bus")
    return inventory


@pytest.fixture
def policy_reports(page):
    """Whatever the browser refused under the Content-Security-Policy, or failed to load."""
    reports = []
    page.on("console", lambda message: reports.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: reports.append(str(error)))
    return reports


def axe_violations(page) -> list[str]:
    """axe-core on the page as drawn (tests/e2e/test_accessibility.py checks every page before any chart)."""
    from axe_playwright_python.sync_playwright import Axe

    return [f"{v['id']}: {v['help']} {[n['html'][:120] for n in v['nodes'][:3]]}"
            for v in Axe().run(page).response["violations"]]


def _logged_in(page, log_in, role=Role.VIEWER):
    log_in(role)
    page.wait_for_url(re.compile(r"/$"))
    return page


def test_the_fleet_page_draws_from_the_api(page, log_in, telemetry, policy_reports):
    _logged_in(page, log_in)
    expect(page.get_by_test_id("overview-gpu-live")).to_contain_text("40.0 %")
    page.get_by_test_id("overview-gpu-live").get_by_role("link", name="Telemetry").click()
    page.wait_for_url(re.compile(r"/telemetry/$"))
    page.wait_for_selector(LOADED)
    assert page.locator("[data-telemetry]").get_attribute("data-loaded") == "true"
    live = page.get_by_test_id("live-grid")
    expect(live.locator('tr[data-node="gpu-01"] td[data-gpu="0"]')).to_have_text("70%")
    expect(live.locator('tr[data-node="gpu-01"] td[data-gpu="1"]')).to_have_text("—")
    expect(page.get_by_test_id("heatmap-canvas")).to_be_visible()
    for chart in ("gpu", "power", "fabric", "filesystem"):
        figure = page.get_by_test_id(f"chart-{chart}")
        expect(figure).to_have_attribute("data-state", "drawn")
        expect(figure.locator("canvas")).to_have_count(1)
    # The newest minute, written out with units: 3 + 1 GB/s sent, 4 + 0.5 GB/s read.
    expect(page.get_by_test_id("chart-fabric").get_by_test_id("chart-latest")).to_have_text("sent 4 GB/s · received 2 GB/s")
    expect(page.get_by_test_id("chart-filesystem").get_by_test_id("chart-latest")).to_contain_text("read 4.5 GB/s")
    expect(page.get_by_test_id("open-alerts")).to_contain_text("1 open hardware alert")
    screenshot(page, "D-telemetry")
    assert axe_violations(page) == []
    page.get_by_role("link", name="24 hours").click()
    page.wait_for_url(re.compile(r"range=24h"))
    page.wait_for_selector(LOADED)
    expect(page.get_by_test_id("chart-fabric")).to_have_attribute("data-state", "drawn")
    assert policy_reports == []


def test_the_fleet_page_refreshes_each_minute(page, log_in, telemetry):
    page.clock.install()
    _logged_in(page, log_in)
    page.goto("/telemetry/")
    page.wait_for_selector(LOADED)
    cell = page.get_by_test_id("live-grid").locator('tr[data-node="gpu-01"] td[data-gpu="2"]')
    expect(cell).to_have_text("—")
    gpu_row(telemetry.gpu_node, 2, minutes_before(timezone.now(), 1), util=55, fb_used_mib=100, power_w=200)
    page.clock.fast_forward(61_000)
    expect(cell).to_have_text("55%")


def test_a_node_a_gpu_and_a_node_without_collector(page, log_in, telemetry, policy_reports):
    _logged_in(page, log_in, Role.ML_ENGINEER)
    page.goto("/telemetry/nodes/gpu-01/")
    page.wait_for_selector(LOADED)
    for chart in ("gpu-util", "gpu-memory", "gpu-power", "fabric", "mounts", "cpu"):
        expect(page.get_by_test_id(f"chart-{chart}")).to_have_attribute("data-state", "drawn")
    expect(page.get_by_test_id("chart-mounts").get_by_test_id("chart-latest")).to_contain_text(
        "/mnt/scratch read 4 GB/s")
    expect(page.get_by_test_id("chart-cpu").get_by_test_id("chart-latest")).to_contain_text("I/O wait 25 %")
    screenshot(page, "D-node")
    assert axe_violations(page) == []
    page.get_by_role("link", name="GPU 0", exact=True).click()
    page.wait_for_url(re.compile(r"/telemetry/nodes/gpu-01/gpus/0/"))
    page.wait_for_selector(LOADED)
    expect(page.get_by_test_id("chart-power").get_by_test_id("chart-latest")).to_contain_text("power 300 W")
    expect(page.get_by_role("link", name="4242")).to_be_visible()
    screenshot(page, "D-gpu")
    page.goto("/telemetry/nodes/storage-01/")
    page.wait_for_selector(LOADED)
    expect(page.get_by_test_id("chart-fabric").get_by_test_id("chart-empty")).to_have_text(
        "No data yet: no collector is deployed on this node (the monitoring stage deploys one).")
    page.goto("/inventory/nodes/gpu-01/")
    page.wait_for_selector(LOADED)
    expect(page.get_by_test_id("node-telemetry").get_by_test_id("chart-gpu-util")).to_have_attribute("data-state", "drawn")
    screenshot(page, "D-node-detail")
    assert policy_reports == []


def test_the_job_page_shows_its_gpus_their_use_and_its_io(page, log_in, telemetry, policy_reports):
    _logged_in(page, log_in)
    page.goto("/telemetry/jobs/")
    page.get_by_role("link", name="4242").click()
    page.wait_for_url(re.compile(r"/telemetry/jobs/4242/$"))
    expect(page.get_by_test_id("job-gpu-count")).to_have_text("2")
    rows = page.get_by_test_id("job-gpus").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator('tr[data-gpu="gpu-02/3"]')).to_contain_text("10.0 %")
    page.wait_for_selector(LOADED)
    for chart in ("gpu-util", "gpu-memory", "fs", "fabric", "iowait"):
        expect(page.get_by_test_id(f"chart-{chart}")).to_have_attribute("data-state", "drawn")
    expect(page.get_by_test_id("chart-gpu-util").get_by_test_id("chart-latest")).to_contain_text("gpu-02/3 10 %")
    screenshot(page, "D-job")
    assert axe_violations(page) == []
    assert policy_reports == []


def test_an_operator_acknowledges_an_alert(page, log_in, telemetry):
    _logged_in(page, log_in, Role.OPERATOR)
    page.goto("/telemetry/alerts/")
    expect(page.get_by_test_id("alerts")).to_contain_text("Xid 79: GPU has fallen off the bus")
    screenshot(page, "D-alerts")
    page.locator("button[data-acknowledge]").click()
    expect(page.locator(".messages")).to_contain_text("Alert acknowledged: gpu-01, Xid 79")
    expect(page.get_by_test_id("no-alerts")).to_be_visible()


@pytest.mark.parametrize("path", ["/telemetry/", "/telemetry/nodes/gpu-01/", "/telemetry/nodes/gpu-01/gpus/0/",
                                  "/telemetry/jobs/4242/", "/inventory/nodes/gpu-01/"])
def test_a_phone_screen_has_no_horizontal_scroll(browser, live_server, users, telemetry, path):
    from appliance.telemetry.models import GpuRollup
    from tests.conftest import PASSWORD

    GpuRollup.objects.filter(node=telemetry.gpu_node, gpu=0).update(fb_used_max_mib=4096)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 800})
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.VIEWER].username)
        page.fill("#id_password", PASSWORD)
        page.click("form.stack button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.goto(path)
        page.wait_for_selector(LOADED)
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        if path == "/telemetry/":
            screenshot(page, "D-telemetry-390")
        assert widths[0] <= widths[1], f"{path}: {widths[0]} px wide on a {widths[1]} px screen"
        charts = page.locator("figure.chart[data-state=drawn] canvas")
        assert charts.count() >= 1
    finally:
        context.close()


def test_a_chart_of_a_single_minute_spans_an_hour_not_years(page, log_in):
    """Right after the collectors start, a node has one minute: its chart's time axis is the hour before
    that minute (uPlot alone widened a single point's axis to years)."""
    inventory = build_sample_inventory()
    start = minutes_before(timezone.now(), 1)
    node_row(inventory.gpu_node, start, gpu_util=30, ib_tx_bps=1e9, ib_rx_bps=1e9)
    _logged_in(page, log_in)
    page.goto("/telemetry/nodes/gpu-01/")
    page.wait_for_selector(LOADED)
    span = page.evaluate("""() => {
      const body = document.querySelector('[data-chart][data-state="drawn"] .chart-body');
      const x = body.uplot.scales.x;
      return [x.min, x.max];
    }""")
    assert span == [int(start.timestamp()) - 3600, int(start.timestamp()) + 60]


@pytest.mark.parametrize("language", ["en", "ru"])
def test_charts_read_iso_times_in_the_portals_zone_and_their_legend_without_hovering(browser, live_server, users,
                                                                                       telemetry, language):
    """The browser is in New York, the portal in UTC: the axes and the legend say the portal's time, 24-hour
    ISO; the legend shows the newest minute before any hover; the per-minute peak series says what it is,
    in the reader's language."""
    from appliance.telemetry.models import GpuRollup
    from tests.conftest import PASSWORD

    GpuRollup.objects.filter(node=telemetry.gpu_node, gpu=0).update(fb_used_max_mib=4096)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900},
                                  timezone_id="America/New_York", locale={"en": "en-US", "ru": "ru-RU"}[language])
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", users[Role.VIEWER].username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    page.goto("/telemetry/nodes/gpu-01/gpus/0/")
    page.wait_for_selector(LOADED)
    # The newest minute the fixture wrote for this GPU (not one counted back from now again: a minute that
    # turned between the fixture and this line failed a full run at 22:39).
    written = GpuRollup.objects.filter(node=telemetry.gpu_node, gpu=0, step=60).order_by("-start").first().start
    newest = timezone.localtime(written).strftime("%Y-%m-%d %H:%M UTC")
    legend = page.get_by_test_id("chart-memory").locator(".u-legend")
    words = {"en": ("time", "peak of each minute"), "ru": ("время", "пик за каждую минуту")}[language]
    expect(legend).to_contain_text(newest)
    expect(legend).not_to_contain_text("--")
    expect(legend.locator(".u-series").first).to_contain_text(words[0])
    expect(legend).to_contain_text(words[1])
    # The axis is drawn on a canvas: its labels as uPlot wrote them.
    ticks = page.evaluate("document.querySelector('[data-chart=memory] .chart-body').uplot.axes[0]._values")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d(\n\d{4}-\d\d-\d\d)?", tick) for tick in ticks), ticks
    context.close()
