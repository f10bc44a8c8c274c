"""An Auditor reads and exports the audit log and changes nothing: every state-changing route of
the whole URL configuration (portal and API) refuses them, and no change record names them."""

import re

import pytest
from django.contrib.admindocs.views import extract_views_from_urlpatterns, simplify_regex
from django.urls import get_resolver

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from tests.sample_inventory import build_sample_inventory

pytestmark = pytest.mark.django_db

# Routes an Auditor may POST to, each for a reason that changes no data of the appliance.
ALLOWED_FOR_EVERYONE = {
    "/accounts/login/": "starts the caller's own session",
    "/accounts/logout/": "ends the caller's own session",
    "/api/v1/accounts/token/": "issues the caller's own API token",
    "/api/v1/accounts/tokens/": "issues the caller's own API token",
    "/accounts/tokens/": "issues the caller's own API token",
    "/api/v1/accounts/tokens/1/revoke/": "revokes one of the caller's own tokens (others': 403 or 404)",
    "/accounts/tokens/1/revoke/": "revokes one of the caller's own tokens (others': 403 or 404)",
    "/api/v1/accounts/me/password/": "changes the caller's own password",
    "/accounts/password/": "changes the caller's own password",
    "/health/": "liveness probe, writes nothing",
    "/i18n/setlang/": "sets the caller's own interface language (a cookie)",
    "/api/v1/partitioning/size/": "the sizing advisor: a calculation from the values posted, writes nothing",
    "/models/1/versions/1/verify/": "a quick check of a version's files against their hashes and signature: "
                                    "it reads them and records the result (an auditor checks before a review)",
}
AUDITOR_EXPORTS = {"/audit/export/", "/api/v1/audit/exports/"}
# Routes no session can write through, whoever's: they take a machine's token only, and refuse a caller
# without one as the protocol they speak does (InfluxDB's write API: 401).
TOKEN_ONLY = {"/telemetry/ingest/api/v2/write": "a node collector's write, with that node's ingest token"}
# MLflow's registry API takes an API token (Bearer) or a password (Basic) on each call, never a session:
# a session gets MLflow's 401 (a token of a role without models.change gets PERMISSION_DENIED, 403:
# tests/lifecycle/test_mlflow_client.py). A method an endpoint does not take answers ENDPOINT_NOT_FOUND (404)
# there, as MLflow's server does.
TOKEN_ONLY_PREFIX = "/api/2.0/mlflow/"


def every_route() -> list[str]:
    routes = set()
    for _view, regex, _namespace, _name in extract_views_from_urlpatterns(get_resolver().url_patterns):
        path = simplify_regex(regex)
        # (a model card's <cardformat:fmt> takes html, md or json only, by GET)
        if path.startswith("/django-admin/") or "<format>" in path or ":fmt>" in path or "drf_format_suffix" in path:
            continue
        routes.add(re.sub(r"<[^>]+>", "1", path))
    return sorted(routes)


def test_every_write_route_refuses_an_auditor(client_for):
    build_sample_inventory()
    client = client_for(Role.AUDITOR)
    routes = every_route()
    assert "/api/v1/audit/records/1/" in routes and "/api/v1/inventory/nodes/1/transition/" in routes
    first_record = AuditRecord.objects.order_by("sequence").values_list("sequence", flat=True).first()
    let_through = []
    for path in routes:
        if path in ALLOWED_FOR_EVERYONE or path in AUDITOR_EXPORTS:
            continue
        for method in ("post", "put", "patch", "delete"):
            response = getattr(client, method)(path, {}, content_type="application/json")
            allowed = (401, 405) if path in TOKEN_ONLY else (401, 404) if path.startswith(TOKEN_ONLY_PREFIX) else (403, 405)
            if response.status_code not in allowed:
                let_through.append((method.upper(), path, response.status_code))
    assert let_through == []
    changes = AuditRecord.objects.filter(actor_username="auditor-user", event__regex=r"\.(create|update|delete)$")
    assert list(changes.values_list("event", flat=True)) == []
    assert AuditRecord.objects.filter(sequence__gte=first_record).exists()


def test_auditor_has_no_django_admin(client_for):
    response = client_for(Role.AUDITOR).get("/django-admin/audit/auditrecord/")
    assert response.status_code == 302 and "/django-admin/login/" in response["Location"]
