"""Accounts API: users managed by Administrators, the caller's own account, API tokens."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role, capabilities_of
from tests.access import assert_error_body
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def admin(client_for):
    return client_for(Role.ADMINISTRATOR)


def post_json(client, url, data):
    return client.post(url, data, content_type="application/json")


def patch_json(client, url, data):
    return client.patch(url, data, content_type="application/json")


def test_administrator_creates_a_user_with_a_role(admin):
    response = post_json(admin, "/api/v1/accounts/users/",
                         {"username": "ml-alice", "email": "alice@example.org", "role": "ml_engineer",
                          "password": "a-long-enough-passphrase"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["username"] == "ml-alice" and body["role"] == "ml_engineer" and body["role_label"] == "ML engineer"
    assert "password" not in body
    user = User.objects.get(username="ml-alice")
    assert user.check_password("a-long-enough-passphrase") and user.is_active
    assert AuditRecord.objects.filter(event="accounts.user.create", target_id=str(user.pk)).exists()


@pytest.mark.parametrize(("payload", "field"), [
    ({"username": "bob", "role": "viewer", "password": "short"}, "password"),
    ({"username": "bob", "role": "viewer", "password": "12345678901234"}, "password"),
    ({"username": "bob", "role": "viewer", "password": "1q2w3e4r5t6y7u8i"}, "password"),
    ({"username": "bob", "email": "bob.example.org@x.org", "role": "viewer", "password": "bob.example.org"},
     "password"),
    ({"username": "bob", "role": "king", "password": "a-long-enough-passphrase"}, "role"),
    ({"username": "viewer-user", "role": "viewer", "password": "a-long-enough-passphrase"}, "username"),
    ({"username": "has space", "role": "viewer", "password": "a-long-enough-passphrase"}, "username"),
    ({"role": "viewer", "password": "a-long-enough-passphrase"}, "username"),
])
def test_user_creation_errors_name_the_field(admin, payload, field):
    error = assert_error_body(post_json(admin, "/api/v1/accounts/users/", payload), 400)
    assert list(error["fields"]) == [field], error
    assert not User.objects.filter(username="bob").exists()


def test_change_role_and_deactivate(admin, users):
    viewer = users[Role.VIEWER]
    response = patch_json(admin, f"/api/v1/accounts/users/{viewer.pk}/", {"role": "operator"})
    assert response.status_code == 200 and response.json()["role"] == "operator"
    change = AuditRecord.objects.filter(event="accounts.role.change").latest("sequence")
    assert change.details == {"role": ["viewer", "operator"]} and change.actor_username == "administrator-user"

    response = patch_json(admin, f"/api/v1/accounts/users/{viewer.pk}/", {"is_active": False})
    assert response.status_code == 200 and response.json()["is_active"] is False
    viewer.refresh_from_db()
    assert not viewer.is_active


def test_a_deactivated_user_loses_token_and_session(admin, users):
    from appliance.accounts.tokens import issue_token

    viewer = users[Role.VIEWER]
    _token, key = issue_token(viewer)
    session = Client()
    session.force_login(viewer)
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/accounts/me/").status_code == 200
    patch_json(admin, f"/api/v1/accounts/users/{viewer.pk}/", {"is_active": False})
    assert_error_body(Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/accounts/me/"), 401)
    assert session.get("/api/v1/accounts/me/").status_code in (401, 403)


def test_administrators_cannot_lock_themselves_or_the_appliance_out(admin, users):
    me = users[Role.ADMINISTRATOR]
    error = assert_error_body(patch_json(admin, f"/api/v1/accounts/users/{me.pk}/", {"is_active": False}), 400)
    assert "own account" in error["fields"]["is_active"][0]
    error = assert_error_body(patch_json(admin, f"/api/v1/accounts/users/{me.pk}/", {"role": "viewer"}), 400)
    assert "last active Administrator" in error["fields"]["role"][0]
    me.refresh_from_db()
    assert me.role == Role.ADMINISTRATOR and me.is_active


def test_put_and_delete_are_not_offered(admin, users):
    url = f"/api/v1/accounts/users/{users[Role.VIEWER].pk}/"
    assert_error_body(admin.delete(url), 405)
    assert_error_body(admin.put(url, {"role": "viewer"}, content_type="application/json"), 405)
    assert User.objects.filter(pk=users[Role.VIEWER].pk).exists()


@pytest.mark.parametrize("role", Role.values)
def test_me_shows_role_and_capabilities(client_for, users, role):
    body = client_for(role).get("/api/v1/accounts/me/").json()
    assert body["username"] == users[role].username and body["role"] == role
    assert body["capabilities"] == sorted(capabilities_of(users[role]))


def test_auditor_reads_users_but_changes_nothing(client_for, users):
    auditor = client_for(Role.AUDITOR)
    assert auditor.get("/api/v1/accounts/users/").json()["count"] == 5
    assert_error_body(patch_json(auditor, f"/api/v1/accounts/users/{users[Role.VIEWER].pk}/", {"role": "operator"}), 403)


# --- tokens -------------------------------------------------------------------------------------------


def test_token_for_username_and_password(users):
    client = Client()
    response = post_json(client, "/api/v1/accounts/token/", {"username": "operator-user", "password": PASSWORD})
    assert response.status_code == 200, response.content
    token = response.json()["token"]
    assert response.json()["role"] == "operator"
    me = Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/v1/accounts/me/")
    assert me.json()["username"] == "operator-user"
    record = AuditRecord.objects.filter(event="auth.token.create").latest("sequence")
    assert record.actor_username == "operator-user" and record.outcome == "success"
    assert token not in str(record.details) and token not in record.reason
    # Only a digest is kept, so asking again issues another token (each listed and revocable on its own).
    again = post_json(client, "/api/v1/accounts/token/", {"username": "operator-user", "password": PASSWORD})
    assert again.json()["token"] != token
    assert Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/v1/accounts/me/").status_code == 200


def test_token_with_wrong_password_or_missing_fields(users):
    error = assert_error_body(post_json(Client(), "/api/v1/accounts/token/",
                                        {"username": "operator-user", "password": "wrong-wrong-wrong"}), 401)
    assert error["code"] == "authentication_failed"
    error = assert_error_body(post_json(Client(), "/api/v1/accounts/token/", {"username": "operator-user"}), 400)
    assert list(error["fields"]) == ["password"]


def test_token_for_a_deactivated_user_is_refused(users):
    users[Role.VIEWER].is_active = False
    users[Role.VIEWER].save()
    assert_error_body(post_json(Client(), "/api/v1/accounts/token/",
                                {"username": "viewer-user", "password": PASSWORD}), 401)


def test_token_endpoint_shares_the_login_lockout(users, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        post_json(client, "/api/v1/accounts/token/", {"username": "operator-user", "password": "wrong-wrong-wrong"})
    error = assert_error_body(post_json(client, "/api/v1/accounts/token/",
                                        {"username": "operator-user", "password": PASSWORD}), 429)
    assert error["code"] == "locked_out"


def test_token_endpoint_is_rate_limited_per_address(db):
    client = Client()
    statuses = [post_json(client, "/api/v1/accounts/token/", {"username": f"nobody-{i}", "password": "x"}).status_code
                for i in range(10)]
    assert statuses == [401] * 10
    error = assert_error_body(post_json(client, "/api/v1/accounts/token/", {"username": "nobody-x", "password": "x"}),
                              429)
    assert error["code"] == "throttled"
