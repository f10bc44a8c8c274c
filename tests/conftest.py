import pytest
from django.test import Client

from appliance.core.roles import Role

PASSWORD = "correct-horse-battery-9"


@pytest.fixture
def make_user(db):
    from appliance.accounts.services import create_user

    def make(role: str = Role.VIEWER, username: str | None = None):
        return create_user(username or f"{role}-user", role, PASSWORD)

    return make


@pytest.fixture
def users(make_user):
    return {role: make_user(role) for role in Role.values}


@pytest.fixture
def client_for(users):
    """A logged-in Django test client for a role."""

    def make(role: str) -> Client:
        client = Client()
        client.force_login(users[role])
        return client

    return make
