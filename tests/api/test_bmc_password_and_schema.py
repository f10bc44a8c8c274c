"""A BMC password never leaves the database: not in the API, a page, a log line or the audit log.
And the API's OpenAPI schema is valid and generated without warnings."""

import json
import logging

import pytest
from django.conf import settings
from django.core.management import call_command
from openapi_spec_validator import validate

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from tests.api.sites import SITE_BMC_PASSWORD, VALID_SITE
from tests.sample_inventory import BMC_PASSWORD

pytestmark = pytest.mark.django_db


def every_inventory_url(inventory) -> list[str]:
    ids = inventory.ids()
    urls = ["/", "/inventory/nodes/", f"/inventory/nodes/{inventory.gpu_node.name}/",
            f"/inventory/nodes/{inventory.gpu_node_2.name}/", "/api/v1/inventory/", "/api/v1/schema/"]
    for collection, key in [("appliances", "appliance"), ("platforms", "platform"), ("nodes", "node"),
                            ("gpus", "gpu"), ("hcas", "hca"), ("hca-ports", "port"), ("switches", "switch"),
                            ("networks", "network"), ("filesystems", "filesystem"), ("pools", "pool")]:
        urls += [f"/api/v1/inventory/{collection}/", f"/api/v1/inventory/{collection}/{ids[key]}/"]
    return urls


def test_no_response_page_log_or_audit_record_holds_a_bmc_password(client_for, inventory, caplog, site_credentials):
    from appliance.inventory.models import BMC

    assert BMC.objects.get(node=inventory.gpu_node).credential.secret == BMC_PASSWORD  # stored, readable by code
    caplog.set_level(logging.DEBUG)
    operator = client_for(Role.OPERATOR)
    seen = []
    for url in every_inventory_url(inventory):
        response = operator.get(url)
        assert response.status_code == 200, url
        seen.append(response.content.decode())
    # A site import names a credential whose secret is stored: the value must not come back either.
    for dry_run in ("true", "false"):
        response = operator.post(f"/api/v1/inventory/site/import/?dry_run={dry_run}", VALID_SITE,
                                 content_type="application/yaml")
        assert response.status_code == 200, response.content
        seen.append(response.content.decode())
    from django.core.files.uploadedfile import SimpleUploadedFile

    page = operator.post("/inventory/site/import/", {"file": SimpleUploadedFile("site.yml", VALID_SITE.encode())})
    seen.append(page.content.decode())
    seen.append(operator.get("/inventory/nodes/up-gpu01/").content.decode())
    seen.append(operator.get("/api/v1/inventory/nodes/?search=up-gpu").content.decode())

    seen.append(caplog.text)
    log_file = settings.LOG_DIR / "appliance.log"
    if log_file.exists():
        seen.append(log_file.read_text(errors="replace"))
    seen.append(json.dumps(list(AuditRecord.objects.values("details", "reason", "target_name")), default=str))
    for text in seen:
        assert BMC_PASSWORD not in text
        assert SITE_BMC_PASSWORD not in text
    # The imported BMC's credential holds its password, so the search above had something to leak.
    assert BMC.objects.get(node__name="up-gpu01").credential.secret == SITE_BMC_PASSWORD


def test_node_page_shows_no_password_not_even_masked(client_for, inventory):
    html = client_for(Role.ADMINISTRATOR).get(f"/inventory/nodes/{inventory.gpu_node.name}/").content.decode()
    assert "<code>sample-bmc</code>" in html  # the credential is named ...
    assert "*" * 4 not in html and "•" not in html  # ... but no mask, whose length would hint at it


def test_openapi_schema_validates(client_for):
    response = client_for(Role.VIEWER).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    spec = json.loads(response.content)
    validate(spec)
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    for path in ["/api/v1/inventory/nodes/", "/api/v1/inventory/nodes/{id}/transition/", "/api/v1/inventory/site/import/",
                 "/api/v1/inventory/site/validate/", "/api/v1/accounts/users/", "/api/v1/accounts/token/"]:
        assert path in paths, path
    bmc = spec["components"]["schemas"]["BMC"]["properties"]
    assert "password" not in bmc and "secret" not in bmc and "credential" in bmc
    # A credential's secret is part of a request, never of a response.
    assert "secret" not in spec["components"]["schemas"]["Credential"]["properties"]
    assert "secret" in spec["components"]["schemas"]["CredentialRequest"]["properties"]
    node_filters = {p["name"] for p in paths["/api/v1/inventory/nodes/"]["get"]["parameters"]}
    assert {"appliance", "role", "state", "pool", "page", "search"} <= node_filters


def test_schema_generation_has_no_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert "/api/v1/inventory/nodes/" in (tmp_path / "schema.yml").read_text()


def test_interactive_docs_page(client_for):
    response = client_for(Role.VIEWER).get("/api/v1/schema/docs/")
    assert response.status_code == 200 and b"swagger-ui" in response.content


def test_schema_and_docs_need_a_signed_in_user(db):
    from django.test import Client

    anonymous = Client()
    assert anonymous.get("/api/v1/schema/").status_code in (401, 403)
    assert anonymous.get("/api/v1/schema/docs/").status_code in (401, 403)
