"""Append-only in the database itself: triggers that reject UPDATE and DELETE (and TRUNCATE on
PostgreSQL) on the audit records, checkpoints and tombstones, whoever issues them, raw SQL included.

The one DELETE let through is archiving: a record may go only once a tombstone covering its sequence
exists (and, on PostgreSQL, only inside the transaction that declared that tombstone with
`SET LOCAL appliance.audit_archive_tombstone`). A tombstone is useless to a forger: it must carry a
valid signature from the key that lives outside the database, or verification fails.

The tables' owner can still drop or disable a trigger; the hash chain and the signed checkpoints
are what catch that (see the tamper tests, which do exactly this).
"""

from contextlib import contextmanager

IMMUTABLE_TABLES = ("audit_auditrecord", "audit_auditcheckpoint", "audit_audittombstone", "audit_auditkeyrotation")
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
]


def _existing(connection) -> list[str]:
    """The immutable tables this database has so far (a migration installs the triggers of the
    tables that exist at its point in the history)."""
    with connection.cursor() as cursor:
        present = set(connection.introspection.table_names(cursor))
    return [table for table in IMMUTABLE_TABLES if table in present]


def _postgres_triggers(tables) -> list[str]:
    statements = []
    for table in tables:
        statements.append(f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
                          f"FOR EACH ROW EXECUTE FUNCTION audit_reject_change()")
        delete_function = "audit_record_delete_guard" if table == "audit_auditrecord" else "audit_reject_change"
        statements.append(f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
                          f"FOR EACH ROW EXECUTE FUNCTION {delete_function}()")
        statements.append(f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                          f"FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()")
    return statements


def install(connection) -> None:
    uninstall(connection)  # idempotent: whatever was there is replaced by the current definitions
    tables = _existing(connection)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for name, sql in _SQLITE_TRIGGERS.items():
                if name.rsplit("_no_", 1)[0] in tables:
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
            for table in tables:
                for suffix in ("no_update", "no_delete", "no_truncate"):
                    cursor.execute(f"DROP TRIGGER IF EXISTS {table}_{suffix} ON {table}")
            cursor.execute("DROP FUNCTION IF EXISTS audit_record_delete_guard()")
            cursor.execute("DROP FUNCTION IF EXISTS audit_reject_change()")


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
