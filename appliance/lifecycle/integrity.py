"""Verifying a model version's files against what was registered and signed.

Quick (before an approval, and before a deployment of a version to a node where it was deployed before;
well under a second): every recorded file is stat()ed, never read: the same size, mtime (ns), inode and
ctime (ns) as at registration, no file missing, none added (a listing of the directory), and the stored
model-signing signature verifies with the appliance's public key and vouches for exactly the recorded
digests (a row changed in the database, or a signature swapped from another version or made with another
key, fails here). A user can set a file's mtime back (os.utime) but not its ctime, which any write moves: a
file whose stat the quick check cannot vouch for (or one registered before ctime was recorded) sends the
whole verification to the full re-hash instead of passing or failing on a guess.

Full (on demand, on schedule, and before a version's first deployment to a node: a stat proves nothing
about the bytes, and the bytes are what the node serves; see deployments._check_intact): model-signing's own
verifier re-hashes every file and compares them with the signed manifest
(`model_signing.verifying.Config().use_elliptic_key_verifier`). When it refuses, the files are hashed again
here to name which changed, went missing or were added. A file whose content is proven unchanged by a full
verification but whose mtime or inode moved (copied back, restored from a backup) gets its new values as the
quick check's baseline.

Each verification updates the version (verification, verified_at, verified_full, verification_detail)
and its artifacts' states, and records lifecycle.version.verify; one that fails also records
lifecycle.version.tampered (critical). A tampered verdict is sticky: no later verification, quick or full,
writes over it (the version stays undeployable), until an Administrator clears it with a reason once a full
verification passes (clear_tampered: lifecycle.version.tamper_clear). Those records are written in the caller's transaction: call
verify / require_intact outside an atomic block that a refusal rolls back, or the alert goes with it.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance.audit import services as audit
from appliance.core.roles import Role

from . import hashing, signing
from .errors import Conflict, Forbidden, IntegrityRefused, LifecycleError
from .models import Artifact, ModelVersion, Stage, Verification

logger = logging.getLogger(__name__)
LISTED_IN_DETAIL = 10  # files named in a message; the result and the audit record carry them all


@dataclass
class VerifyResult:
    ok: bool
    state: str  # a Verification value
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    signature_ok: bool = False
    full: bool = False
    seconds: float = 0.0
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:LISTED_IN_DETAIL])
    more = len(paths) - LISTED_IN_DETAIL
    return shown + (_(" and %(count)d more") % {"count": more} if more > 0 else "")


def describe(result: VerifyResult) -> str:
    """One sentence naming what is wrong (or that nothing is)."""
    parts = []
    if result.changed:
        parts.append(_("changed: %(files)s") % {"files": _names(result.changed)})
    if result.missing:
        parts.append(_("missing: %(files)s") % {"files": _names(result.missing)})
    if result.added:
        parts.append(_("added: %(files)s") % {"files": _names(result.added)})
    if not result.signature_ok:
        parts.append(_("signature: %(reason)s") % {"reason": result.detail or _("does not verify")})
    if not parts:
        how = _("re-hashed in full") if result.full else _("size, mtime, inode and ctime of every file")
        return _("intact (%(how)s), signature verified") % {"how": how}
    return "; ".join(parts)


# --- the signature over the recorded digests ------------------------------------------------------------

def check_signature(version: ModelVersion, artifacts: list[Artifact]) -> tuple[bool, str]:
    """Does the stored bundle verify with the appliance's key and vouch for exactly these digests?
    Reads the database and the key only, no model file."""
    if not version.signature:
        return False, _("the version was never signed")
    try:
        signed = signing.manifest_digests(signing.signed_manifest(version.signature))
    except InvalidSignature:
        return False, _("the signature does not verify with the appliance's model-signing key")
    except (ValueError, KeyError, TypeError) as exc:
        return False, _("the signature does not verify (%(error)s)") % {"error": str(exc)[:300]}
    single_file = signing.model_path(version, artifacts)[1]
    recorded = {signing.manifest_identifier(a.path, single_file): a.sha256 for a in artifacts}
    if signed == recorded:
        return True, ""
    differing = sorted(name for name in signed.keys() | recorded.keys() if signed.get(name) != recorded.get(name))
    return False, _("the signature does not vouch for the recorded hashes of %(files)s") % {
        "files": _names(differing)}


# --- what is on disk ------------------------------------------------------------------------------------

def _present_files(version: ModelVersion, artifacts: list[Artifact]) -> dict[str, Path] | None:
    """Every non-directory entry under the version's directory, by relative path (links and special files
    included: they are changes too), without opening any; None when the storage itself is gone."""
    root, single_file = signing.model_path(version, artifacts)
    if root is None:
        return None
    if single_file:
        return {root.name: root} if os.path.lexists(root) else {}
    if not root.is_dir():
        return None
    present: dict[str, Path] = {}
    pending = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # an unreadable directory: its recorded files show up as missing
        for entry in entries:
            if not prefix and entry.name in hashing.IGNORED_TOP_LEVEL:
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), f"{prefix}{entry.name}/"))
            else:
                present[prefix + entry.name] = Path(entry.path)
    return present


def _stat_differs(path: Path, artifact: Artifact) -> bool:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return True
    return (not stat.S_ISREG(info.st_mode) or info.st_size != artifact.size or info.st_mtime_ns != artifact.mtime_ns
            or info.st_ino != artifact.inode or artifact.ctime_ns is None or info.st_ctime_ns != artifact.ctime_ns)


def _rehash(paths: dict[str, Path], artifacts: dict[str, Artifact]) -> list[str]:
    """Names of the recorded, present files whose content is not the recorded one."""
    def differs(name: str) -> bool:
        path = paths[name]
        if path.is_symlink():
            return True
        try:
            digest = hashing.hash_file(path, name)
        except Exception:  # unreadable, not a regular file, changing under us: not what was signed
            return True
        return digest.sha256 != artifacts[name].sha256 or digest.size != artifacts[name].size

    names = sorted(paths)
    with ThreadPoolExecutor(max_workers=hashing.workers(len(names)), thread_name_prefix="model-verify") as pool:
        return [name for name, bad in zip(names, pool.map(differs, names), strict=True) if bad]


def _library_verifies(version: ModelVersion, artifacts: list[Artifact]) -> tuple[bool, str]:
    """model-signing's own verifier over the files on disk (it re-hashes every one)."""
    import model_signing

    target = signing.model_path(version, artifacts)[0]

    with tempfile.TemporaryDirectory(prefix="model-verify-") as scratch:
        bundle = Path(scratch) / "model.sig"
        bundle.write_text(version.signature)
        try:
            model_signing.verifying.Config().use_elliptic_key_verifier(
                public_key=signing.public_key_file()).verify(target, bundle)
        except (ValueError, OSError, InvalidSignature, KeyError) as exc:
            return False, str(exc)[:500]
    return True, ""


