"""Celery tasks: thin wrappers around appliance.provisioning.services."""

from celery import shared_task

from . import services


@shared_task(name="provisioning.execute_run", acks_late=False)
def execute_run_task(run_id: int) -> str:
    # acks_late is off: a worker that dies mid-run must not have the run redelivered to another worker
    # behind the watchdog's back; the watchdog fails it and the operator reruns (which resumes).
    return services.execute_run(run_id).state


# Beat runs it every half minute: a `task.run` record of each tick would fill the audit log and keep
# an idle appliance's tail unsigned; a run it fails is recorded (provisioning.run.end) by the service.
@shared_task(name="provisioning.watchdog", audit_record_run=False)
def watchdog_task() -> list[int]:
    """Fail runs whose worker died. Safe to schedule with celery beat every minute."""
    return [run.pk for run in services.watchdog()]
