"""manage.py models verify (the "integrity" part): the result printed, the exit status, the version's
state written."""

import io
import json
import os

import pytest
from django.core.management import call_command

from appliance.lifecycle.models import ModelVersion
from tests.lifecycle.integrity_support import put_back, register, rewrite_last_bytes, write_model

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
    assert out.rstrip().endswith("s): intact (size, mtime, inode and ctime of every file), signature verified")


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


def clear(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("models", "clear-tampered", *args, stdout=out, stderr=err)
        status = 0
    except SystemExit as exit:
        status = exit.code
    return status, out.getvalue(), err.getvalue()


def test_clear_tampered_takes_an_administrators_token_and_a_passing_full_verification(tmp_path, make_user,
                                                                                      monkeypatch):
    from appliance.accounts.tokens import issue_token

    model = write_model(tmp_path / "llama")
    register(model)
    original = rewrite_last_bytes(model / SHARD)
    assert run("integrity-llama", "1")[0] == 2
    status, _, err = clear("integrity-llama", "1", "--reason", "restored")
    assert (status, err) == (1, "error: clearing a tampered verdict needs an Administrator\n")
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(make_user("administrator", "ada"))[1])
    status, _, err = clear("integrity-llama", "1", "--reason", "restored")
    assert status == 2 and err.startswith("error: version: a full verification of integrity-llama v1 does not pass")
    put_back(model / SHARD, original)
    assert run("integrity-llama", "1")[0] == 2  # the verdict stands
    status, out, _ = clear("integrity-llama", "1", "--reason", "restored from backup")
    assert status == 0
    assert out.startswith("integrity-llama v1: the tampered verdict is cleared (full verification, ")
    assert ModelVersion.objects.get().verification == "verified"
    assert run("integrity-llama", "1")[0] == 0
