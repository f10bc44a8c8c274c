"""States of provisioning runs and stage runs, and the transitions allowed between them: one explicit
table each. Anything not in a table is refused, so a finished run can never be started again and a
cancelled stage can never turn into a success.
"""

from django.db import models


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class StageState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    SKIPPED = "skipped", "Skipped"


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


class InvalidTransition(ValueError):
    pass


def _check(kind: str, table: dict, choices, current: str, target: str) -> None:
    current, target = choices(current), choices(target)
    if target not in table[current]:
        allowed = ", ".join(sorted(table[current])) or "none, it is finished"
        raise InvalidTransition(f"{kind} cannot go from {current} to {target} (allowed: {allowed})")


def check_run_transition(current: str, target: str) -> None:
    _check("run", RUN_TRANSITIONS, RunState, current, target)


def check_stage_transition(current: str, target: str) -> None:
    _check("stage run", STAGE_TRANSITIONS, StageState, current, target)
