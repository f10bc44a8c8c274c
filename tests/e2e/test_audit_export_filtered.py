"""In a real browser: an Auditor filters the audit log to one user, follows "Export these records",
and downloads a bundle that holds exactly that user's records and verifies offline."""

import json
import zipfile

from playwright.sync_api import expect

from appliance import audit
from appliance.audit.verify import verify_bundle
from appliance.core import context
from appliance.core.roles import Role


def test_the_export_holds_exactly_what_the_filter_showed(page, log_in, users, tmp_path):
    for number in range(4):
        with context.acting_as(users[Role.OPERATOR], channel="web"):
            audit.record("task.run", target_type="task", target_name=f"operator job {number}")
        with context.acting_as(users[Role.ADMINISTRATOR], channel="web"):
            audit.record("task.run", target_type="task", target_name=f"administrator job {number}")

    log_in(Role.AUDITOR)
    page.goto("/audit/")
    page.fill("#id_actor", "operator-user")
    page.click("[data-testid=audit-filters] button[type=submit]")
    expect(page.locator("[data-testid=audit-records] tbody tr[data-sequence]")).to_have_count(4)

    page.click("[data-testid=export-filtered]")
    expect(page.locator("[data-testid=export-count]")).to_have_attribute("data-count", "4")
    expect(page.locator("[data-testid=export-filters] #id_actor")).to_have_value("operator-user")
    page.select_option("#id_format", "jsonl")
    with page.expect_download() as download_info:
        page.click("[data-testid=export-form] button[type=submit]")
    target = tmp_path / "bundle.zip"
    download_info.value.save_as(target)
    zipfile.ZipFile(target).extractall(tmp_path / "unpacked")
    [bundle] = (tmp_path / "unpacked").iterdir()

    records = [json.loads(line)["record"] for line in (bundle / "records.jsonl").read_text().splitlines()]
    assert [r["target"]["name"] for r in records] == [f"operator job {n}" for n in range(4)]
    assert json.loads((bundle / "manifest.json").read_text())["filter"] == {"actor": "operator-user"}
    result = verify_bundle(bundle)
    assert result.ok and result.selection and result.records == 4, result.summary()
