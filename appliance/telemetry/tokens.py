"""The ingest tokens of the nodes' collectors: one per node, issued once by the monitoring stage.

A token is what a collector writes with (contract: `Authorization: Token <t>`); the appliance keeps it
encrypted (to render it to its node again on a later run, so that a re-run changes nothing) and checks a
write by its SHA-256 digest. It never appears in an audit record, an event or a log: the records name the
node and the digest's first characters only.
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from appliance import audit
from appliance.inventory.models import Node

from .models import NodeCollector

TOKEN_BYTES = 32


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def collector_token(node: Node) -> str:
    """The node's ingest token: issued (and audited) on the first call, the same one on every later call."""
    with transaction.atomic():
        existing = NodeCollector.objects.select_for_update().filter(node=node).first()
        if existing is not None:
            return existing.token
        token = secrets.token_urlsafe(TOKEN_BYTES)
        collector = NodeCollector.objects.create(node=node, token=token, token_digest=digest(token),
                                                 issued_at=timezone.now())
        audit.record("telemetry.collector.register", target=node,
                     details={"appliance": node.appliance.name, "digest_prefix": collector.token_digest[:8]})
    return token


def revoke(node: Node) -> bool:
    """Forget the node's token (its collector can no longer write); False when it had none. The next
    monitoring stage issues a new one."""
    with transaction.atomic():
        collector = NodeCollector.objects.select_for_update().filter(node=node).first()
        if collector is None:
            return False
        prefix = collector.token_digest[:8]
        collector.delete()
        audit.record("telemetry.collector.revoke", target=node,
                     details={"appliance": node.appliance.name, "digest_prefix": prefix})
    return True
