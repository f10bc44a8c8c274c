"""The audit portal in a real browser: an Auditor finds their own login in the log, opens it,
verifies it against a signed checkpoint (htmx), and downloads an export bundle."""

import zipfile

from playwright.sync_api import expect

from appliance.core.roles import Role
from tests.e2e.conftest import screenshot


def test_auditor_finds_verifies_and_exports(page, log_in, tmp_path):
    log_in(Role.AUDITOR)
    page.click("[data-nav='audit:log']")
    page.fill("#id_event", "auth.login.success")
    page.fill("#id_actor", "auditor-user")
    page.click("[data-testid=audit-filters] button[type=submit]")
    rows = page.locator("[data-testid=audit-records] tbody tr[data-sequence]")
    # The filtered page replaces the full one: wait for it rather than counting the old rows.
    expect(rows).to_have_count(1)
    assert "auth.login.success" in rows.first.inner_text()

    rows.first.locator("td a").first.click()
    page.wait_for_selector("[data-testid=verify-record]")
    assert page.locator("[data-testid=record-outcome]").inner_text() == "Success"
    page.click("[data-testid=verify-record]")
    result = page.wait_for_selector("[data-testid=verify-result]")
    assert result.get_attribute("data-ok") == "true"
    assert "intact" in result.inner_text()
    screenshot(page, "audit-record-verified")

    page.goto("/audit/export/")
    page.select_option("#id_format", "csv")
    with page.expect_download() as download_info:
        page.click("[data-testid=export-form] button[type=submit]")
    download = download_info.value
    assert download.suggested_filename.startswith("audit-csv-") and download.suggested_filename.endswith(".zip")
    target = tmp_path / download.suggested_filename
    download.save_as(target)
    names = zipfile.ZipFile(target).namelist()
    assert any(name.endswith("manifest.json") for name in names)
    assert any(name.endswith(".csv") for name in names)


def test_catalogue_page_is_the_coverage_matrix(page, log_in):
    log_in(Role.ADMINISTRATOR)
    page.click("[data-nav='audit:catalogue']")
    page.wait_for_selector("[data-testid=coverage-matrix]")
    headers = page.locator("[data-testid=coverage-matrix] thead th").all_text_contents()
    assert headers == ["Event", "Category", "Severity", "OCSF class", "NIST SP 800-53", "PCI DSS 4.0",
                       "ISO/IEC 27001:2022", "FSTEC"]
    assert page.locator("tr[data-event='auth.lockout']").count() == 1
    assert page.locator("[data-standard='FSTEC']").count() == 1
