"""What every benchmark needs around its run: a PostgreSQL database of its own, created and dropped next
to the one DATABASE_URL names, and Django set up on a fresh state directory, migrated."""

import os
import sys
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parents[2]


def with_database(url: str, database: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{database}"))


def create_database(url: str, database: str) -> str:
    """(Re)create `database` on the server of `url`; returns the URL of it."""
    import psycopg

    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    return with_database(url, database)


def drop_database(url: str, database: str) -> None:
    import psycopg

    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def setup_django(state_dir: str) -> None:
    sys.path.insert(0, str(REPO))
    os.environ["APPLIANCE_STATE_DIR"] = state_dir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
