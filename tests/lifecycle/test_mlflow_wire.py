"""The MLflow-compatible API's wire format as MLflow's client reads it ("mlflow" part): error bodies and
their statuses, GET parameters vs JSON bodies, search filters and their refusals, the appliance's read-only
tags, no session (so no CSRF) and no audit record for a search sent as POST."""

import base64

import pytest
from django.test import Client

from appliance.accounts import tokens
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import services
from appliance.lifecycle.errors import NotFound

from ..conftest import PASSWORD
from .mlflow_support import use_artifact_root, write_model

pytestmark = pytest.mark.django_db
API = "/api/2.0/mlflow"


@pytest.fixture
def engineer(make_user):
    return make_user(Role.ML_ENGINEER, "mlflow-wendy")


@pytest.fixture
def bearer(engineer):
    return {"HTTP_AUTHORIZATION": f"Bearer {tokens.issue_token(engineer, 'wire')[1]}"}


@pytest.fixture
def registry(settings, tmp_path, engineer):
    root = use_artifact_root(settings, tmp_path)
    for name, team in (("alpha-7b", "nlp"), ("alpha-70b", "nlp"), ("beta", "vision")):
        services.register_model(name, user=engineer, tags={"team": team})
    services.register_version("alpha-7b", source=str(write_model(root / "a7")), user=engineer, run_id="run-1")
    services.register_version("alpha-7b", source=str(write_model(root / "a7b", seed=5)), user=engineer,
                              run_id="run-2")
    return root


def names(response) -> list[str]:
    return [model["name"] for model in response.json()["registered_models"]]


def test_errors_are_mlflow_bodies_with_mlflow_statuses(client, bearer, registry):
    answer = client.get(f"{API}/registered-models/get", {"name": "nope"}, **bearer)
    assert (answer.status_code, answer.json()) == (404, {"error_code": "RESOURCE_DOES_NOT_EXIST",
                                                        "message": "Registered Model with name=nope not found"})
    answer = client.get(f"{API}/registered-models/get", {"name": "beta"})
    assert (answer.status_code, answer.json()["error_code"]) == (401, "UNAUTHENTICATED")
    answer = client.get(f"{API}/registered-models/get", {"name": "beta"}, HTTP_AUTHORIZATION="Bearer apl_x.y")
    assert (answer.status_code, answer.json()) == (401, {"error_code": "UNAUTHENTICATED", "message": "Invalid token."})
    # MLflow's client falls back on another endpoint when it hears ENDPOINT_NOT_FOUND.
    answer = client.post(f"{API}/experiments/create", {}, content_type="application/json", **bearer)
    assert (answer.status_code, answer.json()["error_code"]) == (404, "ENDPOINT_NOT_FOUND")
    answer = client.post(f"{API}/registered-models/create", {"name": "beta"}, content_type="application/json",
                         **bearer)
    assert (answer.status_code, answer.json()["error_code"]) == (400, "RESOURCE_ALREADY_EXISTS")
    answer = client.post(f"{API}/registered-models/create", {"name": "../etc"}, content_type="application/json",
                         **bearer)
    assert answer.status_code == 400
    assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert answer.json()["message"].startswith("name: ")
    answer = client.get(f"{API}/model-versions/get", {"name": "alpha-7b", "version": "one"}, **bearer)
    assert (answer.status_code, answer.json()["message"]) == (
        400, "version: 'one' is not a version number (1, 2, ...)")


def test_versions_read_as_mlflow_reads_them(client, bearer, registry):
    version = client.get(f"{API}/model-versions/get", {"name": "alpha-7b", "version": "2"}, **bearer).json()[
        "model_version"]
    assert {key: version[key] for key in ("name", "version", "current_stage", "run_id", "status", "source")} == {
        "name": "alpha-7b", "version": "2", "current_stage": "None", "run_id": "run-2", "status": "READY",
        "source": str(registry / "a7b")}
    assert version["tags"] == [{"key": "appliance.stage", "value": "registered"}]
    assert isinstance(version["creation_timestamp"], int)
    model = client.get(f"{API}/registered-models/get", {"name": "alpha-7b"}, **bearer).json()["registered_model"]
    assert [(v["version"], v["current_stage"]) for v in model["latest_versions"]] == [("2", "None")]
    assert model["user_id"] == "mlflow-wendy"


