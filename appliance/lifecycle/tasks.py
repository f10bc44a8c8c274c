"""The model registry's clock (Celery beat, or the embedded worker's timers): promotion requests expire,
deployments rolling out are followed to a state, versions registered while their training job ran get the
job's end once Slurm reports it, and every version's files are re-hashed on schedule.
Each service records what it changes (lifecycle.*), and a tick that changes nothing records nothing, but for
the scheduled re-hash: every version it checks gets its lifecycle.version.verify record, the evidence that
the check ran."""

from celery import shared_task


@shared_task(name="lifecycle.expire_requests", audit_record_run=False)
def expire_requests() -> int:
    from . import services

    return services.expire_requests()


@shared_task(name="lifecycle.follow_deployments", audit_record_run=False)
def follow_deployments() -> list[int]:
    from . import deployments

    return deployments.follow_all()


@shared_task(name="lifecycle.verify_artifacts", audit_record_run=False)
def verify_artifacts() -> dict:
    from . import integrity

    return integrity.verify_all(full=True)


@shared_task(name="lifecycle.refresh_training", audit_record_run=False)
def refresh_training() -> list[int]:
    from . import services

    return services.refresh_unfinished_training()
