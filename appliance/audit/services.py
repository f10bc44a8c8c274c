"""Appending to the audit log. One function, `record`, used by every capture path.

`record` is the hot path of the whole suite (every change of every model goes through it), so it
talks to the database with one statement per record in the common case: move the chain head from
the tip the writer knows to the new record, and insert the record if (and only if) the head moved.
A signed checkpoint (every N records or T seconds) folds the records since the previous one into
the Merkle frontier: amortised, a constant cost per record, never a pass over the log.
"""

import functools
import hashlib
import json
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, router, transaction
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime

from appliance.core import context, resources

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
# A language model's tokens, not credentials: the sizing advisor's kv_bytes_per_token, tokens_per_s_ceiling.
MODEL_TOKEN_KEYS = ("per_token", "tokens_per_")


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if any(marker in lowered for marker in MODEL_TOKEN_KEYS) and not any(
            marker in lowered for marker in SECRET_KEYS if marker != "token"):
        return False
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


_JSON_LEAVES = frozenset((str, int, bool, type(None)))


def _is_plain_json(value) -> bool:
    """True when `value` holds only what JSON holds as it is (dicts with string keys, lists,
    strings, integers, booleans, None): then it needs no JSON-safe copy."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _JSON_LEAVES:
            continue
        if kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    return False
                stack.append(sub)
        elif kind is list:
            stack.extend(item)
        else:
            return False  # floats too: to_json decides how they are written
    return True


def clean_details(details) -> dict:
    """The details as the log keeps them: secrets masked, JSON-safe."""
    value = redact(details or {})
    return value if _is_plain_json(value) else to_json(value)


def describe_target(target) -> tuple[str, str, str]:
    meta = getattr(target, "_meta", None)
    if meta is None:
        raise TypeError("target must be a model instance; pass target_type/target_id otherwise")
    return meta.label_lower, str(target.pk or ""), str(target)[:255]


def record(event: str, *, target=None, target_type: str = "", target_id: str = "", target_name: str = "",
           outcome: str = "success", reason: str = "", details: dict | None = None, actor=None):
    """Append one record. Inside the caller's transaction, if any: no change without its record,
    no record of a change that rolled back.

    The log is English whoever reads the portal: during a request in another language, whatever is
    translated lazily (a model's name that shows a choice label, a refusal's message, a label in the
    details) is read in the default language."""
    arguments = {"target": target, "target_type": target_type, "target_id": target_id, "target_name": target_name,
                 "outcome": outcome, "reason": reason, "details": details, "actor": actor}
    if translation.get_language() in (None, settings.LANGUAGE_CODE):
        return _record(event, **arguments)
    with translation.override(settings.LANGUAGE_CODE):
        return _record(event, **arguments)


def _record(event: str, *, target, target_type: str, target_id: str, target_name: str, outcome: str, reason: str,
            details: dict | None, actor):
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
        outcome=outcome, reason=str(reason)[:4000], details=clean_details(details),
    )
    append(entry)
    return entry


def _as_datetime(value):
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)
    parsed = parse_datetime(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class _Statements:
    """SQL and field adapters of the hot path, built once per database connection alias."""

    def __init__(self, connection):
        record_model, head_model = audit_models.AuditRecord, audit_models.ChainHead
        quote = connection.ops.quote_name
        self.record_fields = [f for f in record_model._meta.concrete_fields]
        columns = ", ".join(quote(f.column) for f in self.record_fields)
        marks = ", ".join(["%s"] * len(self.record_fields))
        record_table, head_table = quote(record_model._meta.db_table), quote(head_model._meta.db_table)
        self.insert = f"INSERT INTO {record_table} ({columns}) VALUES ({marks})"
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        checkpoint_table = quote(audit_models.AuditCheckpoint._meta.db_table)
        # The cadence comes from the last checkpoint itself (an append-only, signed row), not from
        # anything stored in the head.
        self.select_head = (f"SELECT sequence, hash, "
                            f"(SELECT coalesce(max(tree_size), 0) FROM {checkpoint_table}), "
                            f"(SELECT timestamp FROM {checkpoint_table} ORDER BY tree_size DESC LIMIT 1) "
                            f"FROM {head_table} WHERE id = 1{lock}")
        # Compare and swap: the head moves only if it still names the record this one chains to.
        self.move_head = (f"UPDATE {head_table} SET sequence = %s, hash = %s "
                          f"WHERE id = 1 AND sequence = %s AND hash = %s")
        self.insert_head = f"INSERT INTO {head_table} (id, sequence, hash) VALUES (1, 0, %s) ON CONFLICT (id) DO NOTHING"
        # On PostgreSQL the head moves and the record goes in with one statement, and the insert
        # happens only if the head moved: one round trip per record.
        self.combined = connection.vendor == "postgresql"
        self.copy = f"COPY {record_table} ({columns}) FROM STDIN" if self.combined else None
        if self.combined:
            self.move_head_and_insert = (f"WITH moved AS ({self.move_head} RETURNING 1) "
                                         f"INSERT INTO {record_table} ({columns}) SELECT {marks} FROM moved")
        else:
            # Elsewhere the record goes in first, on condition that the head still names the record
            # it chains to (the head's trigger wants the record there before the head moves onto it).
            self.insert_if_head = (f"INSERT INTO {record_table} ({columns}) SELECT {marks} WHERE EXISTS "
                                   f"(SELECT 1 FROM {head_table} WHERE id = 1 AND sequence = %s AND hash = %s)")
        # Only these fields need adapting for the database; the others go as they are.
        self.columns = [(f.attname, f.get_db_prep_save if f.get_internal_type() in ("UUIDField", "DateTimeField",
                                                                                   "JSONField") else None)
                        for f in self.record_fields]

    def record_values(self, entry, connection) -> list:
        values = entry.__dict__
        return [values[name] if prepare is None else prepare(values[name], connection)
                for name, prepare in self.columns]


_statements: dict[str, _Statements] = {}


def _statements_for(connection) -> _Statements:
    statements = _statements.get(connection.alias)
    if statements is None:
        statements = _statements[connection.alias] = _Statements(connection)
    return statements


class _Tip:
    """What a connection last knew of the chain's tip: the record to chain to and when the last
    checkpoint was made. A guess, never trusted: the head only moves if it still matches."""

    __slots__ = ("sequence", "hash", "checkpoint_sequence", "checkpoint_at", "contended")

    def __init__(self, sequence, hash_hex, checkpoint_sequence, checkpoint_at, contended=False):
        self.sequence, self.hash = sequence, hash_hex
        self.checkpoint_sequence, self.checkpoint_at = checkpoint_sequence, _as_datetime(checkpoint_at)
        self.contended = contended  # other writers moved the head since this connection's last append


_TIP_ATTRIBUTE = "_audit_chain_tip"


def _checkpoint_due(sequence: int, last_sequence: int, last_at, now) -> bool:
    if sequence - last_sequence >= settings.AUDIT_CHECKPOINT_EVERY_RECORDS:
        return True
    return last_at is None or (now - last_at).total_seconds() >= settings.AUDIT_CHECKPOINT_EVERY_SECONDS


def append(entry) -> None:
    """Chain and store a prepared record (sequence, prev_hash and hash are assigned here).

    The writer chains to the tip its connection last saw and moves the head from that tip to the
    new record in the statement that inserts it. If the head has moved meanwhile (another writer,
    a rolled-back transaction), nothing is written: the writer locks the head, reads the real tip
    and chains again. A writer appending several records in one transaction therefore costs one
    round trip per record, and concurrent writers still form one strictly linear chain: the head's
    row lock, taken by the compare-and-swap itself, queues them.
    """
    using = router.db_for_write(audit_models.AuditRecord)
    connection = connections[using]
    pending = getattr(connection, _BATCH_ATTRIBUTE, None)
    if pending is not None:
        pending.add(entry)
        return
    sql = _statements_for(connection)
    # Inside the caller's transaction no savepoint is needed: a failed append fails that transaction.
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        guess = getattr(connection, _TIP_ATTRIBUTE, None)
        # A writer that found the head moved by others last time locks it first this time: under
        # contention a guess is mostly stale, and a failed compare-and-swap costs a wait for the
        # lock and a statement. It guesses again once the head it locks is where it left it.
        tip = guess if guess is not None and not guess.contended else None
        missed = False
        for _attempt in range(3):
            if tip is None:
                tip = _locked_tip(cursor, sql)
                tip.contended = missed or (guess is not None and (tip.sequence, tip.hash) != (guess.sequence, guess.hash))
            # Stamped just before the head moves: a writer whose guess was stale stamps again after
            # waiting, so time never goes backwards along the chain and a time window of the log is
            # one contiguous run of sequence numbers.
            entry.timestamp = timezone.now()
            entry.sequence = tip.sequence + 1
            entry.prev_hash = tip.hash
            digest = hashlib.sha256(chain.canonical_payload(entry.payload())).digest()
            entry.hash = digest.hex()
            head_move = [entry.sequence, entry.hash, tip.sequence, tip.hash]
            record_values = sql.record_values(entry, connection)
            if sql.combined:
                cursor.execute(sql.move_head_and_insert, head_move + record_values)
                moved = cursor.rowcount == 1
            else:
                cursor.execute(sql.insert_if_head, record_values + head_move[2:])
                moved = cursor.rowcount == 1
                if moved:
                    cursor.execute(sql.move_head, head_move)
                    if cursor.rowcount != 1:
                        raise RuntimeError(f"the audit chain head moved under its own lock: run `{resources.program()} "
                                           "audit verify --database`")
            if moved:
                break
            tip, missed = None, True
        else:
            raise RuntimeError(f"the audit chain head did not move under its own lock: run `{resources.program()} audit verify "
                               "--database`")
        checkpoint_sequence, checkpoint_at = tip.checkpoint_sequence, tip.checkpoint_at
        if _checkpoint_due(entry.sequence, checkpoint_sequence, checkpoint_at, entry.timestamp):
            from .checkpoints import checkpoint_tip

            checkpoint_tip(entry.sequence, entry.hash, entry.timestamp, using=using)
            checkpoint_sequence, checkpoint_at = entry.sequence, entry.timestamp
        setattr(connection, _TIP_ATTRIBUTE, _Tip(entry.sequence, entry.hash, checkpoint_sequence, checkpoint_at,
                                                 contended=tip.contended))
    entry._state.adding = False
    entry._state.db = using


class _Pending:
    """Records made inside `batch()`, in order, each with the marker that tells whether the
    savepoint it was made in still stands when the batch is written."""

    def __init__(self, using: str):
        self.using, self.entries = using, []

    def add(self, entry) -> None:
        # A callback registered now is dropped by Django if a savepoint active now rolls back:
        # its presence at flush time says the change this record describes is still there.
        def marker():
            pass

        transaction.on_commit(marker, using=self.using)
        self.entries.append((entry, marker))

    def standing(self, connection) -> list:
        live = {id(callback) for _savepoints, callback, *_robust in connection.run_on_commit}
        entries = [entry for entry, marker in self.entries if id(marker) in live]
        self.entries.clear()
        return entries


_BATCH_ATTRIBUTE = "_audit_pending_batch"


@contextmanager
def batch(using: str | None = None):
    """Chain and write the records made inside the block together, when it ends, in its
    transaction (the block is one: it opens it if needed). For code that records many changes in
    one transaction (a site import, a bulk update): one lock of the chain head and one multi-row
    insert instead of a round trip per record.

    Inside the block a record has no sequence or hash yet, and reads of the log do not see it.
    A record made in a savepoint that rolls back is dropped with it; if the block fails, nothing is
    written and its transaction rolls back. Nested batches join the outermost one.
    """
    using = using or router.db_for_write(audit_models.AuditRecord)
    connection = connections[using]
    if getattr(connection, _BATCH_ATTRIBUTE, None) is not None:
        yield
        return
    with transaction.atomic(using=using):
        pending = _Pending(using)
        setattr(connection, _BATCH_ATTRIBUTE, pending)
        try:
            yield
        finally:
            setattr(connection, _BATCH_ATTRIBUTE, None)
        if not connection.needs_rollback:
            _append_many(connection, pending.standing(connection))


def _append_many(connection, entries: list) -> None:
    """Chain and store prepared records in order, under one lock of the head: one multi-row insert,
    the head moved once, and the checkpoints that appending them one by one would have made."""
    if not entries:
        return
    from .checkpoints import prefix_frontier, sign_checkpoint

    using = connection.alias
    sql = _statements_for(connection)
    sha256, leaf_prefix = hashlib.sha256, b"\x00"
    with connection.cursor() as cursor:
        tip = _locked_tip(cursor, sql)
        now = timezone.now()
        sequence, prev_hash = tip.sequence, tip.hash
        checkpoint_sequence, checkpoint_at = tip.checkpoint_sequence, tip.checkpoint_at
        rows, leaves, due = [], [], []
        for entry in entries:
            sequence += 1
            entry.timestamp, entry.sequence, entry.prev_hash = now, sequence, prev_hash
            digest = sha256(chain.canonical_payload(entry.payload())).digest()
            entry.hash = prev_hash = digest.hex()
            rows.append(sql.record_values(entry, connection))
            leaves.append(sha256(leaf_prefix + digest).digest())
            if _checkpoint_due(sequence, checkpoint_sequence, checkpoint_at, now):
                due.append(entry)
                checkpoint_sequence, checkpoint_at = sequence, now
        if sql.copy is not None:
            # COPY: the fastest way into PostgreSQL, a fraction of the server time of INSERTs.
            with cursor.cursor.copy(sql.copy) as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.executemany(sql.insert, rows)
        cursor.execute(sql.move_head, [sequence, prev_hash, tip.sequence, tip.hash])
        if cursor.rowcount != 1:
            raise RuntimeError(f"the audit chain head moved under its own lock: run `{resources.program()} audit verify "
                               "--database`")
        if due:
            frontier, folded = prefix_frontier(tip.sequence, using=using), tip.sequence
            for entry in due:
                merkle.frontier_extend(frontier, leaves[folded - tip.sequence:entry.sequence - tip.sequence])
                folded = entry.sequence
                sign_checkpoint(entry.sequence, frontier, entry.hash, now, using=using)
    for entry in entries:
        entry._state.adding = False
        entry._state.db = using
    setattr(connection, _TIP_ATTRIBUTE, _Tip(sequence, prev_hash, checkpoint_sequence, checkpoint_at))


def forget_tip(using: str | None = None) -> None:
    """Drop a connection's guess of the tip (after the head was changed behind its back)."""
    connection = connections[using or router.db_for_write(audit_models.AuditRecord)]
    if hasattr(connection, _TIP_ATTRIBUTE):
        delattr(connection, _TIP_ATTRIBUTE)


def _locked_tip(cursor, sql: _Statements) -> _Tip:
    cursor.execute(sql.select_head)
    row = cursor.fetchone()
    if row is None:
        row = _create_head(cursor, sql)
    return _Tip(*row)


def _create_head(cursor, sql: _Statements):
    """The head row is made by the migration; it is only missing from a database emptied wholesale
    (a test flush). An empty log may start a new head; a log with records and no head may not.
    Writers racing here all insert-or-ignore, then queue on the one row that exists."""
    cursor.execute(sql.insert_head, [chain.GENESIS_HASH])
    cursor.execute(sql.select_head)
    row = cursor.fetchone()
    # Under the head's lock: a fresh head (sequence 0) over existing records means the head was lost.
    if row[0] == 0 and (audit_models.AuditRecord.objects.exists() or audit_models.AuditTombstone.objects.exists()):
        raise RuntimeError(f"the audit chain head is missing while records exist: run `{resources.program()} audit verify "
                           "--database` and restore the head from the last record")
    return row
