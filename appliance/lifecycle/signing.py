"""Signing a model version with OpenSSF model signing (the `model_signing` package), offline.

The appliance's key is an elliptic-curve (P-256) private key in settings.LIFECYCLE_SIGNING_KEY_FILE, made
on first use (mode 0600; two processes starting at once end up with one key: it is written aside and
linked into place, whoever links first wins). Its public half is written beside it (`<key>.pub`) and shown
by public_key_pem() for auditors and the model card.

The signed manifest is built from the SHA-256 digests recorded at registration (the Artifact rows), not by
reading the files again: it is the manifest model-signing's default file serialization makes for the
same directory (one SHA-256 per file, paths relative to the model directory, git's files ignored, see
hashing.py), so model-signing's own verifier (`model_signing.verifying.Config().use_elliptic_key_verifier`)
accepts the signature over the files on disk, and integrity.py uses that verifier for a full verification.
The signature is the model-signing bundle (Sigstore bundle JSON with a DSSE envelope over the in-toto
statement), kept in ModelVersion.signature; no Sigstore service or network is involved.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from model_signing import manifest as ms_manifest
from model_signing._hashing import hashing as ms_hashing
from model_signing._signing import sign_ec_key, sign_sigstore_pb
from model_signing._signing import signing as ms_signing
from sigstore_models.bundle import v1 as bundle_pb

from appliance.audit import services as audit
from appliance.core.files import create_once, write_private

from .errors import LifecycleError
from .hashing import IGNORED_TOP_LEVEL

_lock = threading.Lock()


class SigningKeyError(LifecycleError):
    status = 500


def key_file() -> Path:
    return Path(settings.LIFECYCLE_SIGNING_KEY_FILE)


def public_key_file() -> Path:
    path = key_file()
    return path.with_name(path.name + ".pub")


def _private_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    mode = path.stat().st_mode
    if mode & 0o077:
        raise SigningKeyError(f"{path}: the model-signing key is readable by others (mode {mode & 0o777:o}); "
                              "chmod 600 it")
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SigningKeyError(f"{path}: not an elliptic-curve private key")
    return key


def ensure_key() -> Path:
    """The private key file, made on first use, with its public half written beside it."""
    path = key_file()
    with _lock:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            create_once(path, _private_pem(), mode=0o600)
        public_pem = _load_private_key(path).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        public_path = public_key_file()
        if not public_path.exists() or public_path.read_bytes() != public_pem:
            write_private(public_path, public_pem, mode=0o644)
    return path


def public_key_pem() -> str:
    """The PEM of the public key that verifies every version's signature (auditors, model cards)."""
    ensure_key()
    return public_key_file().read_text()


def _source_file(source: str) -> Path | None:
    if source.startswith("file://"):
        return Path(unquote(urlparse(source).path))
    return Path(source) if source.startswith("/") else None


def model_path(version, artifacts) -> tuple[Path | None, bool]:
    """What model-signing signs and verifies for the version, and whether it is one file: the model's
    directory, or the single file a version was registered from (its storage_path may be that file or the
    directory holding it; the directory's other files are not the model's)."""
    if not version.storage_path:
        return None, False
    storage = Path(version.storage_path)
    if storage.is_file():
        return storage, True
    names = [artifact.path for artifact in artifacts]
    source = _source_file(version.source or "")
    if len(names) == 1 and source is not None and source.name == names[0] and not source.is_dir():
        return storage / names[0], True
    return storage, False


def manifest_identifier(path: str, single_file: bool) -> str:
    """The name model-signing gives the file: relative to the model directory; for a model that is one
    file, the file itself ("."), as model-signing names it when given the file."""
    return "." if single_file else path


def build_manifest(version, artifacts=None) -> ms_manifest.Manifest:
    """model-signing's manifest of the version, from its recorded digests."""
    artifacts = list(version.artifacts.all()) if artifacts is None else list(artifacts)
    target, single_file = model_path(version, artifacts)
    items = [ms_manifest.FileManifestItem(path=manifest_identifier(artifact.path, single_file),
                                          digest=ms_hashing.Digest("sha256", bytes.fromhex(artifact.sha256)))
             for artifact in artifacts]
    # As model-signing's default file serialization describes itself: SHA-256, no links (hashing.py refuses
    # them), git's files ignored.
    serialization_type = ms_manifest._FileSerialization("sha256", False, sorted(IGNORED_TOP_LEVEL))
    return ms_manifest.Manifest(target.name if target else version.model.name, items, serialization_type)


def sign_manifest(manifest: ms_manifest.Manifest) -> str:
    """The model-signing bundle (JSON) of the manifest, signed with the appliance's key."""
    signer = sign_ec_key.Signer(ensure_key())
    return signer.sign(ms_signing.Payload(manifest)).bundle.to_json()


def read_bundle(text: str) -> sign_sigstore_pb.Signature:
    """A stored bundle as model-signing's signature object (what Signature.read does with a file)."""
    parsed = json.loads(text)
    material = parsed.setdefault("verificationMaterial", {})
    material.setdefault("tlogEntries", [])
    return sign_sigstore_pb.Signature(bundle_pb.Bundle.from_dict(parsed))


def signed_manifest(signature_text: str) -> ms_manifest.Manifest:
    """The manifest a stored signature vouches for, after checking the signature with the appliance's
    public key (ValueError or cryptography's InvalidSignature when it does not verify)."""
    ensure_key()
    return sign_ec_key.Verifier(public_key_file()).verify(read_bundle(signature_text))


def manifest_digests(manifest: ms_manifest.Manifest) -> dict[str, str]:
    return {descriptor.identifier: descriptor.digest.digest_hex for descriptor in manifest.resource_descriptors()}


def sign_version(version, *, user=None) -> None:
    """Sign the version's recorded digests; saves version.signature and signed_at, records
    lifecycle.version.sign."""
    artifacts = list(version.artifacts.all())
    if not artifacts:
        raise LifecycleError(_("source: %(version)s has no files to sign") % {"version": version}, "source")
    manifest = build_manifest(version, artifacts)
    bundle = sign_manifest(manifest)
    with transaction.atomic():
        version.signature = bundle
        version.signed_at = timezone.now()
        version.save(update_fields=["signature", "signed_at", "updated"])
        audit.record("lifecycle.version.sign", target=version, actor=user, details={
            "model": version.model.name, "version": version.number, "files": len(artifacts),
            "method": "model-signing (OpenSSF), elliptic-curve key, offline",
            "manifest_sha256": json.loads(bundle_payload(bundle))["subject"][0]["digest"]["sha256"],
            "key": public_key_fingerprint(),
        })


def bundle_payload(bundle_text: str) -> str:
    """The in-toto statement (JSON) a bundle signs."""
    return base64.b64decode(json.loads(bundle_text)["dsseEnvelope"]["payload"]).decode()


def public_key_fingerprint() -> str:
    """SHA-256 of the public key's PEM: the hint model-signing writes in every bundle."""
    return hashlib.sha256(public_key_pem().encode()).hexdigest()
