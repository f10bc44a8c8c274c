"""Ingestion of Ansible events.

ansible-runner calls the event handler for every event, on the thread that reads ansible-playbook's
output: that is the hot path, and the handler only counts the event and puts it on a queue. The
consumer (the thread that started the stage) takes events off the queue and stores them in batches,
every BATCH_SIZE events or FLUSH_SECONDS, with one bulk insert each. At the end the number emitted
is compared with the number stored in the database: completeness is a number anyone can check.

Text is stored without NUL characters (a command's output may hold one; PostgreSQL refuses it in text
and in jsonb), as AWX's callback receiver does. A batch the database refuses anyway is stored row by
row, so one bad event costs that event alone, and the completeness count names the loss.

While consuming, the ingestor keeps per-host counts, the first failure of each host, the pid of
ansible-playbook, and hands the facts the stages discovered (ansible_facts keys appliance_*) to the
facts sink, which updates the inventory.
"""

import json
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connections, router, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from appliance.audit.services import redact
from appliance.core.secrets import MASK

from .models import StageRun, TaskEvent

log = logging.getLogger(__name__)

BATCH_SIZE = 500
FLUSH_SECONDS = 0.25
STDOUT_LIMIT = 16 * 1024
DATA_LIMIT = 64 * 1024

_FAILED_EVENTS = {"runner_on_failed", "runner_item_on_failed"}
_HOST_EVENTS = {"runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"}


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    failed_task: str = ""
    message: str = ""


@dataclass
class Failure:
    host: str
    task: str
    message: str


NUL = "\x00"
# How json.dumps writes a NUL inside a string (ensure_ascii, the default).
_JSON_NUL = "\\u0000"


