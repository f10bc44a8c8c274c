"""CSRF, with Django's test client enforcing it as a browser would be held to it:

- every route of the project that takes a POST, PUT, PATCH or DELETE refuses a signed-in browser
  session (or an anonymous one, for the login form) that sends no CSRF token, with 403;
- the same request with the session's token gets past the check;
- each state-changing portal form and session-authenticated API call works with the token.
"""

import json

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from appliance.core.roles import Role
from appliance.provisioning.models import Run

pytestmark = pytest.mark.django_db

WRITE_METHODS = ("post", "put", "patch", "delete")
# Routes that take writes without a browser session: the token endpoint is for API clients (no
# cookie, nothing a forged cross-site form could ride on).
NO_SESSION_ROUTES = {"accounts-token"}
ANONYMOUS_FORMS = {"login"}


def _write_routes(resolver: URLResolver, namespace: str = ""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            if str(pattern.pattern).startswith("django-admin"):
                continue
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _write_routes(pattern, inner)
            continue
        if not isinstance(pattern, URLPattern) or not pattern.name or "format" in pattern.pattern.regex.groupindex:
            continue
        callback = pattern.callback
        cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        actions = getattr(callback, "actions", None)
        if actions:
            methods = [m for m in actions if m in WRITE_METHODS]
        elif cls is not None:
            methods = [m for m in WRITE_METHODS if hasattr(cls, m)]
        else:
            methods = []
        if methods:
            # The content type the view parses first: a body it cannot parse is refused before the check.
            parsers = getattr(cls, "parser_classes", None)
            media_type = parsers[0].media_type if parsers else "application/x-www-form-urlencoded"
            kwargs = {key: 1 if key in ("pk", "sequence") else "x" for key in pattern.pattern.regex.groupindex}
            for converter_key, converter in getattr(pattern.pattern, "converters", {}).items():
                if type(converter).__name__ == "IntConverter":
                    kwargs[converter_key] = 1
            yield pattern.name, reverse(f"{namespace}{pattern.name}", kwargs=kwargs), methods, media_type


# MLflow's registry API reads no session cookie (a token or a password on each call) and parses JSON only, which
# a cross-site form cannot send (tests/lifecycle/test_mlflow_wire.py sends one with a remembered Basic password).
NO_SESSION_PREFIXES = ("/api/2.0/mlflow/",)
WRITE_ROUTES = sorted((name, url, method, media_type)
                      for name, url, methods, media_type in _write_routes(get_resolver()) for method in methods
                      if name not in NO_SESSION_ROUTES and not url.startswith(NO_SESSION_PREFIXES))


def test_the_walk_finds_the_forms_and_api_writes():
    found = {(url, method) for _, url, method, _ in WRITE_ROUTES}
    assert {("/accounts/login/", "post"), ("/accounts/logout/", "post"), ("/accounts/users/new/", "post"),
            ("/accounts/users/1/", "post"), ("/inventory/nodes/x/transition/", "post"),
            ("/inventory/site/import/", "post"), ("/audit/export/", "post"), ("/provisioning/", "post"),
            ("/provisioning/runs/1/cancel/", "post"), ("/api/v1/inventory/nodes/1/transition/", "post"),
            ("/api/v1/inventory/site/validate/", "post"), ("/api/v1/inventory/site/import/", "post"),
            ("/api/v1/accounts/users/", "post"), ("/api/v1/accounts/users/1/", "patch"), ("/api/v1/provisioning/runs/", "post"),
            ("/api/v1/provisioning/runs/1/cancel/", "post"), ("/api/v1/audit/exports/", "post")} <= found


def browser(user=None) -> tuple[Client, str]:
    """A client that enforces CSRF, signed in as `user`, and the CSRF token its pages gave it."""
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    page = client.get("/inventory/site/import/" if user is not None else "/accounts/login/")
    assert page.status_code == 200 and b"csrfmiddlewaretoken" in page.content
    return client, client.cookies["csrftoken"].value


def send(client: Client, method: str, url: str, data: dict, token: str | None, media_type: str | None = None):
    headers = {"X-CSRFToken": token} if token else {}
    if media_type not in (None, "application/json", "application/x-www-form-urlencoded"):
        return client.generic(method.upper(), url, data=b"", content_type=media_type, headers=headers)
    if media_type == "application/json" or (media_type is None and url.startswith("/api/")):
        return client.generic(method.upper(), url, data=json.dumps(data), content_type="application/json",
                              headers=headers)
    return client.generic(method.upper(), url, data=_form(data), content_type="application/x-www-form-urlencoded",
                          headers=headers)


def _form(data: dict) -> str:
    from urllib.parse import urlencode

    return urlencode(data)


@pytest.mark.parametrize(("name", "url", "method", "media_type"), WRITE_ROUTES,
                         ids=[f"{m.upper()} {u}" for _, u, m, _ in WRITE_ROUTES])
def test_a_write_without_the_csrf_token_is_refused(users, name, url, method, media_type):
    client, token = browser(None if name in ANONYMOUS_FORMS else users[Role.ADMINISTRATOR])
    refused = send(client, method, url, {}, None, media_type)
    assert refused.status_code == 403, (url, refused.status_code)
    assert b"CSRF" in refused.content, refused.content[:300]
    passed = send(client, method, url, {}, token, media_type)
    assert passed.status_code != 403 or b"CSRF" not in passed.content, (url, passed.content[:300])


@pytest.fixture
def targets(inventory, make_user):
    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["os"])
    return {**inventory.ids(), "run": run.pk, "target_user": make_user(Role.VIEWER, "target-user").pk}