def test_search_filters_order_and_pages(client, bearer, registry):
    search = f"{API}/registered-models/search"
    assert names(client.get(search, {"filter": "name LIKE 'alpha-%'"}, **bearer)) == ["alpha-70b", "alpha-7b"]
    assert names(client.get(search, {"filter": "name ILIKE 'ALPHA-7_'"}, **bearer)) == ["alpha-7b"]
    assert names(client.get(search, {"filter": "tags.team = 'vision'"}, **bearer)) == ["beta"]
    assert names(client.get(search, {"filter": "tags.team != 'nlp'"}, **bearer)) == ["beta"]
    assert names(client.get(search, {"filter": "name IN ('beta', 'alpha-7b') AND tags.team = 'nlp'"},
                            **bearer)) == ["alpha-7b"]
    assert names(client.get(search, {"filter": "tags.`mlflow.prompt.is_prompt` != 'true'",
                                     "order_by": ["name DESC"]}, **bearer)) == ["beta", "alpha-7b", "alpha-70b"]
    first = client.get(search, {"max_results": 2}, **bearer).json()
    assert [m["name"] for m in first["registered_models"]] == ["alpha-70b", "alpha-7b"]
    rest = client.get(search, {"max_results": 2, "page_token": first["next_page_token"]}, **bearer).json()
    assert [m["name"] for m in rest["registered_models"]] == ["beta"] and "next_page_token" not in rest

    versions = f"{API}/model-versions/search"
    found = client.get(versions, {"filter": "name='alpha-7b' AND run_id = 'run-1'"}, **bearer).json()
    assert [v["version"] for v in found["model_versions"]] == ["1"]
    found = client.get(versions, {"filter": "version_number >= 2"}, **bearer).json()
    assert [(v["name"], v["version"]) for v in found["model_versions"]] == [("alpha-7b", "2")]
    found = client.get(versions, {"filter": "tags.`appliance.stage` = 'registered'",
                                  "order_by": ["version_number ASC"]}, **bearer).json()
    assert [v["version"] for v in found["model_versions"]] == ["1", "2"]

    for bad, said in (("name = 'x' OR name = 'y'", "AND expected"), ("owner = 'x'", "'owner' is not searchable"),
                      ("name LIKE", "a quoted string expected at the end")):
        answer = client.get(search, {"filter": bad}, **bearer)
        assert answer.status_code == 400 and answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
        assert answer.json()["message"].startswith("filter: ") and said in answer.json()["message"]
    answer = client.get(search, {"page_token": "forged"}, **bearer)
    assert (answer.status_code, answer.json()["message"]) == (400, "page_token: not a token this server gave")


def test_writes_take_json_bodies_without_session_or_csrf_and_keep_the_appliance_tags(bearer, registry, engineer):
    client = Client(enforce_csrf_checks=True)
    answer = client.post(f"{API}/model-versions/set-tag", {"name": "alpha-7b", "version": "1", "key": "eval",
                                                           "value": "ok"}, content_type="application/json", **bearer)
    assert answer.status_code == 200
    assert services.get_version("alpha-7b", 1).tags == {"eval": "ok"}
    answer = client.post(f"{API}/model-versions/set-tag", {"name": "alpha-7b", "version": "1",
                                                           "key": "appliance.stage", "value": "production"},
                         content_type="application/json", **bearer)
    assert answer.status_code == 400 and "read-only" in answer.json()["message"]
    assert services.get_version("alpha-7b", 1).stage == "registered"
    answer = client.delete(f"{API}/registered-models/delete-tag", {"name": "beta", "key": "team"},
                           content_type="application/json", **bearer)
    assert answer.status_code == 200 and services.get_model("beta").tags == {}
    # A session is no way in: no cookie is read, so a forged cross-site form cannot write.
    session_client = Client(enforce_csrf_checks=True)
    session_client.force_login(engineer)
    answer = session_client.post(f"{API}/registered-models/create", {"name": "via-session"},
                                 content_type="application/json")
    assert (answer.status_code, answer.json()["error_code"]) == (401, "UNAUTHENTICATED")
    # Nor are Basic credentials a browser remembers: a cross-site form cannot send JSON, and only JSON is read.
    basic = base64.b64encode(f"{engineer.get_username()}:{PASSWORD}".encode()).decode()
    answer = client.post(f"{API}/registered-models/create", {"name": "via-form"},
                         HTTP_AUTHORIZATION=f"Basic {basic}")
    assert (answer.status_code, answer.json()["error_code"]) == (400, "MALFORMED_REQUEST")
    with pytest.raises(NotFound):
        services.get_model("via-form")

    before = AuditRecord.objects.filter(event="api.request").count()
    answer = client.post(f"{API}/registered-models/search", {"filter": "name = 'beta'"},
                         content_type="application/json", **bearer)
    assert names(answer) == ["beta"]
    assert AuditRecord.objects.filter(event="api.request").count() == before


