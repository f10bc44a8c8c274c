"""A version registered without weight files (a directory holding only config.json and a tokenizer): the
registration says so, the version page says so, and a deployment is refused naming the version (audited),
before anything reaches the pool."""

import json

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.lifecycle import deployments, services
from appliance.lifecycle.errors import Conflict
from appliance.lifecycle.models import Deployment

from .deploy_support import demo, people  # noqa: F401 (fixtures)
from .test_registry_cli import root  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def config_only(directory):
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    (directory / "tokenizer.json").write_text("{}")
    return directory


def test_a_config_only_version_is_flagged_and_never_deployed(demo, root, people, capsys):  # noqa: F811
    from django.core.management import call_command

    call_command("models", "register", "llama-cfg", "--source", str(config_only(root / "cfg")))
    captured = capsys.readouterr()
    assert "registered llama-cfg v1: 2 files" in captured.out
    assert captured.err.strip() == ("warning: no weight files among them (safetensors, GGUF, ONNX, a TensorRT-LLM "
                                    "engine or a PyTorch checkpoint): this version holds configuration only and "
                                    "cannot be deployed")

    version = services.get_version("llama-cfg", 1)
    client = Client()
    client.force_login(people["olga"])
    page = client.get("/models/llama-cfg/versions/1/").content.decode()
    assert "no weight files: configuration only, it cannot be deployed" in page

    with pytest.raises(Conflict, match=r"^version: llama-cfg v1 holds no weight files \(safetensors, GGUF, ONNX, "
                                       r"a TensorRT-LLM engine or a PyTorch checkpoint\): nothing to serve$"):
        deployments.deploy(version, user=people["olga"])
    assert not Deployment.objects.exists()
    record = AuditRecord.objects.get(event="lifecycle.deployment.create")
    assert (record.outcome, record.actor_username) == ("failure", "olga")
