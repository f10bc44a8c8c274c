"""The three axe findings of the operator's hour, at 1440 and 390 px: the Telemetry live grid's links
(whose accessible name must contain the text they show: axe's experimental label-content-name-mismatch,
turned on here), the Lending policies table's action column (no empty header), and the Models page's
search (a second search landmark, named)."""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe

from appliance.core.roles import Role
from appliance.inventory.models import Pool
from appliance.lending.models import LendingPolicy
from appliance.lifecycle.models import RegisteredModel
from tests.e2e.test_telemetry_pages import LOADED, telemetry  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

RULES = {"label-content-name-mismatch": {"enabled": True}}


def violations(page) -> list[str]:
    result = Axe().run(page, options={"resultTypes": ["violations"], "rules": RULES})
    return [f"{v['id']}: {[n['html'][:100] for n in v['nodes'][:3]]}" for v in result.response["violations"]]


@pytest.mark.parametrize("width", [1440, 390])
def test_telemetry_lending_and_models_are_axe_clean(page, log_in, telemetry, users, width):  # noqa: F811
    training = Pool.objects.create(appliance=telemetry.appliance, name="training-pool", kind=Pool.Kind.TRAINING)
    LendingPolicy.objects.create(pool=training, may_lend=True, minimum_nodes=2, window_start_hour=22,
                                 window_end_hour=7)
    RegisteredModel.objects.create(name="llama", owner=users[Role.OPERATOR])
    page.set_viewport_size({"width": width, "height": 900})
    log_in(Role.OPERATOR)
    page.wait_for_url(re.compile(r"/$"))
    page.goto("/telemetry/")
    page.wait_for_selector(LOADED)
    link = page.get_by_test_id("live-grid").locator('tr[data-node="gpu-01"] td[data-gpu="0"] a')
    assert link.inner_text() == "70%" and link.get_attribute("aria-label").startswith("70% · GPU 0")
    assert violations(page) == []
    page.goto("/lending/")
    assert page.get_by_test_id("keeps").inner_text() == "2 nodes"
    assert violations(page) == []
    page.goto("/models/")
    assert page.get_by_role("search", name="Search models").count() == 1
    assert violations(page) == []
