"""Append-only in the database itself: triggers that reject UPDATE and DELETE (and TRUNCATE on
PostgreSQL) on the audit records, checkpoints and tombstones, whoever issues them, raw SQL included.

The one DELETE let through is archiving: a record may go only once a tombstone covering its sequence
exists (and, on PostgreSQL, only inside the transaction that declared that tombstone with
`SET LOCAL appliance.audit_archive_tombstone`). A tombstone is useless to a forger: it must carry a
valid signature from the key that lives outside the database, or verification fails.

The chain head moves only forward, and only onto the records it names: its new sequence must be
greater, the record there must carry its new hash, the records between must all be there and the
first of them must link to the old hash. It is never deleted, and a new one starts only at the
genesis. A checkpoint goes in only at or below the head, naming the hash of the record at its size,
past every earlier checkpoint; the cadence of checkpoints is the settings' and the checkpoint
table's, not a column anybody can move.

On PostgreSQL every trigger fires ALWAYS, so `session_replication_role = replica` does not switch
it off. The tables' owner can still drop or disable a trigger: `problems()` reports it (to
`audit verify --database` and `manage.py check`), the runtime role that the portal and workers use
owns nothing (see dbroles.py), and the witness outside the database catches a rewrite of anything a
checkpoint signed (see witness.py and the tamper tests, which play exactly that attacker).
"""

from contextlib import contextmanager

IMMUTABLE_TABLES = ("audit_auditrecord", "audit_auditcheckpoint", "audit_audittombstone", "audit_auditkeyrotation")
HEAD_TABLE = "audit_chainhead"
GENESIS_HASH = "0" * 64
ARCHIVE_SETTING = "appliance.audit_archive_tombstone"

_SQLITE_TRIGGERS = {
    "audit_auditrecord_no_update":
        "CREATE TRIGGER audit_auditrecord_no_update BEFORE UPDATE ON audit_auditrecord "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditrecord is append-only: UPDATE rejected'); END",
    "audit_auditrecord_no_delete":
        "CREATE TRIGGER audit_auditrecord_no_delete BEFORE DELETE ON audit_auditrecord "
        "WHEN NOT EXISTS (SELECT 1 FROM audit_audittombstone t "
        "WHERE OLD.sequence BETWEEN t.first_sequence AND t.last_sequence) "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditrecord is append-only: DELETE rejected "
        "(only archiving under a tombstone removes records)'); END",
    "audit_auditcheckpoint_no_update":
        "CREATE TRIGGER audit_auditcheckpoint_no_update BEFORE UPDATE ON audit_auditcheckpoint "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditcheckpoint is append-only: UPDATE rejected'); END",
    "audit_auditcheckpoint_no_delete":
        "CREATE TRIGGER audit_auditcheckpoint_no_delete BEFORE DELETE ON audit_auditcheckpoint "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditcheckpoint is append-only: DELETE rejected'); END",
    "audit_audittombstone_no_update":
        "CREATE TRIGGER audit_audittombstone_no_update BEFORE UPDATE ON audit_audittombstone "
        "BEGIN SELECT RAISE(ABORT, 'audit_audittombstone is append-only: UPDATE rejected'); END",
    "audit_audittombstone_no_delete":
        "CREATE TRIGGER audit_audittombstone_no_delete BEFORE DELETE ON audit_audittombstone "
        "BEGIN SELECT RAISE(ABORT, 'audit_audittombstone is append-only: DELETE rejected'); END",
    "audit_auditkeyrotation_no_update":
        "CREATE TRIGGER audit_auditkeyrotation_no_update BEFORE UPDATE ON audit_auditkeyrotation "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditkeyrotation is append-only: UPDATE rejected'); END",
    "audit_auditkeyrotation_no_delete":
        "CREATE TRIGGER audit_auditkeyrotation_no_delete BEFORE DELETE ON audit_auditkeyrotation "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditkeyrotation is append-only: DELETE rejected'); END",
    "audit_auditcheckpoint_guard_insert":
        "CREATE TRIGGER audit_auditcheckpoint_guard_insert BEFORE INSERT ON audit_auditcheckpoint "
        "WHEN NEW.tree_size < 1 "
        "OR NEW.tree_size > (SELECT h.sequence FROM audit_chainhead h WHERE h.id = 1) "
        "OR NEW.tree_size <= (SELECT coalesce(max(c.tree_size), 0) FROM audit_auditcheckpoint c) "
        "OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = NEW.tree_size "
        "AND r.hash = NEW.last_hash) "
        "BEGIN SELECT RAISE(ABORT, 'audit_auditcheckpoint: a checkpoint names a record at or below the chain "
        "head, by its hash, past the last checkpoint: INSERT rejected'); END",
    "audit_chainhead_forward_only":
        "CREATE TRIGGER audit_chainhead_forward_only BEFORE UPDATE ON audit_chainhead "
        "WHEN NEW.id IS NOT OLD.id OR NEW.sequence <= OLD.sequence "
        "OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = NEW.sequence AND r.hash = NEW.hash) "
        "OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = OLD.sequence + 1 "
        "AND r.prev_hash = OLD.hash) "
        "OR (SELECT count(*) FROM audit_auditrecord r WHERE r.sequence > OLD.sequence "
        "AND r.sequence <= NEW.sequence) != NEW.sequence - OLD.sequence "
        "BEGIN SELECT RAISE(ABORT, 'audit_chainhead moves only forward, onto the records it names: "
        "UPDATE rejected'); END",
    "audit_chainhead_no_delete":
        "CREATE TRIGGER audit_chainhead_no_delete BEFORE DELETE ON audit_chainhead "
        "BEGIN SELECT RAISE(ABORT, 'audit_chainhead is never removed: DELETE rejected'); END",
    "audit_chainhead_genesis_only":
        "CREATE TRIGGER audit_chainhead_genesis_only BEFORE INSERT ON audit_chainhead "
        f"WHEN NEW.id != 1 OR NEW.sequence != 0 OR NEW.hash != '{GENESIS_HASH}' "
        "BEGIN SELECT RAISE(ABORT, 'audit_chainhead starts only at the genesis: INSERT rejected'); END",
}

