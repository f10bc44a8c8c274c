"""Two PostgreSQL roles: the tables' owner, and the runtime role the portal and workers use.

Whoever owns a table may drop or disable its triggers, so the role the appliance runs with must own
nothing. DATABASE_URL names the runtime role; DATABASE_MIGRATE_URL names the owner, and `migrate`
(and the few commands that change what the runtime role may not: `audit install-triggers`,
`audit retention archive`) connect as the owner for their work (`as_owner`). After every migrate
the runtime role gets exactly the grants it needs (`grant_runtime`):

- the audit log's append-only tables (records, checkpoints, tombstones, key handovers): SELECT and
  INSERT only, no UPDATE, DELETE or TRUNCATE (archiving runs as the owner);
- the chain head: SELECT, INSERT and UPDATE (its trigger lets it move only forward);
- django_migrations: SELECT;
- every other table of the schema: SELECT, INSERT, UPDATE, DELETE; sequences: USAGE, SELECT.

The role itself is created once by a database superuser (README, "Database roles").
"""

from contextlib import contextmanager

import dj_database_url
from django.conf import settings
from django.db import connections

from . import triggers

READ_APPEND_ONLY = triggers.IMMUTABLE_TABLES
HEAD = triggers.HEAD_TABLE
READ_ONLY = ("django_migrations",)
# The database stays the one the connection names (a test run's own included): only who connects changes.
_CONNECTION_KEYS = ("USER", "PASSWORD", "HOST", "PORT")


class RoleError(RuntimeError):
    pass


def owner_settings() -> dict | None:
    """The owner's connection settings (DATABASE_MIGRATE_URL), or None when there is one role."""
    url = settings.DATABASE_MIGRATE_URL
    return dj_database_url.parse(url) if url else None


@contextmanager
def as_owner(using: str = "default"):
    """Run the block on connection `using` as the tables' owner, when DATABASE_MIGRATE_URL is set
    (otherwise as it is). The connection is closed before and after, so nothing of the owner's
    session outlives the block."""
    owner = owner_settings()
    if owner is None:
        yield connections[using]
        return
    connection = connections[using]
    if connection.in_atomic_block:
        raise RoleError("switching to the owner role inside a transaction is not possible")
    saved = {key: connection.settings_dict.get(key) for key in _CONNECTION_KEYS}
    connection.close()
    connection.settings_dict.update({key: owner.get(key) for key in _CONNECTION_KEYS})
    try:
        yield connection
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def runtime_role(using: str = "default") -> str | None:
    """The runtime role to grant to after a migrate: DATABASE_URL's user, when an owner is set apart."""
    owner = owner_settings()
    runtime = connections[using].settings_dict.get("USER")
    if owner is None or not runtime or runtime == owner.get("USER"):
        return None
    return runtime


def grant_statements(tables: list[str], role: str, quote) -> list[str]:
    role_name = quote(role)
    statements = [f"GRANT USAGE ON SCHEMA {quote('public')} TO {role_name}"]
    for table in sorted(tables):
        name = quote(table)
        statements.append(f"REVOKE ALL ON {name} FROM {role_name}")
        if table in READ_APPEND_ONLY:
            statements.append(f"GRANT SELECT, INSERT ON {name} TO {role_name}")
        elif table == HEAD:
            statements.append(f"GRANT SELECT, INSERT, UPDATE ON {name} TO {role_name}")
        elif table in READ_ONLY:
            statements.append(f"GRANT SELECT ON {name} TO {role_name}")
        else:
            statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {role_name}")
    statements.append(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {quote('public')} TO {role_name}")
    return statements


def grant_runtime(connection, role: str) -> list[str]:
    """Give `role` exactly the runtime grants on every table of the schema (run as the owner).
    Returns the tables granted. Refuses a role that owns any of them or is a superuser."""
    if connection.vendor != "postgresql":
        raise RoleError("database roles exist on PostgreSQL only; the embedded SQLite database is one file "
                        "of the appliance's OS user")
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
        row = cursor.fetchone()
        if row is None:
            raise RoleError(f"role {role!r} does not exist: a superuser creates it first "
                            f"(CREATE ROLE {role} LOGIN PASSWORD '...')")
        if row[0]:
            raise RoleError(f"role {role!r} is a superuser: it can switch any trigger off; use a plain role")
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tableowner = %s", [role])
        owned = [name for (name,) in cursor.fetchall()]
        if owned:
            raise RoleError(f"role {role!r} owns {', '.join(sorted(owned))}: the runtime role must own nothing "
                            "(run migrate as the owner, DATABASE_MIGRATE_URL)")
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = [name for (name,) in cursor.fetchall()]
        for statement in grant_statements(tables, role, connection.ops.quote_name):
            cursor.execute(statement)
    return sorted(tables)
