"""Verification of a version's files (the "integrity" part): quick (stat only, and the signature over the
recorded hashes) and full (model-signing's verifier re-hashes); each kind of tampering fails naming the
file, sets the version's verification and records lifecycle.version.tampered (critical)."""

import os
import shutil

import pytest

from appliance.audit.models import AuditRecord
from appliance.lifecycle import integrity
from appliance.lifecycle.errors import Conflict, Forbidden, IntegrityRefused, LifecycleError
from appliance.lifecycle.models import Artifact, ModelVersion
from tests.lifecycle.integrity_support import put_back, register, rewrite_last_bytes, write_model

SHARD = "model-00002-of-00002.safetensors"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def key_in_tmp(settings, tmp_path):
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path / "llama")


@pytest.fixture
def version(model):
    return register(model)


def flip_last_byte(path, keep_times=False):
    """Change one byte in place (same size, same inode); keep_times puts the mtime back as it was."""
    info = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0x01]))
    if keep_times:
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def kept(this_check: str) -> str:
    """The detail of a verification of a version already found tampered: the verdict stands."""
    return ("tampered: the files were found changed before, and the verdict stands until an Administrator clears "
            f"it after a full verification passes (this check: {this_check})")


def tampered_records(version):
    return AuditRecord.objects.filter(event="lifecycle.version.tampered", target_id=str(version.pk))


@pytest.mark.parametrize("full", [False, True])
def test_an_untouched_version_verifies(version, full):
    result = integrity.verify(version, full=full)
    assert (result.ok, result.state, result.changed, result.missing, result.added, result.signature_ok) == (
        True, "verified", [], [], [], True)
    version.refresh_from_db()
    assert version.verification == "verified" and version.verified_full is full
    assert version.verified_at is not None
    record = AuditRecord.objects.get(event="lifecycle.version.verify")
    assert record.outcome == "success"
    assert record.details["mode"] == ("full" if full else "quick")
    assert not tampered_records(version).exists()


@pytest.mark.parametrize("full", [False, True])
def test_a_changed_byte_fails_naming_the_file(model, version, full):
    flip_last_byte(model / SHARD)
    result = integrity.verify(version, full=full)
    assert (result.ok, result.state, result.changed, result.missing, result.added) == (
        False, "tampered", [SHARD], [], [])
    assert result.signature_ok
    assert result.detail == f"changed: {SHARD}"
    version.refresh_from_db()
    assert version.verification == "tampered"
    assert version.verification_detail == f"changed: {SHARD}"
    assert Artifact.objects.get(version=version, path=SHARD).state == "tampered"
    assert Artifact.objects.get(version=version, path="config.json").state == "verified"
    alert = tampered_records(version).get()
    assert alert.severity == "critical"
    assert alert.details["changed"] == [SHARD]
    assert alert.reason == f"changed: {SHARD}"


def test_a_byte_changed_with_its_mtime_put_back_fails_the_quick_check_through_a_full_one(model, version):
    # Size, mtime and inode stay; the ctime moved (no user can set it back): the quick check cannot vouch for
    # the file, so the file's content decides (a full verification).
    flip_last_byte(model / SHARD, keep_times=True)
    quick = integrity.verify(version)
    assert (quick.ok, quick.state, quick.changed, quick.full, quick.detail) == (
        False, "tampered", [SHARD], True, f"changed: {SHARD}")
    record = AuditRecord.objects.filter(event="lifecycle.version.verify").last()
    assert (record.details["mode"], record.details["quick_unvouched"]) == ("full", [SHARD])


def test_a_file_registered_before_ctime_was_recorded_is_re_hashed(model, version):
    Artifact.objects.filter(version=version, path=SHARD).update(ctime_ns=None)
    quick = integrity.verify(version)
    assert (quick.ok, quick.full) == (True, True)
    assert AuditRecord.objects.filter(event="lifecycle.version.verify").last().details["quick_unvouched"] == [SHARD]
    assert Artifact.objects.get(version=version, path=SHARD).ctime_ns == (model / SHARD).stat().st_ctime_ns
    assert integrity.verify(version).full is False  # its ctime is the baseline now


def test_a_removed_file_is_missing(model, version):
    (model / "tokenizer.json").unlink()
    for full in (False, True):
        result = integrity.verify(version, full=full)
        assert (result.ok, result.state, result.missing, result.changed, result.added) == (
            False, "missing", ["tokenizer.json"], [], [])
    version.refresh_from_db()
    assert version.verification == "missing"
    assert version.verification_detail == "missing: tokenizer.json"
    assert Artifact.objects.get(version=version, path="tokenizer.json").state == "missing"
    assert tampered_records(version).count() == 2


def test_an_added_file_fails_naming_it(model, version):
    (model / "sub").mkdir()
    (model / "sub" / "extra.safetensors").write_bytes(b"\x08" + bytes(15))
    for full, detail in ((False, "added: sub/extra.safetensors"), (True, kept("added: sub/extra.safetensors"))):
        result = integrity.verify(version, full=full)
        assert (result.ok, result.state, result.added, result.changed) == (False, "tampered",
                                                                           ["sub/extra.safetensors"], [])
        assert result.detail == detail


