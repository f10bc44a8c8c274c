"""The audit signing key: Ed25519, in a file outside the database (settings.AUDIT_SIGNING_KEY_FILE).

Someone who can rewrite the database cannot forge a checkpoint, a tombstone or an export manifest
without this file. The key id is the first 16 hex digits of SHA-256 over the raw 32-byte public key,
so anyone holding the public key computes the same id.

Verification helpers here need neither Django nor a database: the offline verifier uses them.
"""

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from appliance.core.files import create_once

ALGORITHM = "ed25519"


class SigningKeyError(RuntimeError):
    pass


def key_id_of(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_pem(public_key: Ed25519PublicKey) -> str:
    return public_key.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


def load_public_key_pem(data: bytes | str, where: str = "public key") -> Ed25519PublicKey:
    if isinstance(data, str):
        data = data.encode("ascii", "replace")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SigningKeyError(f"{where}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{where}: not an Ed25519 public key")
    return key


def verify_signature(public_key: Ed25519PublicKey, message: bytes, signature_hex: str) -> bool:
    try:
        public_key.verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def rotation_problem(statement: dict) -> str | None:
    """Why a key rotation statement does not hold (None when it does): both public keys must match
    their ids and both must have signed the statement."""
    from . import chain

    if not isinstance(statement, dict) or statement.get("type") != chain.KEY_ROTATION_TYPE:
        return "not a key rotation statement"
    try:
        message = chain.signed_statement(chain.unsigned_rotation(statement))
    except (TypeError, ValueError) as exc:
        return f"cannot be canonicalized ({exc})"
    for side in ("old", "new"):
        try:
            key = load_public_key_pem(statement.get(f"{side}_public_key") or "", f"{side} public key")
        except SigningKeyError as exc:
            return str(exc)
        if key_id_of(key) != statement.get(f"{side}_key_id"):
            return f"the {side} public key is not key {statement.get(f'{side}_key_id')!r}"
        signature = statement.get(f"{side}_signature")
        if not isinstance(signature, str) or not verify_signature(key, message, signature):
            return f"the {side} key's signature does not verify"
    return None


def trusted_keys(anchor: Ed25519PublicKey, rotations: list[dict]) -> dict[str, Ed25519PublicKey]:
    """The keys a verifier trusts, by id: the anchor (a key obtained independently), and every key
    a sound rotation statement links to a trusted key, in either direction. Statements that do not
    hold (see rotation_problem) link nothing."""
    trusted = {key_id_of(anchor): anchor}
    sound = [r for r in rotations if rotation_problem(r) is None]
    grew = True
    while grew:
        grew = False
        for rotation in sound:
            ids = (rotation["old_key_id"], rotation["new_key_id"])
            if (ids[0] in trusted) != (ids[1] in trusted):
                for side, key_id in zip(("old", "new"), ids, strict=True):
                    trusted.setdefault(key_id, load_public_key_pem(rotation[f"{side}_public_key"]))
                grew = True
    return trusted


def retirements(rotations: list[dict]) -> dict[str, tuple[int, str]]:
    """When each key was handed over, by id: (tree size, timestamp) of the sound rotation whose old
    key it is. A key is trusted only for the log up to its handover: a copy of it kept after
    `rotate-key` must not be able to sign a larger tree, or anything dated later."""
    retired: dict[str, tuple[int, str]] = {}
    for rotation in rotations:
        if rotation_problem(rotation) is not None:
            continue
        size, moment = rotation.get("tree_size"), rotation.get("timestamp")
        if type(size) is not int or not isinstance(moment, str):
            continue
        known = retired.get(rotation["old_key_id"])
        if known is None or (size, moment) < known:
            retired[rotation["old_key_id"]] = (size, moment)
    return retired


def statement_scope(statement: dict) -> tuple[int | None, str | None]:
    """The tree size a signed statement speaks for and the moment it names: a checkpoint's tree
    size, a tombstone's last sequence, an export manifest's tree size; its timestamp (a manifest's
    creation)."""
    from . import chain

    kind = statement.get("type")
    if kind == chain.CHECKPOINT_TYPE:
        size, moment = statement.get("tree_size"), statement.get("timestamp")
    elif kind == chain.TOMBSTONE_TYPE:
        size, moment = statement.get("last_sequence"), statement.get("timestamp")
    elif kind == chain.MANIFEST_TYPE:
        tree = statement.get("tree")
        size, moment = (tree.get("size") if isinstance(tree, dict) else None), statement.get("created")
    else:
        size, moment = None, statement.get("timestamp")
    return (size if type(size) is int else None), (moment if isinstance(moment, str) else None)


def retired_problem(statement: dict, retired: tuple[int, str] | None) -> str | None:
    """Why a statement cannot carry the signature of a key retired at `retired` (None if it can)."""
    if retired is None:
        return None
    size, moment = statement_scope(statement)
    handover_size, handover_moment = retired
    if size is None or moment is None:
        return f"it names no tree size or time, and its key was handed over after #{handover_size}"
    if size > handover_size:
        return (f"its key was handed over after #{handover_size} ({handover_moment}) and signs nothing past "
                f"that: this statement speaks for #{size}")
    if moment > handover_moment:
        return (f"its key was handed over at {handover_moment} (after #{handover_size}) and signs nothing "
                f"later: this statement is dated {moment}")
    return None


@dataclass(frozen=True)
class SigningKey:
    private_key: Ed25519PrivateKey
    key_id: str
    path: Path

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    def public_pem(self) -> str:
        return public_key_pem(self.public_key)

    def sign(self, message: bytes) -> str:
        return self.private_key.sign(message).hex()


_cache: dict[tuple[str, int, int], SigningKey] = {}
_lock = threading.Lock()


def private_pem(private_key: Ed25519PrivateKey) -> bytes:
    """The private key as the key file holds it (unencrypted PKCS#8 PEM, kept mode 0600)."""
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())


