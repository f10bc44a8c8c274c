"""axe-core on every portal page template at 1440 and 390 px, in the light and the dark scheme: zero violations.

The Administrator sees every page and every control the other roles see, so the Administrator's visit
checks every page template; what another role changes is which pages it is refused, so a Viewer's visit
checks the refusal page (403) and an anonymous visit the login page it is sent to, each once per width and
scheme. Which role may see what is checked without a browser (tests/core/test_role_matrix.py,
tests/api/test_access.py).

The pages come from the URL conf (tests/e2e/portal_pages.py), so a new page is checked the day it is
added. One case per role and width; a failure lists every violation of every page (rule, page, the
elements), not only the first. To check a few pages while working on them:
    AXE_PAGES=audit,provisioning pytest tests/e2e/test_accessibility.py -k "administrator-narrow-dark"
(AXE_PAGES keeps the pages whose route name contains one of the words).
"""

import os

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.shortcuts import resolve_url

from appliance.core.roles import Role
from tests.conftest import PASSWORD
from tests.e2e.portal_pages import portal_objects, portal_pages  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e

WIDTHS = {"wide": 1440, "narrow": 390}
# Pages the Administrator must have been shown (written out: if collecting the URL conf breaks, this fails).
ADMINISTRATOR_SEES = {
    "portal:overview", "portal:search", "portal:search-results", "portal:fabric", "portal:storage", "portal:pools",
    "accounts:user-list", "accounts:user-create", "accounts:password-change", "accounts:token-list",
    "inventory:node-list", "inventory:node-detail", "inventory:site-import", "inventory:credential-list",
    "audit:log", "audit:record", "audit:timeline", "audit:catalogue",
    "provisioning:index", "provisioning:run", "provisioning:stage-output", "provisioning:acceptance",
    "provisioning:acceptance-export", "portal:not-found",
    "lifecycle:models", "lifecycle:model", "lifecycle:version", "lifecycle:approvals", "lifecycle:deployments",
}
ANONYMOUS = "anonymous"
AXE = Axe()


def _wanted(name: str) -> bool:
    words = [word for word in os.environ.get("AXE_PAGES", "").split(",") if word]
    return not words or any(word in name for word in words)


# Whether a page can still be loading parts after its load event: an htmx attribute that asks the server, or a
# script other than the two every page loads (templates/base.html: htmx, which asks only for hx-* attributes,
# and appliance.js, which asks for nothing), such as the telemetry pages' charts.
LOADS_MORE = r"""() => !!document.querySelector('[hx-get],[hx-post],[hx-put],[hx-patch],[hx-delete],[hx-trigger]')
    || [...document.scripts].some(script => script.type !== 'application/json'
        && !/\/js\/(htmx\.min|appliance)(\.[0-9a-f]+)?\.js$/.test(script.src || ''))"""


def _settle(page, requested: list):
    """Pages that load parts after their load event (htmx, the telemetry charts): let them arrive (polling
    pages never go fully idle). A page that asked for nothing and has nothing that could ask is complete
    at its load event: waiting for network idle there cost half a second a page (Playwright's idle window),
    about a fifth of this file's time."""
    if not requested and not page.evaluate(LOADS_MORE):
        return
    try:
        page.wait_for_load_state("networkidle", timeout=3_000)
    except Exception:  # noqa: BLE001 - a page that polls stays busy; what has arrived is checked
        pass


def _describe(violation: dict, where: str) -> str:
    lines = [f"{where}: {violation['id']} ({violation.get('impact')}): {violation['help']}"]
    for node in violation["nodes"][:4]:
        lines.append(f"    {' '.join(map(str, node['target']))}  {node['html'][:160]}")
    if len(violation["nodes"]) > 4:
        lines.append(f"    ... and {len(violation['nodes']) - 4} more elements")
    return "\n".join(lines)


