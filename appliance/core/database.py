"""What can be known about a database without connecting to it.

An SQLite database that was never migrated is an empty file (settings create it 0600 before the first
connection, so that its WAL and shared-memory files are private too). Connecting to it writes its
header and switches it to WAL. Code that only looks (the audit trigger check every command runs, the
record of a command) asks `not_created` first, so a command refused before `migrate` (a bootstrap with
a wrong option) leaves the database as it found it and says nothing about a log that cannot exist.
"""

from pathlib import Path


def not_created(connection) -> bool:
    """True for an SQLite database whose file is missing or empty; False for anything else."""
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return False
    try:
        return Path(connection.settings_dict["NAME"]).stat().st_size == 0
    except FileNotFoundError:
        return True
