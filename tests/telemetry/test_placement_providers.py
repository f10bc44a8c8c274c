"""The providers the schedulers register with telemetry.placements (their apps' ready()): the registry's
deployments on the inference pool, the simulated workload model's own services; Slurm's is tested against
the demo's real slurmctld in test_ingest_placements."""

import json
import time
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.utils import timezone

from appliance.lifecycle import deployments
from appliance.lifecycle.models import Deployment, ModelVersion, RegisteredModel
from appliance.simulation import workload
from appliance.telemetry import placements
from appliance.telemetry.placements import Placement
from tests.sample_inventory import build_sample_inventory

pytestmark = pytest.mark.django_db


def test_each_scheduler_registers_its_provider():
    assert sorted(placements.providers()) == ["deployments", "simulated-workload", "slurm"]


def test_the_registrys_deployments_place_their_services_on_the_inference_pools_nodes():
    inventory = build_sample_inventory()
    training_node, inference_node = inventory.gpu_node, inventory.gpu_node_2  # gpu-01, gpu-02
    model = RegisteredModel.objects.create(name="llama")
    version = ModelVersion.objects.create(model=model, number=1, source="/models/llama/1")

    def deployment(name, state, node, updated_ago_h=0.0):
        with mock.patch("django.utils.timezone.now", return_value=timezone.now() - timedelta(hours=updated_ago_h)):
            return Deployment.objects.create(name=name, version=version, appliance=inventory.appliance,
                                             pool="inference", state=state,
                                             placement=[{"node": node, "gpu": 0, "profile": None}])

    serving = deployment("chat", "healthy", "gpu-02", updated_ago_h=30)
    stopped = deployment("old-chat", "stopped", "gpu-02", updated_ago_h=1)
    deployment("ancient", "stopped", "gpu-02", updated_ago_h=30)  # ended longer ago than RECENT
    deployment("never", "blocked", "gpu-02")  # refused before it reached the pool
    deployment("elsewhere", "healthy", "gpu-03")
    assert sorted(deployments.node_placements(inference_node), key=lambda p: p.job) == [
        Placement("chat", serving.created, None), Placement("old-chat", stopped.created, stopped.updated)]
    assert deployments.node_placements(training_node) is None


def test_the_simulated_workloads_own_services_are_placed_while_its_driver_runs(monkeypatch, settings, tmp_path):
    inventory = build_sample_inventory()
    settings.SIMULATION_DIR = tmp_path
    (tmp_path / "workload").mkdir()
    started = time.time() - 600
    nodes = [{"name": "gpu-01", "pool": "training", "gpus": 8}, {"name": "gpu-02", "pool": "inference", "gpus": 8}]
    (tmp_path / "workload" / "config.json").write_text(json.dumps(
        {"profile": "demo", "seed": 1, "speed": 60.0, "started_at": started, "nodes": nodes}))
    monkeypatch.setattr(workload, "_pid", lambda: None)
    assert workload.node_placements(inventory.gpu_node_2) == []  # the driver does not run
    monkeypatch.setattr(workload, "_pid", lambda: 4242)
    since = datetime.fromtimestamp(started, UTC)
    assert workload.node_placements(inventory.gpu_node_2) == [
        Placement("chat-gpu-02", since, None), Placement("embeddings-gpu-02", since, None)]
    assert workload.node_placements(inventory.gpu_node) == []  # its training jobs are Slurm's to place
    inventory.appliance.simulated = False
    inventory.appliance.save()
    assert workload.node_placements(type(inventory.gpu_node).objects.get(pk=inventory.gpu_node_2.pk)) is None


def test_slurm_places_nothing_on_an_inference_node_and_is_unavailable_where_it_is_not_running(settings, tmp_path):
    from appliance.lending import slurmctl

    settings.SIMULATION_DIR = tmp_path  # no slurm.conf: the workloads stage has not run here
    inventory = build_sample_inventory()
    assert slurmctl.node_placements(inventory.gpu_node_2) is None
    with pytest.raises(placements.Unavailable, match="the simulated Slurm is not configured here"):
        slurmctl.node_placements(inventory.gpu_node)


def test_slurms_answer_gives_each_job_its_ids_and_times(monkeypatch):
    from appliance.lending import slurmctl

    inventory = build_sample_inventory()
    asked = []

    def squeue(appliance, *argv, timeout):
        asked.append((argv, timeout))
        return ("4182_7|4190|RUNNING|2026-03-02T11:00:05|2026-03-03T11:00:05\n"
                "4100|4100|COMPLETED|2026-03-02T09:00:00|2026-03-02T10:30:00\n"
                "4200|4200|PENDING|N/A|N/A\n")

    monkeypatch.setattr(slurmctl, "_client", squeue)
    monkeypatch.setattr(slurmctl, "_slurm_time", lambda text: None if text == "N/A" else
                        datetime.fromisoformat(text).replace(tzinfo=UTC))  # the client's local time: UTC here
    assert slurmctl.node_placements(inventory.gpu_node) == [
        Placement("4182_7", datetime(2026, 3, 2, 11, 0, 5, tzinfo=UTC), None),
        Placement("4190", datetime(2026, 3, 2, 11, 0, 5, tzinfo=UTC), None),
        Placement("4100", datetime(2026, 3, 2, 9, tzinfo=UTC), datetime(2026, 3, 2, 10, 30, tzinfo=UTC))]
    assert asked == [(("squeue", "--noheader", "--states=all", "--nodelist=gpu-01", "--format=%i|%A|%T|%S|%e"),
                      slurmctl.PLACEMENT_TIMEOUT_S)]
