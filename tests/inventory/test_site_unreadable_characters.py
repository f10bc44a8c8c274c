"""A site file with a character YAML text may not hold (NUL and most controls) is a 400 naming its
line, not a server error."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from appliance.core.roles import Role


def test_a_nul_character_is_a_syntax_error_with_its_line():
    from appliance.inventory.sitedef import SiteValidationError, parse_site

    with pytest.raises(SiteValidationError) as refused:
        parse_site("name: demo\nnodes:\x00\n", "site.yml")
    [error] = refused.value.errors
    assert (error.file, error.line, error.message) == (
        "site.yml", 2, "YAML syntax error: character #x0000 is not allowed in YAML text")


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["/api/v1/inventory/site/validate/", "/api/v1/inventory/site/import/"])
def test_an_upload_with_a_nul_character_is_a_400(client_for, endpoint):
    upload = SimpleUploadedFile("site.yml", b"\x00name: demo\n", "application/yaml")
    response = client_for(Role.OPERATOR).post(endpoint, {"file": upload})
    assert response.status_code == 400
    [error] = response.json()["error"]["errors"]
    assert error == {"file": "site.yml", "line": 1, "path": "",
                     "message": "YAML syntax error: character #x0000 is not allowed in YAML text"}
