"""Guards of the provisioning engine that a quiet bug would remove:

- resume: a stage an unfinished bootstrap completed is carried over only if it covered every node the
  new run targets; a stage that ran on a subset (a --limit run, a node added since) runs again;
- secrets a playbook prints without no_log are scrubbed from every stored event and message;
- events emitted but not stored (lost at the storage layer) fail the stage: its record is incomplete.
"""

import json

import pytest
from django.db import connection

from appliance.audit.models import AuditRecord
from appliance.core.secrets import MASK
from appliance.inventory.models import Node
from appliance.provisioning import services
from appliance.provisioning.catalogue import Catalogue, Stage
from appliance.provisioning.models import HostResult, Run, StageRun, TaskEvent
from appliance.provisioning.states import RunState, StageState
from tests.provisioning import catalogue as test_catalogue

from .conftest import BMC_PASSWORD

# ------------------------------------------------------------------------------------------------
# Resume: "a stage covered every node"


def unfinished_bootstrap(appliance, catalogue, first_hosts, nodes=None):
    """A bootstrap that completed stage `first` on `first_hosts`, then failed in `second`."""
    run = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, nodes=nodes, catalogue=catalogue)
    run.transition(RunState.RUNNING)
    first, second, gpu_only = run.stage_runs.order_by("order")
    first.hosts = first_hosts
    first.save(update_fields=["hosts"])
    first.transition(StageState.RUNNING)
    first.transition(StageState.SUCCEEDED)
    second.hosts = first_hosts
    second.save(update_fields=["hosts"])
    second.transition(StageState.RUNNING)
    second.transition(StageState.FAILED, "stage second: the playbook failed")
    gpu_only.transition(StageState.SKIPPED, "stage second failed")
    run.transition(RunState.FAILED, "stage second failed")
    return run


def stage_states(run):
    return {s.stage: (s.state, s.carried_from.run_id if s.carried_from else None)
            for s in run.stage_runs.select_related("carried_from")}


@pytest.mark.django_db
def test_a_stage_completed_on_every_node_is_carried_over(appliance, catalogue):
    previous = unfinished_bootstrap(appliance, catalogue, ["gpu01", "gpu02", "mgmt01"])
    resumed = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    assert resumed.resumes_id == previous.pk
    assert stage_states(resumed) == {"first": ("skipped", previous.pk), "second": ("pending", None),
                                     "gpu-only": ("pending", None)}


@pytest.mark.django_db
def test_a_stage_completed_on_a_subset_of_the_nodes_is_not_carried_over(appliance, catalogue):
    # The unfinished bootstrap was limited to gpu01: its "first" did not run on gpu02 nor mgmt01.
    unfinished_bootstrap(appliance, catalogue, ["gpu01"], nodes=["gpu01"])
    resumed = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    assert stage_states(resumed) == {"first": ("pending", None), "second": ("pending", None),
                                     "gpu-only": ("pending", None)}


@pytest.mark.django_db
def test_a_node_added_since_the_unfinished_bootstrap_makes_its_stages_run_again(appliance, catalogue, tmp_path):
    previous = unfinished_bootstrap(appliance, catalogue, ["gpu01", "gpu02", "mgmt01"])
    Node.objects.create(appliance=appliance, name="gpu03", role="gpu", platform=Node.objects.get(name="gpu01").platform,
                        management_address="192.168.50.9", sysroot=str(tmp_path / "nodes" / "gpu03"))
    resumed = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    assert resumed.resumes_id == previous.pk
    assert stage_states(resumed) == {"first": ("pending", None), "second": ("pending", None),
                                     "gpu-only": ("pending", None)}


@pytest.mark.slow
def test_the_resumed_bootstrap_runs_the_partial_stage_on_every_node(state_dir, appliance, catalogue, probe):
    unfinished_bootstrap(appliance, catalogue, ["gpu01"], nodes=["gpu01"])
    resumed = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    resumed = services.execute_run(resumed.pk, catalogue=catalogue)
    assert resumed.state == RunState.SUCCEEDED, resumed.message
    first = resumed.stage_runs.get(stage="first")
    assert first.state == StageState.SUCCEEDED and first.carried_from_id is None
    assert sorted(first.hosts) == ["gpu01", "gpu02", "mgmt01"]
    assert sorted(HostResult.objects.filter(stage_run=first).values_list("host", flat=True)) == [
        "gpu01", "gpu02", "mgmt01"]
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}


