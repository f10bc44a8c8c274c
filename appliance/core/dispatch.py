"""Hands background work to Celery, or, with no broker configured, to an in-process worker pool.

Either way the caller returns at once (a web request never waits), the work starts only after
the caller's transaction commits, and the acting user's context travels with it so the audit
log names who asked. Embedded mode needs no broker server; work that was running when the
process died is caught by the provisioning watchdog, as a dead Celery worker's would be.
"""

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait
from threading import Lock

from django.conf import settings
from django.db import close_old_connections, transaction

from . import context

log = logging.getLogger(__name__)
CONTEXT_KWARG = "_action_context"

_pool: ThreadPoolExecutor | None = None
_pool_lock = Lock()
_pending: set[Future] = set()


def broker_configured() -> bool:
    return bool(settings.CELERY_BROKER_URL)


def _embedded_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=settings.EMBEDDED_WORKERS, thread_name_prefix="appliance-worker")
        return _pool


def _run_embedded(task, args, kwargs):
    close_old_connections()
    try:
        task.apply(args=args, kwargs=kwargs, throw=False)
    except Exception:  # the task records its own failure; this is the last resort
        log.exception("embedded task %s crashed", task.name)
    finally:
        close_old_connections()


def enqueue(task, *args, **kwargs):
    """Run `task(*args, **kwargs)` in the background once the current transaction commits."""
    kwargs[CONTEXT_KWARG] = context.current().snapshot()

    def send():
        if broker_configured():
            task.apply_async(args=args, kwargs=kwargs)
        else:
            future = _embedded_pool().submit(_run_embedded, task, args, kwargs)
            _pending.add(future)
            future.add_done_callback(_pending.discard)

    transaction.on_commit(send)


def drain(timeout: float | None = None) -> bool:
    """Wait for the work handed to the in-process pool to finish; True when none is left.
    A process that is about to exit (or a test about to empty its database) calls it first."""
    _done, not_done = wait(list(_pending), timeout=timeout)
    return not not_done
