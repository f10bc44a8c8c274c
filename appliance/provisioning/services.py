"""Provisioning runs: creating them, executing their stages in order, cancelling, and the watchdog.

The bootstrap command, the portal, the API and the Celery task all come here. A run is created
(with its stage runs, pending) by `create_run`, which refuses bad input before anything starts, and
executed by `execute_run`, in the bootstrap's own process or in a worker (`start_run` hands it to
appliance.core.dispatch so that a web request never waits).

A running run beats a heartbeat every few seconds. The watchdog moves a run whose worker is gone
(its process is dead on this host, or its heartbeat is older than the deadline) to failed, with its
running stage and its provisioning nodes, each to the failed twin its state table names: nothing stays
"running" forever. The watchdog runs on Celery beat (or the embedded beat) and before a run is created.

A user's cancel is a flag on the run, read by the executor, and ends as "cancelled": an abort, as in
MAAS. Each node returns to the state it had before the run unless a task of the run changed something
on it (then it is failed, naming what changed). A dead worker ends as "failed", and so do its nodes.
"""

import logging
import os
import socket
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from appliance import audit
from appliance.core import dispatch
from appliance.core.conflicts import StateConflict
from appliance.inventory import health
from appliance.inventory.models import Appliance, Node
from appliance.inventory.states import FAILED_TWIN as NODE_FAILED_TWIN
from appliance.inventory.states import TRANSITIONS as NODE_TRANSITIONS
from appliance.inventory.states import NodeState

from . import catalogue as stage_catalogue
from . import executor, playbook_vars, repository
from .facts import FactsSink
from .models import HostResult, Run, StageRun, TaskEvent
from .processes import is_ansible, kill_tree
from .signals import demo_workload_started
from .states import RUN_FINISHED, RUN_MACHINE, STAGE_FAILED_TWIN, STAGE_MACHINE, RunState, StageState

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
# How many changed tasks per stage, and how many failing checks, a node's state reason names.
_TASKS_NAMED = 5
_FAILURES_NAMED = 3
ProgressCallback = Callable[..., None]


def heartbeat_timeout() -> timedelta:
    return timedelta(seconds=settings.PROVISIONING_HEARTBEAT_TIMEOUT)


def pending_timeout() -> timedelta:
    # A run nobody picked up (no worker running) is failed instead of waiting forever.
    return timedelta(seconds=settings.PROVISIONING_PENDING_TIMEOUT)


