import hashlib
import json
import os
import stat

import pytest
import rfc8785

from appliance.audit import chain, signing

SAMPLES = [
    {"a": 1, "b": [True, False, None], "c": {"z": "", "y": "x"}},
    {"text": "quote \" backslash \\ slash / tab \t newline \n cr \r bell \x07 nul \x00 del \x7f"},
    {"unicode": "é ü ж 中文 😀 \u2028 \u2029 \ufeff", "é": "non-ASCII key"},
    {"big": 2**53 - 1, "negative": -(2**53 - 1), "zero": 0},
    {"float": 1.5, "exp": 1e21, "tiny": 5e-324, "int_as_float": 2.0},
    {"nested": [{"b": 1, "a": [1, 2, {"d": "e", "c": None}]}], "": "empty key"},
    {"\U0001f600": 1, "\ufb01": 2},  # RFC 8785 sorts these by UTF-16 code units, not code points
]


@pytest.mark.parametrize("value", SAMPLES)
def test_canonical_json_is_rfc8785(value):
    assert chain.canonical_json(value) == rfc8785.dumps(value)


def payload_with(details, **fields):
    payload = {key: "" for key in chain.PAYLOAD_FIELDS}
    payload.update(sequence=7, actor={"id": 3, "username": "u", "roles": ["administrator"]}, details=details,
                   target={"type": "t", "id": "1", "name": "n"}, prev_hash=chain.GENESIS_HASH)
    payload.update(fields)
    return payload


@pytest.mark.parametrize("details", SAMPLES)
def test_a_payload_is_canonical_whatever_its_details_hold(details):
    payload = payload_with(details)
    assert chain.canonical_payload(payload) == chain.canonical(payload) == rfc8785.dumps(payload)


@pytest.mark.parametrize("fields", [
    {"sequence": -1}, {"actor": {"id": 2.5, "username": "u", "roles": []}},
    {"actor": {"id": 1, "username": "u", "roles": [1.5]}}, {"reason": 1e21},
    {"target": {"type": "t", "id": 1.0, "name": "n"}}, {"user_agent": "é ж 😀 \u2028"}, {"source_address": None},
])
def test_a_payload_with_unusual_fixed_fields_is_still_canonical(fields):
    payload = payload_with({"k": "v"}, **fields)
    assert chain.canonical_payload(payload) == rfc8785.dumps(payload)


def test_export_line_is_itself_canonical_json_with_the_payload_at_a_fixed_offset():
    payload = {key: "" for key in chain.PAYLOAD_FIELDS}
    payload.update(sequence=7, actor={"id": None, "username": "u", "roles": []}, details={"k": "v"},
                   target={"type": "t", "id": "1", "name": "n"}, prev_hash=chain.GENESIS_HASH)
    payload_bytes = chain.canonical(payload)
    digest = hashlib.sha256(payload_bytes).hexdigest()
    line = chain.export_line(payload_bytes, digest)
    assert line == rfc8785.dumps({"hash": digest, "record": payload}) + b"\n"
    assert line[chain.PAYLOAD_OFFSET:-2] == payload_bytes
    assert json.loads(line)["record"] == payload


def test_signing_key_is_created_once_private_and_identified_by_its_public_key(tmp_path):
    path = tmp_path / "keys" / "audit.key"
    key = signing.load_signing_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = signing.load_signing_key(path)
    assert again.key_id == key.key_id and len(key.key_id) == 16
    public = signing.load_public_key_pem(key.public_pem())
    raw = public.public_bytes(signing.serialization.Encoding.Raw, signing.serialization.PublicFormat.Raw)
    assert key.key_id == hashlib.sha256(raw).hexdigest()[:16]
    signature = key.sign(b"statement")
    assert signing.verify_signature(public, b"statement", signature)
    assert not signing.verify_signature(public, b"statement!", signature)


def test_a_signing_key_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "audit.key"
    signing.load_signing_key(path)
    os.chmod(path, 0o644)
    os.utime(path, ns=(1, 1))  # a different mtime: the cached key is not reused
    with pytest.raises(signing.SigningKeyError, match="chmod 600"):
        signing.load_signing_key(path)
