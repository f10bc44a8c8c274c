"""In the browser: a user makes an API token (shown once), uses it, revokes it; changes their password."""

import re

import pytest
from django.test import Client
from playwright.sync_api import expect

from appliance.core.roles import Role

pytestmark = pytest.mark.e2e
NEW_PASSWORD = "browser-made-passphrase-8"


def test_a_token_is_shown_once_works_and_is_revoked(page, log_in):
    log_in(Role.OPERATOR)
    page.wait_for_url(re.compile(r"/$"))
    page.get_by_role("link", name="API tokens").click()
    page.wait_for_url(re.compile(r"/accounts/tokens/$"))
    page.fill("#id_name", "ci runner")
    page.click("[data-action=create-token]")
    key = page.get_by_test_id("new-token-value").inner_text()
    assert re.fullmatch(r"apl_[0-9a-f]{12}\.[A-Za-z0-9_-]{43}", key)
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/accounts/me/").json()["username"] == "operator-user"

    page.goto("/accounts/tokens/")
    expect(page.get_by_test_id("new-token")).to_have_count(0)
    assert key not in page.content()
    row = page.locator(f"tr[data-token='{key[4:16]}']")
    expect(row).to_contain_text("ci runner")
    expect(row).to_contain_text("active")
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_url(re.compile(r"/accounts/tokens/$"))
    expect(page.locator(f"tr[data-token='{key[4:16]}']")).to_contain_text("revoked by operator-user")
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/accounts/me/").status_code == 401


def test_a_user_changes_their_password(page, log_in, users):
    log_in(Role.VIEWER)
    page.wait_for_url(re.compile(r"/$"))
    page.get_by_role("link", name="Password").click()
    page.fill("#id_old_password", "correct-horse-battery-9")
    page.fill("#id_new_password1", NEW_PASSWORD)
    page.fill("#id_new_password2", NEW_PASSWORD)
    page.get_by_role("button", name="Change password").click()
    page.wait_for_url(re.compile(r"/$"))
    expect(page.locator(".messages")).to_contain_text("Your password was changed.")
    users[Role.VIEWER].refresh_from_db()
    assert users[Role.VIEWER].check_password(NEW_PASSWORD)