def _text(value, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace(NUL, "") if NUL in text else text
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def without_nul(value):
    """`value` with NUL characters removed from every string in it (keys included)."""
    if isinstance(value, str):
        return value.replace(NUL, "")
    if isinstance(value, dict):
        return {without_nul(k) if isinstance(k, str) else k: without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


def failure_message(result: dict) -> str:
    """The line an operator needs from a failed module result."""
    if not isinstance(result, dict):
        return str(result)
    # A loop's summary ("One or more items failed") names nothing: the failed items' own messages do.
    items = [item for item in result.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    if items:
        return "; ".join(failure_message({k: v for k, v in item.items() if k != "results"}) for item in items)
    parts = []
    for key in ("msg", "reason", "stderr", "module_stderr", "stdout", "module_stdout", "exception"):
        value = result.get(key)
        if value and str(value).strip():
            parts.append(str(value).strip())
            if key in ("msg", "reason") or len(parts) == 2:
                break
    if result.get("censored"):
        parts.append(str(result["censored"]))
    return "; ".join(parts) or "the task failed without a message"


class Scrubber:
    """Removes secrets from event data: values of secret-looking keys, and every known secret value
    wherever it appears (a task without no_log that echoed a password)."""

    def __init__(self, secret_values: list[str]):
        self.secret_values = [s for s in secret_values if s]

    def text(self, value: str) -> str:
        for secret in self.secret_values:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def data(self, value) -> tuple[object, int]:
        """The cleaned value and the length of its JSON text (one encoding per event: this is per event)."""
        value = redact(value)
        encoded = json.dumps(value, default=str)
        if _JSON_NUL in encoded:
            # Rare (a NUL in a module's output): walk the value once rather than every event.
            value = without_nul(json.loads(encoded))
            encoded = json.dumps(value)
        cleaned = self.text(encoded)
        if cleaned is not encoded and cleaned != encoded:
            return json.loads(cleaned), len(cleaned)
        return value, len(encoded)


@dataclass
class IngestResult:
    emitted: int
    stored: int
    hosts: dict[str, HostTally]
    failures: list[Failure]
    stats_seen: bool
    ansible_pid: int | None


class EventIngestor:
    def __init__(self, stage_run: StageRun, scrubber: Scrubber, *, facts_sink: Callable | None = None,
                 on_event: Callable | None = None, batch_size: int = BATCH_SIZE, flush_seconds: float = FLUSH_SECONDS):
        self.stage_run = stage_run
        self.scrubber = scrubber
        self.facts_sink = facts_sink
        self.on_event = on_event
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.emitted = 0
        self.stored = 0
        self.hosts: dict[str, HostTally] = {}
        self.failures: list[Failure] = []
        self.stats_seen = False
        self.ansible_pid: int | None = None
        self._batch: list[tuple] = []
        self._last_flush = time.monotonic()

    # -- the hot path: runner's thread ---------------------------------------------------------
    def handle(self, event: dict) -> bool:
        self.emitted += 1
        self.queue.put(event)
        # The database is the store of events; runner need not write a file per event as well.
        return False

    # -- the consumer: the thread that runs the stage ------------------------------------------
    def consume(self, producer_alive: Callable[[], bool], tick: Callable | None = None,
                tick_seconds: float = 1.0) -> IngestResult:
        """Store events until the producer has finished and the queue is empty."""
        last_tick = time.monotonic()
        while True:
            try:
                event = self.queue.get(timeout=min(self.flush_seconds, tick_seconds))
            except queue.Empty:
                event = None
            if event is not None:
                self._take(event)
            now = time.monotonic()
            if len(self._batch) >= self.batch_size or (self._batch and now - self._last_flush >= self.flush_seconds):
                self.flush()
            if tick is not None and now - last_tick >= tick_seconds:
                tick()
                last_tick = now
            if event is None and not producer_alive() and self.queue.empty():
                break
        # Events the runner delivered after the producer stopped being alive are drained here.
        while not self.queue.empty():
            self._take(self.queue.get())
        self.flush()
        stored = TaskEvent.objects.filter(stage_run=self.stage_run).count()
        return IngestResult(self.emitted, stored, self.hosts, self.failures, self.stats_seen, self.ansible_pid)

    def flush(self) -> None:
        if self._batch:
            self.stored += insert_events(self._batch)
            self._batch = []
        self._last_flush = time.monotonic()

    def _take(self, event: dict) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = _plain(data.get("host") or "")
        task = _plain(data.get("task") or "")
        result = data.get("res") if isinstance(data.get("res"), dict) else {}
        if self.ansible_pid is None and event.get("pid"):
            self.ansible_pid = int(event["pid"])
        failed = (kind in _FAILED_EVENTS and not data.get("ignore_errors")) or kind == "runner_on_unreachable"
        changed = kind in ("runner_on_ok", "runner_item_on_ok") and _changed(result, event.get("stdout"))
        if kind in _HOST_EVENTS and host:
            self._tally(kind, host, task, result, failed, changed)
        if kind == "playbook_on_stats":
            self._stats(data)
        # A check that failed still returns what it measured (a port Down, a mount missing): the
        # inventory shows the machine as found, not as it was before.
        if kind in ("runner_on_ok", "runner_on_failed") and host and self.facts_sink is not None:
            facts = {k: v for k, v in (result.get("ansible_facts") or {}).items() if k.startswith("appliance_")}
            if facts:
                self.facts_sink(host, without_nul(facts))
        self._batch.append(self._row(event, kind, data, host, task, failed, changed))
        if self.on_event is not None:
            self.on_event(kind, host, task, event)

    def _tally(self, kind, host, task, result, failed, changed) -> None:
        tally = self.hosts.setdefault(host, HostTally())
        if kind == "runner_on_ok":
            tally.ok += 1
            tally.changed += int(changed)
        elif kind == "runner_on_skipped":
            tally.skipped += 1
        elif kind == "runner_on_unreachable":
            tally.unreachable += 1
        elif kind == "runner_on_failed":
            if failed:
                tally.failed += 1
            else:
                tally.ok += 1
        if failed and not tally.failed_task:
            tally.failed_task = task
            tally.message = _plain(self.scrubber.text(failure_message(result)))
            self.failures.append(Failure(host, task, tally.message))

    def _stats(self, data: dict) -> None:
        # The play recap is Ansible's own count; it wins over the tally of events.
        self.stats_seen = True
        columns = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
                   "skipped": "skipped"}
        hosts = set()
        for column in columns:
            hosts.update((data.get(column) or {}).keys())
        for host in hosts:
            tally = self.hosts.setdefault(host, HostTally())
            for column, attribute in columns.items():
                setattr(tally, attribute, int((data.get(column) or {}).get(host, 0)))

    def _row(self, event, kind, data, host, task, failed, changed) -> tuple:
        clean, size = self.scrubber.data(data)
        if size > DATA_LIMIT:
            clean = {k: v for k, v in clean.items() if k != "res"}
            clean["res_cut"] = f"result of {size} characters not stored; see the stdout"
        created = event.get("created")
        created_at = parse_datetime(created) if isinstance(created, str) else None
        if created_at is None or not isinstance(created_at, datetime):
            created_at = timezone.now()
        return (self.stage_run.pk, int(event.get("counter") or self.emitted), _line(event.get("uuid", ""), 64),
                _line(kind, 64), _line(host, 255), _line(data.get("play") or "", 500), _line(task, 500),
                _line(data.get("role") or "", 255), changed, failed,
                self.scrubber.text(_text(event.get("stdout") or "", STDOUT_LIMIT)), clean, created_at)


def _changed(result: dict, stdout) -> bool:
    if "changed" in result or "censored" not in result:
        return bool(result.get("changed"))
    # ansible-runner replaces a no_log result with {"censored": ...}, "changed" included; Ansible's
    # own line for it still says which ("changed: [gpu01]" or "ok: [gpu01]").
    return isinstance(stdout, str) and stdout.lstrip().startswith("changed:")


def _plain(value) -> str:
    text = value if isinstance(value, str) else str(value)
    return text.replace(NUL, "") if NUL in text else text


def _line(value, limit: int) -> str:
    return _plain(value)[:limit]


_COLUMNS = ("stage_run_id", "counter", "uuid", "event", "host", "play", "task", "role", "changed", "failed", "stdout",
            "data", "created")


def insert_events(rows: list[tuple]) -> int:
    """Store a batch; returns how many rows were stored.

    One multi-row insert per batch. This is the ingestion hot spot: the ORM's per-field preparation of
    bulk_create costs twice the insert itself, so values are prepared here, once, the way the ORM would.
    A batch the database refuses is stored row by row: every event it can take is kept, and the ones it
    cannot are logged and left out (the stage's completeness count then names them)."""
    connection = connections[router.db_for_write(TaskEvent)]
    ops = connection.ops
    json_placeholder = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    placeholders = ", ".join(json_placeholder if c == "data" else "%s" for c in _COLUMNS)
    sql = (f"INSERT INTO {ops.quote_name(TaskEvent._meta.db_table)} "
           f"({', '.join(ops.quote_name(c) for c in _COLUMNS)}) VALUES ({placeholders})")
    prepared = [(*row[:11], json.dumps(row[11], default=str), ops.adapt_datetimefield_value(row[12])) for row in rows]
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.executemany(sql, prepared)
        return len(prepared)
    except DatabaseError as exc:
        if len(prepared) == 1:
            log.error("task event %s of stage run %s not stored: %s", prepared[0][1], prepared[0][0], exc)
            return 0
        log.warning("a batch of %d task events was refused (%s); storing them one by one", len(prepared), exc)
    stored = 0
    for row in prepared:
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(sql, row)
            stored += 1
        except DatabaseError as exc:
            log.error("task event %s of stage run %s not stored: %s", row[1], row[0], exc)
    return stored
