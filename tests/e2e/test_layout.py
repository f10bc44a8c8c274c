"""The portal on any screen: no page wider than a phone (390 px) or a 200 % zoom (720 px), a menu that
folds (with and without JavaScript) and keeps "Log out" reachable, a skip link, tables that scroll inside
focusable regions and sort by their headers, a dark colour scheme, the language switch."""

import re

import pytest

from appliance.core.roles import Role
from tests.conftest import PASSWORD
from tests.e2e.portal_pages import portal_objects, portal_pages  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e

# The widest element that sticks out of the page (not one inside a scrolling region), to say where a page breaks.
WIDEST = """() => {
  const limit = document.documentElement.clientWidth;
  const scrolls = (el) => {
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(up).overflowX)) return true;
    }
    return false;
  };
  let worst = null;
  for (const el of document.querySelectorAll('body *')) {
    if (el.checkVisibility && !el.checkVisibility()) continue;  // e.g. the folded menu
    const box = el.getBoundingClientRect();
    if (box.right > limit + 1 && (!worst || box.right > worst.right) && !scrolls(el)) {
      worst = {right: Math.round(box.right), tag: el.tagName.toLowerCase(), cls: el.className.toString(),
               text: (el.textContent || '').trim().slice(0, 60)};
    }
  }
  return {scroll: document.documentElement.scrollWidth, inner: window.innerWidth, worst};
}"""


def _context(browser, live_server, width, **options):
    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 800}, **options)
    context.set_default_timeout(20_000)
    return context


def _log_in(page, user):
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


@pytest.mark.parametrize("width", [390, 720])
def test_no_page_is_wider_than_the_screen(browser, live_server, users, portal_objects, width):  # noqa: F811
    context = _context(browser, live_server, width)
    page = context.new_page()
    too_wide = []
    try:
        _log_in(page, users[Role.ADMINISTRATOR])
        for portal_page in portal_pages(portal_objects):
            probe = page.request.get(portal_page.url, max_redirects=0)
            if probe.status == 405 or not probe.headers.get("content-type", "").startswith("text/html"):
                continue
            if "<html" not in probe.text()[:2000].lower():
                continue
            page.goto(portal_page.url)
            measured = page.evaluate(WIDEST)
            if measured["scroll"] > measured["inner"]:
                too_wide.append(f"{portal_page.url}: {measured['scroll']} px wide; widest: {measured['worst']}")
    finally:
        context.close()
    assert not too_wide, f"pages wider than {width} px:\n" + "\n".join(too_wide)


def test_the_menu_folds_on_a_phone_and_log_out_stays_reachable(browser, live_server, users):
    context = _context(browser, live_server, 390)
    page = context.new_page()
    _log_in(page, users[Role.OPERATOR])
    nav_link = page.locator('nav.mainnav [data-nav="inventory:node-list"]')
    log_out = page.get_by_role("button", name="Log out")
    assert page.get_by_text("Menu", exact=True).is_visible()
    assert not nav_link.is_visible() and not log_out.is_visible()
    page.get_by_text("Menu", exact=True).click()
    assert nav_link.is_visible()
    log_out.click()
    page.wait_for_url(re.compile(r"/accounts/login/"))
    context.close()


def test_the_menu_is_open_at_wide_widths(browser, live_server, users):
    context = _context(browser, live_server, 1440)
    page = context.new_page()
    _log_in(page, users[Role.OPERATOR])
    assert not page.get_by_text("Menu", exact=True).is_visible()
    assert page.locator('nav.mainnav [data-nav="inventory:node-list"]').is_visible()
    assert page.get_by_role("button", name="Log out").is_visible()
    context.close()


@pytest.mark.parametrize(("width", "open_without_a_click"), [(390, False), (1440, True)])
def test_the_menu_works_without_javascript(browser, live_server, users, width, open_without_a_click):
    context = _context(browser, live_server, width, java_script_enabled=False)
    page = context.new_page()
    _log_in(page, users[Role.VIEWER])
    nav_link = page.locator('nav.mainnav [data-nav="inventory:node-list"]')
    assert nav_link.is_visible() is open_without_a_click
    if not open_without_a_click:
        page.get_by_text("Menu", exact=True).click()
    assert nav_link.is_visible()
    assert page.get_by_role("button", name="Log out").is_visible()
    context.close()


