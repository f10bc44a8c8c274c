"""Cancel as an abort on the product's own `os` stage, on a simulated appliance of two HGX nodes: after a
full `os` run both are Ready; a rerun cancelled mid-way (at the chrony install, after the kernel
command line and the RDMA limits) leaves the node it changed nothing on Ready, saying so, and fails the
node whose GRUB drop-in had been removed (the rerun wrote it back), naming what changed."""

from pathlib import Path

import pytest

from appliance.inventory.models import Node
from appliance.provisioning import services
from appliance.provisioning.states import RunState
from tests.simulation.conftest import make_appliance, sim_settings  # noqa: F401

pytestmark = pytest.mark.slow

CANCEL_AT = "Install chrony"


@pytest.fixture
def simulated(make_appliance):  # noqa: F811
    from appliance.simulation import services as simulation

    appliance, _nodes = make_appliance(nodes=(("sim-gpu01", "hgx-h100-8gpu"), ("sim-gpu02", "hgx-h100-8gpu")))
    yield appliance
    simulation.stop(appliance)  # its BMC emulators and SSH servers


def test_a_cancelled_os_rerun_returns_unchanged_nodes_and_fails_changed_ones(simulated, monkeypatch):
    # The executor reads the cancel flag at every heartbeat (2 s): on a busy machine the short os stage
    # could end first. Read it at every event, so the run stops at the task after the one cancelled at.
    monkeypatch.setattr(services, "HEARTBEAT_SECONDS", 0)
    first = services.execute_run(services.create_run(simulated, stages=["os"]).pk)
    assert first.state == RunState.SUCCEEDED, first.reason
    assert dict(Node.objects.values_list("name", "state")) == {"sim-gpu01": "ready", "sim-gpu02": "ready"}

    # Something the os stage manages drifted on sim-gpu02: the rerun puts it back before it is cancelled.
    drop_ins = list((Path(Node.objects.get(name="sim-gpu02").sysroot) / "etc/default/grub.d").glob("*.cfg"))
    assert drop_ins, "the os stage wrote no GRUB drop-in"
    for path in drop_ins:
        path.unlink()

    def cancel_mid_way(what, **data):
        if what == "event" and data["event_kind"] == "playbook_on_task_start" and data["task"] == CANCEL_AT:
            services.cancel_run(data["stage_run"].run)

    rerun = services.execute_run(services.create_run(simulated, stages=["os"]).pk, progress=cancel_mid_way)

    assert rerun.state == RunState.CANCELLED, rerun.reason
    states = {n.name: (n.state, n.state_reason) for n in Node.objects.all()}
    assert states["sim-gpu01"] == (
        "ready", f"run #{rerun.pk} (cancelled by a user) was aborted before it changed anything on it; "
                 f"as before: provisioned by run #{first.pk}")
    assert states["sim-gpu02"] == (
        "failed", f"run #{rerun.pk} (cancelled by a user) was aborted after changing: os: Write the kernel "
                  "parameters for GRUB on it")
