"""A restart the firmware stage made to apply staged BIOS values is an audit event of its own: the
redfish_reset module's appliance_bmc_reset fact, as the engine's facts sink receives it from the run's
events, becomes one provisioning.bmc.reset record naming the node, the reset and the window."""

from appliance.audit.models import AuditRecord
from appliance.provisioning.facts import FactsSink
from appliance.provisioning.models import Run, StageRun


def test_a_reset_fact_is_recorded_once_per_node(appliance):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.BOOTSTRAP)
    stage_run = StageRun.objects.create(run=run, stage="firmware", order=1)
    node = appliance.nodes.get(name="gpu01")
    reset = {"reset_type": "GracefulRestart", "seconds": 41.5, "window": "sat,sun 22:00-06:00 Europe/Moscow",
             "applied": {"SysProfile": "PerfOptimized"}}

    FactsSink(stage_run, {"gpu01": node}, dry_run=False)("gpu01", {"appliance_bmc_reset": reset})

    [record] = AuditRecord.objects.filter(event="provisioning.bmc.reset")
    assert record.target_name == "gpu01"
    assert record.details == {"reset_type": "GracefulRestart", "seconds": 41.5,
                              "window": "sat,sun 22:00-06:00 Europe/Moscow",
                              "applied": {"SysProfile": "PerfOptimized"}, "run": run.pk, "stage": "firmware"}
    node.refresh_from_db()
    assert "bmc_reset" not in (node.facts or {})
