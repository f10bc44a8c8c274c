"""Browser harness: Django's live server and Debian's Chromium driven by Playwright (sync API).

Playwright's sync API runs an event loop in the test's thread, and Django refuses database calls
from a thread with a running loop unless told otherwise; the tests' own database calls (fixtures)
are synchronous and safe.
"""

import os
from pathlib import Path

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
# Set to a directory to keep screenshots that tests take (never committed).
SCREENSHOT_DIR = os.environ.get("APPLIANCE_E2E_SCREENSHOTS", "")


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def log_in(page, users):
    """Log in through the login form, as a user would."""
    from tests.conftest import PASSWORD

    def log_in_as(role: str, password: str = PASSWORD):
        page.goto("/accounts/login/")
        page.fill("#id_username", users[role].username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        return page

    return log_in_as


def screenshot(page, name: str) -> Path | None:
    if not SCREENSHOT_DIR:
        return None
    path = Path(SCREENSHOT_DIR) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path
