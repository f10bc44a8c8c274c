"""Portal sessions: the idle limit counts from the last request, the maximum age from the login,
however busy the session is."""

import time

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def logged_in(username: str) -> Client:
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": PASSWORD})
    assert response.status_code == 302, response.content[:500]
    return client


def shift(client: Client, **ages: int) -> None:
    """Make the session's clocks `ages` seconds old (keys: login, activity)."""
    session = client.session
    now = int(time.time())
    if "login" in ages:
        session["_authenticated_at"] = now - ages["login"]
    if "activity" in ages:
        session["_last_activity"] = now - ages["activity"]
    session.save()


def test_a_busy_session_ends_at_its_maximum_age(users, settings):
    settings.SESSION_COOKIE_AGE = 3600
    settings.SESSION_IDLE_TIMEOUT = 600
    client = logged_in("viewer-user")
    shift(client, login=3599, activity=5)
    assert client.get("/").status_code == 200
    shift(client, login=3601, activity=5)  # active a moment ago, logged in over an hour ago
    response = client.get("/inventory/nodes/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    page = client.get(response["Location"])
    assert b"Your session reached its maximum length of 1 hour; log in again." in page.content
    assert client.get("/api/v1/accounts/me/").status_code in (401, 403)
    logout = AuditRecord.objects.filter(event="auth.logout").latest("sequence")
    assert logout.reason == "session maximum age reached" and logout.details == {"cause": "maximum age"}
    assert logout.actor_username == "viewer-user"


def test_the_idle_limit_counts_from_the_last_request_not_the_login(users, settings):
    settings.SESSION_COOKIE_AGE = 12 * 3600
    settings.SESSION_IDLE_TIMEOUT = 60
    client = logged_in("viewer-user")
    shift(client, login=3 * 3600, activity=59)  # logged in hours ago, busy all along
    assert client.get("/").status_code == 200
    shift(client, activity=61)
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    logout = AuditRecord.objects.filter(event="auth.logout").latest("sequence")
    assert logout.details == {"cause": "idle timeout"}


def test_a_session_without_a_login_time_is_ended(users):
    client = logged_in("viewer-user")
    session = client.session
    del session["_authenticated_at"]
    session.save()
    assert client.get("/").status_code == 302
