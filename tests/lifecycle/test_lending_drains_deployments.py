"""Lending the inference node to the training pool drains it on the inference side too: the model
deployments placed on it are stopped by the appliance (their pods deleted, their GPUs freed, audited), and
the plan's drain step names them to be deployed again. (Slurm's side, and a plan that completes through the
real Slurm: tests/lending/test_slurm_lending.py.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Pool
from appliance.lending import services as lending
from appliance.lending.models import LendingPolicy, PlanState
from appliance.lifecycle import deployments
from appliance.lifecycle.models import Deployment
from appliance.simulation import kubernetes

from .deploy_support import cluster_file, demo, owners, people, production, root  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_lending_the_inference_node_stops_the_deployments_on_it(demo, root, people, make_user):  # noqa: F811
    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert served.state == "healthy" and owners().get("0")
    inference = Pool.objects.get(appliance=demo, kind="inference")
    LendingPolicy.objects.create(pool=inference, may_lend=True, minimum_nodes=0, window_start_hour=0,
                                 window_end_hour=0, window_days=[0, 1, 2, 3, 4, 5, 6], reclaim_minutes=15)
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
        "success", "model deployments on the nodes stopped: llama (llama v1); deploy them again on the pool's "
                   "other GPUs")
    served.refresh_from_db()
    assert (served.state, served.state_detail) == ("stopped", f"gpu04 leave pool inference (lending plan {plan.pk})")
    assert kubernetes.read(cluster_file(demo))["services"].get("llama", {}).get("selects") is None
    record = AuditRecord.objects.get(event="lifecycle.deployment.stop")
    assert (record.outcome, record.reason) == ("success", f"gpu04 leave pool inference (lending plan {plan.pk})")
    assert not Deployment.objects.filter(state__in=deployments.ACTIVE).exists()
