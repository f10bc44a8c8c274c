"""API request bodies are untrusted: JSON too deep or too large is a 400 with a clear message."""

import json

import pytest
from django.test import Client

from appliance.core.roles import Role

pytestmark = pytest.mark.django_db


def error_of(response) -> dict:
    return json.loads(response.content)["error"]


def test_anonymous_json_nested_100000_deep_is_a_400():
    body = "[" * 100_000 + "]" * 100_000
    response = Client().post("/api/v1/accounts/token/", body, content_type="application/json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["message"] == "JSON body nested too deeply: the limit is 32 levels of arrays and objects."
    assert response["Content-Type"] == "application/json"


def test_json_just_past_the_depth_limit_is_refused_and_at_the_limit_parsed():
    too_deep = {"username": "x", "password": "y", "extra": json.loads("[" * 32 + "]" * 32)}
    response = Client().post("/api/v1/accounts/token/", json.dumps(too_deep), content_type="application/json")
    assert response.status_code == 400
    assert "nested too deeply" in error_of(response)["message"]
    at_limit = {"username": "x", "password": "y", "extra": json.loads("[" * 31 + "]" * 31)}
    response = Client().post("/api/v1/accounts/token/", json.dumps(at_limit), content_type="application/json")
    assert response.status_code == 401  # parsed: the wrong credentials are what is refused


def test_json_larger_than_the_limit_is_refused(client_for, settings):
    settings.API_JSON_MAX_BYTES = 1000
    body = json.dumps({"username": "x", "password": "y" * 1000})
    response = Client().post("/api/v1/accounts/token/", body, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["message"] == "JSON body too large: the limit is 1000 bytes."


def test_deep_json_from_a_signed_in_user_is_a_400_too(client_for):
    body = "{\"a\":" * 5000 + "1" + "}" * 5000
    response = client_for(Role.ADMINISTRATOR).post("/api/v1/accounts/users/", body, content_type="application/json")
    assert response.status_code == 400
    assert "nested too deeply" in error_of(response)["message"]


def test_malformed_json_is_a_400_naming_the_place():
    response = Client().post("/api/v1/accounts/token/", '{"username": "x",, }', content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("JSON parse error: Expecting property name")
    assert "line 1 column 18" in error_of(response)["message"]
