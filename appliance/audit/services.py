"""Appending to the audit log. One function, `record`, used by every capture path.

`record` is the hot path of the whole suite (every change of every model goes through it), so it
talks to the database with three plain statements: lock the chain head, insert the record, move
the head. The Merkle frontier kept in the head makes a signed checkpoint cost O(log n), never a
pass over the log.
"""

import hashlib
import json
import uuid
from datetime import UTC, datetime

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, router, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from appliance.core import context

from . import catalogue, chain, merkle


class _Models:
    """The audit models, looked up at call time: models.py imports tracking, which imports this
    module, so importing models here at load time would be circular."""

    def __getattr__(self, name):
        from . import models

        return getattr(models, name)


audit_models = _Models()

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
           outcome: str = "success", reason: str = "", details: dict | None = None, actor=None):
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

    entry = audit_models.AuditRecord(
        uuid=uuid.uuid4(), timestamp=timezone.now(), event=event, category=event_type.category,
        severity=event_type.severity, actor_id=actor_id, actor_username=actor_username,
        actor_roles=actor_roles, channel=ctx.channel, source_address=ctx.source_address,
        user_agent=ctx.user_agent, request_id=ctx.request_id, action=event_type.action,
        target_type=target_type, target_id=str(target_id), target_name=str(target_name)[:255],
        outcome=outcome, reason=str(reason)[:4000], details=to_json(redact(details or {})),
    )
    append(entry)
    return entry


def _as_datetime(value):
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)
    parsed = parse_datetime(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _as_json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


class _Statements:
    """SQL and field adapters of the hot path, built once per database vendor."""

    def __init__(self, connection):
        record_model, head_model = audit_models.AuditRecord, audit_models.ChainHead
        quote = connection.ops.quote_name
        self.record_fields = [f for f in record_model._meta.concrete_fields]
        columns = ", ".join(quote(f.column) for f in self.record_fields)
        marks = ", ".join(["%s"] * len(self.record_fields))
        self.insert = f"INSERT INTO {quote(record_model._meta.db_table)} ({columns}) VALUES ({marks})"
        head_table = quote(head_model._meta.db_table)
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self.select_head = (f"SELECT sequence, hash, merkle_frontier, last_checkpoint_sequence, last_checkpoint_at "
                            f"FROM {head_table} WHERE id = 1{lock}")
        self.update_head = (f"UPDATE {head_table} SET sequence = %s, hash = %s, merkle_frontier = %s, "
                            f"last_checkpoint_sequence = %s, last_checkpoint_at = %s WHERE id = 1")
        self.insert_head = (f"INSERT INTO {head_table} (id, sequence, hash, merkle_frontier, last_checkpoint_sequence, "
                            f"last_checkpoint_at) VALUES (1, 0, %s, %s, 0, NULL) ON CONFLICT (id) DO NOTHING")
        # On PostgreSQL the record and the head move in one statement: one round trip less per record.
        self.combined = connection.vendor == "postgresql"
        if self.combined:
            self.insert_and_move_head = (f"WITH inserted AS ({self.insert} RETURNING 1) {self.update_head}")
        self.frontier_field = head_model._meta.get_field("merkle_frontier")
        self.datetime_field = head_model._meta.get_field("last_checkpoint_at")


_statements: dict[str, _Statements] = {}


def _statements_for(connection) -> _Statements:
    statements = _statements.get(connection.alias)
    if statements is None:
        statements = _statements[connection.alias] = _Statements(connection)
    return statements


def _checkpoint_due(sequence: int, last_sequence: int, last_at, now) -> bool:
    if sequence - last_sequence >= settings.AUDIT_CHECKPOINT_EVERY_RECORDS:
        return True
    return last_at is None or (now - last_at).total_seconds() >= settings.AUDIT_CHECKPOINT_EVERY_SECONDS


def append(entry) -> None:
    """Chain and store a prepared record (sequence, prev_hash and hash are assigned here)."""
    using = router.db_for_write(audit_models.AuditRecord)
    connection = connections[using]
    sql = _statements_for(connection)
    # Inside the caller's transaction no savepoint is needed: a failed append fails that transaction.
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        # The head row is the chain's one lock: writers queue here, so sequence numbers stay
        # gapless and every record links to the one written just before it.
        cursor.execute(sql.select_head)
        row = cursor.fetchone()
        if row is None:
            row = _create_head(cursor, sql)
        sequence, prev_hash, frontier_json, checkpoint_sequence, checkpoint_at = row
        # Stamped under the lock, so time never goes backwards along the chain and a time window
        # of the log is one contiguous run of sequence numbers.
        entry.timestamp = timezone.now()
        entry.sequence = sequence + 1
        entry.prev_hash = prev_hash
        payload_bytes = chain.canonical(entry.payload())
        digest = hashlib.sha256(payload_bytes).digest()
        entry.hash = digest.hex()
        record_values = [f.get_db_prep_save(getattr(entry, f.attname), connection) for f in sql.record_fields]
        frontier = merkle.frontier_from_json(_as_json(frontier_json))
        merkle.frontier_extend(frontier, (merkle.leaf_hash(digest),))
        checkpoint_at = _as_datetime(checkpoint_at)
        if _checkpoint_due(entry.sequence, checkpoint_sequence, checkpoint_at, entry.timestamp):
            from .checkpoints import sign_checkpoint

            sign_checkpoint(entry.sequence, frontier, entry.hash, entry.timestamp, using=using)
            checkpoint_sequence, checkpoint_at = entry.sequence, entry.timestamp
        head_values = [entry.sequence, entry.hash,
                       sql.frontier_field.get_db_prep_save(merkle.frontier_to_json(frontier), connection),
                       checkpoint_sequence, sql.datetime_field.get_db_prep_save(checkpoint_at, connection)]
        if sql.combined:
            cursor.execute(sql.insert_and_move_head, record_values + head_values)
        else:
            cursor.execute(sql.insert, record_values)
            cursor.execute(sql.update_head, head_values)
    entry._state.adding = False
    entry._state.db = using


def _create_head(cursor, sql: _Statements):
    """The head row is made by the migration; it is only missing from a database emptied wholesale
    (a test flush). An empty log may start a new head; a log with records and no head may not.
    Writers racing here all insert-or-ignore, then queue on the one row that exists."""
    connection = cursor.db
    cursor.execute(sql.insert_head, [chain.GENESIS_HASH, sql.frontier_field.get_db_prep_save([], connection)])
    cursor.execute(sql.select_head)
    row = cursor.fetchone()
    # Under the head's lock: a fresh head (sequence 0) over existing records means the head was lost.
    if row[0] == 0 and (audit_models.AuditRecord.objects.exists() or audit_models.AuditTombstone.objects.exists()):
        raise RuntimeError("the audit chain head is missing while records exist: run `manage.py audit verify "
                           "--database` and restore the head from the last record")
    return row
