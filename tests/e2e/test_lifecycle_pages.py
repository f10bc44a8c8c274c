"""The model lifecycle in Chromium on a 360 px phone ("portal" part): an ML engineer lands on the model
list, opens a version (its lineage drawn as SVG, scrolling inside its own region), verifies its files and
asks for production with an evaluation as evidence; an account the requester created is refused in one
clear message; a second engineer approves; an Operator deploys the production version and sees what the
pool reports. Nothing is wider than the screen, axe-core finds nothing, no console error (the
Content-Security-Policy refuses inline styles: the drawing is coloured by classes)."""

import re

import pytest
from playwright.sync_api import expect

from appliance.accounts.services import create_user
from appliance.core.roles import Role
from tests.accounts.settled import make_user  # noqa: F401 (people older than the four-eyes cooling period)
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations
from tests.lifecycle.deploy_support import demo  # noqa: F401 (fixture)
from tests.lifecycle.portal_support import model_root, register  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH = 360


def _no_horizontal_scroll(page):
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{widths[0]} px wide on a {widths[1]} px screen"


def _phone(browser, live_server, username: str):
    from tests.conftest import PASSWORD

    context = browser.new_context(base_url=live_server.url, viewport={"width": WIDTH, "height": 800})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return context, page, errors


def _checked(page, name: str):
    _no_horizontal_scroll(page)
    screenshot(page, name)
    assert axe_violations(page) == []


def test_from_the_model_list_to_an_approved_deployment_on_a_phone(browser, live_server, make_user, demo,  # noqa: F811
                                                                   model_root):  # noqa: F811
    from appliance.lifecycle import services
    from tests.conftest import PASSWORD

    erin = make_user(Role.ML_ENGINEER, "erin")
    max_ = make_user(Role.ML_ENGINEER, "max")
    make_user(Role.OPERATOR, "olga")
    # An account the requester made: four-eyes refuses it as the approver.
    create_user("erins-friend", Role.ML_ENGINEER, PASSWORD, created_by=erin)
    base = register(model_root, "base-7b", 21, user=erin)
    version = register(model_root, "chat-7b", 22, user=erin, parent="base-7b/1", code_revision="git:4f2a9c1",
                       datasets=[{"name": "dialogues", "uri": "/data/dialogues", "sha256": "ef" * 32}])
    services.transition(version, "validated", user=erin)
    services.transition(version, "staging", user=erin)
    services.add_evaluation(version, user=erin, name="toxicity", metrics={"rate": 0.01}, passed=True)
    assert base.number == 1

    context, page, errors = _phone(browser, live_server, "erin")
    try:
        page.wait_for_url(re.compile(r"/models/$"))
        expect(page.locator('tr[data-model="chat-7b"]')).to_contain_text("none")
        _checked(page, "L-models-360")
        page.get_by_role("link", name="chat-7b").click()
        expect(page.locator('tr[data-version="1"] [data-part="stage"]')).to_contain_text("Staging")
        _checked(page, "L-model-360")
        page.get_by_role("link", name="v1", exact=True).click()
        page.wait_for_url(re.compile(r"/models/chat-7b/versions/1/$"))
        lineage = page.get_by_test_id("lineage")
        expect(lineage.locator('[data-kind="parent"]')).to_contain_text("base-7b v1")
        expect(lineage.locator('[data-kind="dataset"]')).to_contain_text("dialogues")
        expect(lineage.locator('[data-kind="evaluation"]')).to_contain_text("toxicity")
        # The drawing keeps its size and scrolls inside its region; the page does not widen.
        region = page.locator(".lineage-scroll").bounding_box()
        assert region["width"] <= WIDTH
        assert page.locator(".lineage-graph").bounding_box()["width"] > region["width"]
        _checked(page, "L-version-360")

        page.get_by_test_id("verify").click()
        expect(page.locator(".messages li")).to_contain_text("Verified: every file matches its hash")
        expect(page.locator('tr[data-path="model.safetensors"] [data-part="state"]')).to_have_text("Verified")
        page.get_by_role("checkbox", name="toxicity").check()
        page.locator('[data-testid="request-form"] textarea[name="reason"]').fill("low toxicity, ready")
        page.get_by_test_id("request-production").click()
        expect(page.locator(".messages li")).to_contain_text("approvals inbox")
        expect(page.locator('[data-testid="requests"] [data-part="state"]')).to_contain_text("Pending")
        page.goto("/models/approvals/")
        expect(page.get_by_test_id("pending")).to_contain_text("You asked for this: another person must decide.")
        _checked(page, "L-approvals-own-360")
        assert errors == []
    finally:
        context.close()

    context, page, errors = _phone(browser, live_server, "erins-friend")
    try:
        page.goto("/models/approvals/")
        page.get_by_test_id("approve").click()
        refusal = page.locator(".messages li.error")
        expect(refusal).to_have_count(1)
        expect(refusal).to_contain_text("created by 'erin', who asked")
        _checked(page, "L-approvals-refused-360")
    finally:
        context.close()

    context, page, errors = _phone(browser, live_server, "max")
    try:
        page.goto("/models/approvals/")
        expect(page.get_by_test_id("evidence")).to_contain_text("toxicity")
        page.get_by_test_id("approve").click()
        expect(page.locator(".messages li")).to_contain_text("Approved: chat-7b version 1 is now in Production.")
        page.goto("/models/")
        expect(page.locator('tr[data-model="chat-7b"] [data-part="production"]')).to_have_text("version 1")
        assert errors == []
    finally:
        context.close()

    context, page, errors = _phone(browser, live_server, "olga")
    try:
        page.goto("/models/deployments/")
        page.get_by_label("Production version").select_option("chat-7b/1")
        page.get_by_test_id("deploy-submit").click()
        expect(page.locator(".messages li")).to_contain_text("Deploying chat-7b version 1 as chat-7b: Healthy.")
        live = page.locator('[data-deployment="chat-7b"][data-state="healthy"] [data-part="live"]')
        expect(live.locator('[data-part="health"]')).to_have_text("serving")
        expect(live).to_contain_text("1 of 1 replicas ready")
        _checked(page, "L-deployments-360")
        page.goto("/models/chat-7b/versions/1/")
        expect(page.get_by_test_id("lineage").locator('[data-kind="deployment"]')).to_contain_text("Healthy")
        expect(page.get_by_test_id("timeline")).to_contain_text("deployed as chat-7b")
        _checked(page, "L-version-deployed-360")
        # On a desktop the whole drawing fits: datasets, training, the model, evaluations, deployments.
        page.set_viewport_size({"width": 1280, "height": 900})
        region = page.locator(".lineage-scroll").bounding_box()
        assert page.locator(".lineage-graph").bounding_box()["width"] <= region["width"]
        _checked(page, "L-version-deployed-1280")
        assert errors == []
    finally:
        context.close()
    assert max_.pk
