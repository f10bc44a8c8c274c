"""The database queue: Celery's messages kept in the appliance's own database, so queued work
survives the death of whichever process queued or was about to run it, with no Redis or RabbitMQ.

It is kombu's SQLAlchemy transport (`sqla+<database URL>`, two tables: kombu_queue and kombu_message),
used two ways:

- production (`appliance install --production`): the environment file names it as CELERY_BROKER_URL,
  and the Celery worker and beat units consume and fill it like any broker;
- embedded mode (CELERY_BROKER_URL unset: runserver, tests, the bootstrap command): the process that
  queues work publishes it to the same tables, and an in-process consumer runs it on a bounded thread
  pool (appliance.core.dispatch). A serving process consumes from its start, so work queued by a
  process that died before it ran is picked up by the next one.

A message leaves the queue when a worker takes it (the row is marked invisible). Work that was running
when its process was killed is therefore not run twice: a provisioning run left so is failed by the
provisioning watchdog, as before. Taken rows are deleted by the `core.queue_cleanup` beat entry.

The tables are made by `migrate` (migration core 0002, from kombu's own table definitions), not by
kombu at first use: on PostgreSQL the runtime role owns nothing and may create nothing
(appliance.audit.dbroles), and the grants that follow a migrate cover these tables and sequences.
"""

from urllib.parse import quote

QUEUE_TABLE = "kombu_queue"
MESSAGE_TABLE = "kombu_message"
SCHEME = "sqla+"


def broker_url(database: dict) -> str:
    """The kombu SQLAlchemy URL of a Django database (settings.DATABASES entry)."""
    engine = database["ENGINE"]
    if engine.endswith("sqlite3"):
        name = str(database["NAME"])
        if name in ("", ":memory:") or name.startswith("file:"):
            raise ValueError(f"database {name or ':memory:'}: an in-memory database cannot hold a queue "
                             "other processes share")
        return f"{SCHEME}sqlite:///{name}"
    if "postgresql" in engine:
        user = quote(str(database.get("USER") or ""), safe="")
        password = database.get("PASSWORD") or ""
        credentials = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
        host = database.get("HOST") or ""
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        port = f":{database['PORT']}" if database.get("PORT") else ""
        return f"{SCHEME}postgresql+psycopg://{credentials}{host}{port}/{quote(str(database['NAME']), safe='')}"
    raise ValueError(f"database engine {engine}: the database queue supports SQLite and PostgreSQL; "
                     "set CELERY_BROKER_URL to a Redis or RabbitMQ broker instead")


def transport_options(url: str) -> dict:
    """kombu's SQLAlchemy transport passes its options to sqlalchemy.create_engine."""
    if url.startswith(f"{SCHEME}sqlite"):
        # Django's connections write to the same file: wait for its lock instead of failing at once.
        return {"connect_args": {"timeout": 30}}
    if url.startswith(SCHEME):
        return {"pool_pre_ping": True}
    return {}


def connection(url: str):
    """A kombu connection to the database queue at `url` that keeps no database session open between
    two uses (a test database is dropped at the end of the run, which PostgreSQL refuses while a
    session is connected). kombu makes one SQLAlchemy engine per URL and process, with the options of
    the first connection: every in-process use goes through here."""
    from kombu import Connection
    from sqlalchemy.pool import NullPool

    return Connection(url, transport_options={**transport_options(url), "poolclass": NullPool})


def _tables():
    """kombu's declarative classes for the two tables, registered the way its channel registers them,
    so both use one definition."""
    from kombu.transport.sqlalchemy import models

    classes = {}
    for name, base, table in (("Queue", models.Queue, QUEUE_TABLE), ("Message", models.Message, MESSAGE_TABLE)):
        classes[name] = models.class_registry.get(name) or type(name, (base, models.ModelBase),
                                                                {"__tablename__": table})
    return models.metadata, classes


def ddl(vendor: str, drop: bool = False) -> list[str]:
    """The statements that create (or drop) the queue's tables, indexes and sequences on `vendor`."""
    from sqlalchemy import create_mock_engine

    metadata, _classes = _tables()
    dialect = {"postgresql": "postgresql+psycopg://", "sqlite": "sqlite://"}[vendor]
    statements: list[str] = []

    def collect(sql, *multiparams, **params):
        statements.append(str(sql.compile(dialect=engine.dialect)).strip())

    engine = create_mock_engine(dialect, collect)
    if drop:
        metadata.drop_all(engine, checkfirst=False)
    else:
        metadata.create_all(engine, checkfirst=False)
    return statements


def delete_taken(connection=None) -> int:
    """Delete the rows of messages a worker has taken (kombu marks them invisible and leaves them)."""
    from django.db import connection as default_connection

    connection = connection or default_connection
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {connection.ops.quote_name(MESSAGE_TABLE)} WHERE visible = %s", [False])
        return cursor.rowcount
