"""Upgrading: DRF's plaintext tokens are dropped with their table; accounts keep their role's start, and have
been enabled since they were made (the four-eyes cooling period counts from then)."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("accounts", "0001_initial")]
AFTER = [("accounts", "0003_user_active_since")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    """Later tests of this worker share the database: leave it at the latest migration of every app."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_plaintext_tokens_are_dropped_and_roles_date_from_the_account():
    old = migrate(BEFORE)
    User = old.get_model("accounts", "User")
    joined = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    user = User.objects.create(username="old-operator", role="operator", password="!", date_joined=joined)
    with connection.cursor() as cursor:
        # The table rest_framework.authtoken made, holding a token in plain text.
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp NOT NULL, "
                       "user_id bigint NOT NULL UNIQUE REFERENCES accounts_user (id))")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", ["a" * 40, joined, user.pk])

    migrate(AFTER)

    with connection.cursor() as cursor:
        assert "authtoken_token" not in connection.introspection.table_names(cursor)
    from appliance.accounts.models import ApiToken
    from appliance.accounts.models import User as CurrentUser

    upgraded = CurrentUser.objects.get(username="old-operator")
    assert upgraded.role_since == joined and upgraded.created_by is None
    assert upgraded.active_since == joined
    assert ApiToken.objects.count() == 0