class RunRefused(ValueError):
    """Input a run cannot start with; every line names the place (stage, node, file:line)."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class RunConflict(RunRefused, StateConflict):
    """The appliance's or the run's state refuses it: a run is already active, or the run has ended (409)."""


# --------------------------------------------------------------------------------------------------
# Creating runs


def _target_nodes(appliance: Appliance, node_names: list[str] | None) -> list[Node]:
    nodes = list(appliance.nodes.select_related("platform", "bmc").exclude(state=NodeState.RETIRED))
    if not node_names:
        return nodes
    by_name = {n.name: n for n in nodes}
    unknown = [n for n in node_names if n not in by_name]
    if unknown:
        raise RunRefused([f"nodes: {', '.join(unknown)} not in appliance {appliance.name} (or retired)"])
    return [by_name[n] for n in node_names]


def latest_bootstrap(appliance: Appliance, exclude: int | None = None) -> Run | None:
    runs = Run.objects.filter(appliance=appliance, kind=Run.Kind.BOOTSTRAP, dry_run=False)
    if exclude is not None:
        runs = runs.exclude(pk=exclude)
    return runs.order_by("-created", "-id").first()


def completed_stage_runs(previous: Run | None) -> dict[str, StageRun]:
    """Stages an unfinished bootstrap completed on all its nodes: {stage: the stage run that did it}."""
    if previous is None or previous.state not in (RunState.FAILED, RunState.CANCELLED):
        return {}
    done = {}
    for stage_run in previous.stage_runs.all():
        if stage_run.state == StageState.SUCCEEDED:
            done[stage_run.stage] = stage_run
        elif stage_run.state == StageState.SKIPPED and stage_run.carried_from_id:
            done[stage_run.stage] = stage_run.carried_from
    return done


def active_run(appliance: Appliance) -> Run | None:
    return Run.objects.filter(appliance=appliance, state__in=[RunState.PENDING, RunState.RUNNING]).first()


def run_kind(kind: str | None, stages: list[str] | None) -> str:
    """The kind of run asked for. With no kind named (the portal's form, POST {} to the API, the bootstrap
    command), "every stage" is the resumable bootstrap and a list of stages is a stages run: the rule lives
    here, once, as AWX's launch decides a job's type."""
    if kind:
        return kind
    return Run.Kind.STAGES if stages else Run.Kind.BOOTSTRAP


def create_run(appliance: Appliance, *, kind: str | None = None, stages: list[str] | None = None,
               from_stage: str | None = None, nodes: list[str] | None = None, dry_run: bool = False,
               force: bool = False, user=None, catalogue: stage_catalogue.Catalogue | None = None) -> Run:
    """Check the request and create the run with its stage runs (pending). Raises RunRefused.
    kind None: the service decides (run_kind)."""
    catalogue = catalogue or stage_catalogue.active()
    kind = run_kind(kind, stages)
    if kind not in Run.Kind.values:
        raise RunRefused([f"kind: {kind!r} is not one of {', '.join(Run.Kind.values)}"])
    try:
        selected = catalogue.select(only=stages, start=from_stage)
    except stage_catalogue.UnknownStage as exc:
        raise RunRefused([str(exc)]) from None
    if not selected:
        raise RunRefused(["stages: nothing to run (check --only and --from)"])
    if kind == Run.Kind.NODE and (len(selected) != 1 or not nodes):
        raise RunRefused(["a node run is one stage on named nodes"])
    target = _target_nodes(appliance, nodes)
    if not target:
        raise RunRefused([f"appliance {appliance.name} has no node to provision"])
    errors = []
    for stage in selected:
        errors.extend(stage.errors([n for n in target if stage.applies_to(n)]))
    if errors:
        raise RunRefused(errors)

    watchdog()
    with transaction.atomic():
        Appliance.objects.select_for_update().filter(pk=appliance.pk).first()
        busy = active_run(appliance)
        if busy is not None:
            raise RunConflict([f"appliance {appliance.name}: {busy} is {busy.state}; cancel it or wait for it"])
        carried = {}
        previous = latest_bootstrap(appliance)
        if kind == Run.Kind.BOOTSTRAP and not dry_run and not force:
            carried = completed_stage_runs(previous)
        run = Run.objects.create(
            appliance=appliance, kind=kind, stages=[s.name for s in selected],
            node_names=[n.name for n in target] if nodes else [], dry_run=dry_run, force=force,
            requested_by=user if getattr(user, "is_authenticated", False) else None,
            resumes=previous if carried else None,
        )
        for order, stage in enumerate(selected, start=1):
            stage_run = StageRun.objects.create(run=run, stage=stage.name, order=order)
            done = carried.get(stage.name)
            wanted = {n.name for n in target if stage.applies_to(n)}
            if done is not None and wanted <= set(done.hosts):
                stage_run.carried_from = done
                stage_run.hosts = done.hosts
                stage_run.save(update_fields=["carried_from", "hosts", "updated"])
                stage_run.transition(StageState.SKIPPED, f"completed by run #{done.run_id}")
    return run


def start_run(appliance: Appliance, **options) -> Run:
    """Create a run and hand it to a worker (Celery, or the in-process pool): returns at once."""
    from .tasks import execute_run_task

    run = create_run(appliance, **options)
    dispatch.enqueue(execute_run_task, run.pk)
    return run


def cancel_run(run: Run, user=None) -> Run:
    """Ask a run to stop. A pending run is cancelled at once; a running one at the executor's next check."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.finished:
            raise RunConflict([f"{run} has already ended ({run.state})"])
        who = user.get_username() if getattr(user, "is_authenticated", False) else ""
        run.cancel_requested, run.cancel_requested_by = True, who
        # The request's one record is provisioning.run.cancel, not a change-capture diff of the flag too.
        models.Model.save(run, update_fields=["cancel_requested", "cancel_requested_by", "updated"])
        audit.record("provisioning.run.cancel", target=run, details={"state": run.state})
        if run.state == RunState.PENDING:
            for stage_run in run.stage_runs.filter(state=StageState.PENDING):
                stage_run.transition(StageState.CANCELLED, "run cancelled before it started")
            run.transition(RunState.CANCELLED, f"cancelled by {who or 'a user'} before it started")
    return run


