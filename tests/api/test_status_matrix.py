"""Literal status codes, per role, for at least one endpoint of every capability that has one.

Nothing here is computed from the roles table: each row is what a role must get from that request.
Capabilities without an endpoint yet (partitioning.*, telemetry.view, audit.retention, which is the
CLI's) are covered by tests/core/test_role_matrix.py. The lifecycle's models.* rows name nothing that exists
where the role passes: the service's 404 after the role check tells a permitted role from a refused one.
"""

import json

import pytest
from django.test import Client

from appliance.accounts.services import create_user
from appliance.core.roles import Role
from appliance.provisioning.models import Run
from tests.api.conftest import fresh_users, make_role_users
from tests.api.sites import site_body
from tests.conftest import PASSWORD

# A role x endpoint matrix over a database: run on PostgreSQL too, the production backend (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

ROLES_AND_ANONYMOUS = ("administrator", "operator", "ml_engineer", "auditor", "viewer", "anonymous")


def codes(administrator, operator, ml_engineer, auditor, viewer, anonymous):
    return dict(zip(ROLES_AND_ANONYMOUS, (administrator, operator, ml_engineer, auditor, viewer, anonymous), strict=True))


# (capability, method, url, body, {role: status})
ROWS = [
    ("portal.view", "get", "/", None, codes(200, 200, 200, 200, 200, 302)),
    ("portal.view", "get", "/api/v1/accounts/me/", None, codes(200, 200, 200, 200, 200, 401)),
    ("inventory.view", "get", "/api/v1/inventory/nodes/", None, codes(200, 200, 200, 200, 200, 401)),
    ("inventory.view", "get", "/inventory/nodes/", None, codes(200, 200, 200, 200, 200, 302)),
    ("inventory.view", "get", "/api/v1/inventory/switches/", None, codes(200, 200, 200, 200, 200, 401)),
    ("inventory.view", "get", "/api/v1/inventory/switches/{switch}/", None, codes(200, 200, 200, 200, 200, 401)),
    ("inventory.view", "get", "/inventory/fabric/", None, codes(200, 200, 200, 200, 200, 302)),
    ("inventory.change", "post", "/api/v1/inventory/nodes/{node}/transition/",
     {"state": "maintenance", "reason": "fan replacement"}, codes(200, 200, 403, 403, 403, 401)),
    ("inventory.change", "post", "/api/v1/inventory/site/validate/", site_body, codes(200, 200, 403, 403, 403, 401)),
    # Ready without a run: an Administrator's call (nodes.override_state), with a reason.
    ("nodes.override_state", "post", "/api/v1/inventory/nodes/{failed_node}/transition/",
     {"state": "ready", "reason": "GPU 5 reseated, checked by hand"}, codes(200, 403, 403, 403, 403, 401)),
    ("inventory.change", "get", "/inventory/site/import/", None, codes(200, 200, 403, 403, 403, 302)),
    ("provisioning.view", "get", "/api/v1/provisioning/runs/", None, codes(200, 200, 403, 200, 200, 401)),
    ("provisioning.view", "get", "/provisioning/", None, codes(200, 200, 403, 200, 200, 302)),
    ("provisioning.run", "post", "/api/v1/provisioning/runs/{run}/cancel/", {}, codes(200, 200, 403, 403, 403, 401)),
    ("provisioning.run", "post", "/provisioning/runs/{run}/cancel/", {}, codes(302, 302, 403, 403, 403, 302)),
    # The confirmation a cancel asks for first (a page; only the POST cancels).
    ("provisioning.run", "get", "/provisioning/runs/{run}/cancel/", None, codes(200, 200, 403, 403, 403, 302)),
    ("audit.view", "get", "/api/v1/audit/records/", None, codes(200, 403, 403, 200, 403, 401)),
    ("audit.view", "get", "/audit/", None, codes(200, 403, 403, 200, 403, 302)),
    ("audit.export", "post", "/api/v1/audit/exports/", {"format": "jsonl"}, codes(200, 403, 403, 200, 403, 401)),
    ("audit.export", "get", "/audit/export/", None, codes(200, 403, 403, 200, 403, 302)),
    ("accounts.view", "get", "/api/v1/accounts/users/", None, codes(200, 403, 403, 200, 403, 401)),
    ("accounts.view", "get", "/accounts/users/", None, codes(200, 403, 403, 200, 403, 302)),
    ("accounts.manage", "post", "/api/v1/accounts/users/",
     {"username": "new-operator", "role": "operator", "password": "long-enough-passphrase-71"},
     codes(201, 403, 403, 403, 403, 401)),
    ("accounts.manage", "patch", "/api/v1/accounts/users/{target_user}/", {"role": "operator"},
     codes(200, 403, 403, 403, 403, 401)),
    ("accounts.manage", "get", "/accounts/users/new/", None, codes(200, 403, 403, 403, 403, 302)),
    ("accounts.self", "get", "/api/v1/accounts/tokens/", None, codes(200, 200, 200, 200, 200, 401)),
    ("accounts.self", "post", "/api/v1/accounts/tokens/", {"name": "ci"}, codes(201, 201, 201, 201, 201, 401)),
    ("credentials.manage", "get", "/api/v1/inventory/credentials/", None, codes(200, 403, 403, 403, 403, 401)),
    ("models.view", "get", "/api/v1/lifecycle/models/", None, codes(200, 200, 200, 200, 200, 401)),
    ("models.change", "post", "/api/v1/lifecycle/models/", {"name": "new-model"}, codes(201, 403, 201, 403, 403, 401)),
    ("models.approve", "post", "/api/v1/lifecycle/requests/424242/approve/", {}, codes(404, 403, 404, 403, 403, 401)),
    ("models.deploy", "post", "/api/v1/lifecycle/deployments/", {"model": "no-such-model"},
     codes(404, 404, 404, 403, 403, 401)),
]
CASES = [(row, role) for row in ROWS for role in ROLES_AND_ANONYMOUS]