# --- verification ---------------------------------------------------------------------------------------

def verify(version: ModelVersion, *, full: bool = False, user=None, clear_reason: str | None = None) -> VerifyResult:
    """Quick or full verification, written on the version and recorded. `clear_reason`: only through
    clear_tampered (a full verification that, passing, lifts a tampered verdict)."""
    started = time.perf_counter()
    signing.ensure_key()
    artifacts = {a.path: a for a in version.artifacts.all()}
    signature_ok, signature_detail = check_signature(version, list(artifacts.values()))
    present = _present_files(version, list(artifacts.values())) or {}
    missing = sorted(name for name in artifacts if name not in present)
    added = sorted(name for name in present if name not in artifacts)
    on_disk = {name: present[name] for name in artifacts if name in present}
    before = {name: _stat_key(path) for name, path in on_disk.items()}
    refreshed: dict[str, tuple[int, int, int]] = {}
    library_refusal = ""
    unvouched: list[str] = []

    if not full:
        unvouched = sorted(name for name, path in on_disk.items() if _stat_differs(path, artifacts[name]))
        # What the stat cannot vouch for is decided by the content, never by a guess either way.
        full = bool(unvouched)
        changed = []
    if full:
        library_ok, library_detail = False, ""
        if signature_ok and not missing and not added:
            library_ok, library_detail = _library_verifies(version, list(artifacts.values()))
        after = {name: _stat_key(path) for name, path in on_disk.items()}
        if library_ok and after == before:
            # Every file's content is the signed one (and the signature vouches for the recorded digests).
            changed = []
            for name, key in after.items():
                artifact = artifacts[name]
                if key is not None and key[1:] != (artifact.mtime_ns, artifact.inode, artifact.ctime_ns):
                    refreshed[name] = key[1:]
        else:
            changed = _rehash(on_disk, artifacts)
            if library_detail and not changed:
                # model-signing refused what the second look found intact (a file changed back meanwhile, or
                # something only it checks): the verification does not pass on a doubt.
                library_refusal = _("model-signing's verifier refused the files: %(error)s") % {
                    "error": library_detail}

    ok = signature_ok and not (changed or missing or added or library_refusal) and bool(artifacts)
    state = (Verification.VERIFIED if ok else Verification.MISSING if missing or not artifacts
             else Verification.TAMPERED)
    result = VerifyResult(ok=ok, state=state, changed=changed, missing=missing, added=added,
                          signature_ok=signature_ok, full=full, detail=signature_detail)
    result.detail = library_refusal or describe(result)
    if not artifacts:
        result.detail = _("no files of this version on the appliance")
    result.seconds = round(time.perf_counter() - started, 6)
    _save(version, artifacts, result, refreshed, user, unvouched=unvouched, clear_reason=clear_reason)
    return result


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns


