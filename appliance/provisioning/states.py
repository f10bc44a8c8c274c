"""States of provisioning runs and stage runs, and the transitions allowed between them: one explicit
table each, and the failed twin the watchdog moves an outlived state to. Anything not in a table is
refused, so a finished run can never be started again and a cancelled stage can never turn into a
success. The tables drive appliance.core.statemachine, which records one audit event per transition.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.audit.services import record
from appliance.core.statemachine import InvalidTransition, StateMachine

__all__ = ["InvalidTransition", "RunState", "StageState", "RUN_MACHINE", "STAGE_MACHINE", "RUN_TRANSITIONS",
           "STAGE_TRANSITIONS", "RUN_FINISHED", "STAGE_FINISHED", "RUN_FAILED_TWIN", "STAGE_FAILED_TWIN",
           "check_run_transition", "check_stage_transition"]


class RunState(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


class StageState(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    SKIPPED = "skipped", _("Skipped")


RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    # A pending run fails without running when its input is refused or its worker never picks it up.
    RunState.PENDING: frozenset({RunState.RUNNING, RunState.CANCELLED, RunState.FAILED}),
    RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
}

STAGE_TRANSITIONS: dict[StageState, frozenset[StageState]] = {
    StageState.PENDING: frozenset({StageState.RUNNING, StageState.SKIPPED, StageState.CANCELLED,
                                   StageState.FAILED}),
    StageState.RUNNING: frozenset({StageState.SUCCEEDED, StageState.FAILED, StageState.CANCELLED}),
    StageState.SUCCEEDED: frozenset(),
    StageState.FAILED: frozenset(),
    StageState.CANCELLED: frozenset(),
    StageState.SKIPPED: frozenset(),
}

RUN_FINISHED = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
STAGE_FINISHED = frozenset({StageState.SUCCEEDED, StageState.FAILED, StageState.CANCELLED, StageState.SKIPPED})

# A state that outlives its deadline is moved to its failed twin by the watchdog.
RUN_FAILED_TWIN: dict[RunState, RunState] = {RunState.RUNNING: RunState.FAILED, RunState.PENDING: RunState.FAILED}
STAGE_FAILED_TWIN: dict[StageState, StageState] = {StageState.RUNNING: StageState.FAILED,
                                                   StageState.PENDING: StageState.CANCELLED}


def _run_event(_run, _previous, target) -> str:
    # The transition's record is the run's start or end record: auditors read a run from these two.
    return "provisioning.run.start" if target == RunState.RUNNING else "provisioning.run.end"


def _run_outcome(_run, _previous, target) -> str:
    return "failure" if target in (RunState.FAILED, RunState.CANCELLED) else "success"


def _run_details(run, _previous, target) -> dict:
    if target == RunState.RUNNING:
        return {"kind": run.kind, "stages": run.stages, "nodes": run.node_names or "all", "dry_run": run.dry_run,
                "force": run.force, "resumes": run.resumes_id, "worker_host": run.worker_host,
                "worker_pid": run.worker_pid}
    return {"state": target, "ok": run.ok_count, "changed": run.changed_count, "failed": run.failed_count,
            "unreachable": run.unreachable_count, "failed_stage": run.failed_stage, "failed_host": run.failed_host,
            "failed_task": run.failed_task}


def _stage_event(_stage_run, _previous, target) -> str:
    # There is no separate start event for a stage: its start is an update of the stage run, its end
    # (succeeded, failed, cancelled, skipped) the stage's end record.
    return "provisioning.stage.end" if target in STAGE_FINISHED else "provisioning.stagerun.update"


def _stage_outcome(_stage_run, _previous, target) -> str:
    return "failure" if target in (StageState.FAILED, StageState.CANCELLED) else "success"


def _stage_details(stage_run, _previous, target) -> dict:
    details = {"stage": stage_run.stage, "state": target, "hosts": stage_run.hosts}
    if target in STAGE_FINISHED:
        details.update({"ok": stage_run.ok_count, "changed": stage_run.changed_count,
                        "failed": stage_run.failed_count, "unreachable": stage_run.unreachable_count,
                        "failed_host": stage_run.failed_host, "failed_task": stage_run.failed_task,
                        "events_emitted": stage_run.events_emitted, "events_stored": stage_run.events_stored})
    return details


RUN_MACHINE = StateMachine(
    label="run", choices=RunState, transitions=RUN_TRANSITIONS, failed_twin=RUN_FAILED_TWIN, record=record,
    event=_run_event, outcome=_run_outcome, details=_run_details,
    stamps={RunState.RUNNING: ("started", "heartbeat_at"),
            **{state: ("ended",) for state in RUN_FINISHED}},
)

STAGE_MACHINE = StateMachine(
    label="stage run", choices=StageState, transitions=STAGE_TRANSITIONS, failed_twin=STAGE_FAILED_TWIN,
    record=record, event=_stage_event, outcome=_stage_outcome, details=_stage_details,
    stamps={StageState.RUNNING: ("started",), **{state: ("ended",) for state in STAGE_FINISHED}},
)


def check_run_transition(current: str, target: str) -> None:
    RUN_MACHINE.check(current, target)


def check_stage_transition(current: str, target: str) -> None:
    STAGE_MACHINE.check(current, target)
