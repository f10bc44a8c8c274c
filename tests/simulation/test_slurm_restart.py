"""The simulated Slurm picks up what the workloads stage rewrote: on a real node the stage's handlers restart
slurmctld and slurmd when slurm.conf or gres.conf change; the simulation plays systemd, so slurm.start()
restarts the daemons it runs when the files they were started from changed (a partition plan's MIG types)."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.simulation import gpu_ops, slurm
from appliance.simulation import state as node_state
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)


def _gres() -> dict[str, str]:
    lines = slurm.client("sinfo", "--noheader", "--Node", "--format=%N %G").stdout.split("\n")
    return dict(line.split(" ", 1) for line in lines if line.strip())


@pytest.mark.slow
def test_changed_stage_files_restart_the_daemons_with_the_new_gres(demo_appliance):  # noqa: F811
    write_stage_files(demo_appliance)
    try:
        first = slurm.start(demo_appliance)
        assert _gres()["gpu01"].startswith("gpu:h100:8")
        again = slurm.start(demo_appliance)  # the same files: nothing restarted
        assert again["controller"] == first["controller"]

        # gpu01's GPU 0 split into two 3g.40gb instances, recorded as the partitioning stage records them.
        node = demo_appliance.nodes.get(name="gpu01")
        recorded = []
        with node_state.update(node.sysroot) as state:
            gpu_ops.set_mig_mode(state, 0, True)
            for start in (0, 4):
                gi = gpu_ops.create_gpu_instance(state, 0, 9, start)
                ci = gpu_ops.create_compute_instance(state, 0, gi)
                recorded.append({"gpu": 0, "profile": "3g.40gb", "start": start, "gpu_instance": gi,
                                 "compute_instance": ci})
        node.facts = {**node.facts, "mig_instances": recorded}
        node.save(update_fields=["facts"])
        slurm.sync_mig_devices(node)
        write_stage_files(demo_appliance)

        restarted = slurm.start(demo_appliance)
        assert restarted["controller"] != first["controller"]
        gres = _gres()
        assert gres["gpu01"].split(",") == ["gpu:3g.40gb:2", "gpu:h100:7"], gres
        assert gres["gpu02"] == "gpu:h100:8"
    finally:
        slurm.stop(demo_appliance)
    assert list(AuditRecord.objects.filter(event__startswith="simulation.slurm.").values_list("event", flat=True)
                .order_by("sequence")) == ["simulation.slurm.start", "simulation.slurm.restart",
                                           "simulation.slurm.start", "simulation.slurm.stop"]


@pytest.mark.slow
def test_a_slurmd_whose_unit_was_stopped_or_whose_node_left_slurm_conf_is_ended(demo_appliance):  # noqa: F811
    """The workloads stage stops slurmd on a node that slurm.conf no longer names; systemd ends it there.
    The simulation does the same at its next start: that node's slurmd is ended and not waited for."""
    from appliance.inventory.models import Pool, PoolMembership

    write_stage_files(demo_appliance)
    try:
        first = slurm.start(demo_appliance)
        assert sorted(first["nodes"]) == ["gpu01", "gpu02", "gpu03"]
        gpu02 = demo_appliance.nodes.get(name="gpu02")
        pid = first["nodes"]["gpu02"]
        # gpu02's slurmd unit stopped by the stage (the simulated systemctl records it in the node's state).
        with node_state.update(gpu02.sysroot) as state:
            state.setdefault("services", {})["slurmd.service"] = {"enabled": False, "active": False}
        second = slurm.start(demo_appliance)
        assert sorted(second["nodes"]) == ["gpu01", "gpu03"]
        assert not slurm._ours(pid)
        assert second["controller"] == first["controller"]  # the files did not change: no restart

        # gpu03 leaves the training pool: the stage's files no longer name it, and its slurmd is ended.
        gpu03 = demo_appliance.nodes.get(name="gpu03")
        pid = second["nodes"]["gpu03"]
        PoolMembership.objects.filter(node=gpu03).update(pool=Pool.objects.get(appliance=demo_appliance,
                                                                               kind="inference"))
        write_stage_files(demo_appliance)
        third = slurm.start(demo_appliance)
        assert sorted(third["nodes"]) == ["gpu01"]
        assert not slurm._ours(pid)
        assert "gpu03" not in slurm.client("sinfo", "--noheader", "--Node", "--format=%N").stdout.split()
    finally:
        slurm.stop(demo_appliance)
    stops = AuditRecord.objects.filter(event="simulation.slurm.stop").order_by("sequence")
    assert [record.details["stopped"] for record in stops][:2] == [["gpu02"], ["gpu03"]]
