"""Appending to the audit log. One function, `record`, used by every capture path."""

import json
import uuid

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from appliance.core import context

from . import catalogue, chain, merkle
from .models import AuditRecord, ChainHead

REDACTED = "[redacted]"
SECRET_KEYS = ("password", "passwd", "secret", "token", "private_key", "api_key", "credential")


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in SECRET_KEYS)


def redact(value):
    """Masks the values of secret-looking keys anywhere in a JSON-like structure."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def to_json(value):
    """JSON-safe copy (datetimes, decimals, UUIDs as strings; floats stay numbers)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def describe_target(target) -> tuple[str, str, str]:
    meta = getattr(target, "_meta", None)
    if meta is None:
        raise TypeError("target must be a model instance; pass target_type/target_id otherwise")
    return meta.label_lower, str(target.pk or ""), str(target)[:255]


def record(event: str, *, target=None, target_type: str = "", target_id: str = "", target_name: str = "",
           outcome: str = "success", reason: str = "", details: dict | None = None, actor=None) -> AuditRecord:
    """Append one record. Inside the caller's transaction, if any: no change without its record,
    no record of a change that rolled back."""
    event_type = catalogue.get(event)
    ctx = context.current()
    if actor is not None:
        actor_id, actor_username, actor_roles = actor.pk, actor.get_username(), [getattr(actor, "role", "") or ""]
    else:
        actor_id, actor_username, actor_roles = ctx.actor_id, ctx.actor_username, list(ctx.actor_roles)
    if not actor_username and ctx.channel in ("cli", "system"):
        actor_username = context.os_user()
    if target is not None:
        target_type, target_id, target_name = describe_target(target)

    entry = AuditRecord(
        uuid=uuid.uuid4(), timestamp=timezone.now(), event=event, category=event_type.category,
        severity=event_type.severity, actor_id=actor_id, actor_username=actor_username,
        actor_roles=actor_roles, channel=ctx.channel, source_address=ctx.source_address,
        user_agent=ctx.user_agent, request_id=ctx.request_id, action=event_type.action,
        target_type=target_type, target_id=str(target_id), target_name=str(target_name)[:255],
        outcome=outcome, reason=str(reason)[:4000], details=to_json(redact(details or {})),
    )
    with transaction.atomic():
        head = ChainHead.objects.select_for_update().get(pk=1)
        entry.sequence = head.sequence + 1
        entry.prev_hash = head.hash
        payload = entry.payload()
        entry.hash = chain.record_hash(payload)
        entry.save(force_insert=True)
        frontier = merkle.frontier_append(merkle.frontier_from_json(head.merkle_frontier),
                                          merkle.leaf_hash(chain.canonical(payload)))
        head.sequence, head.hash = entry.sequence, entry.hash
        head.merkle_frontier = merkle.frontier_to_json(frontier)
        head.save(update_fields=["sequence", "hash", "merkle_frontier"])
    return entry
