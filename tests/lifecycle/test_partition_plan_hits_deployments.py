"""A partition plan that changes the layout of a GPU a model deployment runs on says so in its disruption
(the plan's record, `partition plan`'s text, the portal's preview): applying it takes the deployment's GPU
away, and whoever applies it should know which services to deploy again."""

import pytest
from django.test import Client

from appliance.lifecycle import deployments
from appliance.partitioning import services as partitioning
from appliance.partitioning.cli.plan import table

from .deploy_support import demo, people, production  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

NOTHING_PLACED = {"placed": [], "unplaced": [], "served_weight": 0, "total_weight": 0}
SPLIT_GPU0 = {**NOTHING_PLACED, "gpus": [{"id": "gpu04/gpu0", "mig": [{"profile": "3g.40gb", "start": 0},
                                                    {"profile": "3g.40gb", "start": 4}], "time_slicing": None}]}
SPLIT_GPU5 = {**NOTHING_PLACED, "gpus": [{"id": "gpu04/gpu5", "mig": [{"profile": "7g.80gb", "start": 0}], "time_slicing": None}]}


def test_a_plan_names_the_deployments_on_the_gpus_it_changes(demo, root, people):  # noqa: F811
    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert served.state == "healthy" and served.placement[0]["gpu"] == 0

    hit = partitioning.save_result(demo, SPLIT_GPU0, user=people["olga"])
    assert hit.result["disruption"]["deployments"] == [
        {"deployment": served.pk, "name": "llama", "model": "llama", "version": 1, "gpus": ["gpu04/gpu0"]}]
    assert ("  model deployment llama (llama v1) on gpu04/gpu0: interrupted, its GPU changes (deploy it again "
            "once the plan is applied)") in table(hit.result).splitlines()
    client = Client()
    client.force_login(people["olga"])
    page = client.get(f"/partitioning/plans/{hit.number}/").content.decode()
    assert 'data-part="deployments_hit"' in page and "llama v1, gpu04/gpu0" in page

    # A plan that leaves the deployment's GPU alone names none; a stopped service is not hit either.
    assert partitioning.save_result(demo, SPLIT_GPU5, user=people["olga"]).result["disruption"]["deployments"] == []
    deployments.stop(served, user=people["olga"], reason="maintenance")
    assert partitioning.save_result(demo, SPLIT_GPU0, user=people["olga"]).result["disruption"]["deployments"] == []


def test_applying_the_plan_stops_the_deployment_first_and_deploys_it_again_after_the_run(
        demo, root, people, django_capture_on_commit_callbacks):  # noqa: F811
    from appliance.audit.models import AuditRecord
    from appliance.lifecycle.models import Deployment
    from appliance.provisioning.states import RunState

    served = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    plan = partitioning.save_result(demo, SPLIT_GPU0, user=people["olga"])
    with django_capture_on_commit_callbacks(execute=False):   # the stage itself is not run here
        run = partitioning.apply_plan(plan, user=people["olga"])
    served.refresh_from_db()
    plan.refresh_from_db()
    assert served.state == "stopped"
    assert served.state_detail == (f"partition plan {plan.number} changes gpu04/gpu0; it is deployed again once "
                                   "the plan's run has ended")
    assert plan.result["moved_deployments"] == [served.pk]

    # The run ends (here: failed, leaving the GPU as it was): the service is deployed again where it fits.
    with django_capture_on_commit_callbacks(execute=True):   # saving the run's end follows it (follow_run)
        run.state = RunState.FAILED
        run.save()
    again = Deployment.objects.exclude(pk=served.pk).get()
    assert (again.name, again.version_id, again.runtime, again.state) == ("llama", served.version_id, "vllm",
                                                                          "healthy")
    record = AuditRecord.objects.filter(event="partitioning.plan.state").order_by("pk").last()
    assert record.outcome == "success"
    assert record.details["redeployed"] == [{"deployment": again.pk, "name": "llama", "state": "healthy",
                                             "replaces": served.pk}]