# --------------------------------------------------------------------------------------------------
# Executing runs


class _Pulse:
    """The run's heartbeat and its cancel flag, read together every few seconds."""

    def __init__(self, run: Run):
        self.run = run
        self.cancelled = False
        self._last = 0.0

    def __call__(self) -> None:
        now = timezone.now()
        if self._last and (now.timestamp() - self._last) < HEARTBEAT_SECONDS:
            return
        self._last = now.timestamp()
        Run.objects.filter(pk=self.run.pk).update(heartbeat_at=now)
        self.cancelled = Run.objects.filter(pk=self.run.pk, cancel_requested=True).exists()

    def should_cancel(self) -> bool:
        return self.cancelled


def _run_nodes(run: Run) -> list[Node]:
    nodes = run.appliance.nodes.select_related("platform", "bmc").exclude(state=NodeState.RETIRED)
    if run.node_names:
        nodes = nodes.filter(name__in=run.node_names)
    return list(nodes)


def _prepare_simulation(appliance: Appliance) -> None:
    if not appliance.simulated:
        return
    from appliance.simulation import services as simulation

    simulation.prepare_appliance(appliance)
    repository.ensure_built()  # the simulated management node serves it (README "Air-gapped installs")
    simulation.start(appliance)  # the BMC emulators and the nodes' SSH servers


# What a simulated appliance starts once a stage has put its files in place: the stage's own services,
# which a real node's systemd starts by itself (the simulation plays systemd).
_SIMULATED_SERVICES = {"workloads": ("the simulated Slurm", "start_slurm"),
                       "monitoring": ("the simulated nodes' collectors", "start_collectors")}


def _start_simulated_services(run: Run, stage_name: str) -> str:
    """Start what the stage's files describe on a simulated appliance; returns why it failed, or ""."""
    if run.dry_run or not run.appliance.simulated or stage_name not in _SIMULATED_SERVICES:
        return ""
    from appliance.simulation import services as simulation

    what, function = _SIMULATED_SERVICES[stage_name]
    try:
        getattr(simulation, function)(run.appliance)
    except simulation.SimulationError as exc:
        return f"{what} did not start: {exc}"
    return ""


def _start_demo_workload(run: Run, catalogue) -> str:
    """At the end of a whole bootstrap of a simulated appliance, the demo workload (unless it runs already),
    so that the portal has something to show, then the demo's story (signals.demo_workload_started: its
    models registered, promoted and deployed, its lending policies); returns why it failed, or ""."""
    if (run.dry_run or not run.appliance.simulated or run.kind != Run.Kind.BOOTSTRAP
            or catalogue.names[-1] not in run.stages):
        return ""
    from appliance.simulation import workload

    if not workload.status(run.appliance)["running"]:
        try:
            workload.start(run.appliance, profile="demo", speed=60)
        except workload.WorkloadError as exc:
            return f"the demo workload did not start: {exc}"
    for receiver, response in demo_workload_started.send_robust(sender=Run, appliance=run.appliance, run=run):
        if isinstance(response, Exception):
            log.error("the demo story (%s) failed", getattr(receiver, "__qualname__", receiver),
                      exc_info=(type(response), response, response.__traceback__))
            return f"the demo story stopped: {response}"
    return ""


def _emit(progress: ProgressCallback | None, what: str, **data) -> None:
    if progress is not None:
        progress(what, **data)


def _failure_line(stage: str, host: str, task: str, message: str) -> str:
    where = f"stage {stage}"
    if host:
        where += f", host {host}"
    if task:
        where += f", task {task!r}"
    return f"{where}: {message}"


def _record_host_results(stage_run: StageRun, ingest, nodes: dict[str, Node]) -> None:
    for host in sorted(set(stage_run.hosts) | set(ingest.hosts)):
        tally = ingest.hosts.get(host)
        if tally is None:
            continue
        HostResult.objects.create(
            stage_run=stage_run, node=nodes.get(host), host=host, ok=tally.ok, changed=tally.changed,
            failed=tally.failed, unreachable=tally.unreachable, skipped=tally.skipped,
            failed_task=tally.failed_task[:500], message=tally.message)


