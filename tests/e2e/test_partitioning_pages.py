"""The partitioning pages in Chromium on a 390 px screen: the layout page draws each GPU as its 8 memory
slices with text labels, an Operator fills the plan editor, previews and sees the planned slices beside
the current ones and what the plan disrupts, then sizes a model in the advisor; nothing overflows, nothing axe-core objects to, no console
error (the Content-Security-Policy refuses inline styles: the slices are placed by classes)."""

import pytest
from playwright.sync_api import expect

from appliance.core.roles import Role
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations
from tests.partitioning.test_api_partitioning import lab  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _no_horizontal_scroll(page):
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{widths[0]} px wide on a {widths[1]} px screen"


def test_layout_and_plan_preview_on_a_phone(browser, live_server, users, lab):  # noqa: F811
    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 844})
    context.set_default_timeout(20_000)
    page = context.new_page()
    reports = []
    page.on("console", lambda message: reports.append(message.text) if message.type == "error" else None)
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.OPERATOR].username)
        page.fill("#id_password", PASSWORD)
        page.click("form.stack button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)

        page.goto("/partitioning/")
        gpu0 = page.locator('[data-gpu="gpu01/gpu0"] [data-testid="slices-now"] .slice-block')
        expect(gpu0).to_have_count(5)
        expect(gpu0.first).to_contain_text("3g.40gb")
        # The 3g.40gb instance spans 4 of the 8 slices: half the row, drawn by the grid (no inline style).
        row = page.locator('[data-gpu="gpu01/gpu0"] [data-testid="slices-now"]').bounding_box()
        block = gpu0.first.bounding_box()
        assert 0.45 < block["width"] / row["width"] < 0.55, (block, row)
        expect(page.locator('[data-gpu="gpu01/gpu1"] [data-testid="slices-now"]')).to_contain_text("whole GPU")
        _no_horizontal_scroll(page)
        screenshot(page, "P-partitioning-layout-390")
        assert axe_violations(page) == []

        page.goto("/partitioning/plans/new/")
        rows = page.get_by_test_id("request-row")
        rows.nth(0).get_by_label("Name").fill("chat-7b")
        rows.nth(0).get_by_label("Memory (GB)").fill("18")
        rows.nth(0).get_by_label("Replicas").fill("2")
        rows.nth(0).get_by_label("Isolation").select_option("hard")
        rows.nth(1).get_by_label("Name").fill("train")
        rows.nth(1).get_by_label("Memory (GB)").fill("80")
        rows.nth(1).get_by_label("Isolation").select_option("exclusive")
        _no_horizontal_scroll(page)
        page.get_by_test_id("preview").click()
        expect(page.get_by_test_id("preview-heading")).to_be_visible()
        expect(page.get_by_test_id("unplaced")).to_contain_text("Every request fits.")
        planned = page.locator('[data-gpu="gpu01/gpu0"] [data-testid="slices-planned"]')
        expect(planned).to_contain_text("3g.40gb")
        expect(planned).to_contain_text("chat-7b#")
        expect(page.locator('[data-gpu="gpu01/gpu1"] [data-testid="slices-planned"]')).to_contain_text("train#0")
        expect(page.get_by_test_id("disruption")).to_be_visible()
        _no_horizontal_scroll(page)
        screenshot(page, "P-partitioning-preview-390")
        assert axe_violations(page) == []

        page.goto("/partitioning/advisor/")
        page.get_by_label("Parameters (billions)").fill("8.03")
        page.get_by_label("Layers").fill("32")
        page.get_by_label("Key/value heads").fill("8")
        page.get_by_label("Head dimension").fill("128")
        page.get_by_test_id("size").click()
        expect(page.locator('[data-part="kv_bytes_per_token"]')).to_contain_text("(131072 B)")
        expect(page.get_by_test_id("planner-request")).to_contain_text('"isolation": "soft"')
        _no_horizontal_scroll(page)
        screenshot(page, "P-partitioning-advisor-390")
        assert axe_violations(page) == []
        assert reports == []
    finally:
        context.close()