def _save(version: ModelVersion, artifacts: dict[str, Artifact], result: VerifyResult,
          refreshed: dict[str, tuple[int, int, int]], user, *, unvouched: list[str], clear_reason: str | None) -> None:
    """Write the result on the version and its artifacts and record it. A stored tampered verdict stays
    (the result says so and is not ok) unless this is clear_tampered's passing full verification."""
    found_ok = result.ok
    states = {name: Verification.VERIFIED for name in artifacts}
    states.update({name: Verification.TAMPERED for name in result.changed})
    states.update({name: Verification.MISSING for name in result.missing})
    details = {"model": version.model.name, "version": version.number, "mode": "full" if result.full else "quick",
               "files": len(artifacts), "changed": result.changed, "missing": result.missing,
               "added": result.added, "signature_ok": result.signature_ok, "seconds": result.seconds}
    if unvouched:
        details["quick_unvouched"] = unvouched  # the quick check's doubt that made this a full verification
    with transaction.atomic():
        stored = ModelVersion.objects.select_for_update().only("verification").get(pk=version.pk).verification
        clearing = clear_reason is not None and stored == Verification.TAMPERED and found_ok
        if stored == Verification.TAMPERED and not clearing:
            # Sticky: what this check found is recorded, the verdict is not lifted by it.
            this_check = result.detail
            result.ok, result.state = False, Verification.TAMPERED
            result.detail = _("tampered: the files were found changed before, and the verdict stands until an "
                              "Administrator clears it after a full verification passes (this check: "
                              "%(detail)s)") % {"detail": this_check}
            states = {name: Verification.TAMPERED if artifact.state == Verification.TAMPERED else states[name]
                      for name, artifact in artifacts.items()}
            refreshed = {}
            details["verdict_kept"] = Verification.TAMPERED
        for name, artifact in artifacts.items():
            fields = []
            if artifact.state != states[name]:
                artifact.state = states[name]
                fields.append("state")
            if name in refreshed:
                artifact.mtime_ns, artifact.inode, artifact.ctime_ns = refreshed[name]
                fields += ["mtime_ns", "inode", "ctime_ns"]
            if fields:
                artifact.save(update_fields=fields)
        version.verification = result.state
        version.verified_at = timezone.now()
        version.verified_full = result.full
        version.verification_detail = result.detail
        version.save(update_fields=["verification", "verified_at", "verified_full", "verification_detail",
                                    "updated"])
        if refreshed:
            details["baseline_refreshed"] = sorted(refreshed)
        audit.record("lifecycle.version.verify", target=version, actor=user, details=details,
                     outcome="success" if result.ok else "failure", reason="" if result.ok else result.detail)
        if not found_ok:
            audit.record("lifecycle.version.tampered", target=version, actor=user, details=details,
                         outcome="failure", reason=result.detail)
        if clearing:
            audit.record("lifecycle.version.tamper_clear", target=version, actor=user, reason=clear_reason,
                         details={"model": version.model.name, "version": version.number,
                                  "verification": "full", "files": len(artifacts)})