def test_a_viewer_reads_and_is_denied_writes(client, registry, make_user):
    viewer = make_user(Role.VIEWER, "mlflow-val")
    basic = base64.b64encode(f"mlflow-val:{PASSWORD}".encode()).decode()
    headers = {"HTTP_AUTHORIZATION": f"Basic {basic}"}
    assert client.get(f"{API}/registered-models/get", {"name": "beta"}, **headers).status_code == 200
    answer = client.post(f"{API}/model-versions/transition-stage", {"name": "alpha-7b", "version": "1",
                                                                    "stage": "Archived"},
                         content_type="application/json", **headers)
    assert (answer.status_code, answer.json()["error_code"]) == (403, "PERMISSION_DENIED")
    assert services.get_version("alpha-7b", 1).stage == "registered"
    denied = AuditRecord.objects.get(event="access.denied", actor_username=viewer.username)
    assert "models.change" in denied.reason


def test_wrong_basic_passwords_spend_the_address_budget_of_the_login_page(client, registry):
    """The login page's budget: 10 password attempts per address and minute (settings)."""

    def attempt(username, password):
        basic = base64.b64encode(f"{username}:{password}".encode()).decode()
        return client.get(f"{API}/registered-models/get", {"name": "beta"}, HTTP_AUTHORIZATION=f"Basic {basic}")

    # Right passwords do not count: a Basic client sends its password with every call.
    for _call in range(12):
        assert attempt("mlflow-wendy", PASSWORD).status_code == 200
    for guess in range(10):  # other usernames each time: no username reaches its own lockout
        assert attempt(f"somebody-{guess}", "guess").status_code == 401
    answer = attempt("mlflow-wendy", PASSWORD)
    assert answer.status_code == 429, answer.content
    assert answer.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED", answer.content
    assert int(answer["Retry-After"]) >= 1


def test_searches_answer_in_the_same_number_of_queries_at_any_size(client, bearer, registry, engineer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from appliance.lifecycle.models import Alias, ModelVersion, RegisteredModel

    def counted(path) -> int:
        client.get(path, {"max_results": 1000}, **bearer)  # the token's last use written once, before counting
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path, {"max_results": 1000}, **bearer).status_code == 200
        return len(queries)

    def grow(count):
        for index in range(count):
            model = RegisteredModel.objects.create(name=f"bulk-{RegisteredModel.objects.count()}-{index}",
                                                   owner=engineer, tags={"k": "v"})
            for number in (1, 2, 3):
                version = ModelVersion.objects.create(model=model, number=number, source="/x", stage="staging",
                                                      registered_by=engineer, tags={"a": "b"})
            Alias.objects.create(model=model, name="champion", version=version)

    grow(2)
    small = (counted(f"{API}/registered-models/search"), counted(f"{API}/model-versions/search"))
    grow(20)
    assert (counted(f"{API}/registered-models/search"), counted(f"{API}/model-versions/search")) == small


def test_stage_changes_follow_the_table_and_refusals_are_audited(client, bearer, registry, engineer):
    transition = f"{API}/model-versions/transition-stage"

    def move(version, stage, **extra):
        return client.post(transition, {"name": "alpha-7b", "version": version, "stage": stage, **extra},
                           content_type="application/json", **bearer)

    # A registered version cannot be deprecated (the table: archived, rejected or validated). (None -> Staging,
    # MLflow's own flow, is taken by the registrant in one call: tests/lifecycle/test_mlflow_client.py.)
    refused = move("1", "deprecated")
    assert (refused.status_code, refused.json()["error_code"]) == (409, "RESOURCE_CONFLICT")
    assert services.get_version("alpha-7b", 1).stage == "registered"
    record = AuditRecord.objects.get(event="lifecycle.version.transition", outcome="failure")
    assert record.actor_username == "mlflow-wendy"

    for version in ("1", "2"):
        assert move(version, "validated").status_code == 200
    assert move("1", "Staging").json()["model_version"]["current_stage"] == "Staging"
    answered = move("2", "staging", archive_existing_versions=True).json()["model_version"]
    assert (answered["current_stage"], answered["tags"][0]) == ("Staging", {"key": "appliance.stage",
                                                                            "value": "staging"})
    assert services.get_version("alpha-7b", 1).stage == "archived"
    assert move("1", "Archived").json()["model_version"]["current_stage"] == "Archived"  # already there
    answer = move("2", "Shipped")
    assert answer.status_code == 400 and answer.json()["message"].startswith("stage: 'Shipped' is not one of None")


def test_a_refused_write_is_audited_with_its_message(client, bearer, registry):
    answer = client.delete(f"{API}/model-versions/delete", {"name": "alpha-7b", "version": "1"},
                           content_type="application/json", **bearer)
    assert (answer.status_code, answer.json()["error_code"]) == (409, "RESOURCE_CONFLICT")
    assert services.get_version("alpha-7b", 1)
    record = AuditRecord.objects.get(event="api.request", outcome="failure")
    assert record.actor_username == "mlflow-wendy"
    assert record.reason.startswith("Model versions are kept: alpha-7b v1 is evidence")


