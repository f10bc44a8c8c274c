"""The command line's share of "API and CLI for all of it": the approvals inbox (`models requests`), a
requester withdrawing their request (`models cancel`), the deployed services (`models deployments`) and
stopping one (`models stop`), each as the account of APPLIANCE_TOKEN and audited like the portal's."""

import json
from datetime import timedelta

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from appliance.accounts import tokens
from appliance.audit.models import AuditRecord
from appliance.lifecycle import deployments, services
from appliance.lifecycle.models import Deployment, PromotionRequest
from appliance.simulation import kubernetes

from .deploy_support import cluster_file, demo, people, production  # noqa: F401 (fixtures)
from .registry_support import write_model
from .test_deploy_cli import models as deploy_models
from .test_registry_cli import models

pytestmark = pytest.mark.django_db


def staged(root, people, directory="v1", seed=7):  # noqa: F811
    version = services.register_version("llama", source=str(write_model(root / directory, seed)), user=people["erin"])
    services.transition(version, "validated", user=people["erin"])
    services.transition(version, "staging", user=people["erin"])
    evaluation = services.add_evaluation(version, user=people["erin"], name="mmlu", metrics={"accuracy": 0.6},
                                         passed=True)
    return version, evaluation


def test_the_inbox_lists_pending_requests_and_reads_an_expired_one_as_expired(root, people, monkeypatch):  # noqa: F811
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)
    version, evaluation = staged(root, people)
    request = services.request_transition(version, "production", user=people["erin"], reason="mmlu 0.6\nsecond line",
                                          evidence=[evaluation.pk])
    printed = models("requests")
    assert printed.startswith(f"request #{request.pk}: llama v1 to production, pending, asked by erin: mmlu 0.6 "
                              "(waiting for a second person until ")
    listed = json.loads(models("requests", "llama", "--json"))
    assert [(row["id"], row["state"], row["evidence"], row["requested_by"]) for row in listed] == [
        (request.pk, "pending", [evaluation.pk], "erin")]

    # Past its lifetime it is no longer in the inbox, though the periodic task has not marked it yet.
    PromotionRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert models("requests") == "no pending requests\n"
    assert json.loads(models("requests", "--state", "expired", "--json"))[0]["id"] == request.pk
    assert PromotionRequest.objects.get(pk=request.pk).state == "pending"   # reading changed nothing
    with pytest.raises(CommandError, match=r"^model 'nothing' does not exist$"):
        models("requests", "nothing")


def test_only_the_requester_withdraws_a_request_and_it_leaves_the_inbox(root, people, monkeypatch):  # noqa: F811
    version, evaluation = staged(root, people)
    request = services.request_transition(version, "production", user=people["erin"], reason="ready",
                                          evidence=[evaluation.pk])
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)
    with pytest.raises(CommandError, match=r"^withdrawing a request needs a person: set APPLIANCE_TOKEN"):
        models("cancel", str(request.pk))
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["amir"], "cli")[1])
    with pytest.raises(CommandError, match=rf"^request #{request.pk} was made by erin; only they can withdraw it$"):
        models("cancel", str(request.pk))
    assert PromotionRequest.objects.get(pk=request.pk).state == "pending"

    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["erin"], "cli")[1])
    assert models("cancel", f"#{request.pk}") == f"request #{request.pk} withdrawn\n"
    assert PromotionRequest.objects.get(pk=request.pk).state == "cancelled"
    assert models("requests") == "no pending requests\n"
    assert f"request #{request.pk}: llama v1 to production, cancelled, asked by erin: ready (cancelled by erin" in (
        models("requests", "--state", "all"))
    events = list(AuditRecord.objects.filter(event="lifecycle.request.cancel").order_by("pk")
                  .values_list("actor_username", "outcome", "channel"))
    assert events == [("amir", "failure", "cli"), ("erin", "success", "cli")]
    with pytest.raises(CommandError, match=rf"^request #{request.pk} is cancelled"):
        models("cancel", str(request.pk))
    with pytest.raises(CommandError, match=r"^request #999999 does not exist$"):
        models("cancel", "999999")


def test_deployments_lists_the_services_and_stop_frees_their_gpus(demo, root, people, monkeypatch):  # noqa: F811
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)
    assert deploy_models("deployments") == (
        0, "no service is deployed (--all lists older replaced, failed and stopped rollouts too)\n", "")
    first = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert first.state == "healthy"
    status, out, _ = deploy_models("deployments")
    assert (status, out) == (0, f"deployment {first.pk}: llama = llama v1 (vllm) on gpu04/gpu0: healthy "
                                "(ready and serving on gpu04/gpu0)\n")

    # Stopping needs the deploy capability: a viewer is refused, audited, and nothing stops.
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["val"], "cli")[1])
    status, _, err = deploy_models("stop", "llama", "--reason", "maintenance")
    assert status == 1 and "val may not deploy models" in err
    assert Deployment.objects.get(pk=first.pk).state == "healthy"

    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["olga"], "cli")[1])
    status, _, err = deploy_models("stop", "llama;rm", "--reason", "x")
    assert (status, err) == (1, "error: name: 'llama;rm' is not a service name\n")
    status, out, err = deploy_models("stop", "llama", "--reason", "maintenance window")
    assert (status, err) == (0, "")
    assert out == (f"deployment {first.pk}: llama = llama v1 (vllm) on gpu04/gpu0: stopped (maintenance window)\n")
    assert kubernetes.read(cluster_file(demo))["services"].get("llama", {}).get("selects") is None
    # Stopped a moment ago it is still among the current deployments; a day later only --all lists it.
    assert deploy_models("deployments")[1] == out
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Deployment._meta.db_table} SET updated = %s WHERE id = %s",
                       [timezone.now() - timedelta(days=2), first.pk])
    assert deploy_models("deployments")[1].startswith("no service is deployed")
    listed = json.loads(deploy_models("deployments", "llama", "--all", "--json")[1])
    assert [(row["id"], row["state"], row["version"]) for row in listed] == [(first.pk, "stopped", 1)]
    status, _, err = deploy_models("stop", "llama", "--reason", "again")
    assert (status, err) == (1, "error: name: no service llama is deployed\n")
    records = list(AuditRecord.objects.filter(event="lifecycle.deployment.stop").order_by("pk")
                   .values_list("actor_username", "outcome"))
    assert records == [("val", "failure"), ("olga", "failure"), ("olga", "success"), ("olga", "failure")]
