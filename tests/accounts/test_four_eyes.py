"""The one four-eyes rule (accounts.services.require_independent_approver) where two accounts share a creator:
siblings are independent; their maker, and an account one of them made, are not."""

import pytest
from django.utils import timezone

from appliance.accounts.services import ApproverNotIndependent, create_user, require_independent_approver
from appliance.core.roles import Role
from tests.accounts.settled import settle
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def decide(approver, requester) -> None:
    require_independent_approver(approver, requester, since=timezone.now(), what="promotion to production",
                                 second="a second person")


def test_two_accounts_made_by_one_administrator_may_decide_each_others_requests():
    """A makes B and C; B asks, C approves: allowed (a common creator is how an appliance's accounts are
    made). A, who made B, may not approve; nor may D, whom C made, approve what C asked."""
    maker = settle(create_user("ada", Role.ADMINISTRATOR, PASSWORD))
    first = settle(create_user("bea", Role.ML_ENGINEER, PASSWORD, created_by=maker))
    second = settle(create_user("cid", Role.ML_ENGINEER, PASSWORD, created_by=maker))
    decide(second, first)
    decide(first, second)
    with pytest.raises(ApproverNotIndependent, match="^approver: 'ada' created 'bea', who asked"):
        decide(maker, first)
    made_by_second = settle(create_user("dot", Role.ML_ENGINEER, PASSWORD, created_by=second))
    with pytest.raises(ApproverNotIndependent, match="^approver: 'dot' was created by 'cid', who asked"):
        decide(made_by_second, second)
    decide(made_by_second, first)  # first's sibling's account: no creator link to first either way
