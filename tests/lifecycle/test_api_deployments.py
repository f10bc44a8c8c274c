"""The demo flow through the REST API on the simulated appliance ("api" part): a version registered the way a
Slurm job does, evaluated, requested for production by one ML engineer and approved by another, deployed by an
operator on the inference pool (live state in the detail), a second version replacing it, a changed file
blocking the next deployment (409 naming the file, the verification saying which), rollback to the previous
version and stop; viewers read all of it and change nothing."""

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.lifecycle.models import Deployment

from .api_support import people, post  # noqa: F401 (fixtures)
from .deploy_support import demo, owners  # noqa: F401 (fixture)
from .integrity_support import put_back, rewrite_last_bytes
from .registry_support import write_model

pytestmark = pytest.mark.django_db

API = "/api/v1/lifecycle/"


def as_(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def to_production(root, people, directory, seed) -> int:  # noqa: F811
    """Register, evaluate, request and approve through the API; the version's number."""
    erin, amir = as_(people["erin"]), as_(people["amir"])
    registered = post(erin, API + "versions/", {"model": "llama", "source": str(write_model(root / directory, seed)),
                                                "datasets": [{"name": "wiki", "sha256": "d" * 64}]})
    assert registered.status_code == 201, registered.content
    number = registered.json()["number"]
    version = f"{API}models/llama/versions/{number}/"
    for stage in ("validated", "staging"):
        assert post(erin, version + "transition/", {"stage": stage}).status_code == 200
    evaluation = post(erin, version + "evaluations/", {"name": "mmlu", "metrics": {"accuracy": 0.6}, "passed": True})
    asked = post(erin, API + "requests/", {"model": "llama", "version": number, "reason": "evaluated",
                                          "evidence": [evaluation.json()["id"]]})
    assert post(amir, f"{API}requests/{asked.json()['id']}/approve/", {"reason": "checked"}).status_code == 200
    return number


def test_deploy_replace_block_rollback_and_stop_through_the_api(demo, root, people):  # noqa: F811
    olga, val = as_(people["olga"]), as_(people["val"])
    to_production(root, people, "v1", 7)
    refused = post(val, API + "deployments/", {"model": "llama"})
    assert refused.status_code == 403

    first = post(olga, API + "deployments/", {"model": "llama", "runtime": "vllm"})
    assert first.status_code == 201, first.content
    body = first.json()
    assert (body["name"], body["version"], body["state"], body["appliance"]) == ("llama", 1, "healthy", "demo")
    assert body["live"]["healthy"] is True and body["live"]["gpus"][0]["owner"] == "llama"
    assert owners()["0"] == {"kind": "inference", "service": "llama"}
    assert val.get(f"{API}deployments/{body['id']}/").json()["live"]["routed"] is True

    not_production = post(olga, API + "deployments/", {"model": "llama", "version": 9})
    assert not_production.status_code == 404

    to_production(root, people, "v2", 8)
    second = post(olga, API + "deployments/", {"model": "llama"})
    assert second.status_code == 201 and second.json()["version"] == 2
    assert val.get(f"{API}deployments/{body['id']}/").json()["state"] == "replaced"

    shard = root / "v2" / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4] + b"\x00\x00\x00\x00")
    blocked = post(olga, API + "deployments/", {"model": "llama"})
    assert blocked.status_code == 409, blocked.content
    assert "model-00002-of-00002.safetensors" in blocked.json()["error"]["message"]
    assert Deployment.objects.filter(state="blocked").count() == 1
    verified = post(olga, API + "models/llama/versions/2/verify/?full=true")
    assert verified.status_code == 200
    assert (verified.json()["ok"], verified.json()["changed"]) == (False, ["model-00002-of-00002.safetensors"])

    no_reason = post(olga, f"{API}deployments/{second.json()['id']}/rollback/", {})
    assert no_reason.status_code == 400 and list(no_reason.json()["error"]["fields"]) == ["reason"]
    rolled = post(olga, f"{API}deployments/{second.json()['id']}/rollback/", {"reason": "v2 files changed"})
    assert rolled.status_code == 201, rolled.content
    assert (rolled.json()["version"], rolled.json()["state"]) == (1, "healthy")
    assert val.get(API + "models/llama/").json()["production_version"] == 1

    listed = val.get(API + "deployments/", {"state": "healthy"}).json()["results"]
    assert [(d["id"], d["version"]) for d in listed] == [(rolled.json()["id"], 1)]
    stopped = post(olga, f"{API}deployments/{rolled.json()['id']}/stop/", {"reason": "maintenance"})
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
    again = post(olga, f"{API}deployments/{rolled.json()['id']}/stop/", {"reason": "twice"})
    assert again.status_code == 409
    assert AuditRecord.objects.filter(event="lifecycle.deployment.rollback", outcome="success",
                                      actor_username="olga").exists()


def test_a_tampered_version_stays_blocked_through_the_api_until_an_administrator_clears_it(demo, root, people):  # noqa: F811
    to_production(root, people, "v1", 7)
    olga, erin, ada = as_(people["olga"]), as_(people["erin"]), as_(people["ada"])
    shard = root / "v1" / "model-00002-of-00002.safetensors"
    original = rewrite_last_bytes(shard)
    assert post(olga, API + "deployments/", {"model": "llama"}).status_code == 409
    put_back(shard, original)
    quick = post(olga, API + "models/llama/versions/1/verify/")
    assert (quick.status_code, quick.json()["ok"], quick.json()["state"]) == (200, False, "tampered")
    assert post(olga, API + "deployments/", {"model": "llama"}).status_code == 409

    clear = API + "models/llama/versions/1/clear-tampered/"
    assert post(olga, clear, {"reason": "restored"}).status_code == 403  # an Operator does not reach it
    refused = post(erin, clear, {"reason": "restored"})
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        403, "clearing a tampered verdict needs an Administrator")
    no_reason = post(ada, clear, {})
    assert no_reason.status_code == 400 and list(no_reason.json()["error"]["fields"]) == ["reason"]
    cleared = post(ada, clear, {"reason": "restored from backup"})
    assert (cleared.status_code, cleared.json()["ok"], cleared.json()["full"]) == (200, True, True)
    assert AuditRecord.objects.filter(event="lifecycle.version.tamper_clear", actor_username="ada").count() == 1
    again = post(ada, clear, {"reason": "restored from backup"})
    assert again.status_code == 409
    deployed = post(olga, API + "deployments/", {"model": "llama"})
    assert deployed.status_code == 201, deployed.content
