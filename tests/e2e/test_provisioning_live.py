"""The portal shows a provisioning run live in Chromium: started from the page, progressing without a
reload (htmx polling), its counts moving while the stage runs, ending with its per-host results; a
cancel of a long run, after a confirmation; the page of a run the size of the demo's stays short, with
its failed checks first."""

import re
from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import expect

from appliance.core.roles import Role
from appliance.inventory.models import Node
from appliance.provisioning import catalogue as stage_catalogue
from appliance.provisioning.models import (
    AcceptanceCheck,
    AcceptanceReport,
    HostResult,
    Run,
    StageRun,
    TaskEvent,
)
from tests.e2e.conftest import screenshot
from tests.provisioning.conftest import appliance, catalogue, platform, probe, state_dir  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
AXE = Axe()


def axe_violations(page) -> list[str]:
    """axe-core on what the page shows now (the pages of every run are checked in test_accessibility.py
    once finished; a running run and the cancel confirmation only exist here)."""
    return [f"{v['id']}: {v['help']} ({', '.join(' '.join(map(str, n['target'])) for n in v['nodes'][:3])})"
            for v in AXE.run(page).response["violations"]]


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


# True once a poll shows tasks counted ok while the stage is still running (one DOM snapshot, both read).
COUNTS_MOVING = """() => {
  const counts = document.querySelector('[data-testid="run-counts"]');
  const stage = document.querySelector('[data-testid="stage-state-first"]');
  return !!counts && !!stage && stage.textContent.trim() === "Running" && /^\\s*[1-9]\\d* ok/.test(counts.textContent);
}"""


def test_the_portal_shows_a_run_live(page, log_in, appliance, probe):  # noqa: F811
    probe["probe_sleep"] = 6
    log_in(Role.OPERATOR)
    start_run(page, "first", "gpu01")
    # A marker on the window survives only if the page is never reloaded.
    page.evaluate("window.__not_reloaded = true")
    expect(page.get_by_test_id("stage-state-first")).to_have_text("Running", timeout=30_000)
    # Counts move while the stage runs (the probe sleeps in its last tasks): not only when it ends.
    page.wait_for_function(COUNTS_MOVING, timeout=30_000, polling=200)
    expect(page.get_by_test_id("stage-state-first")).to_have_text("Running")
    expect(page.get_by_test_id("run-progress")).to_be_visible()
    expect(page.get_by_test_id("run-elapsed")).to_contain_text("running for")
    expect(page.get_by_test_id("latest-events")).to_contain_text("gpu01 · Write the marker file · ", timeout=30_000)
    screenshot(page, "provisioning-running")
    assert axe_violations(page) == []
    expect(page.get_by_test_id("run-state")).to_have_text("Succeeded", timeout=60_000)
    expect(page.get_by_test_id("stage-grid")).to_contain_text("ok · ")
    assert page.evaluate("window.__not_reloaded") is True
    screenshot(page, "provisioning-succeeded")
    run = Run.objects.get()
    assert run.requested_by.username == "operator-user" and run.node_names == ["gpu01"]
    page.get_by_test_id("stage-row-first").get_by_role("link", name="first").click()
    expect(page.get_by_test_id("stage-events")).to_contain_text("Write the marker file")
    expect(page.get_by_test_id("download-output")).to_be_visible()


def test_cancel_from_the_portal(page, log_in, appliance, probe):  # noqa: F811
    probe["probe_sleep"] = 60
    log_in(Role.ADMINISTRATOR)
    start_run(page, "first", "gpu02")
    expect(page.get_by_test_id("stage-state-first")).to_have_text("Running", timeout=30_000)
    page.get_by_role("button", name="Cancel run…").click()
    # A confirmation first: nothing is cancelled yet.
    expect(page.get_by_test_id("cancel-confirm")).to_be_visible()
    assert Run.objects.get().cancel_requested is False
    assert axe_violations(page) == []
    page.get_by_role("button", name="Cancel the run").click()
    expect(page).to_have_url(re.compile(r"/provisioning/runs/\d+/$"))
    expect(page.get_by_test_id("run-state")).to_have_text("Cancelled", timeout=30_000)
    expect(page.get_by_test_id("run-message")).to_contain_text("cancelled by administrator-user")


def test_a_viewer_watches_but_cannot_start_or_cancel(page, log_in, appliance):  # noqa: F811
    log_in(Role.VIEWER)
    page.goto("/provisioning/")
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    expect(page.get_by_test_id("start-run")).to_have_count(0)


