"""Logins, failed logins, logouts (idle timeout included), lockouts, and account changes."""

import json

import pytest
from django.test import Client

from appliance.accounts import services
from appliance.audit.models import AuditRecord
from appliance.core import context
from appliance.core.roles import Role
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def latest(event, **filters):
    return AuditRecord.objects.filter(event=event, **filters).order_by("-sequence").first()


def all_records_json() -> str:
    return json.dumps([r.payload() for r in AuditRecord.objects.all()])


def test_login_success(users):
    client = Client(headers={"User-Agent": "browser/1"})
    response = client.post("/accounts/login/", {"username": "operator-user", "password": PASSWORD})
    assert response.status_code == 302
    rec = latest("auth.login.success", request_id=response["X-Request-ID"])
    user = users[Role.OPERATOR]
    assert rec.outcome == "success"
    assert (rec.actor_id, rec.actor_username, rec.actor_roles) == (user.pk, "operator-user", [Role.OPERATOR])
    assert (rec.target_type, rec.target_id) == ("accounts.user", str(user.pk))
    assert rec.channel == "web" and rec.source_address == "127.0.0.1" and rec.user_agent == "browser/1"


def test_login_failure_keeps_the_attempted_username_never_the_password(users):
    wrong = "Wrong-password-98765"
    response = Client().post("/accounts/login/", {"username": "auditor-user", "password": wrong})
    assert response.status_code == 200
    rec = latest("auth.login.failure", request_id=response["X-Request-ID"])
    assert rec.outcome == "failure" and rec.reason == "invalid credentials"
    assert rec.details == {"attempted_username": "auditor-user"}
    assert rec.target_name == "auditor-user" and rec.target_id == str(users[Role.AUDITOR].pk)
    assert rec.actor_username == ""
    assert wrong not in all_records_json()


def test_login_failure_for_an_unknown_username(db):
    response = Client().post("/accounts/login/", {"username": "nobody-here", "password": "x" * 14})
    rec = latest("auth.login.failure", request_id=response["X-Request-ID"])
    assert rec.details["attempted_username"] == "nobody-here"
    assert rec.target_id == ""


def test_logout(client_for):
    client = client_for(Role.ADMINISTRATOR)
    response = client.post("/accounts/logout/")
    rec = latest("auth.logout", request_id=response["X-Request-ID"])
    assert rec.actor_username == "administrator-user" and rec.reason == ""
    assert rec.details == {"cause": "user"}


def test_idle_timeout_logout_says_so(client_for, settings):
    settings.SESSION_IDLE_TIMEOUT = 60
    client = client_for(Role.AUDITOR)
    session = client.session
    session["_last_activity"] = 1  # long ago
    session.save()
    response = client.get("/audit/")
    assert response.status_code == 302  # back to the login page
    rec = latest("auth.logout", request_id=response["X-Request-ID"])
    assert rec.reason == "session idle timeout"
    assert rec.actor_username == "auditor-user"


def test_lockout_is_recorded_once_then_attempts_say_locked(users, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    for attempt in range(3):
        client.post("/accounts/login/", {"username": "viewer-user", "password": f"bad-password-{attempt}"})
    lockouts = AuditRecord.objects.filter(event="auth.lockout")
    assert lockouts.count() == 1
    lock = lockouts.get()
    assert lock.outcome == "denied"
    assert lock.target_name == "viewer-user" and lock.target_id == str(users[Role.VIEWER].pk)
    assert lock.details["failures"] == 3 and lock.details["failure_limit"] == 3
    failures = list(AuditRecord.objects.filter(event="auth.login.failure").order_by("sequence"))
    assert [f.reason for f in failures] == ["invalid credentials", "invalid credentials",
                                            "invalid credentials; the username is now locked out"]
    assert lock.request_id == failures[-1].request_id

    response = client.post("/accounts/login/", {"username": "viewer-user", "password": PASSWORD})
    assert response.status_code == 429
    assert AuditRecord.objects.filter(event="auth.lockout").count() == 1
    rec = latest("auth.login.failure", request_id=response["X-Request-ID"])
    assert rec.reason == "username is locked out"
    # The refused request itself is counted per address and minute (a 429 like a 401), not recorded alone.
    assert latest("api.request", request_id=response["X-Request-ID"]) is None
    assert PASSWORD not in all_records_json()


def test_user_creation_is_recorded_without_the_password(users):
    admin = users[Role.ADMINISTRATOR]
    secret = "A-new-users-password-42"
    with context.acting_as(admin, channel="web", request_id="req-create-user"):
        user = services.create_user("new-operator", Role.OPERATOR, secret)
    rec = latest("accounts.user.create", target_id=str(user.pk))
    assert rec.actor_username == admin.username and rec.channel == "web" and rec.request_id == "req-create-user"
    assert rec.details["after"]["username"] == "new-operator"
    assert rec.details["after"]["role"] == Role.OPERATOR
    assert rec.details["after"]["password"] == "[redacted]"
    dumped = all_records_json()
    assert secret not in dumped and user.password not in dumped


def test_role_change_is_recorded_with_before_and_after(users):
    admin, target = users[Role.ADMINISTRATOR], users[Role.VIEWER]
    with context.acting_as(admin, channel="api"):
        services.set_role(target, Role.OPERATOR)
    rec = latest("accounts.role.change", target_id=str(target.pk))
    assert rec.details == {"role": [Role.VIEWER, Role.OPERATOR]}
    assert rec.actor_username == admin.username and rec.channel == "api"
    assert rec.severity == "high"


def test_password_change_is_recorded_without_any_hash(users):
    user = users[Role.OPERATOR]
    old_hash = user.password
    with context.acting_as(user, channel="web"):
        user.set_password("Another-long-password-7")
        user.save()
    rec = latest("accounts.password.change", target_id=str(user.pk))
    assert rec.actor_username == user.username
    change = latest("accounts.user.update", target_id=str(user.pk))
    assert change.details["changes"]["password"] == "[redacted]"
    dumped = all_records_json()
    assert old_hash not in dumped and user.password not in dumped and "Another-long-password-7" not in dumped
