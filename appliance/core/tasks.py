"""Base class of every Celery task: restores the context of whoever asked, on the `task` channel."""

from celery import Task, shared_task

from . import context
from .dispatch import CONTEXT_KWARG


class ContextTask(Task):
    abstract = True
    # apply_async checks the call against the function's signature, which knows nothing of the
    # context kwarg that dispatch.enqueue adds and __call__ removes.
    typing = False

    def __call__(self, *args, **kwargs):
        snapshot = kwargs.pop(CONTEXT_KWARG, None)
        ctx = context.from_snapshot(snapshot or {}, channel="task")
        if self.request.id:
            ctx = context.ActionContext(**{**ctx.__dict__, "request_id": ctx.request_id or self.request.id})
        with context.use(ctx):
            return super().__call__(*args, **kwargs)


@shared_task(name="core.queue_cleanup", audit_record_run=False)
def queue_cleanup() -> int:
    """Delete the database queue's rows of messages a worker took (appliance.core.queue). No audit
    record: housekeeping of the queue's own tables, every few minutes."""
    from .queue import delete_taken

    return delete_taken()
