"""The one state-machine helper (appliance.core.statemachine) as runs and stage runs use it: every
transition is checked against the table, stamps its times, and writes exactly one audit record; the
run's start and end records are its transitions' records; the failed twins are read from the table."""

import pytest
from django.db import models

from appliance.audit.models import AuditRecord
from appliance.core.statemachine import InvalidTransition, StateMachine
from appliance.inventory.models import Appliance
from appliance.provisioning import states as provisioning_states
from appliance.provisioning.models import Run, StageRun
from appliance.provisioning.states import RUN_MACHINE, STAGE_MACHINE, RunState, StageState


@pytest.fixture
def run(db):
    appliance = Appliance.objects.create(name="lab")
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["os"])
    StageRun.objects.create(run=run, stage="os", order=1)
    return run


def _records_after(mark: int):
    return list(AuditRecord.objects.filter(pk__gt=mark).order_by("pk").values_list("event", "outcome", "reason"))


def _mark() -> int:
    last = AuditRecord.objects.order_by("-pk").first()
    return last.pk if last else 0


def test_there_is_one_invalid_transition_class():
    from appliance.provisioning.states import InvalidTransition as provisioning_class

    assert provisioning_class is InvalidTransition


def test_a_run_start_and_end_are_one_record_each(run):
    mark = _mark()
    run.worker_host, run.worker_pid = "worker-7", 4321
    assert run.transition(RunState.RUNNING) == "pending"
    assert _records_after(mark) == [("provisioning.run.start", "success", "")]
    start = AuditRecord.objects.get(event="provisioning.run.start")
    assert start.details["from"] == "pending" and start.details["to"] == "running"
    assert start.details["worker_host"] == "worker-7" and start.details["worker_pid"] == 4321

    mark = _mark()
    run.transition(RunState.FAILED, "stage os, host gpu01: boom")
    assert _records_after(mark) == [("provisioning.run.end", "failure", "stage os, host gpu01: boom")]
    run.refresh_from_db()
    assert run.state == "failed" and run.reason == "stage os, host gpu01: boom"
    assert run.message == "stage os, host gpu01: boom"  # the name the API still uses
    assert run.started is not None and run.ended is not None and run.ended >= run.started
    assert run.worker_host == "worker-7"


def test_a_stage_run_end_is_the_stage_end_record(run):
    stage_run = run.stage_runs.get()
    stage_run.transition(StageState.RUNNING)
    stage_run.changed_count = 3
    stage_run.save(update_fields=["changed_count"])
    mark = _mark()
    stage_run.transition(StageState.SUCCEEDED)
    assert _records_after(mark) == [("provisioning.stage.end", "success", "")]
    end = AuditRecord.objects.get(event="provisioning.stage.end")
    assert end.details["changed"] == 3 and end.details["from"] == "running" and end.details["to"] == "succeeded"


def test_a_refused_move_changes_nothing_and_records_nothing(run):
    mark = _mark()
    with pytest.raises(InvalidTransition, match="run cannot go from pending to succeeded "
                                                r"\(allowed: cancelled, failed, running\)"):
        run.transition(RunState.SUCCEEDED, "never")
    run.refresh_from_db()
    assert run.state == "pending" and run.reason == "" and run.ended is None
    assert _records_after(mark) == []


def test_the_table_is_read_from_the_database_not_the_instance(run):
    stale = Run.objects.get(pk=run.pk)
    run.transition(RunState.CANCELLED, "cancelled by alice")
    with pytest.raises(InvalidTransition, match="run cannot go from cancelled to running"):
        stale.transition(RunState.RUNNING)


def test_the_failed_twins_come_from_the_tables():
    assert RUN_MACHINE.twin_of("running") == "failed"
    assert RUN_MACHINE.twin_of("pending") == "failed"
    assert RUN_MACHINE.twin_of("succeeded") is None
    assert STAGE_MACHINE.twin_of("running") == "failed"
    assert STAGE_MACHINE.twin_of("pending") == "cancelled"


def test_fail_outlived_moves_to_the_twin_the_table_names(run, monkeypatch):
    stage_run = run.stage_runs.get()
    # A different twin in the table is the one used: the watchdog hard-codes no target.
    monkeypatch.setitem(provisioning_states.STAGE_FAILED_TWIN, StageState.PENDING, StageState.FAILED)
    assert STAGE_MACHINE.fail_outlived(stage_run, "no worker") == "failed"
    stage_run.refresh_from_db()
    assert stage_run.state == "failed" and stage_run.reason == "no worker"
    assert STAGE_MACHINE.fail_outlived(stage_run, "again") is None


class _Choices(models.TextChoices):
    A = "a", "A"
    B = "b", "B"


def test_a_machine_with_a_missing_row_or_an_impossible_twin_is_refused_when_defined():
    with pytest.raises(ValueError, match="no row for b"):
        StateMachine(label="thing", choices=_Choices, transitions={_Choices.A: frozenset()}, failed_twin={},
                     record=print, event="x")
    with pytest.raises(ValueError, match="the failed twin of a is b, which the table refuses"):
        StateMachine(label="thing", choices=_Choices,
                     transitions={_Choices.A: frozenset(), _Choices.B: frozenset({_Choices.A})},
                     failed_twin={_Choices.A: _Choices.B}, record=print, event="x")
