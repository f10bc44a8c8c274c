"""manage.py models verify (the "integrity" part): the result printed, the exit status, the version's
state written."""

import io
import json
import os

import pytest
from django.core.management import call_command

from appliance.lifecycle.models import ModelVersion
from tests.lifecycle.integrity_support import register, write_model

pytestmark = pytest.mark.django_db
SHARD = "model-00002-of-00002.safetensors"


@pytest.fixture(autouse=True)
def key_in_tmp(settings, tmp_path, monkeypatch):
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)


def run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("models", "verify", *args, stdout=out, stderr=err)
        status = 0
    except SystemExit as exit:
        status = exit.code
    return status, out.getvalue(), err.getvalue()


def test_an_intact_version(tmp_path):
    register(write_model(tmp_path / "llama"))
    status, out, _ = run("integrity-llama", "1")
    assert status == 0
    assert out.startswith("integrity-llama v1: verified (quick, ")
    assert out.rstrip().endswith("s): intact (size, mtime and inode of every file), signature verified")


def test_a_changed_file_exits_2_naming_it(tmp_path):
    model = write_model(tmp_path / "llama")
    register(model)
    with open(model / SHARD, "r+b") as handle:
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 0x01]))
    os.utime(model / SHARD, ns=(0, 0))
    status, out, _ = run("integrity-llama", "1", "--full", "--json")
    assert status == 2
    printed = json.loads(out)
    assert (printed["ok"], printed["state"], printed["changed"], printed["full"]) == (False, "tampered", [SHARD], True)
    assert ModelVersion.objects.get().verification == "tampered"


def test_an_unknown_version_is_refused(tmp_path):
    register(write_model(tmp_path / "llama"))
    status, _, err = run("integrity-llama", "7")
    assert status == 1
    assert err.startswith("error: ")
    assert "7" in err
