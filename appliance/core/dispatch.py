"""Hands background work to Celery, or, with no broker configured, to an in-process worker pool.

Either way the caller returns at once (a web request never waits), the work starts only after
the caller's transaction commits, and the acting user's context travels with it so the audit
log names who asked. Embedded mode needs no broker server; work that was running when the
process died is caught by the provisioning watchdog, as a dead Celery worker's would be.

With no broker there is no `celery beat` either: a process that serves requests (wsgi.py,
asgi.py) starts the beat schedule's timers in-process (`start_embedded_beat`), once, so the
watchdog and the audit checkpoint clock run there.
"""

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait
from threading import Event, Lock, Thread

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


_beat: tuple[Event, list[Thread]] | None = None
_beat_lock = Lock()


def start_embedded_beat(only: tuple[str, ...] | None = None) -> Event | None:
    """Embedded mode: run each entry of the Celery beat schedule (appliance.celery.beat_schedule),
    or the entries named in `only`, in this process, every `schedule` seconds, one run at a time
    per entry. Once per process; returns the Event that stops the timers, or None when a broker's
    beat does the job or the timers already run."""
    global _beat
    if broker_configured():
        return None
    with _beat_lock:
        if _beat is not None:
            return None
        from appliance.celery import app, beat_schedule

        app.loader.import_default_modules()  # the apps' tasks modules: autodiscovery is lazy
        stop, threads = Event(), []
        for name, entry in beat_schedule().items():
            if only is not None and name not in only:
                continue
            seconds = entry["schedule"]
            seconds = seconds.total_seconds() if hasattr(seconds, "total_seconds") else float(seconds)
            thread = Thread(target=_tick, args=(app, entry["task"], seconds, stop), daemon=True,
                            name=f"appliance-beat-{name}")
            thread.start()
            threads.append(thread)
        _beat = (stop, threads)
        return stop


def stop_embedded_beat(timeout: float = 60) -> None:
    """Stop the timers and wait for a tick under way to finish."""
    global _beat
    with _beat_lock:
        if _beat is None:
            return
        stop, threads = _beat
        _beat = None
    stop.set()
    for thread in threads:
        thread.join(timeout)


def _tick(app, task_name: str, seconds: float, stop: Event) -> None:
    while not stop.wait(seconds):
        try:
            _embedded_pool().submit(_run_embedded, app.tasks[task_name], (), {}).result()
        except Exception:  # the next tick tries again
            log.exception("embedded beat: %s failed", task_name)
