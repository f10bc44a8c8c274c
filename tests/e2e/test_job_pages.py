"""The job pages in Chromium at 1440 and 390 px: the jobs list with user and state from Slurm in numeric
order, a job's page with what Slurm says and "not attributed yet (next run HH:MM)" instead of a link to a
404, the Efficiency job page answering the same; no horizontal scroll, axe clean."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from appliance.core.roles import Role
from appliance.lending import jobinfo as lending_jobinfo
from appliance.lending import slurmctl
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import gpu_row, minutes_before

pytestmark = pytest.mark.django_db(transaction=True)

SCONTROL = ("JobId=11 JobName=llama-pretrain UserId=alice(1001) JobState=RUNNING ExitCode=0:0 "
            "SubmitTime=2026-03-02T14:40:00 StartTime=2026-03-02T14:41:00 EndTime=2026-03-03T14:41:00 "
            "Partition=train NodeList=gpu-01\n"
            "JobId=9 JobName=eval UserId=bob(1002) JobState=FAILED ExitCode=1:0 SubmitTime=2026-03-02T14:30:00 "
            "StartTime=2026-03-02T14:30:05 EndTime=2026-03-02T14:55:10 Partition=debug NodeList=gpu-02\n")


@pytest.fixture
def jobs(monkeypatch):
    inventory = build_sample_inventory()
    now = timezone.now()
    for minute, (node, gpu, job) in enumerate([(inventory.gpu_node, 0, "1"), (inventory.gpu_node_2, 0, "9"),
                                               (inventory.gpu_node, 2, "11")], start=2):
        gpu_row(node, gpu, minutes_before(now, minute), util=50, fb_used_mib=1000, power_w=200, job=job)

    def client(appliance, *argv):
        if argv[0] == "scontrol":
            return SCONTROL
        raise slurmctl.SlurmCommandError("Slurm accounting storage is disabled")

    monkeypatch.setattr(slurmctl, "_client", client)
    monkeypatch.setattr(lending_jobinfo, "_failed", {})
    return inventory


@pytest.mark.parametrize("width", [1440, 390])
def test_the_jobs_list_and_a_job_not_attributed_yet(page, log_in, jobs, width):
    page.set_viewport_size({"width": width, "height": 900})
    log_in(Role.VIEWER)
    page.wait_for_url(re.compile(r"/$"))
    page.goto("/telemetry/jobs/")
    rows = page.get_by_test_id("jobs").locator("tbody tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-job") for i in range(3)] == ["11", "9", "1"]
    expect(page.locator('tr[data-job="11"] [data-testid="job-user"]')).to_have_text("alice")
    expect(page.locator('tr[data-job="9"] [data-testid="job-state"]')).to_have_text("FAILED")
    expect(page.locator('tr[data-job="1"] [data-testid="job-state"]')).to_have_text("ended, forgotten")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []
    screenshot(page, f"jobs-{width}")

    page.locator('tr[data-job="9"] a').click()
    page.wait_for_url(re.compile(r"/telemetry/jobs/9/$"))
    expect(page.get_by_test_id("slurm-state")).to_have_text("FAILED")
    expect(page.get_by_test_id("slurm-exit")).to_have_text("1")
    expect(page.get_by_test_id("link-efficiency")).to_contain_text(re.compile(r"not attributed yet \(next run \d\d:\d\d\)"))
    expect(page.get_by_test_id("link-efficiency").locator("a")).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []
    screenshot(page, f"job-{width}")

    response = page.goto("/analytics/jobs/9/")
    assert response.status == 200
    expect(page.get_by_test_id("job-unknown")).to_contain_text("not attributed yet (next run")
    page.get_by_test_id("link-telemetry").click()
    page.wait_for_url(re.compile(r"/telemetry/jobs/9/$"))