def _run_stage(run: Run, stage_run: StageRun, stage, nodes: list[Node], pulse: _Pulse,
               progress: ProgressCallback | None) -> set[str]:
    """Execute one stage; returns the hosts that failed in it."""
    stage_run.hosts = [n.name for n in nodes]
    stage_run.private_data_dir = str(executor.private_data_dir(stage_run))
    stage_run.save(update_fields=["hosts", "private_data_dir", "updated"])
    stage_run.transition(StageState.RUNNING)
    _emit(progress, "stage", stage_run=stage_run, hosts=stage_run.hosts)
    by_name = {n.name: n for n in nodes}
    try:
        playbook_input = playbook_vars.build(run, stage, nodes)
    except playbook_vars.SecretUnavailable as exc:
        stage_run.transition(StageState.FAILED, _failure_line(stage.name, "", "", str(exc)))
        return set(by_name)

    def on_event(kind, host, task, event):
        if stage_run.ansible_pid is None and event.get("pid"):
            stage_run.ansible_pid = int(event["pid"])
            stage_run.save(update_fields=["ansible_pid", "updated"])
        _emit(progress, "event", stage_run=stage_run, event_kind=kind, host=host, task=task, event=event)

    execution = executor.execute(
        stage_run, stage.playbook_path(), playbook_input, dry_run=run.dry_run,
        facts_sink=FactsSink(stage_run, by_name, run.dry_run), should_cancel=pulse.should_cancel, tick=pulse,
        on_event=on_event)
    if execution.notice:
        _emit(progress, "notice", message=execution.notice)
    ingest = execution.ingest
    _record_host_results(stage_run, ingest, by_name)
    totals = {name: sum(getattr(t, name) for t in ingest.hosts.values())
              for name in ("ok", "changed", "failed", "unreachable", "skipped")}
    stage_run.ok_count, stage_run.changed_count = totals["ok"], totals["changed"]
    stage_run.failed_count, stage_run.unreachable_count = totals["failed"], totals["unreachable"]
    stage_run.skipped_count = totals["skipped"]
    stage_run.events_emitted, stage_run.events_stored = ingest.emitted, ingest.stored
    stage_run.strategy = execution.strategy
    stage_run.ansible_pid = ingest.ansible_pid or stage_run.ansible_pid
    failed_hosts = {h for h, t in ingest.hosts.items() if t.failed or t.unreachable}
    if ingest.failures:
        first = ingest.failures[0]
        stage_run.failed_host, stage_run.failed_task = first.host[:255], first.task[:500]
    stage_run.save(update_fields=["ok_count", "changed_count", "failed_count", "unreachable_count",
                                  "skipped_count", "events_emitted", "events_stored", "strategy", "ansible_pid",
                                  "failed_host", "failed_task", "updated"])

    if execution.status == "canceled":
        stage_run.transition(StageState.CANCELLED, "cancelled by a user while running")
        return set()
    if ingest.emitted != ingest.stored:
        stage_run.transition(StageState.FAILED, _failure_line(
            stage.name, "", "", f"{ingest.emitted} events emitted but {ingest.stored} stored: the record of "
                                f"this stage is incomplete"))
        return failed_hosts
    if ingest.failures:
        first = ingest.failures[0]
        more = len({f.host for f in ingest.failures}) - 1
        message = _failure_line(stage.name, first.host, first.task, first.message)
        if more:
            message += f" (and {more} more host{'s' if more > 1 else ''} failed)"
        stage_run.transition(StageState.FAILED, message)
        return failed_hosts
    if execution.status != "successful":
        detail = execution.stdout_tail or f"ansible-playbook ended with status {execution.status}"
        stage_run.transition(StageState.FAILED, _failure_line(
            stage.name, "", "", f"ansible-playbook exited with code {execution.rc}: {detail}"))
        return set(by_name)
    failure = _start_simulated_services(run, stage.name)
    if failure:
        stage_run.transition(StageState.FAILED, _failure_line(stage.name, "", "", failure))
        return set(by_name)
    stage_run.transition(StageState.SUCCEEDED)
    return set()


