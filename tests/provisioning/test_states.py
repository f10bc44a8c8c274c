import pytest

from appliance.provisioning.models import Run, StageRun
from appliance.provisioning.states import (
    RUN_TRANSITIONS,
    STAGE_TRANSITIONS,
    InvalidTransition,
    RunState,
    StageState,
    check_run_transition,
    check_stage_transition,
)


def test_every_state_has_a_row():
    assert set(RUN_TRANSITIONS) == set(RunState)
    assert set(STAGE_TRANSITIONS) == set(StageState)


@pytest.mark.parametrize("finished", [RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED])
def test_a_finished_run_never_moves_again(finished):
    for target in RunState:
        with pytest.raises(InvalidTransition, match="finished"):
            check_run_transition(finished, target)


def test_allowed_and_refused_moves():
    check_run_transition("pending", "running")
    check_run_transition("running", "cancelled")
    check_stage_transition("pending", "skipped")
    check_stage_transition("running", "failed")
    with pytest.raises(InvalidTransition, match="cannot go from pending to succeeded"):
        check_run_transition("pending", "succeeded")
    with pytest.raises(InvalidTransition, match="stage run cannot go from running to skipped"):
        check_stage_transition("running", "skipped")
    with pytest.raises(InvalidTransition):
        check_stage_transition("skipped", "running")


def test_model_transitions_follow_the_table_and_stamp_times(appliance):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"])
    stage_run = StageRun.objects.create(run=run, stage="first", order=1)
    run.transition(RunState.RUNNING)
    stage_run.transition(StageState.RUNNING)
    assert run.started is not None and stage_run.started is not None
    stage_run.transition(StageState.SUCCEEDED)
    run.transition(RunState.SUCCEEDED)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.ended is not None
    with pytest.raises(InvalidTransition):
        run.transition(RunState.RUNNING)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
