"""One access check for every endpoint and every role, NetBox-style.

A test class lists its endpoints as data and inherits the check:

    class TestInventoryAPIAccess(AccessMatrix):
        endpoints = [Endpoint("/api/v1/inventory/nodes/", "inventory.view"), ...]

        @pytest.fixture
        def url_values(self, ...):       # fills the {placeholders} of the URLs
            return {"node": node.pk}

Every endpoint is then requested by each of the five roles and by an anonymous client:
- a role that holds the capability (per tests/expected_roles.py, written out by hand, never read from
  appliance.core.roles.CAPABILITIES, the table under test) gets a success;
- a logged-in role without it gets 403 (API: in the common error body);
- anonymous gets 401 from the API, and a redirect to the login page from the portal.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.conf import settings
from django.shortcuts import resolve_url
from django.test import Client

from appliance.core.roles import Role
from tests.expected_roles import expected_to_hold

ANONYMOUS = "anonymous"
ROLES_AND_ANONYMOUS = [*Role.values, ANONYMOUS]


@dataclass(frozen=True)
class Endpoint:
    url: str  # may hold {placeholders}, filled from the test class's `url_values` fixture
    capability: str
    method: str = "get"
    payload: dict | None = None  # JSON for the API, form fields for portal pages
    body: Callable[[], tuple[bytes, str]] | None = None  # raw body and its content type, instead of payload
    api: bool | None = None  # default: the URL starts with /api/
    success: tuple[int, ...] = ()  # default: 200/201/204 for the API, 200 or a redirect for pages
    note: str = field(default="", compare=False)

    @property
    def is_api(self) -> bool:
        return self.url.startswith("/api/") if self.api is None else self.api

    @property
    def id(self) -> str:
        return f"{self.method.upper()} {self.url}"

    def allows(self, role: str) -> bool:
        return role != ANONYMOUS and expected_to_hold(role, self.capability)


def request(client: Client, endpoint: Endpoint, url: str):
    method = endpoint.method.lower()
    if endpoint.body is not None:
        data, content_type = endpoint.body()
        return client.generic(method.upper(), url, data=data, content_type=content_type)
    if method in ("get", "head", "options"):
        return getattr(client, method)(url, endpoint.payload or {})
    if endpoint.is_api:
        return getattr(client, method)(url, data=json.dumps(endpoint.payload or {}), content_type="application/json")
    return getattr(client, method)(url, data=endpoint.payload or {})


def assert_error_body(response, status: int) -> dict:
    body = response.json()
    assert set(body) == {"error", "request_id"}, body
    assert body["error"]["status"] == status, body
    assert body["error"]["message"], body
    assert body["request_id"] == response["X-Request-ID"]
    return body["error"]


def check_access(client: Client, endpoint: Endpoint, role: str, url: str):
    response = request(client, endpoint, url)
    login_url = resolve_url(settings.LOGIN_URL)
    where = f"{endpoint.id} as {role}"
    if role == ANONYMOUS:
        if endpoint.is_api:
            assert response.status_code == 401, f"{where}: {response.status_code}"
            assert_error_body(response, 401)
        else:
            assert response.status_code == 302, f"{where}: {response.status_code}"
            assert response["Location"].startswith(login_url), f"{where}: redirected to {response['Location']}"
    elif endpoint.allows(role):
        if endpoint.success:
            expected = endpoint.success
        elif endpoint.is_api:
            expected = (200, 201, 204)
        else:
            expected = (200,) if endpoint.method.lower() == "get" else (200, 302)
        detail = response.content[:2000].decode(errors="replace")
        assert response.status_code in expected, f"{where}: {response.status_code} {detail}"
        if response.status_code == 302:
            assert not response["Location"].startswith(login_url), f"{where}: sent to the login page"
    else:
        assert response.status_code == 403, f"{where}: {response.status_code}"
        if endpoint.is_api:
            assert assert_error_body(response, 403)["code"] == "permission_denied"
    return response


class AccessMatrix:
    """Mixin: test every endpoint of `endpoints` as every role and as an anonymous client."""

    endpoints: list[Endpoint] = []

    def pytest_generate_tests(self, metafunc):
        if {"endpoint", "role"} <= set(metafunc.fixturenames):
            cases = [(endpoint, role) for endpoint in self.endpoints for role in ROLES_AND_ANONYMOUS]
            metafunc.parametrize(("endpoint", "role"), cases,
                                 ids=[f"{endpoint.id}-{role}" for endpoint, role in cases])

    @pytest.fixture
    def url_values(self) -> dict:
        return {}

    def test_access(self, endpoint, role, users, url_values):
        client = Client()
        if role != ANONYMOUS:
            client.force_login(users[role])
        check_access(client, endpoint, role, endpoint.url.format(**url_values))
