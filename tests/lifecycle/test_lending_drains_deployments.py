"""Lending the inference node to the training pool drains it on the inference side too: the model
deployments placed on it are stopped by the appliance (their pods deleted, their GPUs freed, audited), and
once the node has left the pool they are deployed again on the pool's other GPUs, or the plan's redeploy
step says why not. (Slurm's side, and a plan that completes through the real Slurm:
tests/lending/test_slurm_lending.py.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Node, Pool, PoolMembership
from appliance.lending import services as lending
from appliance.lending.models import LendingPolicy, PlanState
from appliance.lifecycle import deployments
from appliance.lifecycle.models import Deployment
from appliance.simulation import kubernetes
from appliance.simulation.services import prepare_node

from .deploy_support import cluster_file, demo, owners, people, production  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_lending_the_inference_node_stops_the_deployments_on_it(demo, root, people, make_user):  # noqa: F811
    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert served.state == "healthy" and owners().get("0")
    inference = Pool.objects.get(appliance=demo, kind="inference")
    LendingPolicy.objects.create(pool=inference, may_lend=True, minimum_nodes=0, window_start_hour=0,
                                 window_end_hour=24, window_days=[0, 1, 2, 3, 4, 5, 6], reclaim_minutes=15)
    now = timezone.now()
    plan = lending.propose(nodes=["gpu04"], from_pool="inference", to_pool="training", window_start=now,
                           window_end=now + timedelta(hours=2), reason="a long training run",
                           actor=people["olga"], now=now - timedelta(minutes=1))
    lending.approve(plan, make_user(Role.ADMINISTRATOR, "ada"))
    plan = lending.advance(plan, now=now + timedelta(minutes=1))

    # The plan goes on to the training pool's Slurm, which this test does not run: it stops there (resume).
    assert [(step.name, step.outcome) for step in plan.steps.order_by("pk")][-4:] == [
        ("drain", "success"), ("move", "success"), ("workloads", "skipped"), ("resume", "failure")]
    assert plan.state == PlanState.FAILED
    drain = plan.steps.get(name="drain")
    assert (drain.outcome, drain.message) == (
        "success", "model deployments on the nodes stopped: llama (llama v1); they are deployed again on the "
                   "pool's other GPUs once the nodes have left it")
    served.refresh_from_db()
    assert (served.state, served.state_detail) == ("stopped", f"gpu04 leave pool inference (lending plan {plan.pk})")
    assert kubernetes.read(cluster_file(demo))["services"].get("llama", {}).get("selects") is None
    record = AuditRecord.objects.get(event="lifecycle.deployment.stop")
    assert (record.outcome, record.reason) == ("success", f"gpu04 leave pool inference (lending plan {plan.pk})")
    assert not Deployment.objects.filter(state__in=deployments.ACTIVE).exists()


def _lend_gpu04(demo, people, make_user, captured):  # noqa: F811
    inference = Pool.objects.get(appliance=demo, kind="inference")
    LendingPolicy.objects.create(pool=inference, may_lend=True, minimum_nodes=0, window_start_hour=0,
                                 window_end_hour=24, window_days=[0, 1, 2, 3, 4, 5, 6], reclaim_minutes=15)
    now = timezone.now()
    plan = lending.propose(nodes=["gpu04"], from_pool="inference", to_pool="training", window_start=now,
                           window_end=now + timedelta(hours=2), reason="a long training run",
                           actor=people["olga"], now=now - timedelta(minutes=1))
    lending.approve(plan, make_user(Role.ADMINISTRATOR, "ada"))
    with captured(execute=True):
        return lending.advance(plan, now=now + timedelta(minutes=1))


def test_once_the_node_has_left_the_pool_its_deployments_are_deployed_again_on_the_pools_other_gpus(
        demo, root, people, make_user, django_capture_on_commit_callbacks):  # noqa: F811
    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert [spot["node"] for spot in served.placement] == ["gpu04"]
    # gpu03 joins the inference pool: the pool has GPUs left once gpu04 is lent.
    gpu03 = Node.objects.get(name="gpu03")
    PoolMembership.objects.filter(node=gpu03).update(pool=Pool.objects.get(appliance=demo, kind="inference"))
    prepare_node(gpu03)

    plan = _lend_gpu04(demo, people, make_user, django_capture_on_commit_callbacks)

    served.refresh_from_db()
    assert served.state == "stopped"
    again = Deployment.objects.get(state__in=deployments.ACTIVE)
    assert (again.name, again.version, again.state) == ("llama", served.version, "healthy")
    assert [spot["node"] for spot in again.placement] == ["gpu03"]
    assert kubernetes.read(cluster_file(demo))["services"]["llama"]["selects"] == deployments.workload_name(again)
    redeploy = plan.steps.get(name="redeploy")
    assert (redeploy.outcome, redeploy.message) == ("success", "deployed again: llama on gpu03/gpu0")
    assert redeploy.details["redeployed"] == [{"deployment": again.pk, "name": "llama", "state": "healthy",
                                               "replaces": served.pk, "gpus": ["gpu03/gpu0"]}]
    record = AuditRecord.objects.get(event="lending.plan.redeploy")
    assert (record.outcome, record.target_id) == ("success", str(plan.pk))
    created = AuditRecord.objects.filter(event="lifecycle.deployment.create").order_by("pk").last()
    assert (created.actor_id, created.target_id) == (None, str(again.pk))
    # The version's first deployment to gpu03: its files were re-hashed, not just stat()ed.
    assert (created.details["node"], created.details["first_on_node"], created.details["integrity"]) == (
        "gpu03", True, "full")


def test_a_deployment_that_fits_nowhere_else_stays_stopped_and_the_plan_says_why(
        demo, root, people, make_user, django_capture_on_commit_callbacks):  # noqa: F811
    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])

    plan = _lend_gpu04(demo, people, make_user, django_capture_on_commit_callbacks)

    assert not Deployment.objects.filter(state__in=deployments.ACTIVE).exists()
    served.refresh_from_db()
    assert served.state == "stopped"
    redeploy = plan.steps.get(name="redeploy")
    assert redeploy.outcome == "failure"
    assert redeploy.message.startswith("not deployed again (they stay stopped): llama: ")
    assert [entry["name"] for entry in redeploy.details["not_redeployed"]] == ["llama"]
    assert AuditRecord.objects.get(event="lending.plan.redeploy").outcome == "failure"
