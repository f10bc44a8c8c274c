from pathlib import Path

from django.apps import AppConfig


def _private_sqlite_files(sender, connection, **kwargs):
    """Every SQLite database this process opens (the test database included) is 0600, WAL and SHM too."""
    if connection.vendor != "sqlite":
        return
    from .files import make_private

    name = str(connection.settings_dict.get("NAME") or "")
    if name and name != ":memory:" and not name.startswith("file:"):
        make_private(Path(name), Path(f"{name}-wal"), Path(f"{name}-shm"))


class CoreConfig(AppConfig):
    name = "appliance.core"
    label = "core"

    def ready(self):
        from django.contrib.auth.signals import user_logged_in
        from django.db.backends.signals import connection_created

        from .middleware import stamp_login
        from .parsers import require_strings_for_text

        require_strings_for_text()

        user_logged_in.connect(stamp_login, dispatch_uid="core-session-login-time")
        connection_created.connect(_private_sqlite_files, dispatch_uid="core-private-sqlite-files")
