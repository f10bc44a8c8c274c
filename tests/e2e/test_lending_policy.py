"""The lending policy form in Chromium on a 390 px screen: an Operator sets the training pool's policy from
the lending page (ticks weekdays, hours), the policies table shows it, and neither page scrolls sideways."""

import pytest
from playwright.sync_api import expect

from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Pool
from appliance.lending.models import LendingPolicy

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH = "() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})"


def test_an_operator_sets_a_policy_on_a_phone(browser, live_server, users):
    from tests.conftest import PASSWORD

    appliance = Appliance.objects.create(name="demo", simulated=True)
    Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 800})
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", users[Role.OPERATOR].username)
        page.fill("#id_password", PASSWORD)
        page.click("form.stack button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.goto("/lending/")
        page.get_by_test_id("set-policy-training").click()
        form = page.get_by_test_id("policy-form")
        expect(form).to_be_visible()
        width = page.evaluate(WIDTH)
        assert width["scroll"] <= width["inner"], width
        expect(form.locator("input[name=automatic_approval]")).to_be_disabled()
        form.locator("input[name=may_lend]").check()
        form.locator("input[name=window_days][value='5']").check()
        form.locator("input[name=window_days][value='6']").check()
        form.locator("input[name=window_start_hour]").fill("22")
        form.locator("input[name=window_end_hour]").fill("7")
        form.locator("button[type=submit]").click()
        page.wait_for_url(lambda url: url.endswith("/lending/"))
        row = page.get_by_test_id("policies").locator("tbody tr").first
        expect(row).to_contain_text("22:00–07:00")
        expect(row).to_contain_text("5, 6")
        width = page.evaluate(WIDTH)
        assert width["scroll"] <= width["inner"], width
    finally:
        context.close()
    policy = LendingPolicy.objects.get(pool__name="training")
    assert (policy.may_lend, policy.window_days, policy.window_start_hour, policy.window_end_hour) == (
        True, [5, 6], 22, 7)
