"""How a run ends its nodes and which kind of run the service picks when none is named."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory import health
from appliance.inventory.choices import ComponentKind, HealthStatus
from appliance.inventory.models import Node
from appliance.provisioning import services
from appliance.provisioning.states import RunState


@pytest.mark.slow
def test_a_node_with_a_failing_check_is_not_ready_after_a_run(state_dir, appliance, catalogue):
    gpu01 = Node.objects.get(name="gpu01")
    health.record(gpu01, [health.Observation(ComponentKind.GPU, "5", "present", HealthStatus.FAILING,
                                             "GPU 5 (0000:9a:00.0) missing")], source="acceptance")
    run = services.create_run(appliance, stages=["first"], catalogue=catalogue)
    run = services.execute_run(run.pk, catalogue=catalogue)

    assert run.state == RunState.SUCCEEDED, run.reason
    states = {n.name: (n.state, n.state_reason) for n in Node.objects.all()}
    assert states == {
        "gpu01": ("failed", f"run #{run.pk} ended, but checks fail: GPU 5 (0000:9a:00.0) missing"),
        "gpu02": ("ready", f"provisioned by run #{run.pk}"),
        "mgmt01": ("ready", f"provisioned by run #{run.pk}"),
    }
    # The run's own records: its creation, its start and its end, the end carrying the totals (5 tasks ok on
    # 3 hosts, 2 of them changed: the marker and the password file); a node's
    # move is one record each (two per node: to provisioning, then to its end state).
    records = AuditRecord.objects.filter(target_type="provisioning.run", target_id=str(run.pk)).order_by("pk")
    assert list(records.values_list("event", flat=True)) == [
        "provisioning.run.create", "provisioning.run.start", "provisioning.run.end"]
    end = records.last()
    assert (end.outcome, end.details["from"], end.details["to"]) == ("success", "running", "succeeded")
    assert (end.details["ok"], end.details["changed"], end.details["failed"]) == (15, 6, 0)
    assert AuditRecord.objects.filter(event="inventory.node.transition").count() == 6


@pytest.mark.slow
def test_a_node_failed_by_a_stage_says_which_part_fails_not_the_whole_output(state_dir, appliance, catalogue,
                                                                            probe):
    gpu02 = Node.objects.get(name="gpu02")
    health.record(gpu02, [health.Observation(ComponentKind.GPU, "5", "present", HealthStatus.FAILING,
                                             "GPU 5 (0000:9a:00.0) missing")], source="acceptance")
    probe["probe_fail_on"] = ["gpu02"]
    run = services.create_run(appliance, stages=["first"], catalogue=catalogue)
    run = services.execute_run(run.pk, catalogue=catalogue)

    assert run.state == RunState.FAILED
    gpu02.refresh_from_db()
    assert (gpu02.state, gpu02.state_reason) == (
        "failed", f"run #{run.pk} ended, but checks fail: GPU 5 (0000:9a:00.0) missing")


def test_no_kind_and_no_stages_is_the_resumable_bootstrap(state_dir, appliance, catalogue):
    # What POST /api/v1/provisioning/runs/ {} and the portal's form with nothing ticked ask for.
    run = services.create_run(appliance, catalogue=catalogue)
    assert (run.kind, run.stages) == ("bootstrap", ["first", "second", "gpu-only"])


def test_no_kind_with_stages_is_a_stages_run(state_dir, appliance, catalogue):
    run = services.create_run(appliance, stages=["second"], catalogue=catalogue)
    assert (run.kind, run.stages) == ("stages", ["second"])


def test_a_named_kind_is_kept(state_dir, appliance, catalogue):
    run = services.create_run(appliance, kind="stages", catalogue=catalogue)
    assert (run.kind, run.stages) == ("stages", ["first", "second", "gpu-only"])

