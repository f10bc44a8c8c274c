"""`manage.py check`: the audit log's database triggers are all there and enabled.

A trigger dropped or disabled (or a session that skips triggers) leaves the log open to rewriting
without a trace in the database itself; the check says which, as `audit verify --database` does.
Nothing is checked before the migration that installs the current triggers has run (migrate puts
them in), nor when the database cannot be reached (Django's own checks report that). Untagged, so a
plain `manage.py check` (and runserver) runs it, not only `check --database`.
"""

from django.core import checks
from django.db import DatabaseError, connections, router
from django.db.migrations.recorder import MigrationRecorder

from appliance.core import database, resources

TRIGGERS_MIGRATION = ("audit", "0007_head_guarded_cadence_from_checkpoints")


@checks.register("audit")
def audit_triggers_in_place(app_configs=None, **kwargs):
    from . import triggers
    from .models import AuditRecord

    connection = connections[router.db_for_write(AuditRecord)]
    if database.not_created(connection):
        return []  # nothing to protect yet, and connecting would create the file
    try:
        if TRIGGERS_MIGRATION not in MigrationRecorder(connection).applied_migrations():
            return []
        problems = triggers.problems(connection)
    except (DatabaseError, RuntimeError):
        # Unreachable, or not to be reached from here (Celery runs the checks when a worker starts,
        # a test without database access too): Django's own checks and `migrate` say more.
        return []
    return [checks.Error(problem, hint="the audit log is not protected in the database: run "
                         f"`{resources.program()} audit verify --database`, then put the triggers back with "
                         f"`{resources.program()} audit install-triggers` as the tables' owner", id="audit.E001")
            for problem in problems]
