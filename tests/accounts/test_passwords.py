"""Password rules and every user changing their own password."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from appliance.accounts.services import create_user
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from tests.access import assert_error_body
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
User = get_user_model()
NEW = "a-fresh-long-passphrase-3"


@pytest.mark.parametrize(("password", "message"), [
    ("aaaaaaaaaaaa", "This password is a single character repeated."),
    ("............................", "This password is a single character repeated."),
    ("password1234", "This password is too common."),
    ("short-pw-1", "This password is too short. It must contain at least 12 characters."),
])
def test_weak_passwords_are_refused(db, password, message):
    with pytest.raises(Exception) as caught:
        create_user("weak", Role.VIEWER, password)
    assert message in caught.value.messages
    assert not User.objects.filter(username="weak").exists()


def test_weak_password_through_the_api_names_the_field(client_for):
    response = client_for(Role.ADMINISTRATOR).post("/api/v1/accounts/users/", {
        "username": "bob", "role": "viewer", "password": "aaaaaaaaaaaa"}, content_type="application/json")
    error = assert_error_body(response, 400)
    assert error["fields"] == {"password": ["This password is a single character repeated."]}


def test_a_user_made_by_an_administrator_remembers_who_made_it(users, client_for):
    client_for(Role.ADMINISTRATOR).post("/api/v1/accounts/users/", {
        "username": "bob", "role": "viewer", "password": NEW}, content_type="application/json")
    assert User.objects.get(username="bob").created_by == users[Role.ADMINISTRATOR]


@pytest.mark.parametrize("role", Role.values)
def test_every_user_changes_their_own_password_through_the_api(users, client_for, role):
    client = client_for(role)
    response = client.post("/api/v1/accounts/me/password/", {"old_password": PASSWORD, "new_password": NEW},
                           content_type="application/json")
    assert response.status_code == 204, response.content
    user = users[role]
    user.refresh_from_db()
    assert user.check_password(NEW)
    record = AuditRecord.objects.filter(event="accounts.password.change").latest("sequence")
    assert record.actor_username == user.username and record.target_id == str(user.pk)
    assert NEW not in str(record.details)
    assert client.get("/api/v1/accounts/me/").status_code == 200  # the session survives its own change


def test_own_password_change_errors_name_the_field(users, client_for):
    client = client_for(Role.VIEWER)
    wrong = client.post("/api/v1/accounts/me/password/", {"old_password": "not-it-at-all", "new_password": NEW},
                        content_type="application/json")
    assert assert_error_body(wrong, 400)["fields"] == {"old_password": ["this is not your current password"]}
    weak = client.post("/api/v1/accounts/me/password/", {"old_password": PASSWORD, "new_password": "zzzzzzzzzzzzzz"},
                       content_type="application/json")
    assert assert_error_body(weak, 400)["fields"] == {"new_password": ["This password is a single character repeated."]}
    users[Role.VIEWER].refresh_from_db()
    assert users[Role.VIEWER].check_password(PASSWORD)
    assert not AuditRecord.objects.filter(event="accounts.password.change").exists()


def test_own_password_change_in_the_portal(users):
    client = Client()
    assert client.post("/accounts/login/", {"username": "auditor-user", "password": PASSWORD}).status_code == 302
    assert b"Change your password" in client.get("/accounts/password/").content
    refused = client.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": "password1234",
                                                  "new_password2": "password1234"})
    assert refused.status_code == 200 and b"This password is too common." in refused.content
    done = client.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302
    assert b"Your password was changed." in client.get(done["Location"]).content
    users[Role.AUDITOR].refresh_from_db()
    assert users[Role.AUDITOR].check_password(NEW)
    record = AuditRecord.objects.filter(event="accounts.password.change").latest("sequence")
    assert record.actor_username == "auditor-user" and record.channel == "web"


def test_guessing_the_current_password_counts_towards_the_lockout(users, client_for, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = client_for(Role.OPERATOR)
    answers = []
    for attempt in range(3):
        wrong = client.post("/api/v1/accounts/me/password/", {"old_password": f"guess-{attempt}-xxxxxx",
                                                          "new_password": NEW}, content_type="application/json")
        answers.append(assert_error_body(wrong, 400)["fields"]["old_password"][0])
    assert answers == ["this is not your current password", "this is not your current password",
                       "too many failed attempts for this username; try again later"]  # the third locks
    failures = AuditRecord.objects.filter(event="auth.login.failure", target_name="operator-user")
    assert failures.count() == 3
    locked = client.post("/api/v1/accounts/me/password/", {"old_password": PASSWORD, "new_password": NEW},
                         content_type="application/json")
    assert assert_error_body(locked, 400)["fields"] == {
        "old_password": ["too many failed attempts for this username; try again later"]}
    users[Role.OPERATOR].refresh_from_db()
    assert users[Role.OPERATOR].check_password(PASSWORD)
    assert Client().post("/accounts/login/", {"username": "operator-user", "password": PASSWORD}).status_code == 429


def test_a_wrong_current_password_in_the_portal_is_a_failed_attempt(users, client_for):
    client = client_for(Role.VIEWER)
    page = client.post("/accounts/password/", {"old_password": "not-my-password-1", "new_password1": NEW,
                                               "new_password2": NEW})
    assert page.status_code == 200 and b"this is not your current password" in page.content
    failure = AuditRecord.objects.filter(event="auth.login.failure").latest("sequence")
    assert failure.target_name == "viewer-user" and failure.reason == "invalid credentials"
    users[Role.VIEWER].refresh_from_db()
    assert users[Role.VIEWER].check_password(PASSWORD)