def clear_tampered(version: ModelVersion, *, user, reason: str) -> VerifyResult:
    """Lift a tampered verdict: an active Administrator, with a reason, and only when a full verification run
    now passes (the files are what was registered and signed again, e.g. restored from a backup). Refusals:
    Forbidden (not an Administrator), LifecycleError naming `reason`, Conflict (not tampered),
    IntegrityRefused (the full verification fails: the verdict stays, the failure is recorded)."""
    if user is None or not user.is_active or user.role != Role.ADMINISTRATOR:
        raise Forbidden(_("clearing a tampered verdict needs an Administrator"))
    if not isinstance(reason, str) or not reason.strip():
        raise LifecycleError(_("reason: say why the files can be trusted again"), "reason")
    if len(reason) > 2000 or any(ord(c) < 32 and c not in "\n\t" or ord(c) == 127 for c in reason):
        raise LifecycleError(_("reason: at most 2000 characters, no control characters"), "reason")
    version.refresh_from_db(fields=["verification"])
    if version.verification != Verification.TAMPERED:
        raise Conflict(_("version: %(version)s is %(state)s, not tampered; there is no verdict to clear") % {
            "version": version, "state": version.verification}, "version")
    result = verify(version, full=True, user=user, clear_reason=reason.strip())
    if not result.ok:
        raise IntegrityRefused(_("version: a full verification of %(version)s does not pass (%(detail)s); the "
                                 "tampered verdict stays") % {"version": version, "detail": result.detail},
                               "version")
    return result


def require_intact(version: ModelVersion, *, user=None, full: bool = False) -> VerifyResult:
    """Quick verification (`full`: the full re-hash, as a version's first deployment to a node asks);
    IntegrityRefused naming the files (field "version", its `result` the verification) when the version is
    not what was registered and signed. Call it outside the atomic block the refusal would roll back."""
    result = verify(version, full=full, user=user)
    if not result.ok:
        raise IntegrityRefused(_("version: %(version)s is not what was registered and signed (%(detail)s); "
                                 "it may not be deployed") % {"version": version, "detail": result.detail},
                               "version", result=result)
    return result


def verify_all(full: bool = True) -> dict:
    """Every version not archived, one after the other: {"verified": n, "failed": [{model, version, state,
    detail}]}. One version that cannot be checked does not stop the others."""
    verified, failed = 0, []
    versions = (ModelVersion.objects.exclude(stage=Stage.ARCHIVED).select_related("model")
                .order_by("model__name", "number"))
    for version in versions.iterator(chunk_size=200):
        try:
            result = verify(version, full=full)
        except Exception as exc:  # a broken row or key: report it, go on with the others
            logger.exception("verifying %s failed", version)
            failed.append({"model": version.model.name, "version": version.number, "state": "error",
                           "detail": str(exc)[:500]})
            continue
        verified += 1
        if not result.ok:
            failed.append({"model": version.model.name, "version": version.number, "state": result.state,
                           "detail": result.detail})
    return {"verified": verified, "failed": failed}