def _create(path: Path) -> None:
    """Write a new key so that no reader ever sees a half-written file and two processes starting
    at once end up with the same key: write a temporary file, then link it into place."""
    create_once(path, private_pem(Ed25519PrivateKey.generate()))


def load_signing_key(path: Path | str | None = None) -> SigningKey:
    """The signing key, created on first use (mode 0600)."""
    if path is None:
        from django.conf import settings

        path = settings.AUDIT_SIGNING_KEY_FILE
    path = Path(path)
    with _lock:
        if not path.exists():
            _create(path)
        stat = path.stat()
        cache_key = (str(path), stat.st_mtime_ns, stat.st_ino)
        cached = _cache.get(cache_key)
        if cached is not None:
            return cached
        if stat.st_mode & 0o077:
            raise SigningKeyError(f"{path}: the audit signing key is readable by others "
                                  f"(mode {stat.st_mode & 0o777:o}); chmod 600 it")
        try:
            private_key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"{path}: not an unencrypted PEM private key ({exc})") from None
        if not isinstance(private_key, Ed25519PrivateKey):
            raise SigningKeyError(f"{path}: not an Ed25519 private key")
        key = SigningKey(private_key, key_id_of(private_key.public_key()), path)
        _cache.clear()
        _cache[cache_key] = key
        return key


# -- the published key list --------------------------------------------------------------------------
#
# A bundle speaks for itself: a copy of a handed-over key can make one that leaves the handover out, and
# a verifier holding only that key's public half then has nothing that says it was retired. The key list
# is what the appliance publishes to its auditors (`audit keys export`), outside any bundle: every key it
# has signed with, oldest first, each with its validity interval. A key's end is its handover statement
# (kept in the next entry), which the key's successor signed with it; the whole list is signed by its
# newest key. A verifier given the list (`audit verify --key-list`) refuses any statement signed by a key
# past its end, whatever the bundle holds.

KEY_LIST_TYPE = "appliance-audit-key-list/1"


