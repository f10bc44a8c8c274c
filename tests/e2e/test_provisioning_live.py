"""The portal shows a provisioning run live in Chromium: started from the page, progressing without a
reload (htmx polling), ending with its per-host results; then a cancel of a long run."""

import re

import pytest
from playwright.sync_api import expect

from appliance.core.roles import Role
from appliance.provisioning.models import Run
from tests.e2e.conftest import screenshot
from tests.provisioning.conftest import appliance, catalogue, platform, probe, state_dir  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def embedded_worker(settings, catalogue, state_dir):  # noqa: F811
    settings.CELERY_BROKER_URL = ""
    settings.PROVISIONING_CATALOGUE = "tests.provisioning.catalogue:CATALOGUE"


def start_run(page, stage: str, node: str):
    page.goto("/provisioning/")
    form = page.get_by_test_id("start-run")
    form.locator(f"input[name=stages][value={stage}]").check()
    form.locator("select[name=nodes]").select_option(node)
    form.get_by_role("button", name="Start").click()
    expect(page).to_have_url(re.compile(r"/provisioning/runs/\d+/$"))


def test_the_portal_shows_a_run_live(page, log_in, appliance, probe):  # noqa: F811
    probe["probe_sleep"] = 3
    log_in(Role.OPERATOR)
    start_run(page, "first", "gpu01")
    # A marker on the window survives only if the page is never reloaded.
    page.evaluate("window.__not_reloaded = true")
    expect(page.get_by_test_id("stage-state-first")).to_have_text("Running", timeout=30_000)
    expect(page.get_by_test_id("latest-events")).to_contain_text("gpu01", timeout=30_000)
    screenshot(page, "provisioning-running")
    expect(page.get_by_test_id("run-state")).to_have_text("Succeeded", timeout=60_000)
    expect(page.get_by_test_id("stage-grid")).to_contain_text("ok · ")
    assert page.evaluate("window.__not_reloaded") is True
    screenshot(page, "provisioning-succeeded")
    run = Run.objects.get()
    assert run.requested_by.username == "operator-user" and run.node_names == ["gpu01"]
    page.get_by_role("link", name="first").click()
    expect(page.get_by_test_id("stage-events")).to_contain_text("Write the marker file")
    expect(page.get_by_test_id("download-output")).to_be_visible()


def test_cancel_from_the_portal(page, log_in, appliance, probe):  # noqa: F811
    probe["probe_sleep"] = 60
    log_in(Role.ADMINISTRATOR)
    start_run(page, "first", "gpu02")
    expect(page.get_by_test_id("stage-state-first")).to_have_text("Running", timeout=30_000)
    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_test_id("run-state")).to_have_text("Cancelled", timeout=30_000)
    expect(page.get_by_test_id("run-message")).to_contain_text("cancelled by administrator-user")


def test_a_viewer_watches_but_cannot_start_or_cancel(page, log_in, appliance):  # noqa: F811
    log_in(Role.VIEWER)
    page.goto("/provisioning/")
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    expect(page.get_by_test_id("start-run")).to_have_count(0)