def test_a_link_put_in_a_files_place_is_a_change(model, version, tmp_path):
    (tmp_path / "elsewhere.json").write_bytes((model / "tokenizer.json").read_bytes())
    (model / "tokenizer.json").unlink()
    (model / "tokenizer.json").symlink_to(tmp_path / "elsewhere.json")
    for full in (False, True):
        assert integrity.verify(version, full=full).changed == ["tokenizer.json"]


def test_a_signature_swapped_from_another_version_fails(tmp_path, model, version):
    other_dir = write_model(tmp_path / "other")
    (other_dir / "config.json").write_text('{"hidden_size": 128}')
    other = register(other_dir, name="integrity-other")
    ModelVersion.objects.filter(pk=version.pk).update(signature=other.signature)
    version.refresh_from_db()
    found = "signature: the signature does not vouch for the recorded hashes of config.json"
    for full, detail in ((False, found), (True, kept(found))):
        result = integrity.verify(version, full=full)
        assert (result.ok, result.state, result.signature_ok, result.changed) == (False, "tampered", False, [])
        assert result.detail == detail
    assert tampered_records(version).count() == 2


def test_a_signature_made_with_another_key_fails(tmp_path, settings, model, version):
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "another" / "model-signing.pem"
    result = integrity.verify(version)
    assert (result.ok, result.signature_ok) == (False, False)
    assert result.detail.startswith("signature: the signature does not verify (Key mismatch")


def test_a_recorded_hash_changed_in_the_database_fails(model, version):
    artifact = Artifact.objects.get(version=version, path="config.json")
    artifact.sha256 = "0" * 64
    artifact.save()
    result = integrity.verify(version)
    assert (result.ok, result.signature_ok) == (False, False)
    assert result.detail == "signature: the signature does not vouch for the recorded hashes of config.json"


def test_an_unsigned_version_fails(version):
    ModelVersion.objects.filter(pk=version.pk).update(signature="")
    version.refresh_from_db()
    result = integrity.verify(version)
    assert result.detail == "signature: the version was never signed"


def test_a_restored_copy_passes_a_full_check_which_refreshes_the_quick_baseline(model, version):
    # Copied away and back (a restore from backup): new inode and mtime, same bytes.
    shutil.copy(model / SHARD, model.parent / "backup")
    (model / SHARD).unlink()
    shutil.copy(model.parent / "backup", model / SHARD)
    # The quick check cannot vouch for the new inode: the content decides, and is the signed one.
    first = integrity.verify(version)
    assert (first.ok, first.full) == (True, True)
    assert AuditRecord.objects.filter(event="lifecycle.version.verify").last().details["baseline_refreshed"] == [
        SHARD]
    again = integrity.verify(version)
    assert (again.ok, again.full) == (True, False)


def test_require_intact_refuses_naming_the_files(model, version):
    assert integrity.require_intact(version).ok
    flip_last_byte(model / SHARD)
    (model / "tokenizer.json").unlink()
    with pytest.raises(IntegrityRefused) as refused:
        integrity.require_intact(version)
    assert str(refused.value) == (f"version: integrity-llama v1 is not what was registered and signed (changed: "
                                  f"{SHARD}; missing: tokenizer.json); it may not be deployed")
    assert refused.value.field == "version"
    assert refused.value.status == 409


def test_verify_all_reports_the_failed_versions(tmp_path, model, version):
    second = register(write_model(tmp_path / "second"), name="integrity-second")
    archived = register(write_model(tmp_path / "archived"), name="integrity-archived")
    ModelVersion.objects.filter(pk=archived.pk).update(stage="archived")
    (tmp_path / "archived" / "config.json").unlink()
    flip_last_byte(tmp_path / "second" / "config.json", keep_times=True)
    outcome = integrity.verify_all(full=True)
    assert outcome == {"verified": 2, "failed": [
        {"model": "integrity-second", "version": 1, "state": "tampered", "detail": "changed: config.json"}]}
    second.refresh_from_db()
    assert second.verification == "tampered" and second.verified_full


def test_quick_verification_is_fast(version):
    result = integrity.verify(version)
    assert result.seconds < 0.5


@pytest.mark.parametrize("full", [False, True])
def test_a_model_that_is_one_file_among_others(tmp_path, full):
    # The file's directory holds other things (another model, a log): they are not this version's files.
    file = tmp_path / "shelf" / "tiny.gguf"
    file.parent.mkdir()
    file.write_bytes(b"GGUF" + bytes(4096))
    (file.parent / "other.gguf").write_bytes(b"GGUF" + bytes(10))
    version = register(file)
    assert version.storage_path == str(file.parent)
    assert integrity.verify(version, full=full).ok
    flip_last_byte(file)
    result = integrity.verify(version, full=full)
    assert (result.ok, result.changed, result.added) == (False, ["tiny.gguf"], [])
    file.unlink()
    result = integrity.verify(version, full=full)
    # Missing now, but found tampered before: that verdict stands.
    assert (result.ok, result.state, result.missing, result.added) == (False, "tampered", ["tiny.gguf"], [])
    assert result.detail == kept("missing: tiny.gguf")


