"""`manage.py migrate`, as the tables' owner when DATABASE_MIGRATE_URL is set, then the runtime
role (DATABASE_URL's user) gets exactly the grants it needs (appliance.audit.dbroles)."""

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import transaction

from appliance.audit import dbroles


class Command(DjangoMigrate):
    help = (DjangoMigrate.help + " With DATABASE_MIGRATE_URL set it connects as the tables' owner, then grants the "
            "runtime role of DATABASE_URL what the portal and workers need and no more.")

    def handle(self, *args, **options):
        database = options["database"]
        role = dbroles.runtime_role(database)
        with dbroles.as_owner(database) as connection:
            super().handle(*args, **options)
            if role is not None:
                grant(connection, role)
                if options["verbosity"]:
                    self.stdout.write(f"runtime role {role}: granted what it needs on the tables of the schema")


def grant(connection, role: str) -> list[str]:
    """Grant `role` the runtime grants and record it (`audit.dbroles.grant`)."""
    from appliance import audit

    try:
        with transaction.atomic(using=connection.alias):
            tables = dbroles.grant_runtime(connection, role)
            audit.record("audit.dbroles.grant", target_type="database.role", target_name=role,
                         details={"role": role, "tables": len(tables)})
    except dbroles.RoleError as exc:
        raise CommandError(str(exc)) from exc
    return tables
