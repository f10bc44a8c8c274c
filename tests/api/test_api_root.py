"""The API's roots and its version in the path: GET /api/ names the versions, GET /api/v1/ lists the
apps' endpoints, and the unversioned paths of earlier releases are a 404 that names the versioned one."""

import pytest
from django.test import Client

from appliance.core.roles import Role
from tests.access import assert_error_body

pytestmark = pytest.mark.django_db


def test_api_index_names_the_versions_and_links_for_anyone():
    response = Client().get("/api/")
    assert response.status_code == 200
    assert response.json() == {
        "versions": [{"version": "v1", "status": "current", "url": "http://testserver/api/v1/"}],
        "current": "v1",
        "links": {
            "root": "http://testserver/api/v1/",
            "schema": "http://testserver/api/v1/schema/",
            "docs": "http://testserver/api/v1/schema/docs/",
            "redoc": "http://testserver/api/v1/schema/redoc/",
        },
    }


def test_v1_root_lists_each_app_for_a_signed_in_user(client_for):
    response = client_for(Role.VIEWER).get("/api/v1/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json() == {
        "inventory": "http://testserver/api/v1/inventory/",
        "accounts": "http://testserver/api/v1/accounts/",
        "audit": "http://testserver/api/v1/audit/",
        "provisioning": "http://testserver/api/v1/provisioning/",
        "telemetry": "http://testserver/api/v1/telemetry/",
        "analytics": "http://testserver/api/v1/analytics/",
        "lending": "http://testserver/api/v1/lending/",
        "partitioning": "http://testserver/api/v1/partitioning/",
        "lifecycle": "http://testserver/api/v1/lifecycle/",
        "schema": "http://testserver/api/v1/schema/",
    }
    assert Client().get("/api/v1/").status_code == 401


@pytest.mark.parametrize(("path", "versioned"), [
    ("/api/inventory/nodes/", "/api/v1/inventory/nodes/"),
    ("/api/schema/", "/api/v1/schema/"),
])
def test_unversioned_paths_are_a_404_naming_the_versioned_path(client_for, path, versioned):
    response = client_for(Role.ADMINISTRATOR).get(path)
    assert response.status_code == 404
    error = assert_error_body(response, 404)
    assert error["message"] == (f"Not found. The API's paths carry their version: {versioned} "
                                "(GET /api/ lists the versions).")


def test_unknown_version_and_unknown_path_inside_a_version(client_for):
    admin = client_for(Role.ADMINISTRATOR)
    assert assert_error_body(admin.get("/api/v2/inventory/"), 404)["message"] == (
        "Not found. This appliance's API has no version v2 (GET /api/ lists the versions).")
    assert assert_error_body(admin.get("/api/v1/no-such-app/"), 404)["message"] == "Not found."