def audit_pages(page, pages, role: str, width: str, *, refusals_only: bool = False) -> tuple[list[str], list[str]]:
    """Visit each page; run axe once per distinct page reached (a redirect to a page already checked,
    or a second 403, is not checked again). With `refusals_only`, only the first page the role is refused
    (403, or a redirect to the login page) is visited. Returns (violations, pages checked)."""
    checked: set[str] = set()
    violations, visited = [], []
    denied_seen = False
    requested = []  # requests the page's own scripts made (fetch, XHR) since the last navigation
    page.on("request", lambda request: request.resource_type in ("fetch", "xhr") and requested.append(request.url))
    for portal_page in pages:
        if not _wanted(portal_page.name):
            continue
        # Asked first without the browser (same cookies): a POST-only route (405) and a download are
        # not pages a browser shows.
        probe = page.request.get(portal_page.url, max_redirects=0)
        if probe.status == 405 or not probe.headers.get("content-type", "").startswith("text/html"):
            continue
        if probe.status < 300 and "<html" not in probe.text()[:2000].lower():
            continue  # a fragment that htmx swaps into a page (checked there), not a page
        refused = probe.status == 403 or "/accounts/login/" in probe.headers.get("location", "")
        if refusals_only and (visited or not refused):
            continue
        requested.clear()
        response = page.goto(portal_page.url)
        status = response.status if response else 0
        if status == 403:
            if denied_seen:
                continue
            denied_seen = True
        # A page is the URL it landed on; a redirect (to the login page, with ?next=) counts once by its path.
        landed = page.url.split("/", 3)[-1]
        final = page.url if "/" + landed == portal_page.url else page.url.split("?")[0]
        if final in checked:
            continue
        checked.add(final)
        _settle(page, requested)
        path = final.split("/", 3)[-1]
        shown = portal_page.url if "/" + path == portal_page.url else f"{portal_page.url} -> /{path}"
        where = f"[{role} {width}] {portal_page.name} {shown} ({status})"
        visited.append(where)
        results = AXE.run(page)
        violations.extend(_describe(violation, where) for violation in results.response["violations"])
    return violations, visited


# Every width and scheme: the Administrator on every page; a Viewer (refused the most) and nobody logged in on
# the page each is refused with. The other roles repeated the Administrator's templates at five times the
# cost (every page, 40 s of axe for the audit catalogue alone, per role).
SCHEMES = ("light", "dark")
CASES = [(role, width, scheme) for width in WIDTHS for scheme in SCHEMES
         for role in (Role.ADMINISTRATOR.value, Role.VIEWER.value, ANONYMOUS)]


@pytest.mark.parametrize(("role", "width", "scheme"), CASES, ids=["-".join(case) for case in CASES])
def test_no_axe_violations_on_any_page(browser, live_server, users, portal_objects, role, width, scheme):  # noqa: F811
    context = browser.new_context(base_url=live_server.url, viewport={"width": WIDTHS[width], "height": 900},
                                  color_scheme=scheme)
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        if role != ANONYMOUS:
            page.goto(resolve_url(settings.LOGIN_URL))
            page.fill("#id_username", users[role].username)
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            assert "/accounts/login/" not in page.url, f"{role} could not log in"
        violations, visited = audit_pages(page, portal_pages(portal_objects), role, f"{width} {scheme}",
                                          refusals_only=role != Role.ADMINISTRATOR)
    finally:
        context.close()
    assert visited, "no page was checked"
    if role == Role.ADMINISTRATOR and not os.environ.get("AXE_PAGES"):
        checked_names = {where.split()[3] for where in visited}
        assert ADMINISTRATOR_SEES <= checked_names, f"not checked: {sorted(ADMINISTRATOR_SEES - checked_names)}"
    if role == ANONYMOUS:
        assert len(visited) == 1 and "-> /accounts/login/" in visited[0], visited
    if role == Role.VIEWER:
        assert len(visited) == 1 and visited[0].endswith("(403)"), visited
    assert not violations, f"{len(violations)} axe-core violations:\n" + "\n".join(violations)