_POSTGRES_FUNCTIONS = [
    """CREATE OR REPLACE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % rejected', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$""",
    f"""CREATE OR REPLACE FUNCTION audit_record_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_audittombstone t
                   WHERE OLD.sequence BETWEEN t.first_sequence AND t.last_sequence
                     AND t.id::text = current_setting('{ARCHIVE_SETTING}', true)) THEN
        RAISE EXCEPTION 'audit_auditrecord is append-only: DELETE of #% rejected '
            '(only archiving under a tombstone removes records)', OLD.sequence
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$""",
    """CREATE OR REPLACE FUNCTION audit_checkpoint_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tree_size < 1
       OR NEW.tree_size > (SELECT h.sequence FROM audit_chainhead h WHERE h.id = 1)
       OR NEW.tree_size <= (SELECT coalesce(max(c.tree_size), 0) FROM audit_auditcheckpoint c)
       OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = NEW.tree_size
                      AND r.hash = NEW.last_hash) THEN
        RAISE EXCEPTION 'audit_auditcheckpoint: a checkpoint names a record at or below the chain head, '
            'by its hash, past the last checkpoint: INSERT of #% rejected', NEW.tree_size
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$""",
    # AFTER the statement's rows are in: the combined append moves the head and inserts the record
    # in one statement, and this runs once both are done.
    """CREATE OR REPLACE FUNCTION audit_head_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.sequence <= OLD.sequence
       OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = NEW.sequence AND r.hash = NEW.hash)
       OR NOT EXISTS (SELECT 1 FROM audit_auditrecord r WHERE r.sequence = OLD.sequence + 1
                      AND r.prev_hash = OLD.hash)
       OR (SELECT count(*) FROM audit_auditrecord r WHERE r.sequence > OLD.sequence
           AND r.sequence <= NEW.sequence) <> NEW.sequence - OLD.sequence THEN
        RAISE EXCEPTION 'audit_chainhead moves only forward, onto the records it names: '
            'UPDATE from #% to #% rejected', OLD.sequence, NEW.sequence
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$""",
    f"""CREATE OR REPLACE FUNCTION audit_head_genesis_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> 1 OR NEW.sequence <> 0 OR NEW.hash <> '{GENESIS_HASH}' THEN
        RAISE EXCEPTION 'audit_chainhead starts only at the genesis: INSERT rejected'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$""",
]

_POSTGRES_FUNCTION_NAMES = ("audit_record_delete_guard", "audit_reject_change", "audit_checkpoint_guard",
                            "audit_head_guard", "audit_head_genesis_only")


def _existing(connection) -> list[str]:
    """The immutable tables this database has so far (a migration installs the triggers of the
    tables that exist at its point in the history)."""
    with connection.cursor() as cursor:
        present = set(connection.introspection.table_names(cursor))
    return [table for table in IMMUTABLE_TABLES + (HEAD_TABLE,) if table in present]


