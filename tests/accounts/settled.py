"""Accounts that have been on the appliance for a while: made, enabled and given their role longer ago than
the four-eyes cooling period (settings.FOUR_EYES_COOLING_PERIOD, a day by default). Tests of decisions that
need two people build their people this way; the tests of the rule itself make fresh accounts on purpose."""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.core.roles import Role

# Long enough for tests that run at fixed dates (a plan proposed on 2026-12-01) too.
SETTLED_FOR = timedelta(days=5 * 365)


def settle(*users, ago: timedelta = SETTLED_FOR):
    """Move each account's creation, enabling and role back by `ago`; returns the users, refreshed."""
    from appliance.accounts.models import User

    when = timezone.now() - ago
    User.objects.filter(pk__in=[user.pk for user in users]).update(date_joined=when, role_since=when,
                                                                    active_since=when)
    for user in users:
        user.refresh_from_db()
    return users[0] if len(users) == 1 else users


@pytest.fixture
def make_user(make_user):
    """tests/conftest.py's make_user, the account settled: a conftest that imports this fixture gives its tests
    people who have been on the appliance longer than the cooling period (a request one makes can be decided);
    the tests of the rule itself make fresh accounts with accounts.services.create_user."""

    def make(role: str = Role.VIEWER, username: str | None = None):
        return settle(make_user(role, username))

    return make