DEMO_NODES = [("gpu01", "gpu"), ("gpu02", "gpu"), ("gpu03", "gpu"), ("gpu04", "gpu"), ("stor01", "storage"),
              ("stor02", "storage"), ("mgmt01", "management")]


@pytest.fixture
def demo_sized_run(db, platform):  # noqa: F811
    """A finished bootstrap the size of the demo's: 7 nodes, every stage of the product's catalogue, 21
    task results per host and stage, 174 acceptance checks of which 2 failed. Stored directly: running the
    real bootstrap here would take minutes and show the same page."""
    from appliance.inventory.models import Appliance

    demo = Appliance.objects.create(name="demo", simulated=False)
    for index, (name, role) in enumerate(DEMO_NODES, start=1):
        Node.objects.create(appliance=demo, name=name, role=role, management_address=f"192.168.100.{index}",
                            platform=platform if role == "gpu" else None)
    hosts = [name for name, _ in DEMO_NODES]
    stages = stage_catalogue.DEFAULT.names
    now = timezone.now()
    run = Run.objects.create(appliance=demo, kind=Run.Kind.BOOTSTRAP, stages=stages, state="failed",
                             started=now - timedelta(minutes=4), ended=now, failed_stage="acceptance",
                             reason="stage acceptance, host gpu02, task 'Check the GPUs': 2 checks failed")
    for order, stage in enumerate(stages, start=1):
        failed = stage == "acceptance"
        stage_run = StageRun.objects.create(
            run=run, stage=stage, order=order, state="failed" if failed else "succeeded", hosts=hosts,
            started=now - timedelta(seconds=240 - order * 25), ended=now - timedelta(seconds=240 - order * 25 - 20),
            reason=run.reason if failed else "")
        HostResult.objects.bulk_create([HostResult(stage_run=stage_run, host=h, ok=21, changed=4,
                                                   failed=int(failed and h == "gpu02"),
                                                   failed_task="Check the GPUs" if failed and h == "gpu02" else "")
                                        for h in hosts])
        TaskEvent.objects.bulk_create([
            TaskEvent(stage_run=stage_run, counter=n * len(hosts) + i + 1, event="runner_on_ok", host=h,
                      task=f"{stage} task {n + 1}", changed=n % 5 == 0, created=now)
            for n in range(21) for i, h in enumerate(hosts)])
    report = AcceptanceReport.objects.create(run=run, passed=False, checks_total=174, checks_failed=2)
    checks = []
    for number in range(174):
        host = hosts[number % len(hosts)]
        name = f"check.{number:03d}"
        failed = number in (8, 15)  # both on gpu02
        checks.append(AcceptanceCheck(report=report, host=host, name=name, expected=">= 380 Gb/s",
                                      measured=None if number == 15 else (196.4 if failed else 392.6),
                                      passed=not failed, source="firmware/platforms/hgx-h100-8gpu.yaml",
                                      message="measured below the gate" if failed else ""))
    AcceptanceCheck.objects.bulk_create(checks)
    return run


def test_the_page_of_a_demo_sized_run_is_short_with_failed_checks_first(browser, live_server, users,
                                                                          demo_sized_run):
    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.VIEWER].username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"/provisioning/runs/{demo_sized_run.pk}/")
        expect(page.get_by_test_id("run-state")).to_have_text("Failed")
        expect(page.get_by_test_id("run-stage-states")).to_have_text("Stages: 9 succeeded · 1 failed")
        height = page.evaluate("document.documentElement.scrollHeight")
        screenshot(page, "provisioning-demo-sized-run")
        assert height < 3000, f"the run page is {height} px tall"
        failed = page.get_by_test_id("check-failed")
        expect(failed).to_have_count(2)
        assert failed.first.bounding_box()["y"] < page.get_by_test_id("passed-checks").bounding_box()["y"]
        expect(failed.nth(1)).to_contain_text("— not measured")
        # The 172 passed checks are folded until asked for.
        expect(page.get_by_test_id("check-passed").first).to_be_hidden()
        page.get_by_text("172 passed checks").click()
        expect(page.get_by_test_id("check-passed")).to_have_count(172)
        expect(page.get_by_test_id("check-passed").first).to_be_visible()
        # The failure is printed once.
        assert page.locator("main").inner_text().count("2 checks failed") == 1
    finally:
        context.close()