# ------------------------------------------------------------------------------------------------
# Secrets printed without no_log

LEAKY = Catalogue([Stage("leaky", str(test_catalogue.PLAYBOOKS / "leaky.yml"), "prints the BMC password")])


@pytest.mark.slow
def test_a_secret_printed_without_no_log_is_scrubbed_from_everything_stored(state_dir, appliance, catalogue):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["leaky"], catalogue=LEAKY)
    run = services.execute_run(run.pk, catalogue=LEAKY)

    stage_run = StageRun.objects.get(run=run)
    assert stage_run.state == StageState.FAILED  # gpu02 failed with the password in its message
    events = list(TaskEvent.objects.filter(stage_run=stage_run))
    assert len(events) == stage_run.events_emitted == stage_run.events_stored
    stored = [event.stdout + json.dumps(event.data) for event in events]
    # The playbook did print it: each leak is there, masked.
    assert any(f"the BMC password of gpu01 is {MASK}" in text for text in stored)
    assert any(f"prefix-{MASK}-suffix" in text for text in stored)
    assert any(f"cannot log in with {MASK}" in text for text in stored)
    assert not [text for text in stored if BMC_PASSWORD in text]
    failed = HostResult.objects.get(stage_run=stage_run, host="gpu02")
    assert failed.message == f"cannot log in with {MASK}"
    assert BMC_PASSWORD not in stage_run.message and MASK in stage_run.message
    run.refresh_from_db()
    assert BMC_PASSWORD not in run.message
    assert not AuditRecord.objects.filter(details__icontains=BMC_PASSWORD).exists()
    assert not AuditRecord.objects.filter(reason__icontains=BMC_PASSWORD).exists()


# ------------------------------------------------------------------------------------------------
# Events emitted but not stored


@pytest.fixture
def events_of_the_finish_task_are_lost(db):
    """A trigger in the database silently drops the rows of the probe's last task, as a storage layer
    that loses writes would: the insert succeeds, the rows are not there."""
    table = TaskEvent._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("CREATE FUNCTION mutants_lose_finish() RETURNS trigger LANGUAGE plpgsql AS $$ "
                           "BEGIN IF NEW.task = 'Finish' THEN RETURN NULL; END IF; RETURN NEW; END $$")
            cursor.execute(f"CREATE TRIGGER mutants_lose_finish BEFORE INSERT ON {table} FOR EACH ROW "
                           f"EXECUTE FUNCTION mutants_lose_finish()")
        else:
            cursor.execute(f"CREATE TRIGGER mutants_lose_finish BEFORE INSERT ON {table} "
                           f"WHEN NEW.task = 'Finish' BEGIN SELECT RAISE(IGNORE); END")


@pytest.mark.slow
def test_events_lost_at_the_storage_layer_fail_the_stage(state_dir, appliance, catalogue, probe,
                                                         events_of_the_finish_task_are_lost):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first", "second"], catalogue=catalogue)
    run = services.execute_run(run.pk, catalogue=catalogue)

    first, second = run.stage_runs.order_by("order")
    stored = TaskEvent.objects.filter(stage_run=first).count()
    assert (first.events_stored, first.events_emitted - first.events_stored) == (stored, 7)
    assert first.state == StageState.FAILED
    assert first.message == (f"stage first: {first.events_emitted} events emitted but {stored} stored: "
                             f"the record of this stage is incomplete")
    # A stage whose record is incomplete stops the run: the later stage does not run on its word.
    assert second.state == StageState.SKIPPED
    assert run.state == RunState.FAILED and run.failed_stage == "first"
    assert set(Node.objects.values_list("state", flat=True)) == {"failed"}
    end = AuditRecord.objects.filter(event="provisioning.stage.end").order_by("sequence").first()
    assert end.outcome == "failure"
    assert end.details["events_emitted"] - end.details["events_stored"] == 7