FORMS = [
    ("post", "/inventory/nodes/{node_name}/transition/", {"state": "maintenance", "reason": "fan"}, 302),
    ("post", "/accounts/users/new/", {"username": "new-viewer", "role": "viewer",
                                      "password1": "long-enough-passphrase-71",
                                      "password2": "long-enough-passphrase-71"}, 302),
    ("post", "/accounts/users/{target_user}/", {"role": "operator"}, 302),
    ("post", "/provisioning/runs/{run}/cancel/", {}, 302),
    ("post", "/audit/export/", {"format": "jsonl"}, 200),
    ("post", "/accounts/logout/", {}, 302),
    ("post", "/api/v1/inventory/nodes/{node}/transition/", {"state": "maintenance", "reason": "fan"}, 200),
    ("post", "/api/v1/accounts/users/", {"username": "api-viewer", "role": "viewer",
                                      "password": "long-enough-passphrase-71"}, 201),
    ("patch", "/api/v1/accounts/users/{target_user}/", {"role": "operator"}, 200),
    ("post", "/api/v1/provisioning/runs/{run}/cancel/", {}, 200),
    ("post", "/api/v1/audit/exports/", {"format": "jsonl"}, 200),
]


@pytest.mark.parametrize(("method", "url", "data", "status"), FORMS, ids=[f"{m.upper()} {u}" for m, u, _, _ in FORMS])
def test_each_form_is_refused_without_the_token_and_works_with_it(users, targets, method, url, data, status):
    url = url.format(**targets)
    client, token = browser(users[Role.ADMINISTRATOR])
    refused = send(client, method, url, data, None)
    assert refused.status_code == 403 and b"CSRF" in refused.content
    done = send(client, method, url, data, token)
    assert done.status_code == status, (url, done.status_code, done.content[:500])


def test_the_login_form_needs_the_token(users):
    client, token = browser()
    credentials = {"username": users[Role.VIEWER].username, "password": "correct-horse-battery-9"}
    assert send(client, "post", "/accounts/login/", credentials, None).status_code == 403
    assert "_auth_user_id" not in client.session
    assert send(client, "post", "/accounts/login/", credentials, token).status_code == 302
    assert client.session["_auth_user_id"] == str(users[Role.VIEWER].pk)


def test_a_form_field_token_works_as_a_browser_sends_it(users, targets):
    client, token = browser(users[Role.ADMINISTRATOR])
    url = "/inventory/nodes/{node_name}/transition/".format(**targets)
    response = client.post(url, {"state": "maintenance", "reason": "fan", "csrfmiddlewaretoken": token})
    assert response.status_code == 302


def test_an_api_token_client_needs_no_csrf_token(users, targets):
    """No cookie, no session: a token is sent on purpose, never by a browser riding a session."""
    client = Client(enforce_csrf_checks=True)
    issued = client.post("/api/v1/accounts/token/", data=json.dumps(
        {"username": users[Role.OPERATOR].username, "password": "correct-horse-battery-9"}),
        content_type="application/json")
    assert issued.status_code == 200, issued.content[:300]
    response = client.post(f"/api/v1/provisioning/runs/{targets['run']}/cancel/", data="{}",
                           content_type="application/json", headers={"Authorization": f"Token {issued.json()['token']}"})
    assert response.status_code == 200, response.content[:300]