def test_a_version_whose_storage_path_is_the_file(tmp_path):
    file = tmp_path / "tiny.gguf"
    file.write_bytes(b"GGUF" + bytes(4096))
    version = register(file)
    ModelVersion.objects.filter(pk=version.pk).update(storage_path=str(file))
    version.refresh_from_db()
    assert integrity.verify(version, full=True).ok


def test_through_the_registrys_registration(tmp_path, settings, make_user):
    """A version registered by services.register_version (hash_tree, Artifact rows, sign_version) verifies
    with model-signing's own verifier, and a changed file then blocks it."""
    import model_signing

    from appliance.lifecycle import services, signing

    settings.LIFECYCLE_ARTIFACT_ROOTS = [tmp_path / "models"]
    model = write_model(tmp_path / "models" / "llama")
    tiny = tmp_path / "models" / "tiny.gguf"
    tiny.write_bytes(b"GGUF" + bytes(64))
    engineer = make_user("ml_engineer", "integrity-engineer")
    version = services.register_version("integrity-e2e", source=str(model), user=engineer)
    single = services.register_version("integrity-tiny", source=f"file://{tiny}", user=engineer)
    bundle = tmp_path / "model.sig"
    bundle.write_text(version.signature)
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=signing.public_key_file()).verify(
        model, bundle)
    assert integrity.require_intact(version).ok and integrity.require_intact(single).ok
    assert integrity.verify(single, full=True).ok
    (model / "config.json").write_text("{}")
    with pytest.raises(IntegrityRefused, match="changed: config.json"):
        integrity.require_intact(version, user=engineer)
    alert = tampered_records(version).get()
    assert (alert.severity, alert.actor_username, alert.details["changed"]) == (
        "critical", "integrity-engineer", ["config.json"])


def test_a_tampered_verdict_stays_through_later_checks_until_an_administrator_clears_it(model, version, make_user):
    original = rewrite_last_bytes(model / SHARD)
    assert integrity.verify(version).state == "tampered"
    put_back(model / SHARD, original)  # the right bytes again: later checks pass on content, the verdict stays
    for full in (False, True):
        result = integrity.verify(version, full=full)
        assert (result.ok, result.state, result.changed) == (False, "tampered", [])
        assert result.detail == kept("intact (re-hashed in full), signature verified")
    version.refresh_from_db()
    assert version.verification == "tampered"
    assert Artifact.objects.get(version=version, path=SHARD).state == "tampered"
    with pytest.raises(IntegrityRefused):
        integrity.require_intact(version)

    with pytest.raises(Forbidden, match="^clearing a tampered verdict needs an Administrator$"):
        integrity.clear_tampered(version, user=make_user("ml_engineer", "erin"), reason="restored")
    admin = make_user("administrator", "ada")
    for bad in ("", "  ", "x" * 2001, "a\x00b"):
        with pytest.raises(LifecycleError) as refused:
            integrity.clear_tampered(version, user=admin, reason=bad)
        assert refused.value.field == "reason"
    assert not AuditRecord.objects.filter(event="lifecycle.version.tamper_clear").exists()

    cleared = integrity.clear_tampered(version, user=admin, reason="restored from the backup of 1 December")
    assert (cleared.ok, cleared.state, cleared.full) == (True, "verified", True)
    version.refresh_from_db()
    assert version.verification == "verified"
    assert Artifact.objects.get(version=version, path=SHARD).state == "verified"
    record = AuditRecord.objects.get(event="lifecycle.version.tamper_clear")
    assert (record.actor_username, record.reason, record.outcome) == (
        "ada", "restored from the backup of 1 December", "success")
    assert integrity.require_intact(version).ok
    with pytest.raises(Conflict, match="^version: integrity-llama v1 is verified, not tampered; there is no verdict "
                                       "to clear$"):
        integrity.clear_tampered(version, user=admin, reason="again")


def test_clearing_is_refused_while_the_files_are_still_changed(model, version, make_user):
    rewrite_last_bytes(model / SHARD)
    assert integrity.verify(version).state == "tampered"
    with pytest.raises(IntegrityRefused) as refused:
        integrity.clear_tampered(version, user=make_user("administrator", "ada"), reason="looks fine to me")
    assert str(refused.value) == (
        "version: a full verification of integrity-llama v1 does not pass (" + kept(f"changed: {SHARD}") + "); the "
        "tampered verdict stays")
    version.refresh_from_db()
    assert version.verification == "tampered"
    assert not AuditRecord.objects.filter(event="lifecycle.version.tamper_clear").exists()
