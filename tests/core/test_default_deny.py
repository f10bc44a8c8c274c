"""Permissions deny by default: a view that declares no capability is refused to everyone, an
Administrator included, and every view the project mounts declares one for each method it serves
(only the few routes listed in OPEN_ROUTES are open on purpose)."""

import json

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.views import View
from rest_framework.views import APIView

from appliance.core.permissions import CapabilityMixin, RolePermission, required_capability
from appliance.core.roles import CAPABILITIES, Role

# url name -> why it needs no capability. Anything else without one is a hole.
OPEN_ROUTES = {
    "login": "the login page",
    "logout": "ending one's own session",
    "accounts-token": "where a caller exchanges a password for a token (throttled, tested in test_accounts_api)",
    "schema": "OpenAPI schema: any signed-in user (SPECTACULAR_SETTINGS SERVE_PERMISSIONS)",
    "schema-docs": "the schema's page: any signed-in user",
    "schema-redoc": "the schema's page: any signed-in user",
    "health": "the load balancer's probe, answers no data",
    "api-index": "GET /api/: the API's versions and where each begins, no data",
    "set_language": "Django's language switch: sets the caller's language cookie, nothing on the server",
    "ingest-write": "a node collector's write: authenticated by that node's ingest token, not by a role "
                    "(tests/telemetry/test_ingest.py; a session is refused with 401)",
    "ingest-health": "InfluxDB's /health for the collectors' client: answers no data",
    "ingest-ping": "InfluxDB's /ping for the collectors' client: answers no data",
    "ingest-ready": "InfluxDB's /ready, probed by its clients before they write: answers no data but its uptime",
    "unknown": "MLflow's ENDPOINT_NOT_FOUND for any other path under /api/2.0/mlflow/ (its client falls back "
               "on it): answers no data",
}
HANDLERS = ("get", "post", "put", "patch", "delete")


def _routes(resolver: URLResolver, prefix: str = ""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            if str(pattern.pattern).startswith("django-admin"):
                continue  # Django's admin has its own staff check (tests/audit/test_api.py)
            yield from _routes(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern


def _undeclared(url: str, pattern: URLPattern) -> list[str]:
    callback = pattern.callback
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    where = f"{url} ({pattern.name})"
    if cls is None:
        return [f"{where}: function view {callback.__module__}.{callback.__name__} declares no capability"]
    problems = []
    if issubclass(cls, APIView):
        if RolePermission not in cls.permission_classes:
            problems.append(f"{where}: {cls.__name__} does not use RolePermission")
        actions = getattr(callback, "actions", None)
        methods = actions.items() if actions else [(m, None) for m in HANDLERS if hasattr(cls, m)]
    elif issubclass(cls, View):
        if not issubclass(cls, CapabilityMixin):
            return [f"{where}: {cls.__name__} is not a CapabilityMixin view"]
        methods = [(m, None) for m in HANDLERS if hasattr(cls, m)]
    else:
        return [f"{where}: {cls!r} is not a view this test knows"]
    for method, action in methods:
        capability = required_capability(cls, method.upper(), action)
        if capability not in CAPABILITIES:
            problems.append(f"{where}: {method.upper()} ({action or cls.__name__}) needs {capability!r}")
    return problems


def test_every_mounted_view_declares_a_known_capability_for_each_method():
    problems, open_seen = [], set()
    for url, pattern in _routes(get_resolver()):
        if pattern.name in OPEN_ROUTES:
            open_seen.add(pattern.name)
            continue
        problems.extend(_undeclared(url, pattern))
    assert problems == []
    assert open_seen == set(OPEN_ROUTES)


def test_the_route_walk_flags_a_view_without_a_capability():
    from tests.core import undeclared_urls

    flagged = [problem for pattern in undeclared_urls.undeclared_patterns
               for problem in _undeclared(str(pattern.pattern), pattern)]
    assert flagged == [
        "api/undeclared/ (None): GET (UndeclaredAPI) needs None",
        "api/undeclared/ (None): POST (UndeclaredAPI) needs None",
        "api/read-only/ (None): POST (ReadOnlyDeclaredAPI) needs None",
        "undeclared/ (None): GET (UndeclaredPage) needs None",
        "undeclared/ (None): POST (UndeclaredPage) needs None",
        "read-only/ (None): POST (ReadOnlyDeclaredPage) needs None",
    ]


@pytest.mark.urls("tests.core.undeclared_urls")
@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.ADMINISTRATOR, Role.VIEWER])
def test_a_view_without_a_declared_capability_is_refused_to_every_role(make_user, role):
    client = Client()
    client.force_login(make_user(role))
    # The declared read is open: the refusals below come from the missing declarations, not the set-up.
    assert client.get("/api/read-only/").status_code == 200
    assert client.get("/read-only/").status_code == 200
    for method, url in [("get", "/api/undeclared/"), ("post", "/api/undeclared/"), ("post", "/api/read-only/"),
                        ("get", "/undeclared/"), ("post", "/undeclared/"), ("post", "/read-only/")]:
        if method == "post":
            response = client.post(url, data=json.dumps({}), content_type="application/json")
        else:
            response = client.get(url)
        assert response.status_code == 403, (method, url, response.status_code)
        assert b"secret" not in response.content
