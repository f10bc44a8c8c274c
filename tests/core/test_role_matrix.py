"""The role x capability table, checked against a copy written out by hand (tests/expected_roles.py),
one case per role and capability: granting or withdrawing any capability fails here."""

import pytest

from appliance.core.roles import CAPABILITIES, Role, can
from tests.expected_roles import EXPECTED_MATRIX, ROLES, expected_to_hold

pytestmark = pytest.mark.django_db


def test_the_expected_table_names_exactly_the_capabilities_and_roles_of_the_product():
    assert set(CAPABILITIES) == set(EXPECTED_MATRIX)
    assert tuple(Role.values) == ROLES


@pytest.mark.parametrize("capability", sorted(EXPECTED_MATRIX))
@pytest.mark.parametrize("role", ROLES)
def test_each_role_holds_exactly_the_capabilities_written_down(make_user, role, capability):
    user = make_user(role)
    assert can(user, capability) is expected_to_hold(role, capability), (role, capability)


def test_an_operator_does_not_manage_accounts(make_user):
    operator = make_user(Role.OPERATOR)
    assert not can(operator, "accounts.manage")
    assert not can(operator, "accounts.view")
    assert not can(operator, "audit.view")
