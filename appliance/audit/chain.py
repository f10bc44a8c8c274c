"""The hash chain: what a record's hash covers, computed the same way when writing and verifying.

A record's hash is SHA-256 over the RFC 8785 canonical JSON of its payload, and the payload
includes the previous record's hash. Verifying needs nothing but this module and the records.
"""

import hashlib
from datetime import UTC, datetime

import rfc8785

GENESIS_HASH = "0" * 64

# The payload's keys, in the order exports write them (canonical JSON sorts them anyway).
PAYLOAD_FIELDS = (
    "sequence", "uuid", "timestamp", "event", "category", "severity", "actor", "channel",
    "source_address", "user_agent", "request_id", "action", "target", "outcome", "reason",
    "details", "prev_hash",
)


def format_timestamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def canonical(payload: dict) -> bytes:
    return rfc8785.dumps({key: payload[key] for key in PAYLOAD_FIELDS})


def record_hash(payload: dict) -> str:
    return hashlib.sha256(canonical(payload)).hexdigest()
