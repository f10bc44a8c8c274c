"""The transitions of runs and stage runs, written out literally: every (from, to) pair of states is
either allowed here or refused, by the table and by the models that use it. A cancelled stage can
never become succeeded, a finished run never moves again."""

import pytest

from appliance.inventory.models import Appliance
from appliance.provisioning.models import Run, StageRun
from appliance.provisioning.states import InvalidTransition, check_run_transition, check_stage_transition

RUN_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
STAGE_STATES = ("pending", "running", "succeeded", "failed", "cancelled", "skipped")

RUN_ALLOWED = {
    ("pending", "running"), ("pending", "cancelled"), ("pending", "failed"),
    ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"),
}
STAGE_ALLOWED = {
    ("pending", "running"), ("pending", "skipped"), ("pending", "cancelled"), ("pending", "failed"),
    ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"),
}
RUN_PAIRS = [(a, b) for a in RUN_STATES for b in RUN_STATES]
STAGE_PAIRS = [(a, b) for a in STAGE_STATES for b in STAGE_STATES]


@pytest.mark.parametrize(("current", "target"), RUN_PAIRS, ids=[f"{a}->{b}" for a, b in RUN_PAIRS])
def test_run_transition_table(current, target):
    if (current, target) in RUN_ALLOWED:
        check_run_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=f"run cannot go from {current} to {target}"):
            check_run_transition(current, target)


@pytest.mark.parametrize(("current", "target"), STAGE_PAIRS, ids=[f"{a}->{b}" for a, b in STAGE_PAIRS])
def test_stage_transition_table(current, target):
    if (current, target) in STAGE_ALLOWED:
        check_stage_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=f"stage run cannot go from {current} to {target}"):
            check_stage_transition(current, target)


@pytest.fixture
def stage_run(db):
    run = Run.objects.create(appliance=Appliance.objects.create(name="lab"), kind=Run.Kind.STAGES, stages=["os"])
    return StageRun.objects.create(run=run, stage="os", order=1)


def _walk(obj, path):
    for state in path:
        obj.transition(state)


@pytest.mark.parametrize("path", [("cancelled",), ("running", "cancelled")], ids=["pending", "running"])
def test_a_cancelled_stage_run_never_becomes_succeeded(stage_run, path):
    _walk(stage_run, path)
    for target in ("succeeded", "running", "failed", "skipped", "pending"):
        with pytest.raises(InvalidTransition):
            stage_run.transition(target)
    stage_run.refresh_from_db()
    assert stage_run.state == "cancelled"


def test_a_cancelled_run_never_becomes_succeeded(stage_run):
    run = stage_run.run
    _walk(run, ("running", "cancelled"))
    for target in ("succeeded", "running", "failed", "pending"):
        with pytest.raises(InvalidTransition):
            run.transition(target)
    run.refresh_from_db()
    assert run.state == "cancelled"


@pytest.mark.parametrize(("current", "target"), sorted(STAGE_ALLOWED), ids=[f"{a}->{b}" for a, b in sorted(STAGE_ALLOWED)])
def test_the_stage_run_model_takes_every_allowed_move(stage_run, current, target):
    if current == "running":
        stage_run.transition("running")
    stage_run.transition(target)
    stage_run.refresh_from_db()
    assert stage_run.state == target
