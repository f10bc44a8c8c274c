"""The lending clock: Celery beat (or the embedded worker's timer) advances every plan with a step due."""

from celery import shared_task

from . import services


# No `task.run` record per tick: each step a plan takes is recorded by the service (lending.plan.*).
@shared_task(name="lending.advance", audit_record_run=False)
def advance() -> list[int]:
    return services.advance_due()