def _completed_on(node: Node, stage_runs: list[StageRun], catalogue) -> bool:
    """Whether every stage of the run that applies to the node ran to the end on it without failing."""
    for stage_run in stage_runs:
        if not catalogue.get(stage_run.stage).applies_to(node):
            continue
        if node.name not in stage_run.hosts:
            return False
        if stage_run.state == StageState.SUCCEEDED or (
                stage_run.state == StageState.SKIPPED and stage_run.carried_from_id):
            continue
        # A stage that failed on other hosts still completed on this one if it ran to the end here.
        host_level_failure = stage_run.state == StageState.FAILED and stage_run.failed_host
        result = stage_run.host_results.filter(host=node.name).first() if host_level_failure else None
        if result is None or not result.succeeded:
            return False
    return True


def _changes_by_host(run: Run) -> dict[str, dict[str, list[str]]]:
    """What the run's tasks changed on each host: {host: {stage: [task, ...]}}, in run order, from the
    stored task events (changed=true) and, for a stage whose events name no task, its host results."""
    changes: dict[str, dict[str, list[str]]] = {}
    events = (TaskEvent.objects.filter(stage_run__run=run, changed=True).exclude(host="")
              .order_by("stage_run__order", "counter").values_list("host", "stage_run__stage", "task"))
    for host, stage, task in events:
        tasks = changes.setdefault(host, {}).setdefault(stage, [])
        if (task or "a task") not in tasks:
            tasks.append(task or "a task")
    results = (HostResult.objects.filter(stage_run__run=run, changed__gt=0)
               .order_by("stage_run__order").values_list("host", "stage_run__stage", "changed"))
    for host, stage, count in results:
        changes.setdefault(host, {}).setdefault(stage, [f"{count} change{'s' if count > 1 else ''}"])
    return changes


def _describe_changes(by_stage: dict[str, list[str]]) -> str:
    shown = []
    for stage, tasks in by_stage.items():
        more = len(tasks) - _TASKS_NAMED
        shown.append(f"{stage}: {', '.join(tasks[:_TASKS_NAMED])}" + (f" and {more} more" if more > 0 else ""))
    return "; ".join(shown)


def _health_reason(run: Run, failures: list[str]) -> str:
    more = len(failures) - _FAILURES_NAMED
    named = "; ".join(failures[:_FAILURES_NAMED]) + (f" (and {more} more)" if more > 0 else "")
    return f"run #{run.pk} ended, but checks fail: {named}"


def _abort_node(run: Run, node: Node, changed: dict[str, list[str]] | None, run_message: str) -> None:
    """A cancelled run is an abort: the node returns to its state before the run unless a task of the
    run changed something on it; then it is failed, saying what changed."""
    if changed:
        node.transition(NodeState.FAILED, f"run #{run.pk} ({run_message}) was aborted after changing: "
                                          f"{_describe_changes(changed)} on it")
        return
    before = run.nodes_before.get(node.name) or {}
    previous, previous_reason = before.get("state", ""), before.get("reason", "")
    reason = f"run #{run.pk} ({run_message}) was aborted before it changed anything on it"
    if previous == NodeState.READY:
        failures = health.open_failures(node)
        if failures:
            node.transition(NodeState.FAILED, _health_reason(run, failures))
            return
    if previous and previous != NodeState.PROVISIONING and previous in NODE_TRANSITIONS[NodeState.PROVISIONING]:
        node.transition(previous, f"{reason}; as before: {previous_reason}" if previous_reason else reason)
        return
    where = f"it was {previous} before, and" if previous else "its state before the run is unknown, and"
    node.transition(NodeState.FAILED, f"{reason}, but {where} a node cannot return there from provisioning")


