"""What schemathesis found the schema not stating, now stated: a CLI run's requested_by is null, an alias's
delete may answer 400, credential user names and evaluation dataset names need something besides white
space (and the server refuses exactly what the pattern refuses)."""

import json
import re

import pytest

from appliance.inventory.api import CredentialSerializer
from appliance.lifecycle.serializers import DatasetSerializer


@pytest.fixture(scope="module")
def schema():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def test_requested_by_is_nullable(schema):
    for component in ("RunDetail", "Run"):
        assert schema["components"]["schemas"][component]["properties"]["requested_by"]["nullable"] is True


def test_alias_delete_documents_400(schema):
    [path] = [p for p in schema["paths"] if p.startswith("/api/v1/lifecycle/models/{name}/aliases/{alias}")]
    assert sorted(schema["paths"][path]["delete"]["responses"]) == ["204", "400", "401", "403", "404", "409"]


@pytest.mark.parametrize(("value", "valid"), [("admin", True), (" admin ", True), ("", False), ("   ", False),
                                             ("a:b", False), ("a\tb", False)])
def test_credential_user_names(schema, value, valid):
    pattern = schema["components"]["schemas"]["CredentialRequest"]["properties"]["username"]["pattern"]
    assert schema["components"]["schemas"]["CredentialRequest"]["properties"]["username"]["minLength"] == 1
    assert bool(re.search(pattern, value)) is valid
    serializer = CredentialSerializer(data={"name": "bmc-x", "username": value, "secret": "s3cret"})
    assert serializer.is_valid() is valid, serializer.errors


@pytest.mark.parametrize(("value", "valid"), [("wiki-2026", True), ("  mmlu ", True), ("", False), ("  ", False),
                                             ("two\nlines", False)])
def test_dataset_names(schema, value, valid):
    pattern = schema["components"]["schemas"]["DatasetRequest"]["properties"]["name"]["pattern"]
    assert bool(re.search(pattern, value)) is valid
    assert DatasetSerializer(data={"name": value}).is_valid() is valid
