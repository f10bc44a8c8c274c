"""Events whose text holds a NUL character are stored (without it) on every database, and a batch the
database refuses is stored row by row: only the refused rows are missing, and the completeness count
says how many."""

import json

import pytest
from django.db import connection
from django.utils import timezone

from appliance.provisioning import services
from appliance.provisioning.catalogue import Catalogue, Stage
from appliance.provisioning.events import EventIngestor, Scrubber, insert_events
from appliance.provisioning.models import Run, StageRun, TaskEvent
from appliance.provisioning.states import RunState, StageState
from tests.provisioning import catalogue as test_catalogue


@pytest.fixture
def stage_run(appliance):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"])
    return StageRun.objects.create(run=run, stage="first", order=1, hosts=["gpu01"])


def ansible_event(counter, kind, task, stdout="", res=None):
    """An event as ansible-runner hands it to the event handler."""
    data = {"host": "gpu01", "task": task, "play": "Print a NUL character", "role": ""}
    if res is not None:
        data["res"] = res
    return {"counter": counter, "uuid": f"uuid-{counter}", "event": kind, "stdout": stdout, "event_data": data,
            "created": timezone.now().isoformat()}


def consume(ingestor, events):
    for event in events:
        ingestor.handle(event)
    return ingestor.consume(lambda: False)


@pytest.mark.django_db
def test_an_event_with_a_nul_character_is_stored_without_it(stage_run):
    ingestor = EventIngestor(stage_run, Scrubber([]))
    result = consume(ingestor, [
        ansible_event(1, "playbook_on_task_start", "Print bytes with a NUL between them"),
        ansible_event(2, "runner_on_ok", "Print bytes with a NUL between them", stdout="ok: [gpu01] before\x00after",
                      res={"changed": False, "stdout": "before\x00after", "rc": 0, "stdout_lines": ["before\x00after"]}),
    ])
    assert (result.emitted, result.stored) == (2, 2)
    stored = TaskEvent.objects.get(stage_run=stage_run, counter=2)
    assert stored.stdout == "ok: [gpu01] beforeafter"
    assert stored.data["res"]["stdout"] == "beforeafter"
    assert stored.data["res"]["stdout_lines"] == ["beforeafter"]
    assert result.hosts["gpu01"].ok == 1


@pytest.mark.django_db
def test_a_failure_message_with_a_nul_character_is_kept_without_it(stage_run):
    ingestor = EventIngestor(stage_run, Scrubber([]))
    result = consume(ingestor, [
        ansible_event(1, "runner_on_failed", "Read the\x00 device", stdout="fatal: [gpu01]: FAILED!",
                      res={"failed": True, "msg": "non-zero return code\x00", "rc": 1}),
    ])
    assert (result.emitted, result.stored) == (1, 1)
    assert [(f.host, f.task, f.message) for f in result.failures] == [("gpu01", "Read the device",
                                                                       "non-zero return code")]
    assert TaskEvent.objects.get(stage_run=stage_run).task == "Read the device"


@pytest.mark.django_db
def test_a_refused_batch_is_stored_row_by_row(stage_run):
    """Counter 2 twice breaks the unique (stage run, counter) constraint: the whole multi-row insert is
    refused, then every other row is stored one by one."""
    ingestor = EventIngestor(stage_run, Scrubber([]))
    result = consume(ingestor, [ansible_event(c, "runner_on_ok", f"task {c}", res={"changed": False})
                                for c in (1, 2, 2, 3)])
    assert (result.emitted, result.stored) == (4, 3)
    assert list(TaskEvent.objects.filter(stage_run=stage_run).values_list("counter", "task")) == [
        (1, "task 1"), (2, "task 2"), (3, "task 3")]


@pytest.mark.django_db
def test_insert_events_says_how_many_rows_it_stored(stage_run):
    now = timezone.now()
    row = (stage_run.pk, 7, "u", "runner_on_ok", "gpu01", "", "a task", "", False, False, "", {}, now)
    assert insert_events([row]) == 1
    assert insert_events([row]) == 0  # the same counter again: refused, and said so
    assert TaskEvent.objects.filter(stage_run=stage_run).count() == 1


NUL_CATALOGUE = Catalogue([Stage("nul", str(test_catalogue.PLAYBOOKS / "nul_output.yml"), "prints a NUL")])


def run_the_nul_stage(appliance):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["nul"], nodes=["gpu01"],
                              catalogue=NUL_CATALOGUE)
    run = services.execute_run(run.pk, catalogue=NUL_CATALOGUE)
    stage_run = run.stage_runs.get()
    assert stage_run.state == StageState.SUCCEEDED, stage_run.message
    assert run.state == RunState.SUCCEEDED, run.message
    assert stage_run.events_emitted == stage_run.events_stored
    assert stage_run.events_stored == TaskEvent.objects.filter(stage_run=stage_run).count() >= 6
    printed = TaskEvent.objects.get(stage_run=stage_run, event="runner_on_ok",
                                    task="Print bytes with a NUL between them")
    assert printed.data["res"]["stdout"] == "beforeafter"
    assert "\\u0000" not in json.dumps(printed.data)


@pytest.mark.slow
@pytest.mark.sqlite_only
@pytest.mark.django_db
def test_a_stage_printing_a_nul_character_succeeds_on_sqlite(state_dir, appliance, settings):
    settings.PLAYBOOKS_DIR = test_catalogue.PLAYBOOKS
    assert connection.vendor == "sqlite"
    run_the_nul_stage(appliance)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db
def test_a_stage_printing_a_nul_character_succeeds_on_postgresql(state_dir, appliance, settings):
    """PostgreSQL refuses a NUL in text and in jsonb: before the fix, 0 of the stage's events were stored
    and the stage failed with a database error."""
    if connection.vendor != "postgresql":
        pytest.skip("runs in the PostgreSQL pass (DATABASE_URL names a PostgreSQL server)")
    settings.PLAYBOOKS_DIR = test_catalogue.PLAYBOOKS
    run_the_nul_stage(appliance)
