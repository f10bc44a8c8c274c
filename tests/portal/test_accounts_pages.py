"""Users pages, login, logout, failed-login lockout and the session idle timeout."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from appliance.core.roles import Role
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
User = get_user_model()


def test_users_page_for_administrators_has_forms(client_for, users):
    html = client_for(Role.ADMINISTRATOR).get("/accounts/users/").content.decode()
    assert html.count("data-user=") == 5
    assert 'data-action="create-user"' in html
    assert html.count(">Set role</button>") == 5
    assert html.count(">Deactivate</button>") == 4  # not for oneself


def test_users_page_for_auditors_is_read_only(client_for, users):
    html = client_for(Role.AUDITOR).get("/accounts/users/").content.decode()
    assert html.count("data-user=") == 5
    assert "<form" not in html.split('<main id="main" tabindex="-1">', 1)[1]


def test_create_user_from_the_page(client_for):
    client = client_for(Role.ADMINISTRATOR)
    response = client.post("/accounts/users/new/", {
        "username": "new-auditor", "email": "", "role": "auditor",
        "password1": "long-enough-passphrase-71", "password2": "long-enough-passphrase-71"}, follow=True)
    assert b"Created new-auditor (Auditor)." in response.content
    assert User.objects.get(username="new-auditor").role == Role.AUDITOR


@pytest.mark.parametrize(("fields", "error_for", "message"), [
    ({"password1": "short", "password2": "short"}, "password1", "too short"),
    ({"password1": "long-enough-passphrase-71", "password2": "other-passphrase-7171"}, "password2", "differ"),
    ({"username": "viewer-user"}, "username", "already exists"),
    ({"username": "bad name!"}, "username", "letters, digits"),
    ({"role": "emperor"}, "role", "valid choice"),
])
def test_create_user_errors_are_shown_next_to_the_field(client_for, users, fields, error_for, message):
    data = {"username": "someone", "email": "", "role": "viewer",
            "password1": "long-enough-passphrase-71", "password2": "long-enough-passphrase-71", **fields}
    html = client_for(Role.ADMINISTRATOR).post("/accounts/users/new/", data).content.decode()
    assert f'data-error-for="{error_for}"' in html
    assert message in html.split(f'data-error-for="{error_for}"', 1)[1].split("</p>", 1)[0]
    assert not User.objects.filter(username="someone").exists()


def test_change_role_and_deactivate_from_the_page(client_for, users):
    client = client_for(Role.ADMINISTRATOR)
    viewer = users[Role.VIEWER]
    response = client.post(f"/accounts/users/{viewer.pk}/", {"role": "operator"}, follow=True)
    assert b"viewer-user is now Operator." in response.content
    response = client.post(f"/accounts/users/{viewer.pk}/", {"is_active": "false"}, follow=True)
    assert b"viewer-user deactivated." in response.content
    viewer.refresh_from_db()
    assert viewer.role == Role.OPERATOR and not viewer.is_active
    response = client.post(f"/accounts/users/{viewer.pk}/", {"is_active": "true"}, follow=True)
    assert b"viewer-user reactivated." in response.content


def test_an_administrator_cannot_deactivate_themselves_from_the_page(client_for, users):
    me = users[Role.ADMINISTRATOR]
    response = client_for(Role.ADMINISTRATOR).post(f"/accounts/users/{me.pk}/", {"is_active": "false"}, follow=True)
    assert b"you cannot deactivate your own account" in response.content
    me.refresh_from_db()
    assert me.is_active


# --- login, lockout, session ---------------------------------------------------------------------------


def login(client, username, password):
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_login_and_logout(users):
    client = Client()
    response = login(client, "operator-user", PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").context["user"].username == "operator-user"
    assert client.get("/accounts/logout/").status_code == 405  # a link cannot log anyone out
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert client.get("/")["Location"].startswith("/accounts/login/")


def test_failed_login_shows_an_error(users):
    response = login(Client(), "operator-user", "not-the-password")
    assert response.status_code == 200
    assert b'role="alert"' in response.content and b"correct username and password" in response.content


def test_the_sixth_failed_login_for_a_username_is_locked(users, settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    client = Client()
    for attempt in range(1, 5):
        assert login(client, "operator-user", f"wrong-{attempt}").status_code == 200, attempt
    fifth = login(client, "operator-user", "wrong-5")
    assert fifth.status_code == 429 and b"Account locked" in fifth.content
    # Now even the right password is refused, from any client: the lock is on the username.
    sixth = login(Client(), "operator-user", PASSWORD)
    assert sixth.status_code == 429 and b"Account locked" in sixth.content
    assert "_auth_user_id" not in sixth.wsgi_request.session
    # Other usernames are not affected.
    assert login(Client(), "viewer-user", PASSWORD).status_code == 302


def test_session_ends_after_the_idle_timeout(users, settings):
    settings.SESSION_IDLE_TIMEOUT = 60
    client = Client()
    assert login(client, "viewer-user", PASSWORD).status_code == 302
    assert client.get("/").status_code == 200  # activity is recorded
    session = client.session
    session["_last_activity"] = int(time.time()) - 30
    session.save()
    assert client.get("/").status_code == 200  # within the timeout
    session = client.session
    session["_last_activity"] = int(time.time()) - 61
    session.save()
    response = client.get("/inventory/nodes/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    page = client.get(response["Location"])
    assert b"Log in" in page.content
    assert b"Your session ended after 1 minute without activity" in page.content
    assert client.get("/api/v1/accounts/me/").status_code in (401, 403)
