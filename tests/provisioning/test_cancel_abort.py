"""Cancel is an abort, not a failure (as in MAAS): a cancelled run returns each node to the state it had
before the run unless a task of the run changed something on it; then the node is failed and says what
changed. A pending run cancelled changes no node. The engine's probe playbook writes a marker file whose
content names the stage: a rerun of the same stage changes nothing, another stage changes the marker."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Node
from appliance.inventory.states import NodeState
from appliance.provisioning import services
from appliance.provisioning.models import Run
from appliance.provisioning.states import RunState

pytestmark = pytest.mark.slow


def run_stages(appliance, catalogue, stages, progress=None, **options):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=stages, catalogue=catalogue, **options)
    return services.execute_run(run.pk, progress=progress, catalogue=catalogue)


def cancel_when_sleeping(what, **data):
    if what == "event" and data["event_kind"] == "playbook_on_task_start" and data["task"] == "Sleep when asked":
        services.cancel_run(data["stage_run"].run)


def node_states() -> dict:
    return {n.name: (n.state, n.state_reason) for n in Node.objects.order_by("name")}


def test_a_cancelled_rerun_that_changed_nothing_leaves_ready_nodes_ready(state_dir, appliance, catalogue, probe):
    first = run_stages(appliance, catalogue, ["first"])
    assert first.state == RunState.SUCCEEDED, first.reason
    assert {name: state for name, (state, _) in node_states().items()} == {
        "gpu01": "ready", "gpu02": "ready", "mgmt01": "ready"}

    probe["probe_sleep"] = 60
    rerun = run_stages(appliance, catalogue, ["first"], progress=cancel_when_sleeping)

    assert rerun.state == RunState.CANCELLED
    assert rerun.nodes_before == {name: {"state": "ready", "reason": f"provisioned by run #{first.pk}"}
                                  for name in ("gpu01", "gpu02", "mgmt01")}
    reason = (f"run #{rerun.pk} (cancelled by a user) was aborted before it changed anything on it; "
              f"as before: provisioned by run #{first.pk}")
    assert node_states() == {"gpu01": ("ready", reason), "gpu02": ("ready", reason), "mgmt01": ("ready", reason)}


def test_an_aborted_run_returns_a_node_in_maintenance_to_maintenance(state_dir, appliance, catalogue, probe):
    first = run_stages(appliance, catalogue, ["first"])
    assert first.state == RunState.SUCCEEDED, first.reason
    node = Node.objects.get(name="gpu01")
    node.transition(NodeState.MAINTENANCE, "DIMM swap")

    probe["probe_sleep"] = 60
    rerun = run_stages(appliance, catalogue, ["first"], nodes=["gpu01"], progress=cancel_when_sleeping)

    assert rerun.state == RunState.CANCELLED
    assert node_states()["gpu01"] == (
        "maintenance", f"run #{rerun.pk} (cancelled by a user) was aborted before it changed anything on it; "
                       "as before: DIMM swap")


def test_a_cancelled_run_that_changed_a_node_fails_it_saying_what_changed(state_dir, appliance, catalogue, probe):
    run_stages(appliance, catalogue, ["first"])
    probe["probe_sleep"] = 60
    # Stage `second` writes another marker: the one change the run makes before it is cancelled.
    run = run_stages(appliance, catalogue, ["second"], nodes=["gpu01", "gpu02"],
                     progress=cancel_when_sleeping)

    assert run.state == RunState.CANCELLED
    reason = (f"run #{run.pk} (cancelled by a user) was aborted after changing: second: Write the marker file "
              "on it")
    states = node_states()
    assert states["gpu01"] == ("failed", reason) and states["gpu02"] == ("failed", reason)
    # mgmt01 was not in the run: it is left as it was.
    assert states["mgmt01"][0] == "ready"


def test_cancelling_a_pending_run_touches_no_node(state_dir, appliance, catalogue):
    before = node_states()
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    services.cancel_run(run)
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED
    assert node_states() == before
    assert AuditRecord.objects.filter(event="inventory.node.transition").count() == 0
    # The cancel is one record, the run's end another: no change-capture copy of the cancel flag.
    assert list(AuditRecord.objects.filter(target_type="provisioning.run").order_by("pk")
                .values_list("event", flat=True)) == ["provisioning.run.create", "provisioning.run.cancel",
                                                      "provisioning.run.end"]


def test_a_crash_stays_a_failure(state_dir, appliance, catalogue):
    import socket

    from tests.provisioning.test_watchdog import dead_pid

    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    Node.objects.filter(name="gpu01").first().transition(NodeState.PROVISIONING, f"run #{run.pk}")
    run.worker_host, run.worker_pid = socket.gethostname(), dead_pid()
    run.transition(RunState.RUNNING)
    assert [r.pk for r in services.watchdog()] == [run.pk]
    gpu01 = Node.objects.get(name="gpu01")
    assert gpu01.state == NodeState.FAILED and gpu01.state_reason.startswith(f"run #{run.pk}: worker died")
