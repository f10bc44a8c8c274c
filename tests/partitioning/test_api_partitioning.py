"""The partitioning API as each role: the layout and plans are read by everyone; a preview, a saved plan,
apply and rollback need partitioning.change (apply and rollback also provisioning.run); errors name the
field (400), the role (403) or the state (409: a stale plan, a run already active)."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import GPU, Appliance, Node, Pool, PoolMembership
from appliance.partitioning.models import Plan
from appliance.provisioning.models import Run

pytestmark = pytest.mark.django_db

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def lab():
    """Appliance lab: gpu01 (inference) with GPU 0 in MIG mode holding 3g.40gb at 0 and 1g.10gb at 6, and
    GPU 1 whole."""
    appliance = Appliance.objects.create(name="lab", simulated=True)
    pool = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, facts={"mig_instances": [
        {"gpu": 0, "profile": "3g.40gb", "start": 0, "gpu_instance": 2, "compute_instance": 0, "uuid": "MIG-a"},
        {"gpu": 0, "profile": "1g.10gb", "start": 6, "gpu_instance": 13, "compute_instance": 0, "uuid": "MIG-b"}]})
    PoolMembership.objects.create(pool=pool, node=node)
    GPU.objects.create(node=node, index=0, model=H100, memory_mib=81559, mig_capable=True,
                       mig_mode=GPU.MigMode.ENABLED)
    GPU.objects.create(node=node, index=1, model=H100, memory_mib=81559, mig_capable=True)
    return appliance


REQUESTS = [{"name": "chat-7b", "memory_gb": 18, "replicas": 2, "isolation": "hard"},
            {"name": "train", "memory_gb": 80, "isolation": "exclusive"}]


def test_layout_is_read_by_every_role(client_for, lab):
    for role in Role.values:
        response = client_for(role).get("/api/v1/partitioning/layout/")
        assert response.status_code == 200, role
    body = client_for(Role.VIEWER).get("/api/v1/partitioning/layout/?appliance=lab").json()
    assert body["appliance"] == "lab"
    assert [(g["id"], g["model"], g["pool"]) for g in body["gpus"]] == [
        ("gpu01/gpu0", "h100-80gb", "inference"), ("gpu01/gpu1", "h100-80gb", "inference")]
    assert [(i["profile"], i["start"]) for i in body["gpus"][0]["mig"]] == [("3g.40gb", 0), ("1g.10gb", 6)]
    assert body["gpus"][1]["mig"] is None
    assert client_for(Role.VIEWER).get("/api/v1/partitioning/layout/?appliance=nope").status_code == 404


def test_preview_plans_without_saving(client_for, lab):
    response = client_for(Role.OPERATOR).post("/api/v1/partitioning/preview/", {"requests": REQUESTS},
                                              content_type="application/json")
    assert response.status_code == 200, response.content
    result = response.json()
    placed = sorted((p["request"], p["replica"], p["kind"]) for p in result["placed"])
    assert placed == [("chat-7b", 0, "mig"), ("chat-7b", 1, "mig"), ("train", 0, "whole")]
    assert result["unplaced"] == []
    assert (result["optimality"]["status"], result["optimality"]["gap_percent"]) == ("optimal", 0)
    assert Plan.objects.count() == 0


def test_viewer_and_auditor_cannot_preview_save_apply_or_roll_back(client_for, lab):
    for role in (Role.VIEWER, Role.AUDITOR):
        client = client_for(role)
        for path in ("/api/v1/partitioning/preview/", "/api/v1/partitioning/plans/",
                     "/api/v1/partitioning/rollback/"):
            assert client.post(path, {"requests": REQUESTS}, content_type="application/json").status_code == 403
    assert Plan.objects.count() == 0


def test_operator_saves_a_plan_audited_and_everyone_reads_it(client_for, lab, users):
    response = client_for(Role.OPERATOR).post("/api/v1/partitioning/plans/",
                                              {"requests": REQUESTS, "description": "chat and training"},
                                              content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["number"], body["state"], body["description"], body["created_by"]) == (
        1, "draft", "chat and training", users[Role.OPERATOR].username)
    assert body["unplaced"] == 0 and body["requests"] == REQUESTS
    assert AuditRecord.objects.filter(event="partitioning.plan.create",
                                      actor_username=users[Role.OPERATOR].username).exists()
    record = AuditRecord.objects.get(event="partitioning.plan.create")
    assert (record.details["optimality"], record.details["gap_percent"]) == ("optimal", 0)
    listed = client_for(Role.VIEWER).get("/api/v1/partitioning/plans/").json()
    assert [(p["number"], p["state"], p["optimality"]) for p in listed] == [(1, "draft", "optimal")]
    detail = client_for(Role.VIEWER).get("/api/v1/partitioning/plans/1/").json()
    assert detail["result"]["placed"] and detail["current"]
    assert client_for(Role.VIEWER).get("/api/v1/partitioning/plans/2/").status_code == 404


@pytest.mark.parametrize(("requests", "field"), [
    ([{"name": "Bad Name", "memory_gb": 10, "isolation": "soft"}], "requests[0].name"),
    ([{"name": "ok", "memory_gb": -1, "isolation": "soft"}], "requests[0].memory_gb"),
    ([{"name": "ok", "memory_gb": 10, "isolation": "soft"}, {"name": "b", "memory_gb": 10, "isolation": "shared"}],
     "requests[1].isolation"),
])
def test_bad_requests_are_a_400_naming_the_item(client_for, lab, requests, field):
    for path in ("/api/v1/partitioning/preview/", "/api/v1/partitioning/plans/"):
        response = client_for(Role.OPERATOR).post(path, {"requests": requests}, content_type="application/json")
        assert response.status_code == 400, (path, response.content)
        error = response.json()["error"]
        assert field in error["fields"], error
        assert error["message"].startswith(field), error
    assert Plan.objects.count() == 0


def test_requests_must_be_a_list_of_objects(client_for, lab):
    client = client_for(Role.OPERATOR)
    response = client.post("/api/v1/partitioning/preview/", {"requests": "chat"}, content_type="application/json")
    assert response.status_code == 400 and "requests" in response.json()["error"]["fields"]
    response = client.post("/api/v1/partitioning/preview/", {"requests": [{"name": "x", "memory_gb": 1}] * 501},
                           content_type="application/json")
    assert response.status_code == 400 and "requests" in response.json()["error"]["fields"]


def _save(client_for, role=Role.OPERATOR) -> int:
    response = client_for(role).post("/api/v1/partitioning/plans/", {"requests": REQUESTS},
                                     content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["number"]


def test_apply_needs_provisioning_run_and_starts_a_run(client_for, lab, users):
    number = _save(client_for)
    second = _save(client_for)
    for role in (Role.VIEWER, Role.AUDITOR, Role.ML_ENGINEER):
        assert client_for(role).post(f"/api/v1/partitioning/plans/{number}/apply/").status_code == 403
    assert Run.objects.count() == 0
    response = client_for(Role.OPERATOR).post(f"/api/v1/partitioning/plans/{number}/apply/",
                                              {"appliance": "lab"}, content_type="application/json")
    assert response.status_code == 202, response.content
    body = response.json()
    run = Run.objects.get()
    assert (body["state"], body["run"]) == ("applying", run.pk)
    assert run.stages == ["partitioning"]
    assert AuditRecord.objects.filter(event="partitioning.plan.apply", outcome="success").count() == 1
    # The same plan again: it is applying, a conflict.
    again = client_for(Role.OPERATOR).post(f"/api/v1/partitioning/plans/{number}/apply/", {},
                                           content_type="application/json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    assert again.json()["error"]["message"] == f"plan {number} is applying; only a draft (or a failed plan) is applied"
    # Another draft while the run is still pending: a conflict naming the run, not a second run.
    other = client_for(Role.OPERATOR).post(f"/api/v1/partitioning/plans/{second}/apply/", {},
                                           content_type="application/json")
    assert other.status_code == 409, other.content
    assert other.json()["error"]["message"].endswith("is pending; cancel it or wait for it")
    assert Run.objects.count() == 1
    # Both refusals are in the audit log, as a refusal through the command or the portal is.
    assert AuditRecord.objects.filter(event="partitioning.plan.apply", outcome="failure").count() == 2


def test_a_stale_plan_is_a_409(client_for, lab):
    number = _save(client_for)
    node = Node.objects.get(name="gpu01")
    node.facts = {"mig_instances": [{"gpu": 0, "profile": "7g.80gb", "start": 0, "gpu_instance": 0}]}
    node.save()
    response = client_for(Role.ADMINISTRATOR).post(f"/api/v1/partitioning/plans/{number}/apply/", {},
                                                   content_type="application/json")
    assert response.status_code == 409, response.content
    assert "stale" in response.json()["error"]["message"]
    assert Run.objects.count() == 0


def test_rollback_without_an_applied_plan_is_a_409(client_for, lab):
    response = client_for(Role.OPERATOR).post("/api/v1/partitioning/rollback/", {}, content_type="application/json")
    assert response.status_code == 409
    assert "no applied partition plan" in response.json()["error"]["message"]


def test_rollback_applies_a_new_plan_of_the_layout_before(client_for, lab, users):
    number = _save(client_for)
    Plan.objects.filter(number=number).update(state=Plan.State.APPLIED)
    # The nodes now have the plan's layout (as the stage would have left them).
    plan = Plan.objects.get(number=number)
    node = Node.objects.get(name="gpu01")
    instances = [{"gpu": int(g["id"][-1]), "profile": i["profile"], "start": i["start"], "gpu_instance": n}
                 for g in plan.result["gpus"] for n, i in enumerate(g["mig"] or [])]
    node.facts = {"mig_instances": instances}
    node.save()
    GPU.objects.filter(node=node, index__in=[int(g["id"][-1]) for g in plan.result["gpus"] if g["mig"] is not None]
                       ).update(mig_mode=GPU.MigMode.ENABLED)
    GPU.objects.filter(node=node, index__in=[int(g["id"][-1]) for g in plan.result["gpus"] if g["mig"] is None]
                       ).update(mig_mode=GPU.MigMode.DISABLED)
    response = client_for(Role.OPERATOR).post("/api/v1/partitioning/rollback/", {"appliance": "lab"},
                                              content_type="application/json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["number"] == number + 1 and body["state"] == "applying"
    target = {g["id"]: g for g in body["result"]["gpus"]}
    assert [(i["profile"], i["start"]) for i in target["gpu01/gpu0"]["mig"]] == [("3g.40gb", 0), ("1g.10gb", 6)]
    assert AuditRecord.objects.filter(event="partitioning.plan.rollback").count() == 1


def test_size_for_every_role_and_bad_values_named(client_for, lab):
    values = {"params": 8_030_261_248, "layers": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bf16",
              "context": 8192, "concurrency": 4, "gpu": "h100-80gb"}
    for role in Role.values:
        response = client_for(role).post("/api/v1/partitioning/size/", values, content_type="application/json")
        assert response.status_code == 200, (role, response.content)
    body = response.json()
    assert body["weights_bytes"] == 16_060_522_496  # 8,030,261,248 parameters x 2 bytes
    assert body["kv_bytes_per_token"] == 131_072    # 2 x 32 layers x 8 heads x 128 x 2 bytes
    assert body["kv_bytes"] == 131_072 * 8192 * 4
    assert body["placement"]["kind"] in ("mig", "gpu") and body["assumptions"]
    bad = client_for(Role.VIEWER).post("/api/v1/partitioning/size/", {**values, "gpu": "../../etc"},
                                       content_type="application/json")
    assert bad.status_code == 400 and "gpu" in bad.json()["error"]["fields"]
    bad = client_for(Role.VIEWER).post("/api/v1/partitioning/size/", {**values, "layers": 0},
                                       content_type="application/json")
    assert bad.status_code == 400 and "layers" in bad.json()["error"]["fields"]
