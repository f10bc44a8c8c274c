"""The acceptance report page in Chromium: verdict, checks per node, filters, the printable export."""

import re

import pytest

from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node
from appliance.provisioning.models import AcceptanceCheck, AcceptanceReport, Run
from tests.e2e.conftest import screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def report(db):
    appliance = Appliance.objects.create(name="lab", simulated=False)
    for index, name in enumerate(("gpu01", "gpu02"), start=1):
        Node.objects.create(appliance=appliance, name=name, role="gpu", management_address=f"192.168.50.{index}")
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["acceptance"], state="succeeded")
    report = AcceptanceReport.objects.create(run=run)
    for host, name, expected, measured, passed in [
        ("gpu01", "gpu.count", 8, 8, True),
        ("gpu01", "nccl.all_reduce_busbw", ">= 460 GB/s", 471.5, True),
        ("gpu02", "gpu.count", 8, 8, True),
        ("gpu02", "ib_write_bw.mlx5_3", ">= 380 Gb/s", 196.4, False),
    ]:
        AcceptanceCheck.objects.create(report=report, host=host, name=name, expected=expected, measured=measured,
                                       passed=passed, source="firmware/platforms/hgx-h100-8gpu.yaml:71",
                                       message="" if passed else f"{name}: measured below the gate")
    return run


def test_the_acceptance_report_in_a_browser(page, log_in, report):
    log_in(Role.VIEWER)
    page.wait_for_url(re.compile(r"/$"))
    page.locator('nav.mainnav [data-nav="provisioning:acceptance"]').click()
    page.wait_for_url(re.compile(r"/provisioning/acceptance/$"))
    assert page.get_by_test_id("verdict").inner_text() == "FAILED"
    assert page.get_by_test_id("check-row").count() == 4
    failing = page.get_by_test_id("acceptance-node-gpu02")
    assert "1 failed" in failing.locator("h2").inner_text()
    assert "ib_write_bw.mlx5_3: measured below the gate" in failing.inner_text()
    screenshot(page, "acceptance")

    # Only the failed checks: one row, and gpu01 (nothing failed there) shows it has none.
    filters = page.get_by_test_id("acceptance-filters")
    filters.locator('select[name="result"]').select_option("failed")
    filters.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"result=failed"))
    assert page.get_by_test_id("check-row").count() == 1
    assert "196.4" in page.get_by_test_id("check-row").inner_text()

    # The printable export keeps the filter and opens on its own.
    with page.context.expect_page() as opened:
        page.get_by_test_id("export-html").click()
    export = opened.value
    export.wait_for_load_state()
    assert "result=failed" in export.url
    assert export.locator("#verdict").inner_text() == "FAILED"
    assert "ib_write_bw.mlx5_3" in export.content() and "gpu.count" not in export.content()