def _finish_nodes(run: Run, nodes: list[Node], node_failures: dict[str, str], run_message: str, catalogue, *,
                  aborted: bool = False) -> None:
    """Each node the run moved to provisioning ends: failed (with why) where a stage failed on it; after a
    cancel, back to its state before the run unless the run changed it (_abort_node); otherwise ready
    when every stage of the run completed on it and no current health check fails, failed if not."""
    stage_runs = list(run.stage_runs.all())
    changes = _changes_by_host(run) if aborted else {}
    for node in nodes:
        node.refresh_from_db(fields=["state"])
        if node.state != NodeState.PROVISIONING:
            continue
        if node.name in node_failures:
            # The health rows name the failing part in a line; the stage's message is the whole output.
            failures = health.open_failures(node)
            node.transition(NodeState.FAILED, _health_reason(run, failures) if failures else node_failures[node.name])
        elif aborted:
            _abort_node(run, node, changes.get(node.name), run_message)
        elif _completed_on(node, stage_runs, catalogue):
            failures = health.open_failures(node)
            if failures:
                node.transition(NodeState.FAILED, _health_reason(run, failures))
            else:
                node.transition(NodeState.READY, f"provisioned by run #{run.pk}")
        else:
            node.transition(NodeState.FAILED, f"run #{run.pk} did not complete: {run_message}")


_SUMMARY_FIELDS = ("ok_count", "changed_count", "failed_count", "unreachable_count", "skipped_count",
                   "failed_stage", "failed_host", "failed_task")


def _summarise(run: Run) -> tuple[str, ...]:
    """Set the run's totals from its stage runs; returns the fields to save, with the run's end (whose
    one audit record carries them)."""
    stage_runs = list(run.stage_runs.filter(carried_from__isnull=True))
    for name in ("ok", "changed", "failed", "unreachable", "skipped"):
        setattr(run, f"{name}_count", sum(getattr(s, f"{name}_count") for s in stage_runs))
    return _SUMMARY_FIELDS


def execute_run(run_id: int, progress: ProgressCallback | None = None,
                catalogue: stage_catalogue.Catalogue | None = None) -> Run:
    """Execute a pending run's stages in order, in this process. Returns the run, ended."""
    catalogue = catalogue or stage_catalogue.active()
    run = Run.objects.select_related("appliance").get(pk=run_id)
    if run.state != RunState.PENDING:
        return run
    nodes = _run_nodes(run)
    run.worker_host, run.worker_pid = socket.gethostname(), os.getpid()
    if not run.dry_run:
        # Where a cancel returns each node the run changed nothing on.
        run.nodes_before = {n.name: {"state": n.state, "reason": n.state_reason} for n in nodes}
    run.transition(RunState.RUNNING, also=("nodes_before",))
    pulse = _Pulse(run)
    node_failures: dict[str, str] = {}
    run_failure = ""
    try:
        if not run.dry_run:
            for node in nodes:
                if node.state != NodeState.PROVISIONING:
                    node.transition(NodeState.PROVISIONING, f"run #{run.pk}")
        _prepare_simulation(run.appliance)
        stop_reason = ""
        for stage_run in run.stage_runs.order_by("order"):
            if stage_run.state != StageState.PENDING:
                _emit(progress, "stage_end", stage_run=stage_run)
                continue
            pulse()
            if pulse.cancelled:
                stage_run.transition(StageState.CANCELLED, "run cancelled before this stage")
                continue
            if stop_reason:
                stage_run.transition(StageState.SKIPPED, stop_reason)
                _emit(progress, "stage_end", stage_run=stage_run)
                continue
            stage = catalogue.get(stage_run.stage)
            stage_nodes = [n for n in nodes if stage.applies_to(n) and n.name not in node_failures]
            if not stage_nodes:
                reason = ("every node it applies to failed in an earlier stage"
                          if any(stage.applies_to(n) for n in nodes) else
                          f"no node with role {', '.join(sorted(stage.roles))} in this run")
                stage_run.transition(StageState.SKIPPED, reason)
                _emit(progress, "stage_end", stage_run=stage_run)
                continue
            failed_hosts = _run_stage(run, stage_run, stage, stage_nodes, pulse, progress)
            _emit(progress, "stage_end", stage_run=stage_run)
            if stage_run.state == StageState.FAILED and not run.failed_stage:
                run.failed_stage, run.failed_host, run.failed_task = (
                    stage_run.stage, stage_run.failed_host, stage_run.failed_task)
                run_failure = stage_run.reason
            for host in failed_hosts:
                node_failures.setdefault(host, stage_run.reason)
            if stage_run.state == StageState.CANCELLED:
                pulse.cancelled = True
            elif stage_run.state == StageState.FAILED and not stage_run.failed_host:
                # The stage failed as a whole (not one host): later stages depend on it.
                stop_reason = f"stage {stage_run.stage} failed"
    except Exception as exc:
        log.exception("run %s failed", run.pk)
        run_failure = run_failure or f"{type(exc).__name__}: {exc}"
        for stage_run in run.stage_runs.filter(state=StageState.RUNNING):
            stage_run.transition(StageState.FAILED, run_failure)
        for stage_run in run.stage_runs.filter(state=StageState.PENDING):
            stage_run.transition(StageState.SKIPPED, "the run stopped: " + run_failure)

    run.refresh_from_db(fields=["cancel_requested", "cancel_requested_by"])
    cancelled = run.stage_runs.filter(state=StageState.CANCELLED).exists()
    if not run_failure and not cancelled and not run.stage_runs.filter(state=StageState.FAILED).exists():
        run_failure = _start_demo_workload(run, catalogue)
    if run_failure:
        target, message = RunState.FAILED, run_failure
    elif cancelled:
        who = run.cancel_requested_by or "a user"
        target, message = RunState.CANCELLED, f"cancelled by {who}"
    else:
        target, message = RunState.SUCCEEDED, ("check mode: nothing was changed" if run.dry_run else "")
    summary = _summarise(run)
    if not run.dry_run:
        _finish_nodes(run, nodes, node_failures, message, catalogue, aborted=target == RunState.CANCELLED)
    run.transition(target, message, also=summary)
    return run


