"""`models register --url` ("registry" part): a compute node without database access registers through the
appliance's API with its token; the answer and the refusals come back as the API gives them."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from appliance.accounts.tokens import issue_token
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle.models import ModelVersion

from .registry_support import write_model
from .test_registry_cli import root  # noqa: F401 (fixture)


def register(*args) -> str:
    out = StringIO()
    call_command("models", "register", *args, stdout=out)
    return out.getvalue()


def test_register_through_the_api_with_a_token(root, live_server, make_user, monkeypatch):  # noqa: F811
    directory = write_model(root / "llama" / "v1")
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(make_user(Role.ML_ENGINEER, "erin"))[1])
    monkeypatch.setenv("APPLIANCE_URL", live_server.url)
    printed = register("llama", "--source", str(directory), "--metric", "loss=1.25",
                       "--dataset", f"name=wiki,uri=/data/wiki,sha256={'ab' * 32}")
    assert "registered llama v1: 3 files" in printed and f"through {live_server.url}" in printed
    version = ModelVersion.objects.get()
    assert version.registered_by.username == "erin" and version.metrics == {"loss": 1.25}
    assert AuditRecord.objects.get(event="lifecycle.version.register").channel == "api"

    with pytest.raises(CommandError, match=r"answered 400: source: /etc is not inside an artifact root"):
        register("llama", "--source", "/etc")
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(make_user(Role.VIEWER, "val"))[1])
    with pytest.raises(CommandError, match="answered 403"):
        register("llama", "--source", str(directory))
    assert ModelVersion.objects.count() == 1


def test_the_url_and_the_token_are_checked_before_anything_is_sent(root, monkeypatch):  # noqa: F811
    directory = write_model(root / "m")
    with pytest.raises(CommandError, match="needs APPLIANCE_TOKEN"):
        register("m", "--source", str(directory), "--url", "http://appliance.example:8000")
    monkeypatch.setenv("APPLIANCE_TOKEN", "apl_0.x")
    with pytest.raises(CommandError, match="--url: 'file:///etc/passwd' is not an http"):
        register("m", "--source", str(directory), "--url", "file:///etc/passwd")
