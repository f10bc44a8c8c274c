"""The audit log's clock: Celery beat (or the embedded worker's timer) seals the unsigned tail."""

from celery import shared_task

from . import checkpoints


# Part of the log's own machinery, like the checkpoints appends make: a `task.run` record of every
# tick would itself be a new unsigned record, so the log would never be idle (capture/tasks.py).
@shared_task(name="audit.seal_unsigned", audit_record_run=False)
def seal_unsigned_task() -> int | None:
    """Sign a checkpoint if records are unsigned; the tree size signed, or None."""
    checkpoint = checkpoints.seal_unsigned()
    return checkpoint.tree_size if checkpoint is not None else None
