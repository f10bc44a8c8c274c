"""A lending plan drives the simulated appliance's real Slurm: a training node is drained (its running job
requeued once the deadline passed), moved to the inference pool, reclaimed at the window's end and resumed;
a second plan is rolled back. Every step is audited."""

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Pool, PoolMembership
from appliance.lending import services
from appliance.lending.models import LendingPolicy, PlanState
from appliance.simulation import slurm
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def sinfo_state(node: str) -> str:
    return slurm.client("sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T").stdout.strip()


def wait_for(what, check, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {seconds} s ({(slurm.slurm_dir() / 'log' / 'slurmctld.log').read_text()[-2000:]})")


@pytest.fixture
def lending_slurm(demo_appliance, make_user):  # noqa: F811
    for node in demo_appliance.nodes.filter(name__in=["gpu01", "gpu02", "gpu03"]):
        node.facts = {**node.facts, "gpu_cores": {str(gpu): "0-55" if gpu < 4 else "56-111" for gpu in range(8)}}
        node.save(update_fields=["facts"])
    write_stage_files(demo_appliance)
    LendingPolicy.objects.create(pool=Pool.objects.get(name="training"), may_lend=True, minimum_nodes=1,
                                 reclaim_minutes=10)
    try:
        slurm.start(demo_appliance)
        yield demo_appliance, make_user(Role.OPERATOR), make_user(Role.ADMINISTRATOR)
    finally:
        slurm.stop(demo_appliance)


def test_a_node_is_lent_to_inference_and_returned_through_slurm(lending_slurm):
    appliance, operator, administrator = lending_slurm
    job = slurm.client("sbatch", "--parsable", "--job-name=long", "--nodelist=gpu03", "--nodes=1",
                       f"--output={slurm.slurm_dir() / 'job-%j.out'}", "--wrap", "sleep 600").stdout.strip()
    wait_for("the job runs on gpu03", lambda: slurm.client(
        "squeue", "--noheader", f"--jobs={job}", "--format=%T %N").stdout.split() == ["RUNNING", "gpu03"])

    t0 = timezone.now()
    plan = services.propose(nodes=["gpu03"], from_pool="training", to_pool="inference", window_start=t0,
                            window_end=t0 + timedelta(hours=2), reason="training idle at night", actor=operator)
    assert plan.state == PlanState.PROPOSED
    services.approve(plan, administrator)

    # Drained, the job still running: the plan waits for it until the deadline (the pool's 10 minutes).
    plan = services.advance(plan, now=t0)
    assert plan.state == PlanState.DRAINING
    assert sinfo_state("gpu03") == "draining"
    assert plan.deadline == t0 + timedelta(minutes=10)
    assert services.advance(plan, now=t0 + timedelta(minutes=9)).state == PlanState.DRAINING

    # Past the deadline the job is requeued; once it has left the node, the node moves and is lent.
    later = t0 + timedelta(minutes=11)
    plan = services.advance(plan, now=later)
    assert plan.steps.filter(name="requeue").get().details["jobs"] == [{"id": job, "state": "RUNNING", "nodes": "gpu03"}]
    plan = wait_for("the plan is active", lambda: (p := services.advance(plan, now=later)).state == PlanState.ACTIVE and p)
    assert sinfo_state("gpu03") == "drained"
    assert PoolMembership.objects.get(node__name="gpu03").pool.name == "inference"
    shown = slurm.client("scontrol", "show", "job", job).stdout
    assert "Restarts=1" in shown and "JobState=RUNNING" not in shown, shown
    assert "Reason=lent to pool inference by lending plan" in slurm.client("scontrol", "show", "node", "gpu03").stdout

    # Before the window's end nothing happens; after it the node comes back and is resumed.
    assert services.advance(plan, now=later + timedelta(minutes=30)).state == PlanState.ACTIVE
    plan = services.advance(plan, now=t0 + timedelta(hours=2, seconds=1))
    assert plan.state == PlanState.RETURNED
    assert PoolMembership.objects.get(node__name="gpu03").pool.name == "training"
    # A resumed node shows as not responding ("idle*") until slurmctld's next ping of its slurmd.
    assert wait_for("gpu03 back", lambda: sinfo_state("gpu03") in ("idle", "allocated"))  # the job may retake it
    steps = list(plan.steps.values_list("name", "outcome"))
    assert steps == [("propose", "success"), ("approve", "success"), ("drain", "success"), ("requeue", "success"),
                     ("move", "success"), ("workloads", "skipped"), ("activate", "success"), ("reclaim", "success"),
                     ("move", "success"), ("workloads", "skipped"), ("resume", "success"), ("return", "success")]
    events = list(AuditRecord.objects.filter(target_type="lending.lendingplan", target_id=str(plan.pk))
                  .order_by("sequence").values_list("event", "actor_username"))
    assert events[:2] == [("lending.plan.propose", "operator-user"), ("lending.plan.approve", "administrator-user")]
    assert [event for event, _ in events[2:]] == [f"lending.plan.{name}" for name in (
        "drain", "requeue", "move", "workloads", "activate", "reclaim", "move", "workloads", "resume", "return")]

    # A second plan, lent at once (no job on gpu02), is rolled back: back in training and resumed.
    second = services.propose(nodes=["gpu02"], from_pool="training", to_pool="inference", window_start=t0,
                              window_end=t0 + timedelta(hours=2), reason="a burst of requests", actor=operator)
    services.approve(second, administrator)
    second = services.advance(second, now=t0 + timedelta(minutes=1))
    assert second.state == PlanState.ACTIVE
    assert sinfo_state("gpu02") == "drained"
    second = services.rollback(second, administrator, "the training queue grew")
    assert second.state == PlanState.ROLLED_BACK
    assert wait_for("gpu02 back", lambda: sinfo_state("gpu02") == "idle")
    assert PoolMembership.objects.get(node__name="gpu02").pool.name == "training"
    assert second.steps.last().message.startswith("rolled back by administrator-user: gpu02 back in pool training; "
                                                  "resumed in Slurm (gpu02)")


def play_workloads_stage(appliance, run_id):
    """What the workloads run the plan started does on a simulated appliance (its playbook is tested in
    tests/playbooks): the slurm role writes the files of the pools as they are now (the vars provider the
    stage runs with) on the Slurm nodes the run covers, and only there; the simulation (playing systemd)
    restarts the daemons whose files changed; the run ends."""
    from appliance.partitioning.renderers.stage_vars import workloads_vars
    from appliance.provisioning.models import Run
    from appliance.provisioning.states import RunState

    run = Run.objects.get(pk=run_id)
    config = workloads_vars(appliance)["appliance_slurm"]
    for node in appliance.nodes.filter(name__in=[config["controller"], *config["nodes"]]):
        if node.name in run.node_names:
            (Path(node.sysroot) / "etc" / "slurm").mkdir(parents=True, exist_ok=True)
            for name, key in (("slurm.conf", "slurm_conf"), ("gres.conf", "gres_conf"), ("cgroup.conf", "cgroup_conf")):
                (Path(node.sysroot) / "etc" / "slurm" / name).write_text(config[key])
    slurm.start(appliance)
    Run.objects.filter(pk=run_id).update(state=RunState.SUCCEEDED)


def test_an_inference_node_lent_into_training_joins_the_slurm_cluster_and_leaves_it(lending_slurm):
    from appliance.provisioning.models import Run, StageRun
    from appliance.provisioning.states import RunState, StageState

    appliance, operator, administrator = lending_slurm
    gpu04 = appliance.nodes.get(name="gpu04")
    gpu04.facts = {**gpu04.facts, "gpu_cores": {str(gpu): "0-55" if gpu < 4 else "56-111" for gpu in range(8)}}
    gpu04.save(update_fields=["facts"])
    done = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["workloads"], state=RunState.SUCCEEDED)
    StageRun.objects.create(run=done, stage="workloads", order=1, state=StageState.SUCCEEDED)
    LendingPolicy.objects.create(pool=Pool.objects.get(name="inference"), may_lend=True, minimum_nodes=0,
                                 reclaim_minutes=10)
    assert "gpu04" not in slurm.client("sinfo", "--noheader", "--Node", "--format=%N").stdout.split()

    t0 = timezone.now()
    plan = services.propose(nodes=["gpu04"], from_pool="inference", to_pool="training", window_start=t0,
                            window_end=t0 + timedelta(hours=2), reason="a deadline in training", actor=operator)
    services.approve(plan, administrator)
    plan = services.advance(plan, now=t0)
    assert plan.state == PlanState.MOVED
    # Joining the Slurm cluster rewrites slurm.conf on the controller and every Slurm node, not only on gpu04.
    run = Run.objects.get(pk=plan.run_id)
    assert (run.kind, run.stages, run.node_names) == ("node", ["workloads"], ["gpu01", "gpu02", "gpu03", "gpu04", "mgmt01"])
    play_workloads_stage(appliance, run.pk)
    plan = services.advance(plan, now=t0)
    assert plan.state == PlanState.ACTIVE
    resume = plan.steps.get(name="resume")
    assert (resume.outcome, resume.message) == ("success", "gpu04 serve pool training in Slurm: idle there, nothing to resume")
    # The training pool's Slurm runs a job on the lent node.
    job = slurm.client("sbatch", "--parsable", "--job-name=on-gpu04", "--nodelist=gpu04", "--nodes=1", "--gres=gpu:8",
                       f"--output={slurm.slurm_dir() / 'job-%j.out'}", "--wrap", "hostname").stdout.strip()
    wait_for("the job ran on gpu04", lambda: (slurm.slurm_dir() / f"job-{job}.out").is_file()
             and (slurm.slurm_dir() / f"job-{job}.out").read_text().strip() == "gpu04")

    # The job has ended (Slurm may still show it completing for a moment after its output is written).
    wait_for("the job left gpu04", lambda: not slurm.client("squeue", "--noheader", "--nodelist=gpu04").stdout.strip())

    # At the window's end the node is drained in Slurm and leaves the cluster again.
    end = t0 + timedelta(hours=2, seconds=1)
    plan = services.advance(plan, now=end)
    assert plan.state == PlanState.RECLAIMING
    assert PoolMembership.objects.get(node__name="gpu04").pool.name == "inference", list(
        plan.steps.values_list("name", "message"))
    run = Run.objects.get(pk=plan.run_id)
    assert run.node_names == ["gpu01", "gpu02", "gpu03", "gpu04", "mgmt01"]
    play_workloads_stage(appliance, run.pk)
    plan = services.advance(plan, now=end)
    assert plan.state == PlanState.RETURNED
    assert wait_for("gpu04 out of the cluster", lambda: "gpu04" not in slurm.client(
        "sinfo", "--noheader", "--Node", "--format=%N").stdout.split())
    assert [name for name, _ in plan.steps.values_list("name", "outcome")] == [
        "propose", "approve", "drain", "move", "workloads", "resume", "activate", "reclaim", "move", "workloads",
        "return"]