@pytest.fixture(scope="module")
def module_values(shared_rows):
    """The users and the rows the URLs name, written once for the module (tests/api/conftest.py): each
    case's request runs in a savepoint rolled back after it."""
    from appliance.inventory import credentials
    from tests.api.sites import SITE_BMC_ENDPOINTS, SITE_BMC_PASSWORD, SITE_CREDENTIAL
    from tests.sample_inventory import build_sample_inventory

    with shared_rows():
        users = make_role_users()
        inventory = build_sample_inventory()
        credentials.create(SITE_CREDENTIAL, username="admin", secret=SITE_BMC_PASSWORD, endpoints=SITE_BMC_ENDPOINTS)
        run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["os"])
        failed = inventory.gpu_node
        failed.state = "failed"
        failed.save()
        target = create_user("target-user", Role.VIEWER, PASSWORD)
        return users, {**inventory.ids(), "run": run.pk, "target_user": target.pk, "failed_node": failed.pk}


@pytest.fixture
def users(module_values):
    return fresh_users(module_values[0])


@pytest.fixture
def url_values(module_values):
    return module_values[1]


@pytest.mark.parametrize(("row", "role"), CASES, ids=[f"{r[1].upper()} {r[2]}-{role}" for r, role in CASES])
def test_each_role_gets_the_status_written_down(row, role, users, url_values):
    _, method, url, body, expected = row
    client = Client()
    if role != "anonymous":
        client.force_login(users[role])
    url = url.format(**url_values)
    if callable(body):
        data, content_type = body()
        response = client.generic(method.upper(), url, data=data, content_type=content_type)
    elif method == "get":
        response = client.get(url)
    elif url.startswith("/api/"):
        response = getattr(client, method)(url, data=json.dumps(body), content_type="application/json")
    else:
        response = getattr(client, method)(url, data=body)
    assert response.status_code == expected[role], (
        f"{method.upper()} {url} as {role}: {response.status_code} {response.content[:500]!r}")
