"""The portal in Russian, as a Russian operator meets it: their browser's language first, then the
switch in the frame, which holds across pages and over their browser's choice."""

import pytest

from appliance.core.roles import Role
from tests.e2e.portal_pages import portal_objects, portal_pages  # noqa: F401 (a fixture)
from tests.e2e.test_layout import WIDEST, _log_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def russian_page(browser, live_server):
    context = browser.new_context(base_url=live_server.url, locale="ru-RU", viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def test_a_russian_browser_gets_russian_and_the_switch_changes_it(russian_page, users):
    from tests.conftest import PASSWORD

    page = russian_page
    page.goto("/accounts/login/")
    assert page.locator("html").get_attribute("lang") == "ru"
    assert page.locator("h1").inner_text() == "Войти"

    page.fill("#id_username", users[Role.OPERATOR].username)
    page.fill("#id_password", PASSWORD)
    page.locator("main button[type=submit]").click()
    page.wait_for_url("**/")
    assert page.get_by_test_id("current-role").inner_text() == "Оператор"
    assert page.locator("h1").first.inner_text() == "Обзор"

    # The frame's switch: English, kept on the next page although the browser still asks for Russian.
    switch = page.locator("form[data-language-switch]").first
    switch.locator("select[name=language]").select_option("en")
    switch.locator("button").click()
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.get_by_test_id("current-role").inner_text() == "Operator"
    page.goto("/provisioning/")
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.locator("h1").first.inner_text() == "Provisioning"

    switch = page.locator("form[data-language-switch]").first
    switch.locator("select[name=language]").select_option("ru")
    switch.locator("button").click()
    page.wait_for_load_state()
    assert page.url.endswith("/provisioning/")
    assert page.locator("h1").first.inner_text() == "Развёртывание"


def test_no_page_is_wider_than_a_phone_in_russian(browser, live_server, users, portal_objects):  # noqa: F811
    """Russian words run longer than English ones: every page still fits 390 px."""
    context = browser.new_context(base_url=live_server.url, locale="ru-RU", viewport={"width": 390, "height": 800})
    context.set_default_timeout(20_000)
    page = context.new_page()
    too_wide, russian = [], 0
    try:
        _log_in(page, users[Role.ADMINISTRATOR])
        for portal_page in portal_pages(portal_objects):
            probe = page.request.get(portal_page.url, max_redirects=0)
            if probe.status == 405 or not probe.headers.get("content-type", "").startswith("text/html"):
                continue
            if "<html" not in probe.text()[:2000].lower():
                continue
            page.goto(portal_page.url)
            russian += page.evaluate("() => document.documentElement.lang") == "ru"
            measured = page.evaluate(WIDEST)
            if measured["scroll"] > measured["inner"]:
                too_wide.append(f"{portal_page.url}: {measured['scroll']} px wide; widest: {measured['worst']}")
    finally:
        context.close()
    assert russian > 15
    assert not too_wide, "pages wider than 390 px in Russian:\n" + "\n".join(too_wide)
