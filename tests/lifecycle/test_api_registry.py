"""The lifecycle REST API ("api" part): a version registered the way a Slurm job's `models register --url`
does, read back with its lineage and files, evaluated, promoted by one person and approved by another,
its aliases and history; every refusal one error body naming the field."""

import pytest

from appliance.accounts.models import User
from appliance.audit.models import AuditRecord
from appliance.lifecycle.models import ModelVersion, PromotionRequest, RegisteredModel

from .api_support import people, post  # noqa: F401 (fixtures)
from .registry_support import write_model

pytestmark = pytest.mark.django_db

API = "/api/v1/lifecycle/"


def login(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def erin(client, people):  # noqa: F811
    return login(client, people["erin"])


def register(client, root, directory="v1", seed=7, **extra):  # noqa: F811
    source = write_model(root / directory, seed)
    return post(client, API + "versions/", {"model": "llama", "source": str(source), **extra})


def test_register_as_a_compute_node_does_and_read_the_version_back(erin, root):  # noqa: F811
    response = register(erin, root, datasets=[{"name": "wiki", "uri": "file:///data/wiki", "sha256": "b" * 64}],
                        code_revision="9f1c2e0", hyperparameters={"lr": 0.0003, "epochs": 3},
                        metrics={"loss": 1.25}, description="first cut", tags={"team": "nlp"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["model"], body["number"], body["stage"], body["format"]) == ("llama", 1, "registered", "safetensors")
    assert [a["path"] for a in body["artifacts"]] == ["config.json", "model-00001-of-00002.safetensors",
                                                      "model-00002-of-00002.safetensors"]
    assert all(len(a["sha256"]) == 64 for a in body["artifacts"])
    assert body["lineage"]["datasets"] == [{"name": "wiki", "uri": "file:///data/wiki", "sha256": "b" * 64}]
    assert body["lineage"]["code_revision"] == "9f1c2e0"
    assert body["lineage"]["hyperparameters"] == {"lr": 0.0003, "epochs": 3}
    assert body["lineage"]["metrics"] == {"loss": 1.25}
    assert body["tags"] == {"team": "nlp"} and body["registered_by"] == "erin" and body["signed"] is True
    assert body["architecture"]["layers"] == 2
    assert [h["stage"] for h in body["stage_history"]] == ["registered"]
    detail = erin.get(API + "models/llama/versions/1/")
    assert detail.status_code == 200 and detail.json()["artifacts"] == body["artifacts"]
    model = erin.get(API + "models/llama/").json()
    assert (model["name"], model["versions"], model["latest_version"], model["production_version"]) == (
        "llama", 1, 1, None)
    assert AuditRecord.objects.filter(event="lifecycle.version.register", actor_username="erin").count() == 1


def test_a_fine_tune_names_its_parent_and_the_parent_lists_it(erin, root):  # noqa: F811
    assert register(erin, root).status_code == 201
    assert register(erin, root, "v2", seed=8, parent="models:/llama/1").status_code == 201
    assert erin.get(API + "models/llama/versions/2/").json()["lineage"]["parent"] == "llama/1"
    assert erin.get(API + "models/llama/versions/1/").json()["lineage"]["children"] == ["llama/2"]


@pytest.mark.parametrize(("body", "field"), [
    ({"source": "/etc"}, "source"),
    ({"source": "relative/path"}, "source"),
    ({"model": "../etc"}, "model"),
    ({"job": "12; rm -rf /"}, "job"),
    ({"parent": "llama"}, "parent"),
    ({"parent": "llama/7"}, "parent"),
    ({"datasets": [{"name": "wiki", "sha256": "not-a-hash"}]}, "datasets"),
    ({"metrics": {"loss": "low"}}, "metrics"),
])
def test_bad_registrations_are_a_400_naming_the_field_and_leave_nothing(erin, root, body, field):  # noqa: F811
    source = write_model(root / "v1")
    response = post(erin, API + "versions/", {"model": "llama", "source": str(source), **body})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == [field], error
    assert not ModelVersion.objects.exists() and not RegisteredModel.objects.exists()


def test_viewer_and_operator_cannot_register(client, root, people):  # noqa: F811
    source = write_model(root / "v1")
    for who in ("val", "olga", "aude"):
        response = post(login(client, people[who]), API + "versions/", {"model": "llama", "source": str(source)})
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"
    assert not ModelVersion.objects.exists()


def test_models_create_update_search_filter_and_delete(erin):
    assert post(erin, API + "models/", {"name": "llama", "license": "apache-2.0", "risk_class": "limited",
                                        "tags": {"team": "nlp"}}).status_code == 201
    assert post(erin, API + "models/", {"name": "whisper", "description": "speech to text"}).status_code == 201
    again = post(erin, API + "models/", {"name": "llama"})
    assert again.status_code == 409 and again.json()["error"]["fields"] == {"name": [
        "name: a model 'llama' exists already"]}
    assert [m["name"] for m in erin.get(API + "models/", {"search": "speech"}).json()["results"]] == ["whisper"]
    assert [m["name"] for m in erin.get(API + "models/", {"risk_class": "limited"}).json()["results"]] == ["llama"]
    assert [m["name"] for m in erin.get(API + "models/", {"tag": "team"}).json()["results"]] == ["llama"]
    changed = erin.patch(API + "models/whisper/", data='{"intended_use": "meeting notes"}',
                         content_type="application/json")
    assert changed.status_code == 200 and changed.json()["intended_use"] == "meeting notes"
    bad = erin.patch(API + "models/whisper/", data='{"tags": {"no spaces": "x"}}', content_type="application/json")
    assert bad.status_code == 400 and list(bad.json()["error"]["fields"]) == ["tags"]
    assert erin.delete(API + "models/whisper/").status_code == 204
    missing = erin.get(API + "models/whisper/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_a_model_with_versions_cannot_be_deleted(erin, root):  # noqa: F811
    register(erin, root)
    response = erin.delete(API + "models/llama/")
    assert response.status_code == 409
    assert response.json()["error"]["fields"] == {"name": ["model llama has 1 versions; archive them instead"]}


def test_promotion_needs_a_second_person_through_the_api(client, root, people):  # noqa: F811
    erin = login(client, people["erin"])
    register(erin, root)
    for stage in ("validated", "staging"):
        assert post(erin, API + "models/llama/versions/1/transition/", {"stage": stage}).status_code == 200
    direct = post(erin, API + "models/llama/versions/1/transition/", {"stage": "production"})
    assert direct.status_code == 409 and list(direct.json()["error"]["fields"]) == ["stage"]
    evaluation = post(erin, API + "models/llama/versions/1/evaluations/",
                      {"name": "mmlu", "metrics": {"accuracy": 0.61}, "passed": True,
                       "datasets": [{"name": "mmlu", "sha256": "c" * 64}]})
    assert evaluation.status_code == 201
    evaluation_id = evaluation.json()["id"]
    no_evidence = post(erin, API + "requests/", {"model": "llama", "version": 1, "reason": "good", "evidence": []})
    assert no_evidence.status_code == 400 and list(no_evidence.json()["error"]["fields"]) == ["evidence"]
    asked = post(erin, API + "requests/", {"model": "llama", "version": 1, "reason": "beats v0 on mmlu",
                                          "evidence": [evaluation_id]})
    assert asked.status_code == 201
    request_id = asked.json()["id"]
    assert asked.json()["evidence"] == [evaluation_id] and asked.json()["state"] == "pending"
    inbox = erin.get(API + "requests/", {"state": "pending"}).json()
    assert [r["id"] for r in inbox["results"]] == [request_id]

    self_approval = post(erin, API + f"requests/{request_id}/approve/", {"reason": "mine"})
    assert self_approval.status_code == 409, self_approval.content
    operator = post(login(client, people["olga"]), API + f"requests/{request_id}/approve/", {})
    assert operator.status_code == 403

    approved = post(login(client, people["amir"]), API + f"requests/{request_id}/approve/",
                    {"reason": "evidence checked"})
    assert approved.status_code == 200
    assert (approved.json()["state"], approved.json()["decided_by"]) == ("approved", "amir")
    version = client.get(API + "models/llama/versions/1/").json()
    assert version["stage"] == "production" and version["aliases"] == ["production"]
    assert client.get(API + "models/llama/").json()["production_version"] == 1
    again = post(client, API + f"requests/{request_id}/approve/", {})
    assert again.status_code == 409
    assert AuditRecord.objects.filter(event="lifecycle.request.approve", outcome="success",
                                      actor_username="amir").count() == 1
    assert AuditRecord.objects.filter(event="lifecycle.request.approve", outcome="failure",
                                      actor_username="erin").count() == 1


def test_reject_needs_a_reason_and_cancel_is_the_requesters(client, root, people):  # noqa: F811
    erin = login(client, people["erin"])
    register(erin, root)
    for stage in ("validated", "staging"):
        post(erin, API + "models/llama/versions/1/transition/", {"stage": stage})
    evaluation = post(erin, API + "models/llama/versions/1/evaluations/", {"name": "mmlu"}).json()["id"]
    request_id = post(erin, API + "requests/", {"model": "llama", "version": 1, "reason": "ready",
                                               "evidence": [evaluation]}).json()["id"]
    amir = login(client, people["amir"])
    no_reason = post(amir, API + f"requests/{request_id}/reject/", {})
    assert no_reason.status_code == 400 and list(no_reason.json()["error"]["fields"]) == ["reason"]
    not_theirs = post(amir, API + f"requests/{request_id}/cancel/", {})
    assert not_theirs.status_code == 403 and list(not_theirs.json()["error"]["fields"]) == ["request"]
    assert post(login(client, people["val"]), API + f"requests/{request_id}/cancel/", {}).status_code == 403
    assert PromotionRequest.objects.get(pk=request_id).state == "pending"
    cancelled = post(login(client, people["erin"]), API + f"requests/{request_id}/cancel/", {})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"


def test_aliases_and_the_history_at_a_point_in_time(erin, root):  # noqa: F811
    from django.utils import timezone

    register(erin, root)
    before_alias = timezone.now()
    register(erin, root, "v2", seed=8)
    put = erin.put(API + "models/llama/aliases/champion/", data='{"version": 2}', content_type="application/json")
    assert put.status_code == 200 and put.json() == {"model": "llama", "name": "champion", "version": 2}
    reserved = erin.put(API + "models/llama/aliases/production/", data='{"version": 2}',
                        content_type="application/json")
    assert reserved.status_code == 409
    bad_name = erin.put(API + "models/llama/aliases/Bad Name/", data='{"version": 2}', content_type="application/json")
    assert bad_name.status_code == 400 and list(bad_name.json()["error"]["fields"]) == ["alias"]
    assert erin.get(API + "models/llama/").json()["aliases"] == {"champion": 2}
    then = erin.get(API + "models/llama/history/", {"at": before_alias.isoformat()}).json()
    assert then["state"] == {"stages": {"1": "registered"}, "aliases": {}}
    now = erin.get(API + "models/llama/history/", {"at": timezone.now().isoformat()}).json()
    assert now["state"] == {"stages": {"1": "registered", "2": "registered"}, "aliases": {"champion": 2}}
    kinds = [(event["kind"], event["version"]) for event in now["timeline"]]
    assert kinds == [("stage", 1), ("stage", 2), ("alias", 2)]
    only_one = erin.get(API + "models/llama/history/", {"version": "1"}).json()
    assert only_one["state"] is None and [e["version"] for e in only_one["timeline"]] == [1]
    assert erin.get(API + "models/llama/history/", {"at": "yesterday"}).status_code == 400
    assert erin.delete(API + "models/llama/aliases/champion/").status_code == 204
    assert erin.get(API + "models/llama/").json()["aliases"] == {}


def test_unknown_model_version_and_request_are_404_naming_them(erin):
    assert erin.get(API + "models/nope/versions/1/").json()["error"]["fields"] == {"name": [
        "model 'nope' does not exist"]}
    assert erin.get(API + "requests/999/").status_code == 404
    assert erin.get(API + "deployments/999/").status_code == 404
    assert post(erin, API + "models/nope/versions/1/transition/", {"stage": "validated"}).status_code == 404


def test_an_administrator_cannot_approve_through_an_account_made_for_the_occasion(client, root, people):  # noqa: F811
    """The issue's attack through the REST API: the Administrator makes an ML engineer `sock`, which asks for
    production a moment later; the Administrator's approval is refused (409, naming the approver), and so is a
    third person's while `sock` is new; the version stays in staging."""
    admin = login(client, people["ada"])
    made = post(admin, "/api/v1/accounts/users/", {"username": "sock", "role": "ml_engineer",
                                                   "password": "Sock-puppet-pass-42"})
    assert made.status_code == 201, made.content
    sock = login(client, User.objects.get(username="sock"))
    register(sock, root)
    for stage in ("validated", "staging"):
        assert post(sock, API + "models/llama/versions/1/transition/", {"stage": stage}).status_code == 200
    evaluation = post(sock, API + "models/llama/versions/1/evaluations/",
                      {"name": "mmlu", "metrics": {"accuracy": 0.61}, "passed": True})
    asked = post(sock, API + "requests/", {"model": "llama", "version": 1, "reason": "ship it",
                                          "evidence": [evaluation.json()["id"]]})
    request_id = asked.json()["id"]

    refused = post(login(client, people["ada"]), API + f"requests/{request_id}/approve/", {"reason": "ok"})
    assert refused.status_code == 409
    assert refused.json()["error"]["fields"] == {"approver": [
        "approver: 'ada' created 'sock', who asked (directly or through accounts they made); the approver must not "
        "have made the requester's account"]}
    third = post(login(client, people["amir"]), API + f"requests/{request_id}/approve/", {"reason": "ok"})
    assert third.status_code == 409
    assert list(third.json()["error"]["fields"]) == ["requester"]
    assert "'sock' was created at" in third.json()["error"]["message"]
    assert ModelVersion.objects.get(model__name="llama", number=1).stage == "staging"
    assert PromotionRequest.objects.get(pk=request_id).state == "pending"