def test_no_mlflow_call_of_the_administrator_puts_a_version_of_an_account_it_made_in_production(
        client, settings, tmp_path, make_user):
    """The issue's attack through the MLflow API: the Administrator makes an ML engineer `sock` (accounts API),
    which registers a version, moves it to Staging and asks for Production with MLflow's calls; the
    Administrator's own MLflow calls (transition-stage to Production, the alias production) are requests, never
    approvals, and are refused while sock's request is pending; sock's version is not in Production."""
    from appliance.accounts.models import User

    root = use_artifact_root(settings, tmp_path)
    ada = make_user(Role.ADMINISTRATOR, "ada")
    client.force_login(ada)
    made = client.post("/api/v1/accounts/users/", {"username": "sock", "role": "ml_engineer",
                                                   "password": "Sock-puppet-pass-42"}, content_type="application/json")
    assert made.status_code == 201, made.content
    client.logout()
    sock = User.objects.get(username="sock")

    def as_(user):
        return {"HTTP_AUTHORIZATION": f"Bearer {tokens.issue_token(user, 'mlflow')[1]}"}

    def call(user, endpoint, **body):
        return client.post(f"{API}/{endpoint}", body, content_type="application/json", **as_(user))

    assert call(sock, "registered-models/create", name="llm").status_code == 200
    created = call(sock, "model-versions/create", name="llm", source=str(write_model(root / "llm")))
    assert created.status_code == 200, created.content
    assert call(sock, "model-versions/transition-stage", name="llm", version="1", stage="Staging").status_code == 200
    services.add_evaluation(services.get_version("llm", 1), user=sock, name="mmlu", metrics={"accuracy": 0.6},
                            passed=True)
    asked = call(sock, "model-versions/transition-stage", name="llm", version="1", stage="Production")
    assert asked.json()["model_version"]["current_stage"] == "Staging"

    for endpoint, body in (("model-versions/transition-stage", {"stage": "Production"}),
                           ("registered-models/alias", {"alias": "production"})):
        refused = call(ada, endpoint, name="llm", version="1", **body)
        assert (refused.status_code, refused.json()["error_code"]) == (409, "RESOURCE_CONFLICT")
        assert refused.json()["message"] == "stage: a request to move llm v1 to production is pending already"
    assert services.get_version("llm", 1).stage == "staging"
    latest = client.get(f"{API}/registered-models/get-latest-versions", {"name": "llm", "stages": "Production"},
                        **as_(ada))
    assert latest.json() == {"model_versions": []}
    assert not AuditRecord.objects.filter(event="lifecycle.request.approve").exists()


def test_a_tampered_version_is_not_handed_out_through_mlflow(client, bearer, registry, make_user):
    """The issue's attack on a version's file (the last 8 bytes rewritten in place, the mtime put back): once
    a verification finds it, MLflow's client cannot resolve the version's files (models:/... goes through
    get-download-uri) and still cannot after the bytes are back and a quick check passes over them; an
    Administrator's clearing (a full verification that passes) hands them out again. Another version is not
    affected."""
    from appliance.lifecycle import integrity

    from .integrity_support import put_back, rewrite_last_bytes

    uri = f"{API}/model-versions/get-download-uri"
    version = services.get_version("alpha-7b", 1)
    original = rewrite_last_bytes(registry / "a7" / "model.safetensors")
    assert integrity.verify(version, full=True).state == "tampered"
    refused = client.get(uri, {"name": "alpha-7b", "version": "1"}, **bearer)
    assert (refused.status_code, refused.json()) == (409, {
        "error_code": "RESOURCE_CONFLICT",
        "message": "version: alpha-7b v1 was found changed since registration (tampered): its files are not handed "
                   "out until an Administrator clears the verdict after a full verification passes"})
    put_back(registry / "a7" / "model.safetensors", original)
    assert integrity.verify(version).state == "tampered"
    assert client.get(uri, {"name": "alpha-7b", "version": "1"}, **bearer).status_code == 409
    assert client.get(uri, {"name": "alpha-7b", "version": "2"}, **bearer).json() == {
        "artifact_uri": f"file://{registry / 'a7b'}"}

    integrity.clear_tampered(version, user=make_user(Role.ADMINISTRATOR, "ada"), reason="restored from backup")
    assert client.get(uri, {"name": "alpha-7b", "version": "1"}, **bearer).json() == {
        "artifact_uri": f"file://{registry / 'a7'}"}
