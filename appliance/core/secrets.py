"""Encryption of secrets at rest (BMC passwords, tokens) with a key file outside the database."""

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from .files import create_once

PREFIX = "enc:v1:"
MASK = "********"


@lru_cache(maxsize=1)
def _fernet() -> MultiFernet:
    path = settings.SECRETS_KEY_FILE
    create_once(path, Fernet.generate_key() + b"\n")
    # One key a line, newest first: rotation adds a line on top and re-encrypts at leisure.
    keys = [line.strip() for line in path.read_bytes().splitlines() if line.strip()]
    return MultiFernet([Fernet(k) for k in keys])


def encrypt(plaintext: str) -> str:
    if plaintext == "":
        return ""
    return PREFIX + _fernet().encrypt(plaintext.encode()).decode()


def decrypt(stored: str) -> str:
    if not stored:
        return ""
    if not stored.startswith(PREFIX):
        raise ValueError("stored secret is not encrypted")
    try:
        return _fernet().decrypt(stored[len(PREFIX):].encode()).decode()
    except InvalidToken as exc:
        raise ValueError("secret cannot be decrypted with the configured key file") from exc
