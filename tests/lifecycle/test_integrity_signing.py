"""signing (the "integrity" part): a version's recorded digests signed with the appliance's P-256 key,
offline, in a bundle that OpenSSF model-signing's own verifier accepts over the files on disk."""

import json
import stat
import threading

import model_signing
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.audit.models import AuditRecord
from appliance.lifecycle import signing
from tests.lifecycle.integrity_support import register, sha256sum, write_model


@pytest.fixture(autouse=True)
def key_in_tmp(settings, tmp_path):
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    return settings.LIFECYCLE_SIGNING_KEY_FILE


def library_verify(directory, signature_text, public_key_path, tmp_path):
    bundle = tmp_path / "model.sig"
    bundle.write_text(signature_text)
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public_key_path).verify(directory, bundle)


def test_the_key_is_made_once_private_and_p256(key_in_tmp):
    pem = signing.public_key_pem()
    assert stat.S_IMODE(key_in_tmp.stat().st_mode) == 0o600
    private = serialization.load_pem_private_key(key_in_tmp.read_bytes(), password=None)
    assert isinstance(private.curve, ec.SECP256R1)
    assert pem.startswith("-----BEGIN PUBLIC KEY-----\n")
    assert pem.encode() == private.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    first = key_in_tmp.read_bytes()
    assert signing.public_key_pem() == pem
    assert key_in_tmp.read_bytes() == first


def test_racing_first_uses_agree_on_one_key(key_in_tmp):
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(signing.public_key_pem())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and len(seen) == 8


@pytest.mark.django_db
def test_a_signature_made_here_verifies_with_model_signings_verifier(tmp_path, key_in_tmp):
    model = write_model(tmp_path / "llama")
    version = register(model)

    assert version.signed_at is not None
    bundle = json.loads(version.signature)
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    statement = json.loads(signing.bundle_payload(version.signature))
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    resources = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    assert resources == {
        "config.json": sha256sum(model / "config.json"),
        "model-00001-of-00002.safetensors": sha256sum(model / "model-00001-of-00002.safetensors"),
        "model-00002-of-00002.safetensors": sha256sum(model / "model-00002-of-00002.safetensors"),
        "tokenizer.json": sha256sum(model / "tokenizer.json"),
    }
    library_verify(model, version.signature, signing.public_key_file(), tmp_path)


@pytest.mark.django_db
def test_the_signing_is_audited(tmp_path, make_user):
    user = make_user("ml_engineer", "integrity-signer")
    version = register(write_model(tmp_path / "llama"), user=user)
    record = AuditRecord.objects.filter(event="lifecycle.version.sign").get()
    assert record.actor_username == "integrity-signer"
    assert record.details["files"] == 4
    assert record.details["version"] == 1
    assert record.target_id == str(version.pk)


@pytest.mark.django_db
def test_git_files_are_left_out_as_model_signing_leaves_them_out(tmp_path):
    model = write_model(tmp_path / "llama")
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (model / ".gitignore").write_text("*.tmp\n")
    (model / "sub").mkdir()
    (model / "sub" / "generation_config.json").write_text("{}")
    version = register(model)
    library_verify(model, version.signature, signing.public_key_file(), tmp_path)


@pytest.mark.django_db
def test_a_model_that_is_one_file_verifies(tmp_path):
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF" + bytes(1000))
    version = register(file)
    library_verify(file, version.signature, signing.public_key_file(), tmp_path)
    file.write_bytes(b"GGUF" + bytes(999) + b"\x01")
    with pytest.raises(ValueError, match="Hash mismatch"):
        library_verify(file, version.signature, signing.public_key_file(), tmp_path)


@pytest.mark.django_db
def test_another_key_does_not_verify_it(tmp_path, settings):
    model = write_model(tmp_path / "llama")
    version = register(model)
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "other" / "model-signing.pem"
    signing.public_key_pem()
    with pytest.raises(ValueError, match="Key mismatch"):
        library_verify(model, version.signature, signing.public_key_file(), tmp_path)
