"""`manage.py dbroles --runtime-role NAME`: give the PostgreSQL role the portal and workers run as
exactly the grants they need, as the tables' owner (DATABASE_MIGRATE_URL, or DATABASE_URL when that
is the owner). `migrate` does the same for DATABASE_URL's user after every run."""

from django.core.management.base import BaseCommand

from appliance.audit import dbroles

from .migrate import grant


class Command(BaseCommand):
    help = ("Grant the runtime database role SELECT/INSERT on the audit log (no UPDATE, DELETE, TRUNCATE, no "
            "ownership) and ordinary access to the other tables. PostgreSQL only; run as the tables' owner.")

    def add_arguments(self, parser):
        parser.add_argument("--runtime-role", required=True, help="the role of DATABASE_URL (it must exist)")
        parser.add_argument("--database", default="default", help="database alias (default: default)")

    def handle(self, *args, runtime_role, database, **options):
        with dbroles.as_owner(database) as connection:
            tables = grant(connection, runtime_role)
        self.stdout.write(f"runtime role {runtime_role}: SELECT/INSERT on the audit log, ordinary access to the "
                          f"other {len(tables) - len(dbroles.READ_APPEND_ONLY) - 1} tables; it owns none")