def _postgres_trigger_definitions(tables) -> list[tuple[str, str, str]]:
    """(table, trigger name, CREATE TRIGGER) of every trigger the tables present should have."""
    definitions = []
    for table in tables:
        if table == HEAD_TABLE:
            definitions += [
                (table, f"{table}_forward_only", f"CREATE TRIGGER {table}_forward_only AFTER UPDATE ON {table} "
                                                 "FOR EACH ROW EXECUTE FUNCTION audit_head_guard()"),
                (table, f"{table}_no_delete", f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
                                              "FOR EACH ROW EXECUTE FUNCTION audit_reject_change()"),
                (table, f"{table}_no_truncate", f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                                                "FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()"),
                (table, f"{table}_genesis_only", f"CREATE TRIGGER {table}_genesis_only BEFORE INSERT ON {table} "
                                                 "FOR EACH ROW EXECUTE FUNCTION audit_head_genesis_only()"),
            ]
            continue
        delete_function = "audit_record_delete_guard" if table == "audit_auditrecord" else "audit_reject_change"
        definitions += [
            (table, f"{table}_no_update", f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
                                          "FOR EACH ROW EXECUTE FUNCTION audit_reject_change()"),
            (table, f"{table}_no_delete", f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
                                          f"FOR EACH ROW EXECUTE FUNCTION {delete_function}()"),
            (table, f"{table}_no_truncate", f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                                            "FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()"),
        ]
        if table == "audit_auditcheckpoint":
            definitions.append((table, f"{table}_guard_insert",
                                f"CREATE TRIGGER {table}_guard_insert BEFORE INSERT ON {table} "
                                "FOR EACH ROW EXECUTE FUNCTION audit_checkpoint_guard()"))
    return definitions


def _sqlite_trigger_definitions(tables) -> dict[str, str]:
    return {name: sql for name, sql in _SQLITE_TRIGGERS.items() if _sqlite_table_of(name) in tables}


def _sqlite_table_of(trigger_name: str) -> str:
    return next(t for t in IMMUTABLE_TABLES + (HEAD_TABLE,) if trigger_name.startswith(t + "_"))


def _postgres_triggers(tables) -> list[str]:
    statements = []
    for table, name, sql in _postgres_trigger_definitions(tables):
        statements.append(sql)
        # Fires whatever session_replication_role says (a replica session skips ORIGIN triggers).
        statements.append(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {name}")
    return statements


def install(connection) -> None:
    uninstall(connection)  # idempotent: whatever was there is replaced by the current definitions
    tables = _existing(connection)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for sql in _sqlite_trigger_definitions(tables).values():
                cursor.execute(sql)
        elif connection.vendor == "postgresql":
            for sql in _POSTGRES_FUNCTIONS + _postgres_triggers(tables):
                cursor.execute(sql)
        else:
            raise RuntimeError(f"append-only audit triggers are not written for {connection.vendor}")


def uninstall(connection) -> None:
    tables = _existing(connection)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for name in _SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        elif connection.vendor == "postgresql":
            for table, name, _sql in _postgres_trigger_definitions(tables):
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            for function in _POSTGRES_FUNCTION_NAMES:
                cursor.execute(f"DROP FUNCTION IF EXISTS {function}()")


def allow_archive(cursor, vendor: str, tombstone_id: int) -> None:
    """Declare, for the current transaction only, which tombstone the coming DELETE archives under."""
    if vendor == "postgresql":
        cursor.execute("SELECT set_config(%s, %s, true)", [ARCHIVE_SETTING, str(tombstone_id)])


@contextmanager
def suspended(connection):
    """Take the triggers away for a block and put them back: what an owner of the tables can always
    do, used by the test suite to empty its database between tests and to play the attacker."""
    uninstall(connection)
    try:
        yield
    finally:
        install(connection)


def problems(connection) -> list[str]:
    """What is wrong with the triggers of this database, one sentence each: a trigger missing, one
    disabled (or not firing always), a session that skips triggers. Empty when all hold."""
    tables = _existing(connection)
    found = []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            present = dict(cursor.fetchall())
            for name, sql in _sqlite_trigger_definitions(tables).items():
                if name not in present:
                    found.append(f"trigger {name} on {_sqlite_table_of(name)} is missing")
                elif " ".join(present[name].split()) != " ".join(sql.split()):
                    found.append(f"trigger {name} on {_sqlite_table_of(name)} was replaced by another definition")
        elif connection.vendor == "postgresql":
            cursor.execute("SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t "
                           "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
                           "AND c.relnamespace = to_regnamespace(current_schema())::oid")
            present = {(table, name): enabled for table, name, enabled in cursor.fetchall()}
            for table, name, _sql in _postgres_trigger_definitions(tables):
                enabled = present.get((table, name))
                if enabled is None:
                    found.append(f"trigger {name} on {table} is missing")
                elif enabled == "D":
                    found.append(f"trigger {name} on {table} is disabled")
                elif enabled != "A":
                    found.append(f"trigger {name} on {table} was switched off and on again: it fires only in "
                                 f"{'replica' if enabled == 'R' else 'origin'} sessions, not always")
            cursor.execute("SELECT current_setting('session_replication_role')")
            role = cursor.fetchone()[0]
            if role != "origin":
                found.append(f"session_replication_role is {role!r}, not 'origin': this session skips triggers")
    return found
