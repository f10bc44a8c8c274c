import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from appliance.accounts.services import ensure_administrator


class Command(BaseCommand):
    help = ("Create the first Administrator. The password comes from --password-file or "
            "APPLIANCE_ADMIN_PASSWORD; otherwise one is generated, printed once and kept in "
            "APPLIANCE_STATE_DIR/keys/admin-password (mode 0600).")

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("APPLIANCE_ADMIN_USERNAME", "admin"))
        parser.add_argument("--password-file", help="file holding the password (first line)")

    def handle(self, *args, username, password_file=None, **options):
        password = os.environ.get("APPLIANCE_ADMIN_PASSWORD") or None
        if password_file:
            try:
                with open(password_file) as handle:
                    password = handle.readline().rstrip("\n")
            except OSError as exc:
                raise CommandError(f"{password_file}: {exc.strerror}") from exc
        try:
            user, generated = ensure_administrator(username, password)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if generated:
            path = settings.KEYS_DIR / "admin-password"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(generated + "\n")
            self.stdout.write(f"Administrator {user.username!r} created. Password: {generated}\n"
                              f"(also kept in {path}, readable by this OS user only)")
        else:
            self.stdout.write(f"Administrator {user.username!r} is ready.")
