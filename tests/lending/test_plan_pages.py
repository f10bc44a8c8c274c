"""The lending pages as an operator reads them: windows with their zone, the pool's minimum as a count, the
proposer not offered Approve on their own plan, a decision's message saying what it did, the steps named in
the reader's language, no empty table header."""

import pytest
from django.test import Client

from appliance.core.roles import Role
from appliance.lending.models import LendingPlan, PlanState

from .test_plans import plan_of, pools  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru"}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_windows_carry_their_zone_and_the_minimum_reads_as_a_count(pools, make_user):  # noqa: F811
    operator = make_user(Role.OPERATOR)
    plan = plan_of(operator)
    viewer = client_of(make_user(Role.VIEWER))
    plans = client_of(operator).get("/lending/").content.decode()
    assert ">2026-12-01 23:00 UTC</time> – <time" in plans and ">2026-12-02 06:00 UTC</time>" in plans
    assert "22:00–07:00 UTC" in plans
    assert '<td data-testid="keeps">1 node</td>' in plans
    assert "<th></th>" not in plans and '<span class="visually-hidden">Actions</span>' in plans
    detail = viewer.get(f"/lending/plans/{plan.pk}/").content.decode()
    assert "<dd>2026-12-01 23:00 UTC – 2026-12-02 06:00 UTC</dd>" in detail
    assert "<td>propose</td>" in detail
    assert "<td>предложение</td>" in viewer.get(f"/lending/plans/{plan.pk}/", **RUSSIAN).content.decode()
    assert '<td data-testid="keeps">1 узел</td>' in viewer.get("/lending/", **RUSSIAN).content.decode()


def test_the_proposer_is_not_offered_approve_and_a_decision_says_what_it_did(pools, make_user):  # noqa: F811
    proposer, other = make_user(Role.ADMINISTRATOR, "ada"), make_user(Role.ADMINISTRATOR, "grace")
    plan = plan_of(proposer)
    own = client_of(proposer).get(f"/lending/plans/{plan.pk}/").content.decode()
    assert 'data-testid="approve"' not in own and 'data-testid="own-plan"' in own
    assert 'data-testid="reject"' in own
    approver = client_of(other)
    assert 'data-testid="approve"' in approver.get(f"/lending/plans/{plan.pk}/").content.decode()
    page = approver.post(f"/lending/plans/{plan.pk}/approve/", follow=True).content.decode()
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.APPROVED
    assert f"Lending plan #{plan.pk} approved: now Approved." in page
    assert ": done." not in page
    second = plan_of(proposer, nodes=["gpu02"])
    page = approver.post(f"/lending/plans/{second.pk}/reject/", {"reason": "not tonight"}, follow=True).content.decode()
    assert f"Lending plan #{second.pk} rejected." in page


def test_an_approval_through_an_account_the_proposer_made_is_refused_on_the_page(pools, make_user):  # noqa: F811
    """The issue's attack through the portal: an Administrator proposes, makes `admin2` a moment later and
    approves through it. The page says why, in the words the APIs and the command line use; nothing changes."""
    from html import unescape

    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    ada = make_user(Role.ADMINISTRATOR, "ada")
    plan = plan_of(ada)
    admin2 = create_user("admin2", Role.ADMINISTRATOR, PASSWORD, created_by=ada)
    page = unescape(client_of(admin2).post(f"/lending/plans/{plan.pk}/approve/", follow=True).content.decode())
    assert ("approver: 'admin2' was created by 'ada', who asked (directly or through accounts they made); the "
            "approver must be an account the requester did not make") in page
    assert "approved: now" not in page
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.PROPOSED
