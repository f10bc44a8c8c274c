"""Log in through the browser as each role: what the navigation offers, logout, errors, denial."""

import re

import pytest
from playwright.sync_api import expect

from appliance.core.roles import CAPABILITIES, Role
from appliance.portal.navigation import NAVIGATION
from tests.e2e.conftest import screenshot
from tests.sample_inventory import BMC_PASSWORD, build_sample_inventory

pytestmark = pytest.mark.e2e

# The pages of the foundation each role must (True) or must not (False) be offered.
OFFERED = {
    Role.ADMINISTRATOR: {"inventory:node-list": True, "inventory:site-import": True, "accounts:user-list": True},
    Role.OPERATOR: {"inventory:node-list": True, "inventory:site-import": True, "accounts:user-list": False},
    Role.ML_ENGINEER: {"inventory:node-list": True, "inventory:site-import": False, "accounts:user-list": False},
    Role.AUDITOR: {"inventory:node-list": True, "inventory:site-import": False, "accounts:user-list": True},
    Role.VIEWER: {"inventory:node-list": True, "inventory:site-import": False, "accounts:user-list": False},
}


def navigation_of(page) -> list[str]:
    return page.locator("nav.mainnav [data-nav]").evaluate_all("links => links.map(a => a.dataset.nav)")


@pytest.mark.parametrize("role", Role.values)
def test_each_role_is_offered_exactly_its_navigation_and_can_log_out(page, log_in, role):
    log_in(role)
    page.wait_for_url(re.compile(r"/$"))
    assert page.get_by_test_id("current-role").inner_text() == Role(role).label
    offered = navigation_of(page)
    assert offered == [e.url_name for e in NAVIGATION if Role(role) in CAPABILITIES[e.capability]]
    for url_name, expected in OFFERED[role].items():
        assert (url_name in offered) is expected, url_name
    # Every entry offered opens.
    for link in page.locator("nav.mainnav [data-nav]").evaluate_all("links => links.map(a => a.href)"):
        assert page.goto(link).status == 200, link

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/accounts/login/$"))
    assert navigation_of(page) == []
    page.goto("/inventory/nodes/")
    assert "/accounts/login/" in page.url


def test_failed_login_shows_an_error(page, log_in):
    log_in(Role.OPERATOR, password="not-the-password")
    alert = page.get_by_role("alert")
    assert "correct username and password" in alert.inner_text()
    assert "/accounts/login/" in page.url
    assert navigation_of(page) == []


def test_auditor_is_refused_the_site_import_page(page, log_in):
    log_in(Role.AUDITOR)
    page.wait_for_url(re.compile(r"/$"))
    response = page.goto("/inventory/site/import/")
    assert response.status == 403
    # The appliance's own 403 page, in the portal frame, keeping the reason.
    assert page.get_by_test_id("error-message").inner_text() == "Your role does not allow this."
    assert page.get_by_test_id("current-role").inner_text() == Role(Role.AUDITOR).label


def test_node_list_with_data_filters_live_and_opens_a_node(page, log_in, transactional_db):
    build_sample_inventory()
    # The portal works under its Content-Security-Policy: htmx swaps and styles, nothing refused.
    refused = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    log_in(Role.OPERATOR)
    page.wait_for_url(re.compile(r"/$"))
    page.get_by_role("link", name="Nodes", exact=True).click()  # the menu's (the Overview links its node count too)
    page.wait_for_url(re.compile(r"/inventory/nodes/$"))
    rows = page.locator("#node-table tbody tr")
    assert rows.count() == 3
    screenshot(page, "node-list")
    page.select_option("select[name=role]", "storage")  # htmx swaps the table in place
    page.wait_for_url(re.compile(r"role=storage"))
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    assert page.locator("#node-table tbody tr").get_attribute("data-node") == "storage-01"
    page.select_option("select[name=role]", "")
    expect(page.locator("#node-table tbody tr")).to_have_count(3)

    page.get_by_role("link", name="gpu-01").click()
    page.wait_for_url(re.compile(r"/inventory/nodes/gpu-01/$"))
    assert page.locator("[data-testid=gpus] tbody tr").count() == 8
    assert BMC_PASSWORD not in page.content()
    screenshot(page, "node-detail")
    page.fill("#id_reason", "fan swap")
    page.click("button[data-transition=maintenance]")
    page.wait_for_url(re.compile(r"/inventory/nodes/gpu-01/$"))
    assert page.get_by_test_id("node-state").inner_text() == "Maintenance"
    assert "script-src 'self';" in page.goto("/inventory/nodes/").headers["content-security-policy"]
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"
    assert refused == []


def test_site_import_preview_then_confirm(page, log_in, tmp_path, site_credentials):
    from tests.api.sites import SITE_BMC_PASSWORD, VALID_SITE

    site = tmp_path / "site-a.yml"
    site.write_text(VALID_SITE)
    log_in(Role.OPERATOR)
    page.wait_for_url(re.compile(r"/$"))
    page.get_by_role("link", name="Site import").click()
    page.set_input_files("#id_file", str(site))
    page.get_by_role("button", name="Check and preview").click()
    report = page.get_by_test_id("site-report")
    assert "what an import would change in upload-demo" in report.inner_text()
    assert page.locator("[data-change=create]").count() > 0
    page.get_by_role("button", name="Import these changes").click()
    assert "imported into upload-demo" in page.get_by_test_id("site-report").inner_text()
    page.goto("/inventory/nodes/?pool=training")
    assert page.locator("#node-table tbody tr").get_attribute("data-node") == "up-gpu01"
    assert SITE_BMC_PASSWORD not in page.content()
