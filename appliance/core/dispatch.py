"""Hands background work to Celery, or, with no broker configured, to the database queue and an
in-process worker pool.

Either way the caller returns at once (a web request never waits), the work starts only after
the caller's transaction commits, and the acting user's context travels with it so the audit
log names who asked.

Embedded mode (CELERY_BROKER_URL unset) needs no broker server: the work is queued in the database
queue (appliance.core.queue: kombu's SQLAlchemy transport on the appliance's own database, the one
the connection in use names), and an in-process consumer takes it from there and runs it on a pool of
EMBEDDED_WORKERS threads. It takes a message only when a thread is free, so what waits stays in the
database: when the process dies, the work it queued and had not started is run by the next process
that consumes the queue. A serving process (wsgi.py, asgi.py) consumes from its start
(`start_embedded_worker`); any other process (a command, a test) consumes while work it queued is
not finished. Work that was running when the process died is not run again: the provisioning
watchdog fails such a run, as a dead Celery worker's.

With no broker there is no `celery beat` either: a process that serves requests (wsgi.py,
asgi.py) starts the beat schedule's timers in-process (`start_embedded_beat`), once, so the
watchdog and the audit checkpoint clock run there.
"""

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from threading import BoundedSemaphore, Condition, Event, Lock, Thread

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from . import context, queue

log = logging.getLogger(__name__)
CONTEXT_KWARG = "_action_context"
# How often an idle consumer looks for work another process queued (its own is announced at once).
POLL_SECONDS = 2.0

_pool: ThreadPoolExecutor | None = None
_pool_lock = Lock()
# Ids of the messages this process queued and whose work has not finished: `drain` waits for them.
_pending: set[str] = set()
_pending_changed = Condition()


def broker_configured() -> bool:
    return bool(settings.CELERY_BROKER_URL)


def _embedded_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=settings.EMBEDDED_WORKERS, thread_name_prefix="appliance-worker")
        return _pool


def _run_embedded(task, args, kwargs, task_id=None):
    close_old_connections()
    try:
        task.apply(args=args, kwargs=kwargs, task_id=task_id, throw=False)
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
            _queue_embedded(task, args, kwargs)

    transaction.on_commit(send)


def _queue_url() -> str:
    """The database queue of the database this process uses now (a test run's own included)."""
    return queue.broker_url(connection.settings_dict)


def _queue_embedded(task, args, kwargs) -> None:
    from appliance.celery import app

    url = _queue_url()
    task_id = str(uuid.uuid4())
    with _pending_changed:
        _pending.add(task_id)
    try:
        with queue.connection(url) as broker:
            with app.producer_or_acquire(app.amqp.Producer(broker)) as producer:
                task.apply_async(args=args, kwargs=kwargs, task_id=task_id, producer=producer)
    except BaseException:
        _finished(task_id)
        raise
    _consumer_for(url, persistent=False).wake.set()


def _finished(task_id: str | None) -> None:
    with _pending_changed:
        _pending.discard(task_id)
        _pending_changed.notify_all()
    with _consumers_lock:
        for consumer in _consumers.values():
            consumer.wake.set()  # a command's or a test's consumer may be done


class _Consumer(Thread):
    """Takes messages from the database queue, one per free thread of the pool, and runs them."""

    def __init__(self, url: str, persistent: bool):
        super().__init__(name="appliance-queue-consumer", daemon=persistent)
        self.url, self.persistent = url, persistent
        self.wake, self.stop = Event(), Event()
        self.slots = settings.EMBEDDED_WORKERS
        self.free = BoundedSemaphore(self.slots)
        self.channel_lock = Lock()

    def run(self):
        from appliance.celery import app

        try:
            with queue.connection(self.url) as broker:
                channel = broker.channel()
                source = app.amqp.queues[app.conf.task_default_queue](channel)
                source.declare()
                while not self.stop.is_set() and not self._idle_end():
                    if not self.free.acquire(timeout=POLL_SECONDS):
                        continue
                    with self.channel_lock:
                        message = source.get(no_ack=False, accept=["json"])
                    if message is not None:
                        _embedded_pool().submit(self._run, message)
                        continue
                    self.free.release()
                    self.wake.wait(POLL_SECONDS)
                    self.wake.clear()
                # The work taken finishes (and is acknowledged) before the channel closes: closing it
                # with a message unacknowledged would queue that message again.
                for _slot in range(self.slots):
                    self.free.acquire()
        except Exception:
            log.exception("the database queue's consumer stopped")
        finally:
            _forget_consumer(self)

    def _idle_end(self) -> bool:
        """A consumer that is not a serving process's ends when nothing it waits for is left."""
        if self.persistent:
            return False
        with _consumers_lock, _pending_changed:
            if _pending:
                return False
            _consumers.pop(self.url, None)
            return True

    def _run(self, message):
        from appliance.celery import app

        task_id = message.headers.get("id")
        try:
            name = message.headers.get("task")
            args, kwargs, _embed = message.decode()
            task = app.tasks.get(name)
            if task is None:
                log.error("database queue: message %s names no known task %r; dropped", task_id, name)
            else:
                _run_embedded(task, args, kwargs, task_id)
        except Exception:
            log.exception("database queue: message %s could not be run", task_id)
        finally:
            with self.channel_lock:
                message.ack()
            self.free.release()
            _finished(task_id)


_consumers: dict[str, _Consumer] = {}
_consumers_lock = Lock()
# Consumers that end once their process's work is done: `drain` waits for them to let go of the database.
_ending: list[_Consumer] = []


def _consumer_for(url: str, persistent: bool) -> _Consumer:
    with _consumers_lock:
        consumer = _consumers.get(url)
        if consumer is None or not consumer.is_alive() or consumer.stop.is_set():
            consumer = _consumers[url] = _Consumer(url, persistent)
            consumer.start()
            if not persistent:
                _ending.append(consumer)
        elif persistent:
            consumer.persistent = True  # a serving process took over a command's consumer
        return consumer


def _forget_consumer(consumer: _Consumer) -> None:
    with _consumers_lock:
        if _consumers.get(consumer.url) is consumer:
            del _consumers[consumer.url]


def start_embedded_worker() -> _Consumer | None:
    """Embedded mode, a serving process: consume the database queue for as long as the process lives,
    work queued by processes that died before it ran included. None when a broker's worker does it."""
    if broker_configured():
        return None
    try:
        url = _queue_url()
    except ValueError:  # an in-memory database: no other process queued anything there
        return None
    return _consumer_for(url, persistent=True)


def stop_embedded_worker(timeout: float = 60) -> None:
    """Stop this process's consumers of the database queue once the work they took has finished;
    what they have not taken stays queued."""
    with _consumers_lock:
        consumers = list(_consumers.values())
    for consumer in consumers:
        consumer.stop.set()
        consumer.wake.set()
    for consumer in consumers:
        consumer.join(timeout)


def drain(timeout: float | None = None) -> bool:
    """Wait for the work this process queued to finish; True when none is left.
    A process that is about to exit (or a test about to empty its database) calls it first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _pending_changed:
        if not _pending_changed.wait_for(lambda: not _pending, timeout=timeout):
            return False
    with _consumers_lock:
        ending = [consumer for consumer in _ending if not consumer.persistent]
        _ending[:] = [consumer for consumer in _ending if consumer.is_alive()]
    for consumer in ending:
        consumer.wake.set()
        consumer.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if consumer.is_alive():
            return False
    return True


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
