"""How far a run has got, computed from what is stored: the portal's run page and the run API read the
same numbers from here.

A finished stage's per-host counts are Ansible's play recap (HostResult). A running stage has no recap
yet: its counts are the task events stored so far, aggregated in SQL (the ingestor stores them every
quarter of a second), counted the way the ingestor tallies them. "Task N of M": N is the number of tasks
the running stage has started; M is how many the previous successful run of the same stage started,
when there is one and this run has not gone past it (otherwise M is unknown and not shown). The ETA is
that previous run's duration less the time spent. The number of queries does not depend on the number
of stages, hosts or events.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext, pgettext_lazy

from .models import HostResult, Run, StageRun, TaskEvent
from .states import STAGE_FINISHED, StageState

COUNTS = ("ok", "changed", "failed", "unreachable", "skipped")
TASK_START = "playbook_on_task_start"

# Readable outcomes of Ansible's event names, for task lines ("gpu01 · Install NVIDIA driver · ok").
OUTCOMES = {
    "runner_on_ok": pgettext_lazy("task outcome", "ok"),
    "runner_on_failed": pgettext_lazy("task outcome", "failed"),
    "runner_on_skipped": pgettext_lazy("task outcome", "skipped"),
    "runner_on_unreachable": pgettext_lazy("task outcome", "unreachable"),
    "runner_item_on_ok": pgettext_lazy("task outcome", "item ok"),
    "runner_item_on_failed": pgettext_lazy("task outcome", "item failed"),
    "runner_item_on_skipped": pgettext_lazy("task outcome", "item skipped"),
    "runner_retry": pgettext_lazy("task outcome", "retrying"),
    "runner_on_start": pgettext_lazy("task outcome", "started"),
    "playbook_on_start": pgettext_lazy("task outcome", "playbook started"),
    "playbook_on_play_start": pgettext_lazy("task outcome", "play started"),
    "playbook_on_task_start": pgettext_lazy("task outcome", "task started"),
    "playbook_on_handler_task_start": pgettext_lazy("task outcome", "handler started"),
    "playbook_on_stats": pgettext_lazy("task outcome", "recap"),
    "playbook_on_no_hosts_matched": pgettext_lazy("task outcome", "no host matched"),
    "verbose": pgettext_lazy("task outcome", "output"),
    "warning": pgettext_lazy("task outcome", "warning"),
    "deprecated": pgettext_lazy("task outcome", "deprecation"),
    "error": pgettext_lazy("task outcome", "error"),
}
RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


def format_duration(value: timedelta | float | None) -> str:
    """12 s, 3 min 05 s, 1 h 02 min; empty when unknown."""
    if value is None:
        return ""
    seconds = int(value.total_seconds() if isinstance(value, timedelta) else value)
    seconds = max(seconds, 0)
    if seconds < 60:
        return _("%(s)d s") % {"s": seconds}
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return _("%(m)d min %(s)02d s") % {"m": minutes, "s": seconds}
    hours, minutes = divmod(minutes, 60)
    return _("%(h)d h %(m)02d min") % {"h": hours, "m": minutes}


def duration(start: datetime | None, end: datetime | None, now: datetime | None = None) -> timedelta | None:
    """From start to end (or to now, while it runs); None before it starts."""
    if start is None:
        return None
    return (end or now or timezone.now()) - start


@dataclass
class Counts:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0

    def add(self, other: "Counts") -> None:
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in COUNTS}

    @property
    def problem(self) -> bool:
        return bool(self.failed or self.unreachable)


@dataclass
class TaskLine:
    """One readable event: host · task · outcome."""

    stage: str
    counter: int
    host: str
    task: str
    outcome: str
    state: str  # for the colour: ok, changed, failed, skipped

    def __str__(self):
        return " · ".join(part for part in (self.host, self.task, self.outcome) if part)


@dataclass
class StageProgress:
    stage_run: StageRun
    duration: timedelta | None
    hosts: dict[str, Counts]
    totals: Counts
    live: bool  # counts from the events stored so far, not yet Ansible's recap
    tasks_started: int | None = None
    tasks_expected: int | None = None
    current_task: str = ""
    previous_run_id: int | None = None
    previous_duration: timedelta | None = None

    @property
    def stage(self) -> str:
        return self.stage_run.stage

    @property
    def done(self) -> bool:
        return self.stage_run.state in STAGE_FINISHED

    @property
    def remaining(self) -> timedelta | None:
        """Time left by the previous successful run of this stage (zero once that is spent)."""
        if self.done:
            return timedelta(0)
        if self.previous_duration is None:
            return None
        spent = self.duration or timedelta(0)
        return max(self.previous_duration - spent, timedelta(0))

    @property
    def fraction(self) -> float:
        """How much of the stage is done, 0..1: by tasks where M is known, else by time, else 0."""
        if self.done:
            return 1.0
        if self.stage_run.state != StageState.RUNNING:
            return 0.0
        if self.tasks_expected and self.tasks_started is not None:
            # A started task is not a finished one: the current task counts half.
            return min(max(self.tasks_started - 0.5, 0) / self.tasks_expected, 0.99)
        if self.previous_duration and self.duration is not None:
            return min(self.duration / self.previous_duration, 0.99)
        return 0.0

    @property
    def duration_text(self) -> str:
        return format_duration(self.duration)

    @property
    def remaining_text(self) -> str:
        return format_duration(self.remaining)

    @property
    def task_text(self) -> str:
        """task 3 of 21 (or task 3, when M is not known)."""
        if not self.tasks_started:
            return ""
        if self.tasks_expected:
            return _("task %(n)d of %(m)d") % {"n": self.tasks_started, "m": self.tasks_expected}
        return _("task %(n)d") % {"n": self.tasks_started}

    def as_dict(self) -> dict:
        remaining = self.remaining
        return {
            "stage": self.stage, "state": self.stage_run.state, "live": self.live,
            "duration_seconds": _seconds(self.duration), "tasks_started": self.tasks_started,
            "tasks_expected": self.tasks_expected, "current_task": self.current_task,
            "remaining_seconds": _seconds(remaining), "estimated_from_run": self.previous_run_id,
            "counts": self.totals.as_dict(), "hosts": {h: c.as_dict() for h, c in sorted(self.hosts.items())},
        }


@dataclass
class RunProgress:
    run: Run
    stages: list[StageProgress]
    elapsed: timedelta | None
    heartbeat_age: timedelta | None
    totals: Counts = field(default_factory=Counts)

    @property
    def stages_done(self) -> int:
        return sum(1 for s in self.stages if s.done)

    @property
    def current(self) -> StageProgress | None:
        return next((s for s in self.stages if s.stage_run.state == StageState.RUNNING), None)

    @property
    def percent(self) -> int:
        if self.run.finished or not self.stages:
            return 100 if self.run.finished else 0
        current = self.current
        done = self.stages_done + (current.fraction if current else 0.0)
        return min(int(done * 100 / len(self.stages)), 99)

    @property
    def stage_states(self) -> list[tuple[str, str, int]]:
        """(state, its label, how many stages are in it), in the order states first appear."""
        found: dict[str, list] = {}
        for stage in self.stages:
            entry = found.setdefault(stage.stage_run.state, [stage.stage_run.get_state_display(), 0])
            entry[1] += 1
        return [(state, label, n) for state, (label, n) in found.items()]

    @property
    def remaining(self) -> timedelta | None:
        """Time left by the previous successful runs of every stage not done; None if one is unknown."""
        if self.run.finished:
            return None
        total = timedelta(0)
        for stage in self.stages:
            remaining = stage.remaining
            if remaining is None:
                return None
            total += remaining
        return total

    @property
    def elapsed_text(self) -> str:
        return format_duration(self.elapsed)

    @property
    def remaining_text(self) -> str:
        return format_duration(self.remaining)

    @property
    def heartbeat_text(self) -> str:
        if self.heartbeat_age is None:
            return ""
        return _("%(age)s ago") % {"age": format_duration(self.heartbeat_age)}

    def as_dict(self) -> dict:
        current = self.current
        return {
            "percent": self.percent, "stages_done": self.stages_done, "stages_total": len(self.stages),
            "current_stage": current.stage if current else None,
            "current_task": current.current_task if current else "",
            "tasks_started": current.tasks_started if current else None,
            "tasks_expected": current.tasks_expected if current else None,
            "elapsed_seconds": _seconds(self.elapsed), "remaining_seconds": _seconds(self.remaining),
            "heartbeat_age_seconds": _seconds(self.heartbeat_age),
            "counts": self.totals.as_dict(), "stages": [s.as_dict() for s in self.stages],
        }


def _seconds(value: timedelta | None) -> int | None:
    return None if value is None else max(int(value.total_seconds()), 0)


def _previous_successes(run: Run):
    """The run's stage runs, each annotated with the previous successful run of the same stage on the
    same appliance (same check mode, not carried over): its id, start and end."""
    previous = (StageRun.objects.filter(run__appliance_id=run.appliance_id, run__dry_run=run.dry_run,
                                        stage=OuterRef("stage"), state=StageState.SUCCEEDED,
                                        carried_from__isnull=True, started__isnull=False, ended__isnull=False)
                .exclude(run_id=run.pk).order_by("-ended", "-id"))
    return run.stage_runs.select_related("carried_from").order_by("order").annotate(
        previous_id=Subquery(previous.values("pk")[:1]),
        previous_run_id=Subquery(previous.values("run_id")[:1]),
        previous_started=Subquery(previous.values("started")[:1]),
        previous_ended=Subquery(previous.values("ended")[:1]),
    )


def _live_counts(stage_run_ids: list[int]) -> dict[int, dict[str, Counts]]:
    """Per stage run and host, the counts of the events stored so far (as the ingestor tallies them)."""
    if not stage_run_ids:
        return {}
    rows = (TaskEvent.objects.filter(stage_run_id__in=stage_run_ids).exclude(host="")
            .values("stage_run_id", "host")
            .annotate(ok=Count("id", filter=Q(event="runner_on_ok") | Q(event="runner_on_failed", failed=False)),
                      changed=Count("id", filter=Q(event="runner_on_ok", changed=True)),
                      failed=Count("id", filter=Q(event="runner_on_failed", failed=True)),
                      unreachable=Count("id", filter=Q(event="runner_on_unreachable")),
                      skipped=Count("id", filter=Q(event="runner_on_skipped"))))
    live: dict[int, dict[str, Counts]] = {}
    for row in rows:
        live.setdefault(row["stage_run_id"], {})[row["host"]] = Counts(*(row[name] for name in COUNTS))
    return live


def _tasks_started(stage_run_ids: list[int]) -> dict[int, int]:
    if not stage_run_ids:
        return {}
    rows = (TaskEvent.objects.filter(stage_run_id__in=stage_run_ids, event=TASK_START)
            .values("stage_run_id").annotate(n=Count("id")))
    return {row["stage_run_id"]: row["n"] for row in rows}


def _current_tasks(stage_run_ids: list[int]) -> dict[int, str]:
    """The task each running stage started last (one query: the latest task start of each)."""
    if not stage_run_ids:
        return {}
    latest = (TaskEvent.objects.filter(stage_run_id=OuterRef("pk"), event=TASK_START)
              .order_by("-counter").values("task")[:1])
    return dict(StageRun.objects.filter(pk__in=stage_run_ids).annotate(task=Subquery(latest))
                .values_list("pk", "task"))


def run_progress(run: Run, now: datetime | None = None) -> RunProgress:
    """Everything the run page and the run API show about how far `run` has got (at most 5 queries)."""
    now = now or timezone.now()
    stage_runs = list(_previous_successes(run))
    running = [s.pk for s in stage_runs if s.state == StageState.RUNNING]
    recaps: dict[int, dict[str, Counts]] = {}
    for result in HostResult.objects.filter(stage_run__run=run).only("stage_run_id", "host", *COUNTS):
        recaps.setdefault(result.stage_run_id, {})[result.host] = Counts(*(getattr(result, n) for n in COUNTS))
    live = _live_counts(running)
    # The previous runs' task counts are read only for stages that run now: those are the ones with a "of M".
    expected = _tasks_started([s.previous_id for s in stage_runs if s.pk in running and s.previous_id])
    started = _tasks_started(running)
    current_tasks = _current_tasks(running)
    stages, totals = [], Counts()
    for stage_run in stage_runs:
        is_live = stage_run.pk in running
        hosts = live.get(stage_run.pk, {}) if is_live else recaps.get(stage_run.pk, {})
        stage_totals = Counts()
        for counts in hosts.values():
            stage_totals.add(counts)
        previous_duration = duration(stage_run.previous_started, stage_run.previous_ended)
        progress = StageProgress(
            stage_run=stage_run, duration=duration(stage_run.started, stage_run.ended, now), hosts=hosts,
            totals=stage_totals, live=is_live, previous_run_id=stage_run.previous_run_id,
            previous_duration=previous_duration)
        if is_live:
            progress.tasks_started = started.get(stage_run.pk, 0)
            progress.current_task = current_tasks.get(stage_run.pk) or ""
            progress.tasks_expected = expected.get(stage_run.previous_id)
            if progress.tasks_expected is not None and progress.tasks_started > progress.tasks_expected:
                progress.tasks_expected = None  # this run went past the previous one: M is not known
        if not stage_run.carried_from_id:
            totals.add(stage_totals)
        stages.append(progress)
    heartbeat_age = now - run.heartbeat_at if run.heartbeat_at and not run.finished else None
    return RunProgress(run=run, stages=stages, elapsed=duration(run.started, run.ended, now),
                       heartbeat_age=heartbeat_age, totals=totals)


def task_lines(run: Run, limit: int) -> list[TaskLine]:
    """The latest results of the run's tasks, newest first, as readable lines."""
    events = (TaskEvent.objects.filter(stage_run__run=run, event__in=RESULT_EVENTS)
              .exclude(task="").select_related("stage_run").only("stage_run__stage", "counter", "host", "task",
                                                                  "event", "changed", "failed")
              .order_by("-stage_run__order", "-counter")[:limit])
    return [task_line(event) for event in events]


def outcome(event: TaskEvent) -> tuple[str, str]:
    """(what happened, in words; its colour: ok, changed, failed, skipped) for one stored event."""
    if event.event in ("runner_on_ok", "runner_item_on_ok") and event.changed:
        return pgettext("task outcome", "changed"), "changed"
    if event.event == "runner_on_failed" and not event.failed:
        return pgettext("task outcome", "failed (ignored)"), "skipped"
    state = {"runner_on_failed": "failed", "runner_item_on_failed": "failed", "runner_on_unreachable": "failed",
             "runner_on_skipped": "skipped", "runner_item_on_skipped": "skipped"}.get(event.event, "ok")
    return str(OUTCOMES.get(event.event, event.event)), state


def task_line(event: TaskEvent) -> TaskLine:
    text, state = outcome(event)
    return TaskLine(stage=event.stage_run.stage, counter=event.counter, host=event.host, task=event.task,
                    outcome=text, state=state)
