"""Shared pieces of the lifecycle API's tests ("api" part): the artifact root and signing key of a test, the
people who act, and rows written straight to the database for the query-count tests (many versions)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.core.roles import Role
from appliance.inventory.models import Appliance
from appliance.lifecycle.models import (
    Alias,
    AliasHistory,
    Artifact,
    Deployment,
    Evaluation,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    StageHistory,
)


@pytest.fixture
def people(make_user):
    return {"erin": make_user(Role.ML_ENGINEER, "erin"), "amir": make_user(Role.ML_ENGINEER, "amir"),
            "ada": make_user(Role.ADMINISTRATOR, "ada"), "olga": make_user(Role.OPERATOR, "olga"),
            "val": make_user(Role.VIEWER, "val"), "aude": make_user(Role.AUDITOR, "aude")}


def post(client, url, body=None):
    return client.post(url, data=json.dumps(body or {}), content_type="application/json")


def many_versions(name: str, count: int, user) -> RegisteredModel:
    """A model with `count` versions, each with three files, an evaluation, its stage history, a decided
    request and a stopped deployment; aliases on the first and the last. Written to the database directly (no files behind them):
    what a page that lists or shows them reads, at any number of versions."""
    now = timezone.now()
    appliance, _created = Appliance.objects.get_or_create(name="lab", defaults={"simulated": True})
    model = RegisteredModel.objects.create(name=name, owner=user, tags={"team": "nlp"})
    for number in range(1, count + 1):
        version = ModelVersion.objects.create(model=model, number=number, source=f"/models/{name}/{number}",
                                              storage_path=f"/models/{name}/{number}", registered_by=user,
                                              stage="staging", training_job=str(1000 + number),
                                              datasets=[{"name": "wiki", "uri": "file:///data/wiki",
                                                         "sha256": "a" * 64}])
        Artifact.objects.bulk_create([Artifact(version=version, path=f"shard-{index}.safetensors", size=10 + index,
                                               sha256=f"{index:064x}", mtime_ns=1, inode=index)
                                      for index in range(3)])
        evaluation = Evaluation.objects.create(version=version, name="mmlu", metrics={"accuracy": 0.5},
                                               created_by=user)
        StageHistory.objects.create(version=version, stage="registered", started=now - timedelta(hours=2),
                                    started_by=user.username, ended=now - timedelta(hours=1), ended_by=user.username)
        StageHistory.objects.create(version=version, stage="staging", started=now - timedelta(hours=1),
                                    started_by=user.username)
        request = PromotionRequest.objects.create(version=version, target_stage="production", state="rejected",
                                                  requested_by=user, requested_by_username=user.username,
                                                  reason="try", expires_at=now + timedelta(hours=1))
        request.evidence.set([evaluation])
        Deployment.objects.create(name=name, version=version, appliance=appliance, pool="inference", state="stopped",
                                  placement=[{"node": "gpu04", "gpu": number % 8, "profile": None}],
                                  created_by=user)
        if number > 1:
            version.parent = ModelVersion.objects.get(model=model, number=number - 1)
            version.save()
    for alias, number in (("champion", 1), ("challenger", count)):
        version = ModelVersion.objects.get(model=model, number=number)
        Alias.objects.create(model=model, name=alias, version=version)
        AliasHistory.objects.create(model=model, name=alias, version=version, started=now, started_by=user.username)
    return model