def key_list_statement(current_public_pem: str, rotations: list[dict], created: str) -> dict:
    """The unsigned key list of a log whose handovers are `rotations` (signed statements, oldest first)
    and whose signing key is now `current_public_pem`."""
    entries: list[dict] = []
    for rotation in rotations:
        if not entries:
            entries.append({"key_id": rotation["old_key_id"], "public_key": rotation["old_public_key"],
                            "valid_from": None})
        end = {"tree_size": rotation["tree_size"], "timestamp": rotation["timestamp"]}
        entries[-1]["valid_until"] = end
        entries.append({"key_id": rotation["new_key_id"], "public_key": rotation["new_public_key"],
                        "valid_from": end, "handover": rotation})
    current = load_public_key_pem(current_public_pem)
    if not entries:
        entries.append({"key_id": key_id_of(current), "public_key": current_public_pem, "valid_from": None})
    entries[-1]["valid_until"] = None
    return {"type": KEY_LIST_TYPE, "created": created, "key_id": key_id_of(current), "keys": entries}


@dataclass(frozen=True)
class KeyList:
    keys: dict  # key id -> public key, oldest first
    retired: dict  # key id -> (tree size, timestamp) of its handover
    newest: str  # the id of the key still in use when the list was made
    created: str


def read_key_list(data: bytes | str, where: str = "key list") -> KeyList:
    """The keys and their ends from a published key list; SigningKeyError naming the entry and field
    when the list does not hold together (a handover that does not verify, entries out of order, a
    signature that is not its newest key's)."""
    import json

    from . import chain

    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SigningKeyError(f"{where}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("type") != KEY_LIST_TYPE:
        raise SigningKeyError(f"{where}: type: not an audit key list ({KEY_LIST_TYPE})")
    entries = document.get("keys")
    if not isinstance(entries, list) or not entries or not all(isinstance(entry, dict) for entry in entries):
        raise SigningKeyError(f"{where}: keys: expected a list of key entries")
    keys: dict = {}
    retired: dict = {}
    for index, entry in enumerate(entries):
        at = f"{where}: keys[{index}]"
        key = load_public_key_pem(entry.get("public_key") or "", f"{at}.public_key")
        if key_id_of(key) != entry.get("key_id"):
            raise SigningKeyError(f"{at}.key_id: {str(entry.get('key_id'))[:40]!r} is not the id of its public key")
        if entry["key_id"] in keys:
            raise SigningKeyError(f"{at}.key_id: key {entry['key_id']} is listed twice")
        if index == 0:
            if entry.get("valid_from") is not None or "handover" in entry:
                raise SigningKeyError(f"{at}: the first key has no predecessor (valid_from null, no handover)")
        else:
            handover = entry.get("handover")
            problem = rotation_problem(handover) if isinstance(handover, dict) else "missing"
            if problem:
                raise SigningKeyError(f"{at}.handover: {problem}")
            previous = entries[index - 1]
            if (handover["old_key_id"], handover["new_key_id"]) != (previous["key_id"], entry["key_id"]):
                raise SigningKeyError(f"{at}.handover: hands key {handover['old_key_id']} over to "
                                      f"{handover['new_key_id']}, not {previous['key_id']} to {entry['key_id']}")
            end = {"tree_size": handover["tree_size"], "timestamp": handover["timestamp"]}
            if previous.get("valid_until") != end or entry.get("valid_from") != end:
                raise SigningKeyError(f"{at}.valid_from: the interval does not match its handover (after "
                                      f"#{handover['tree_size']} at {handover['timestamp']})")
            retired[previous["key_id"]] = (handover["tree_size"], handover["timestamp"])
        keys[entry["key_id"]] = key
    newest = entries[-1]
    if newest.get("valid_until") is not None:
        raise SigningKeyError(f"{where}: keys[{len(entries) - 1}].valid_until: the newest key has no end yet (null)")
    if document.get("key_id") != newest["key_id"]:
        raise SigningKeyError(f"{where}: key_id: the list must be signed by its newest key {newest['key_id']}")
    signature = document.get("signature")
    unsigned = {name: value for name, value in document.items() if name != "signature"}
    if not isinstance(signature, str) or not verify_signature(keys[newest["key_id"]], chain.signed_statement(unsigned),
                                                                signature):
        raise SigningKeyError(f"{where}: signature: does not verify with the newest key {newest['key_id']}")
    created = document.get("created")
    return KeyList(keys, retired, newest["key_id"], created if isinstance(created, str) else "")