def test_the_skip_link_is_the_first_tab_stop_and_moves_to_the_content(browser, live_server, users):
    context = _context(browser, live_server, 1440)
    page = context.new_page()
    _log_in(page, users[Role.VIEWER])
    page.keyboard.press("Tab")
    focused = page.evaluate("() => [document.activeElement.textContent.trim(), document.activeElement.getAttribute('href')]")
    assert focused == ["Skip to content", "#main"]
    assert page.locator(".skip-link").is_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"
    context.close()


def test_tables_sort_by_their_headers(browser, live_server, users):
    context = _context(browser, live_server, 1440)
    page = context.new_page()
    _log_in(page, users[Role.ADMINISTRATOR])
    page.goto("/accounts/users/")
    header = page.locator('[data-testid="users"] thead th').first

    def usernames():
        return page.locator('[data-testid="users"] tbody tr').evaluate_all("rows => rows.map(r => r.dataset.user)")

    header.get_by_role("button", name="Username").click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert usernames() == ["administrator-user", "auditor-user", "ml_engineer-user", "operator-user", "viewer-user"]
    header.get_by_role("button", name="Username").click()
    assert header.get_attribute("aria-sort") == "descending"
    assert usernames() == ["viewer-user", "operator-user", "ml_engineer-user", "auditor-user", "administrator-user"]
    context.close()


def test_tables_scroll_inside_a_focusable_labelled_region(browser, live_server, users):
    context = _context(browser, live_server, 390)
    page = context.new_page()
    _log_in(page, users[Role.ADMINISTRATOR])
    page.goto("/audit/")
    region = page.locator('.table-scroll:has([data-testid="audit-records"])')
    assert region.get_attribute("role") == "region"
    assert region.get_attribute("tabindex") == "0"
    assert region.get_attribute("aria-label") == "Audit log"
    # the table is wider than the phone: the region scrolls, not the page
    assert page.locator('[data-testid="audit-records"]').evaluate("el => el.getBoundingClientRect().width") > 390
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    # a keyboard user scrolls it: focus it, press the arrow key (scrolling may be smooth: wait for it)
    region.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("el => el.scrollLeft > 0", arg=region.element_handle(), timeout=3_000)
    context.close()


def test_dark_colour_scheme(browser, live_server, users):
    context = _context(browser, live_server, 1440, color_scheme="dark")
    page = context.new_page()
    _log_in(page, users[Role.VIEWER])
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(15, 20, 27)"
    assert page.evaluate("() => getComputedStyle(document.body).color") == "rgb(230, 233, 239)"
    context.close()


def test_the_language_switch_in_the_frame(browser, live_server, users):
    context = _context(browser, live_server, 1440)
    page = context.new_page()
    _log_in(page, users[Role.VIEWER])
    page.get_by_label("Language").select_option("ru")
    page.locator("form.language button").click()
    page.wait_for_load_state()
    assert page.evaluate("() => document.documentElement.lang") == "ru"
    assert page.locator("#language-frame").input_value() == "ru"
    context.close()


def test_numbers_sort_as_numbers(browser, live_server, users, make_user):
    for index in range(8):  # each new account is an audit record: more than nine records in all
        make_user(Role.VIEWER, f"extra-{index}")
    context = _context(browser, live_server, 1440)
    page = context.new_page()
    _log_in(page, users[Role.AUDITOR])
    page.goto("/audit/")
    sequences = page.locator('[data-testid="audit-records"] tbody tr').evaluate_all(
        "rows => rows.map(r => Number(r.dataset.sequence))")
    assert len(sequences) >= 10
    page.locator('[data-testid="audit-records"] thead th').first.get_by_role("button", name="#").click()
    ascending = page.locator('[data-testid="audit-records"] tbody tr').evaluate_all(
        "rows => rows.map(r => Number(r.dataset.sequence))")
    assert ascending == sorted(sequences)  # 9 before 10, not "10" before "9"
    context.close()


def test_without_javascript_wide_tables_still_scroll_inside_their_card(browser, live_server, users):
    context = _context(browser, live_server, 390, java_script_enabled=False)
    page = context.new_page()
    _log_in(page, users[Role.ADMINISTRATOR])
    for url in ("/audit/", "/accounts/users/", "/accounts/tokens/"):
        page.goto(url)
        measured = page.evaluate(WIDEST)
        assert measured["scroll"] <= 390, (url, measured)
    context.close()
