"""API tokens: stored as a digest, expiring, listed without their secret, revoked by their owner or an
Administrator; Django's admin shows none and mints none."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from appliance.accounts.models import ApiToken
from appliance.accounts.tokens import issue_token, revoke_token
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from tests.access import assert_error_body
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def token_client(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def obtain(username: str) -> str:
    response = Client().post("/api/v1/accounts/token/", {"username": username, "password": PASSWORD},
                             content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()["token"]


def test_the_database_holds_no_usable_token(users):
    key = obtain("operator-user")
    secret = key.split(".", 1)[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        [row] = cursor.fetchall()
    stored = " ".join(str(value) for value in row)
    assert key not in stored and secret not in stored
    assert len(secret) == 43  # 32 random bytes, URL-safe base64
    assert token_client(key).get("/api/v1/accounts/me/").json()["username"] == "operator-user"


def test_a_token_expires_after_the_configured_days(users, settings):
    settings.TOKEN_TTL_DAYS = 7
    token, key = issue_token(users[Role.VIEWER])
    assert timedelta(days=7) - timedelta(minutes=1) < token.expires - timezone.now() <= timedelta(days=7)
    ApiToken.objects.filter(pk=token.pk).update(expires=timezone.now() - timedelta(seconds=1))
    error = assert_error_body(token_client(key).get("/api/v1/accounts/me/"), 401)
    assert error["message"] == "Token expired."


def test_last_use_is_kept(users):
    token, key = issue_token(users[Role.VIEWER])
    assert token.last_used is None
    token_client(key).get("/api/v1/accounts/me/")
    token.refresh_from_db()
    assert timezone.now() - token.last_used < timedelta(seconds=30)


def test_a_tampered_or_unknown_token_is_refused(users):
    _token, key = issue_token(users[Role.VIEWER])
    prefix, secret = key.split(".", 1)
    for bad in (f"{prefix}.{'A' * len(secret)}", f"apl_000000000000.{secret}", secret, prefix, "apl_."):
        assert assert_error_body(token_client(bad).get("/api/v1/accounts/me/"), 401)["message"] == "Invalid token."


def test_the_owner_lists_and_revokes_a_token_and_it_stops_working(users):
    key = obtain("operator-user")
    client = token_client(key)
    listed = client.get("/api/v1/accounts/tokens/").json()
    [entry] = listed["results"]
    assert set(entry) == {"id", "username", "name", "prefix", "state", "created", "expires", "last_used", "revoked",
                          "revoked_by"}
    assert entry["state"] == "active" and key.startswith(f"apl_{entry['prefix']}.")
    assert key.split(".", 1)[1] not in str(listed)

    response = client.post(f"/api/v1/accounts/tokens/{entry['id']}/revoke/")
    assert response.status_code == 200 and response.json()["state"] == "revoked"
    assert response.json()["revoked_by"] == "operator-user"
    assert assert_error_body(client.get("/api/v1/accounts/me/"), 401)["message"] == "Token revoked."
    record = AuditRecord.objects.filter(event="auth.token.revoke").latest("sequence")
    assert record.actor_username == "operator-user" and record.target_type == "accounts.apitoken"
    assert record.details == {"owner": "operator-user", "prefix": entry["prefix"], "name": ""}


def test_a_new_token_from_the_api_shows_its_secret_once(client_for):
    client = client_for(Role.ML_ENGINEER)
    created = client.post("/api/v1/accounts/tokens/", {"name": "notebook"}, content_type="application/json")
    assert created.status_code == 201
    key = created.json()["token"]
    assert token_client(key).get("/api/v1/accounts/me/").json()["username"] == "ml_engineer-user"
    again = client.get(f"/api/v1/accounts/tokens/{created.json()['id']}/").json()
    assert "token" not in again and again["name"] == "notebook"


def test_an_operator_cannot_see_or_revoke_an_administrators_token(users, client_for):
    admin_token, admin_key = issue_token(users[Role.ADMINISTRATOR])
    operator = client_for(Role.OPERATOR)
    assert operator.get("/api/v1/accounts/tokens/").json()["count"] == 0
    assert_error_body(operator.get(f"/api/v1/accounts/tokens/{admin_token.pk}/"), 404)
    assert_error_body(operator.post(f"/api/v1/accounts/tokens/{admin_token.pk}/revoke/"), 404)
    assert operator.post(f"/accounts/tokens/{admin_token.pk}/revoke/").status_code == 404
    with pytest.raises(PermissionError, match="only its owner or an Administrator may revoke it"):
        revoke_token(admin_token, users[Role.OPERATOR])
    admin_token.refresh_from_db()
    assert admin_token.revoked is None
    assert token_client(admin_key).get("/api/v1/accounts/me/").status_code == 200


def test_an_auditor_lists_every_token_but_revokes_only_their_own(users, client_for):
    operator_token, _key = issue_token(users[Role.OPERATOR])
    own, _own_key = issue_token(users[Role.AUDITOR])
    auditor = client_for(Role.AUDITOR)
    assert {t["username"] for t in auditor.get("/api/v1/accounts/tokens/").json()["results"]} == {
        "operator-user", "auditor-user"}
    assert assert_error_body(auditor.post(f"/api/v1/accounts/tokens/{operator_token.pk}/revoke/"), 403)
    assert auditor.post(f"/api/v1/accounts/tokens/{own.pk}/revoke/").status_code == 200


def test_an_administrator_revokes_anyones_token(users, client_for):
    token, key = issue_token(users[Role.OPERATOR])
    response = client_for(Role.ADMINISTRATOR).post(f"/api/v1/accounts/tokens/{token.pk}/revoke/")
    assert response.status_code == 200 and response.json()["revoked_by"] == "administrator-user"
    assert_error_body(token_client(key).get("/api/v1/accounts/me/"), 401)
    record = AuditRecord.objects.filter(event="auth.token.revoke").latest("sequence")
    assert record.actor_username == "administrator-user" and record.details["owner"] == "operator-user"
    again = client_for(Role.ADMINISTRATOR).post(f"/api/v1/accounts/tokens/{token.pk}/revoke/")
    assert "already revoked" in assert_error_body(again, 400)["fields"]["non_field_errors"][0]


def test_the_portal_page_makes_lists_and_revokes_tokens(users, client_for):
    client = client_for(Role.VIEWER)
    page = client.post("/accounts/tokens/", {"name": "laptop"})
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    key = page.context["new_token"]
    assert key.encode() in page.content
    token = ApiToken.objects.get(user=users[Role.VIEWER])
    assert token.name == "laptop"
    listing = client.get("/accounts/tokens/")
    assert key.encode() not in listing.content and f"apl_{token.prefix}".encode() in listing.content
    assert client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 302
    assert_error_body(token_client(key).get("/api/v1/accounts/me/"), 401)


# --- Django's admin site ------------------------------------------------------------------------------


def test_the_admin_site_cannot_mint_or_show_a_token(users, client_for):
    token, key = issue_token(users[Role.OPERATOR])
    admin = client_for(Role.ADMINISTRATOR)
    assert admin.get("/django-admin/accounts/apitoken/add/").status_code == 403
    assert admin.post("/django-admin/accounts/apitoken/add/", {"user": users[Role.OPERATOR].pk}).status_code == 403
    assert admin.get("/django-admin/authtoken/tokenproxy/add/").status_code == 404  # DRF's plaintext tokens: gone
    listing = admin.get("/django-admin/accounts/apitoken/")
    detail = admin.get(f"/django-admin/accounts/apitoken/{token.pk}/change/")
    assert listing.status_code == detail.status_code == 200
    for page in (listing, detail):
        assert token.digest.encode() not in page.content and key.split(".", 1)[1].encode() not in page.content
    assert ApiToken.objects.count() == 1


def test_revoking_from_the_admin_site_is_recorded(users, client_for):
    token, _key = issue_token(users[Role.OPERATOR])
    response = client_for(Role.ADMINISTRATOR).post("/django-admin/accounts/apitoken/", {
        "action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked is not None
    record = AuditRecord.objects.filter(event="auth.token.revoke").latest("sequence")
    assert record.actor_username == "administrator-user" and record.target_id == str(token.pk)
    assert record.details["owner"] == "operator-user"


def test_changing_a_user_in_the_admin_site_is_recorded(users, client_for):
    viewer = users[Role.VIEWER]
    response = client_for(Role.ADMINISTRATOR).post(f"/django-admin/accounts/user/{viewer.pk}/change/", {
        "email": "v@example.org", "first_name": "", "last_name": "", "role": "operator", "is_active": "on"})
    assert response.status_code == 302, response.content[:3000]
    viewer.refresh_from_db()
    assert viewer.role == "operator" and viewer.email == "v@example.org"
    action = AuditRecord.objects.filter(event="admin.action").latest("sequence")
    assert action.actor_username == "administrator-user" and action.target_id == str(viewer.pk)
    assert action.target_name == "viewer-user" and action.details["action"] == "change"
    assert action.details["changes"] == [{"changed": {"fields": ["Email address", "Role"]}}]
    role = AuditRecord.objects.filter(event="accounts.role.change").latest("sequence")
    assert role.details == {"role": ["viewer", "operator"]} and role.actor_username == "administrator-user"


def test_the_admin_site_keeps_the_last_administrator_and_sets_no_passwords(users, client_for):
    me = users[Role.ADMINISTRATOR]
    admin = client_for(Role.ADMINISTRATOR)
    admin.post(f"/django-admin/accounts/user/{me.pk}/change/", {
        "email": "", "first_name": "", "last_name": "", "role": "viewer", "is_active": "on"})
    me.refresh_from_db()
    assert me.role == "administrator"
    assert not AuditRecord.objects.filter(event="admin.action").exists()
    page = admin.get(f"/django-admin/accounts/user/{users[Role.VIEWER].pk}/password/", follow=True)
    assert b'type="password"' not in page.content  # no form sets another user's password
    assert admin.get("/django-admin/accounts/user/add/").status_code == 403


def test_the_admin_site_takes_no_passwords_of_its_own(users):
    client = Client(REMOTE_ADDR="198.51.100.20")
    response = client.post("/django-admin/login/?next=/django-admin/accounts/user/",
                           {"username": "administrator-user", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/django-admin/accounts/user/"
    assert "_auth_user_id" not in client.session
    assert client.get("/django-admin/").status_code == 302
