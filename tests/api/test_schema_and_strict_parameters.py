"""The OpenAPI schema documents every operation's errors with one body, the HTML export as HTML, and
the API refuses what its schema refuses (empty appliance name, numbers for text, bad page sizes,
booleans other than true/false, form encodings), while an id that names nothing matches nothing."""

import json

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer

from appliance.core.roles import Role

pytestmark = pytest.mark.django_db

ERROR_REF = {"$ref": "#/components/schemas/Error"}


@pytest.fixture(scope="module")
def schema():
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def test_every_operation_documents_its_errors_with_the_one_error_body(schema):
    undocumented = []
    for label, operation in operations(schema):
        statuses = set(operation["responses"])
        expected = {"400"} if label == "POST /api/v1/accounts/token/" else {"401", "403"}
        if "{" in label:
            expected.add("404")
        if "requestBody" in operation or any(p["in"] == "query" for p in operation.get("parameters", [])):
            expected.add("400")
        if not expected <= statuses:
            undocumented.append((label, sorted(expected - statuses)))
        for status, response in operation["responses"].items():
            if status >= "400":
                assert response["content"] == {"application/json": {"schema": ERROR_REF}}, (label, status)
    assert undocumented == []
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert sorted(error["required"]) == ["code", "message", "status"]


def test_known_conflicts_are_documented(schema):
    paths = schema["paths"]
    assert "409" in paths["/api/v1/provisioning/runs/{id}/cancel/"]["post"]["responses"]
    assert "409" in paths["/api/v1/inventory/nodes/{id}/transition/"]["post"]["responses"]
    assert "404" in paths["/api/v1/provisioning/acceptance/"]["get"]["responses"]


def test_the_html_acceptance_report_is_documented_as_html(schema):
    responses = schema["paths"]["/api/v1/provisioning/acceptance/html/"]["get"]["responses"]
    assert list(responses["200"]["content"]) == ["text/html"]
    assert list(schema["paths"]["/api/v1/provisioning/acceptance/"]["get"]["responses"]["200"]["content"]) == [
        "application/json"]


def test_request_bodies_are_json(schema):
    body = schema["paths"]["/api/v1/provisioning/runs/"]["post"]["requestBody"]
    assert list(body["content"]) == ["application/json"]
    appliance = schema["components"]["schemas"]["RunRequestRequest"]["properties"]["appliance"]
    assert appliance["minLength"] == 1


def test_an_empty_appliance_name_starts_no_run(client_for, inventory):
    from appliance.provisioning.models import Run

    response = client_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {"appliance": "", "dry_run": True},
                                              content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"appliance": [
        "may not be blank: name the appliance, or leave the field out when there is only one"]}
    assert not Run.objects.exists()


def test_a_form_encoded_body_is_refused(client_for, inventory):
    from appliance.provisioning.models import Run

    response = client_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {"appliance": "", "dry_run": "true"})
    assert response.status_code == 415
    assert not Run.objects.exists()


def test_a_number_where_text_goes_is_refused(client_for):
    from appliance.accounts.models import User

    response = client_for(Role.ADMINISTRATOR).post("/api/v1/accounts/users/", {
        "username": 12345, "role": "viewer", "password": "Long-enough-password-7"}, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["username"]  # its own field's message
    assert not User.objects.filter(username="12345").exists()
    refused = client_for(Role.ADMINISTRATOR).post("/api/v1/inventory/credentials/", {
        "name": "numbers", "username": "root", "secret": "Secret-secret-12", "description": 7,
        "endpoints": ["https://10.0.0.9"]}, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"description": ["Not a valid string."]}


@pytest.mark.parametrize(("query", "field", "message"), [
    ({"page_size": "abc"}, "page_size", "Enter a whole number in ASCII digits."),
    ({"page_size": "0"}, "page_size", "Enter a whole number between 1 and 1000."),
    ({"page_size": "1001"}, "page_size", "Enter a whole number between 1 and 1000."),
    ({"page": "0"}, "page", "Enter a whole number between 1 and 9223372036854775807."),
    ({"search": "gpu\x00"}, "search", "Null characters are not allowed."),
    ({"search\x00": "gpu"}, "search\\x00", "Null characters are not allowed."),
])
def test_bad_paging_and_search_values_are_a_400_naming_them(client_for, inventory, query, field, message):
    response = client_for(Role.VIEWER).get("/api/v1/inventory/nodes/", query)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {field: [message]}


@pytest.mark.parametrize("path", ["/api/v1/provisioning/acceptance/", "/api/v1/provisioning/acceptance/html/",
                                  "/api/v1/inventory/nodes/", "/api/v1/audit/records/"])
def test_a_nul_character_in_any_query_parameter_is_a_400(client_for, path):
    response = client_for(Role.ADMINISTRATOR).get(path, {"appliance": "demo\x00"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "query parameter appliance: null characters are not allowed"


def test_a_nul_character_in_a_page_query_is_the_400_page(client_for):
    response = client_for(Role.OPERATOR).get("/inventory/nodes/", {"name": "\x00"})
    assert response.status_code == 400
    assert "query parameter name: null characters are not allowed" in response.content.decode()
    assert 'data-testid="error-page"' in response.content.decode()


def test_booleans_are_true_or_false(client_for, inventory):
    client = client_for(Role.VIEWER)
    assert client.get("/api/v1/inventory/appliances/", {"simulated": "true"}).json()["count"] == 1
    assert client.get("/api/v1/inventory/appliances/", {"simulated": "false"}).json()["count"] == 0
    refused = client.get("/api/v1/inventory/appliances/", {"simulated": "null"})
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"simulated": ["Enter true or false."]}


def test_an_id_that_names_nothing_matches_nothing(client_for, inventory):
    response = client_for(Role.VIEWER).get("/api/v1/provisioning/stage-runs/", {"run": "424242"})
    assert response.status_code == 200
    assert response.json()["count"] == 0


def test_empty_values_in_a_multiple_choice_mean_nothing(client_for, inventory):
    response = client_for(Role.VIEWER).get("/api/v1/inventory/nodes/?role=&role=storage")
    assert response.status_code == 200
    assert [node["name"] for node in response.json()["results"]] == ["storage-01"]


def test_an_error_that_echoes_a_lone_surrogate_is_still_a_json_400(client_for):
    # YAML's "\ud825" escape is a lone surrogate: not valid Unicode, so not encodable as UTF-8.
    response = client_for(Role.OPERATOR).post("/api/v1/inventory/site/validate/?filename=s.yml",
                                              '"\\ud825x": 1\n', content_type="application/yaml")
    assert response.status_code == 400
    body = json.loads(response.content)
    assert body["error"]["status"] == 400
    assert "\ud825x" in [error["path"] for error in body["error"]["errors"]]
