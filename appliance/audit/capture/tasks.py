"""Background tasks: every run records `task.run` under the context of whoever asked.

appliance.core.dispatch puts a snapshot of the asking user's context in the task's kwargs, and
ContextTask restores it around the body; these signal receivers read the same snapshot, because
Celery sends task_postrun after the body has left that context.
"""

import time

from celery import signals, states

from appliance import audit
from appliance.core import context
from appliance.core.dispatch import CONTEXT_KWARG


def task_context(task, task_id: str, kwargs: dict) -> context.ActionContext:
    ctx = context.from_snapshot((kwargs or {}).get(CONTEXT_KWARG) or {}, channel="task")
    if not ctx.request_id and task_id:
        ctx = context.ActionContext(**{**ctx.__dict__, "request_id": task_id})
    return ctx


def on_prerun(sender=None, task_id=None, task=None, **kwargs):
    if task is not None:
        task.request.audit_started = time.monotonic()


def _reason(state: str, retval) -> str:
    if state == states.SUCCESS:
        return ""
    if isinstance(retval, BaseException):
        message = str(retval)
        return f"{state}: {type(retval).__name__}: {message}" if message else f"{state}: {type(retval).__name__}"
    return state


def on_postrun(sender=None, task_id=None, task=None, args=None, kwargs=None, retval=None, state=None, **extra):
    if task is None or not getattr(task, "audit_record_run", True):
        return  # a task of the audit log's own machinery (its checkpoint clock)
    started = getattr(task.request, "audit_started", None)
    details = {
        "task": task.name,
        "task_id": task_id or "",
        "state": state or "",
        "retries": task.request.retries or 0,
        "eager": bool(task.request.is_eager),
        "duration_ms": round((time.monotonic() - started) * 1000, 3) if started is not None else None,
    }
    with context.use(task_context(task, task_id, kwargs)):
        audit.record("task.run", outcome="success" if state == states.SUCCESS else "failure",
                     reason=_reason(state, retval), target_type="task", target_id=task_id or "",
                     target_name=task.name, details=details)


def connect() -> None:
    signals.task_prerun.connect(on_prerun, weak=False, dispatch_uid="audit-task-prerun")
    signals.task_postrun.connect(on_postrun, weak=False, dispatch_uid="audit-task-postrun")