# --------------------------------------------------------------------------------------------------
# The watchdog


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _dead_reason(run: Run, now) -> str:
    local = run.worker_host == socket.gethostname()
    if local and run.worker_pid and run.worker_pid != os.getpid() and not _process_alive(run.worker_pid):
        return f"worker died: process {run.worker_pid} on {run.worker_host} is gone"
    beat = run.heartbeat_at or run.started or run.created
    if beat < now - heartbeat_timeout():
        return (f"worker died: no heartbeat from {run.worker_host or 'the worker'} "
                f"(pid {run.worker_pid}) since {beat:%Y-%m-%d %H:%M:%S %Z}")
    return ""


def _stop_orphan(stage_run: StageRun, run: Run) -> None:
    """A dead worker's ansible-playbook keeps running (runner spawns it ignoring SIGHUP): stop it, so it
    cannot act on the nodes while the run is resumed."""
    pid = stage_run.ansible_pid
    if not pid or run.worker_host != socket.gethostname() or not _process_alive(pid) or not is_ansible(pid):
        return
    kill_tree(pid)


def fail_dead_run(run: Run, reason: str) -> Run:
    """The watchdog's end of a run whose worker is gone: the run, its stage runs and its nodes each move
    to the failed twin of the state they outlived (the tables in .states and inventory.states). A crash
    is a failure, not an abort: nodes do not return to their state before the run."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.state in RUN_FINISHED:
            return run
        for stage_run in run.stage_runs.filter(state__in=list(STAGE_FAILED_TWIN)).order_by("order"):
            if stage_run.state == StageState.RUNNING:
                _stop_orphan(stage_run, run)
                run.failed_stage = run.failed_stage or stage_run.stage
            STAGE_MACHINE.fail_outlived(stage_run, reason)
        if not run.dry_run:
            for node in _run_nodes(run):
                if node.state in NODE_FAILED_TWIN:
                    node.transition(NODE_FAILED_TWIN[node.state], f"run #{run.pk}: {reason}")
        RUN_MACHINE.fail_outlived(run, reason, also=("failed_stage",), details={"watchdog": True})
    return run


def watchdog(now=None) -> list[Run]:
    """Fail every run whose worker is gone, and every run nobody picked up in time. Returns them."""
    now = now or timezone.now()
    failed = []
    for run in Run.objects.filter(state=RunState.RUNNING):
        reason = _dead_reason(run, now)
        if reason:
            failed.append(fail_dead_run(run, reason))
    for run in Run.objects.filter(state=RunState.PENDING, created__lt=now - pending_timeout()):
        failed.append(fail_dead_run(run, f"never started: no worker picked it up within {pending_timeout()}"))
    return failed
