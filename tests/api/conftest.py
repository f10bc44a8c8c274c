"""Rows a whole test module shares, for the role x endpoint matrices (test_status_matrix.py, test_access.py).

Each of their cases is one request by one role. Building the sample inventory, six users and the rest
for each of them again made the set-up cost many times the request (0.2 s a case on SQLite, 0.6 s on
PostgreSQL, for a few hundred cases). Here the rows are written once per module, in a transaction of the
module's own that is rolled back after its last test; each test still runs in a savepoint of it that is
rolled back after the test (pytest-django's `db`), so what one request changes (a node's state, a new
user, a deleted credential, a changed password) is gone before the next one, as before.
"""

from contextlib import contextmanager

import pytest
from django.db import transaction
from django.test import override_settings

from tests.conftest import PASSWORD

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@contextmanager
def module_rows(django_db_blocker, tmp_path_factory):
    """Open the module's transaction (the database unblocked only while it is opened and rolled back);
    yield a context manager under which the module's rows are written."""

    @contextmanager
    def writing():
        # As the function-scoped autouse fixtures of tests/conftest.py set them for a test: cheap hashes, and
        # an audit witness file of the module's own (its rows are rolled back, so must its witness be).
        witness = tmp_path_factory.mktemp("module-audit-witness") / "witness.jsonl"
        with django_db_blocker.unblock(), override_settings(PASSWORD_HASHERS=FAST_HASHER, AUDIT_WITNESS_FILE=witness):
            yield

    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
    try:
        yield writing
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


def make_role_users() -> dict[str, int]:
    """One user per role, named as tests/conftest.py's `users` names them: {role: primary key}."""
    from appliance.accounts.services import create_user
    from appliance.core.roles import Role

    return {role: create_user(f"{role}-user", role, PASSWORD).pk for role in Role.values}


def fresh_users(user_pks: dict[str, int]) -> dict:
    """The module's users read again for one test: what a test does to its objects stays with it."""
    from django.contrib.auth import get_user_model

    found = get_user_model().objects.in_bulk(user_pks.values())
    return {role: found[pk] for role, pk in user_pks.items()}


@pytest.fixture(scope="module")
def shared_rows(django_db_setup, django_db_blocker, tmp_path_factory):
    """Use: `with shared_rows(): ...create rows...` in a module-scoped fixture."""
    with module_rows(django_db_blocker, tmp_path_factory) as writing:
        yield writing
