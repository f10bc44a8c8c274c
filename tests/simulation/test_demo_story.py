"""The demo's story (simulation/demo.py, issue 39): at the end of the simulated appliance's bootstrap the models
its inference services serve are registered from the scratch filesystem with their lineage, promoted by a
four-eyes approval and deployed, and its pools get lending policies; on a production install's cooling period
the story stops at the production request and says why. The whole bootstrap tells it too
(tests/provisioning/test_bootstrap_demo.py)."""

import json
from datetime import timedelta

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Pool
from appliance.lending.models import LendingPolicy
from appliance.lifecycle.models import Deployment, ModelVersion, PromotionRequest
from appliance.simulation import demo as story
from appliance.simulation import slurm, workload
from tests.lifecycle.test_registry_slurm import training_slurm  # noqa: F401 (a fixture)
from tests.simulation.slurm_fixtures import demo_appliance  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(training_slurm):  # noqa: F811
    """The demo appliance with its real (simulated) Slurm running and its scratch filesystem as the artifact
    root, as at the end of its bootstrap."""
    return training_slurm


@pytest.fixture
def first_job(demo):  # noqa: F811
    """The workload driver's first Slurm job, submitted as the driver submits it, named in its jobs.jsonl."""
    job = slurm.client("sbatch", "--parsable", "--job-name=compute-gpu01-d0-0", "--nodelist=gpu01", "--nodes=1",
                       "--gres=gpu:2", "--time=10", "--output=/dev/null", "--wrap", "sleep 300").stdout.strip()
    directory = workload.workload_dir()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "jobs.jsonl").write_text(json.dumps({"activity": "compute-gpu01-d0-0", "job": job,
                                                      "node": "gpu01", "gpus": [0, 1]}) + "\n")
    return job


def test_the_story_registers_promotes_and_deploys_the_services_models(demo, first_job, settings):  # noqa: F811
    settings.FOUR_EYES_COOLING_PERIOD = timedelta(0)  # a development appliance's default (settings.py)
    result = story.tell(demo)

    assert result.models == ["chat v1", "embeddings v1"]
    assert result.waiting == []
    versions = ModelVersion.objects.select_related("model").order_by("model__name")
    assert [(v.model.name, v.number, v.stage, v.source, v.training_job, v.code_revision) for v in versions] == [
        ("chat", 1, "production", "/mnt/scratch/models/chat/v1", first_job, "demo-1"),
        ("embeddings", 1, "production", "/mnt/scratch/models/embeddings/v1", first_job, "demo-1")]
    assert (versions[0].training["name"], versions[0].training["partition"]) == ("compute-gpu01-d0-0", "train")
    assert [dataset["uri"] for v in versions for dataset in v.datasets] == [
        "/mnt/scratch/datasets/support-dialogues", "/mnt/scratch/datasets/documents"]
    # Four eyes: the engineer asked, the lead decided.
    assert sorted(PromotionRequest.objects.values_list("state", "requested_by__username", "decided_by__username")) == [
        ("approved", "demo-engineer", "demo-lead"), ("approved", "demo-engineer", "demo-lead")]
    assert sorted(Deployment.objects.values_list("name", "version__model__name")) == [
        ("chat", "chat"), ("embeddings", "embeddings")]
    assert set(Deployment.objects.values_list("state", flat=True)) <= {"rolling_out", "healthy"}
    policies = {policy.pool.kind: policy for policy in LendingPolicy.objects.select_related("pool")}
    inference = policies[Pool.Kind.INFERENCE]
    assert (inference.may_lend, inference.minimum_nodes, inference.window_start_hour, inference.window_end_hour,
            inference.reclaim_minutes) == (True, 1, 20, 7, 15)
    assert policies[Pool.Kind.TRAINING].may_lend is False
    # The people of the demo cannot log in; each step is theirs in the audit log.
    engineer = versions[0].registered_by
    assert engineer.username == "demo-engineer" and not engineer.has_usable_password()
    assert [(v.model.risk_class, v.model.license) for v in versions] == [("limited", "Apache-2.0"), ("minimal", "Apache-2.0")]
    register = AuditRecord.objects.filter(event="lifecycle.version.register").order_by("pk")
    assert list(register.values_list("actor_username", flat=True)) == ["demo-engineer", "demo-engineer"]
    told = AuditRecord.objects.get(event="simulation.demo.story")
    assert told.details["lines"][0] == "demo models registered and promoted: chat v1, embeddings v1"
    assert told.details["training_job"] == first_job

    # Told once: a second bootstrap's story adds nothing.
    again = story.tell(demo)
    assert (again.models, again.deployments, again.policies) == ([], [], [])
    assert ModelVersion.objects.count() == 2 and Deployment.objects.count() == 2
    assert AuditRecord.objects.filter(event="simulation.demo.story").count() == 1  # nothing new, nothing recorded


def test_with_a_production_cooling_period_the_story_stops_at_the_request_and_says_why(demo, settings,  # noqa: F811
                                                                                      monkeypatch):
    monkeypatch.setattr(story, "JOB_WAIT_S", 0)  # no workload driver here: no job to wait for
    settings.FOUR_EYES_COOLING_PERIOD = timedelta(hours=24)
    result = story.tell(demo)

    assert result.models == [] and result.deployments == []
    assert len(result.waiting) == 2
    assert result.waiting[0].startswith("chat v1 waits for a production approval: requester: 'demo-engineer' "
                                        "was created at ")
    assert set(ModelVersion.objects.values_list("stage", flat=True)) == {"staging"}
    assert set(PromotionRequest.objects.values_list("state", flat=True)) == {"pending"}
    assert not Deployment.objects.exists()
    told = AuditRecord.objects.get(event="simulation.demo.story")
    assert told.outcome == "failure" and told.reason.startswith("chat v1 waits for a production approval")
