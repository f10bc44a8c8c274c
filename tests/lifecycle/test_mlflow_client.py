"""MLflow's own client (mlflow-skinny from PyPI) against the appliance as its registry ("mlflow" part):
models, versions from real files, aliases, search, download URIs, a transition to Production that becomes a
request for approval, roles, and Basic authentication checked like a login."""

from datetime import timedelta
from pathlib import Path

import pytest
import requests
from axes.models import AccessAttempt
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from appliance.accounts import tokens
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import services
from appliance.lifecycle.models import Artifact, ModelVersion, PromotionRequest

from ..conftest import PASSWORD
from .mlflow_support import use_artifact_root, write_model


@pytest.fixture
def mlflow_env(monkeypatch):
    # Failures fast: no retries, short timeouts (the client retries 5xx and 429 otherwise).
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    for name in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def people(make_user):
    return {"engineer": make_user(Role.ML_ENGINEER, "mlflow-erin"), "viewer": make_user(Role.VIEWER, "mlflow-vic")}


def client_for(live_server) -> MlflowClient:
    return MlflowClient(tracking_uri=live_server.url, registry_uri=live_server.url)


def test_mlflow_client_registers_reads_searches_and_asks_for_production(live_server, settings, tmp_path,
                                                                       mlflow_env, people):
    root = use_artifact_root(settings, tmp_path)
    model_dir = write_model(root / "llama-small")
    engineer = people["engineer"]
    _row, token = tokens.issue_token(engineer, "mlflow client")
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", token)
    client = client_for(live_server)

    created = client.create_registered_model("mlflow-llama", tags={"team": "nlp"}, description="a small llama")
    assert created.name == "mlflow-llama"
    assert created.tags == {"team": "nlp"}
    version = client.create_model_version("mlflow-llama", source=str(model_dir), run_id=None,
                                          tags={"dataset": "wiki-2026"}, description="first cut")
    assert (version.version, version.current_stage, version.status) == ("1", "None", "READY")
    assert version.source == str(model_dir)
    assert version.user_id == "mlflow-erin"
    assert version.tags == {"dataset": "wiki-2026", "appliance.stage": "registered"}
    # Registered through the services: its files hashed (config.json and the safetensors file) and signed.
    stored = ModelVersion.objects.get(model__name="mlflow-llama", number=1)
    assert sorted(Artifact.objects.filter(version=stored).values_list("path", flat=True)) == [
        "config.json", "model.safetensors"]
    assert stored.signature and stored.format == "safetensors"

    fetched = client.get_model_version("mlflow-llama", "1")
    assert fetched.description == "first cut"
    assert fetched.creation_timestamp > 1_700_000_000_000  # milliseconds

    client.set_registered_model_alias("mlflow-llama", "champion", "1")
    assert client.get_model_version_by_alias("mlflow-llama", "champion").version == "1"
    assert client.get_registered_model("mlflow-llama").aliases == {"champion": "1"}

    client.create_registered_model("other-model")
    assert [m.name for m in client.search_registered_models("name LIKE 'mlflow-%'")] == ["mlflow-llama"]
    assert [m.name for m in client.search_registered_models("tags.team = 'nlp'")] == ["mlflow-llama"]
    assert [m.name for m in client.search_registered_models(order_by=["name DESC"])] == ["other-model",
                                                                                         "mlflow-llama"]
    page = client.search_registered_models(max_results=1)
    assert [m.name for m in page] == ["mlflow-llama"] and page.token
    assert [m.name for m in client.search_registered_models(max_results=1, page_token=page.token)] == [
        "other-model"]
    assert [(v.name, v.version) for v in client.search_model_versions("name='mlflow-llama'")] == [
        ("mlflow-llama", "1")]
    assert client.search_model_versions("name='other-model'") == []
    assert client.get_model_version_download_uri("mlflow-llama", "1") == f"file://{model_dir}"

    client.set_model_version_tag("mlflow-llama", "1", "reviewed", "yes")
    assert client.get_model_version("mlflow-llama", "1").tags["reviewed"] == "yes"

    # The one who registered it moves it to Staging in one call: validated and staged, two audited steps.
    staged = client.transition_model_version_stage("mlflow-llama", "1", "Staging")
    assert (staged.current_stage, staged.tags["appliance.stage"]) == ("Staging", "staging")
    assert list(stored.stage_history.values_list("stage", "started_by")) == [
        ("registered", "mlflow-erin"), ("validated", "mlflow-erin"), ("staging", "mlflow-erin")]

    services.add_evaluation(stored, user=engineer, name="mmlu", metrics={"accuracy": 0.61}, passed=True)
    answered = client.transition_model_version_stage("mlflow-llama", "1", "Production")
    # A second person must approve: the version is still in Staging, with the request named.
    request = PromotionRequest.objects.get(version=stored)
    assert (request.state, request.target_stage, request.requested_by) == ("pending", "production", engineer)
    assert answered.current_stage == "Staging"
    assert answered.tags["appliance.pending_request"] == str(request.pk)
    assert answered.status_message == (
        f"Production needs a second person's approval: request #{request.pk} is pending until someone with "
        "models.approve approves it; the version stays in Staging until then")
    assert client.get_latest_versions("mlflow-llama", stages=["Production"]) == []

    with pytest.raises(MlflowException) as kept:
        client.delete_model_version("mlflow-llama", "1")
    assert kept.value.error_code == "RESOURCE_CONFLICT"
    with pytest.raises(MlflowException) as missing:
        client.get_registered_model("no-such-model")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    audited = set(AuditRecord.objects.filter(actor_username="mlflow-erin", event__startswith="lifecycle.")
                  .values_list("event", flat=True))
    assert {"lifecycle.model.register", "lifecycle.version.register", "lifecycle.alias.set",
            "lifecycle.version.transition", "lifecycle.version.update", "lifecycle.request.create"} <= audited

    # A Viewer's token reads, and is refused every write.
    _row, viewer_token = tokens.issue_token(people["viewer"], "viewer")
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", viewer_token)
    assert client.get_registered_model("mlflow-llama").name == "mlflow-llama"
    with pytest.raises(MlflowException) as denied:
        client.create_registered_model("viewer-model")
    assert denied.value.error_code == "PERMISSION_DENIED"
    with pytest.raises(MlflowException) as denied:
        client.set_registered_model_alias("mlflow-llama", "viewer-pick", "1")
    assert denied.value.error_code == "PERMISSION_DENIED"
    assert not client.search_registered_models("name = 'viewer-model'")


def test_the_production_alias_is_a_request_for_approval(live_server, settings, tmp_path, mlflow_env, people):
    root = use_artifact_root(settings, tmp_path)
    engineer = people["engineer"]
    version = services.register_version("aliased", source=str(write_model(root / "aliased")), user=engineer)
    services.transition(version, "validated", user=engineer)
    services.transition(version, "staging", user=engineer)
    services.add_evaluation(version, user=engineer, name="smoke", metrics={"loss": 1.5}, passed=True)
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(engineer, "t")[1])
    client = client_for(live_server)

    client.set_registered_model_alias("aliased", "production", "1")

    request = PromotionRequest.objects.get(version=version)
    assert (request.state, request.alias, request.target_stage) == ("pending", "production", "production")
    assert client.get_registered_model("aliased").aliases == {}
    with pytest.raises(MlflowException) as missing:
        client.get_model_version_by_alias("aliased", "production")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_basic_authentication_is_a_password_login(live_server, settings, tmp_path, mlflow_env, people):
    use_artifact_root(settings, tmp_path)
    services.register_model("basic-model", user=people["engineer"])
    mlflow_env.setenv("MLFLOW_TRACKING_USERNAME", "mlflow-erin")
    mlflow_env.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    client = client_for(live_server)
    assert client.get_registered_model("basic-model").name == "basic-model"

    mlflow_env.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-password")
    with pytest.raises(MlflowException) as refused:
        client.get_registered_model("basic-model")
    assert refused.value.error_code == "UNAUTHENTICATED"
    # Counted by the login policy: the username's failures (lockout) and the audit log.
    assert AccessAttempt.objects.get(username="mlflow-erin").failures_since_start == 1
    failure = AuditRecord.objects.get(event="auth.login.failure")
    assert (failure.outcome, failure.target_name) == ("failure", "mlflow-erin")


def test_basic_authentication_locks_the_username_after_the_failure_limit(live_server, settings, tmp_path,
                                                                         mlflow_env, people):
    settings.AXES_FAILURE_LIMIT = 2
    use_artifact_root(settings, tmp_path)
    mlflow_env.setenv("MLFLOW_TRACKING_USERNAME", "mlflow-erin")
    mlflow_env.setenv("MLFLOW_TRACKING_PASSWORD", "wrong-1")
    client = client_for(live_server)
    for _attempt in range(2):
        with pytest.raises(MlflowException):
            client.search_registered_models()
    # The right password no longer opens it (MLflow's client reports a 429 as its retries running out,
    # so the answer is read here as it is sent).
    answer = requests.get(f"{live_server.url}/api/2.0/mlflow/registered-models/search",
                          auth=("mlflow-erin", PASSWORD), timeout=60)
    assert answer.status_code == 429
    assert answer.json() == {"error_code": "REQUEST_LIMIT_EXCEEDED",
                             "message": "too many failed logins for this username; try again later"}
    assert AuditRecord.objects.filter(event="auth.lockout", target_name="mlflow-erin").count() == 1


def test_mlflow_register_model_creates_the_model_then_adds_versions(live_server, settings, tmp_path, mlflow_env,
                                                                    people):
    """mlflow.register_model(), the one line most MLflow code uses: it creates the model, and on the second
    call hears RESOURCE_ALREADY_EXISTS and goes on to add a version."""
    import mlflow

    root = use_artifact_root(settings, tmp_path)
    mlflow_env.setenv("MLFLOW_TRACKING_URI", live_server.url)
    mlflow_env.setenv("MLFLOW_REGISTRY_URI", live_server.url)
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(people["engineer"], "t")[1])
    first = mlflow.register_model(str(write_model(root / "one", seed=1)), "one-liner")
    second = mlflow.register_model(f"file://{write_model(root / 'two', seed=2)}", "one-liner")
    assert (first.version, second.version) == ("1", "2")
    assert list(ModelVersion.objects.filter(model__name="one-liner").values_list("number", "storage_path")) == [
        (2, str(root / "two")), (1, str(root / "one"))]


def _backdate(*people) -> None:
    """Accounts that have held their role for two days: past the four-eyes cooling period."""
    from django.utils import timezone

    from appliance.accounts.models import User

    since = timezone.now() - timedelta(days=2)
    fields = {field: since for field in ("date_joined", "role_since", "active_since")
              if any(f.name == field for f in User._meta.get_fields())}
    User.objects.filter(pk__in=[person.pk for person in people]).update(**fields)


def test_mlflow_promote_flow_register_staging_production_request_approval_download(
        live_server, settings, tmp_path, mlflow_env, people, make_user):
    """The flow MLflow users run, with MLflow's client and MLflow's URIs: register, Staging, Production
    (a promotion request here), a second person approves, and models:/NAME/Production downloads the files."""
    import mlflow

    settings.FOUR_EYES_COOLING_PERIOD = timedelta(0)
    root = use_artifact_root(settings, tmp_path)
    model_dir = write_model(root / "flow-v1")
    erin, amir = people["engineer"], make_user(Role.ML_ENGINEER, "mlflow-amir")
    _backdate(erin, amir)
    mlflow_env.setenv("MLFLOW_TRACKING_URI", live_server.url)
    mlflow_env.setenv("MLFLOW_REGISTRY_URI", live_server.url)
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(erin, "flow")[1])
    client = client_for(live_server)

    registered = mlflow.register_model(str(model_dir), "mlflow-flow")
    assert (registered.version, registered.current_stage) == ("1", "None")
    staged = client.transition_model_version_stage("mlflow-flow", "1", "Staging", archive_existing_versions=True)
    assert (staged.current_stage, staged.tags["appliance.stage"], staged.status_message) == (
        "Staging", "staging", "")
    staging_copy = mlflow.artifacts.download_artifacts("models:/mlflow-flow/Staging", dst_path=str(tmp_path / "s"))
    assert sorted(p.name for p in Path(staging_copy).iterdir()) == ["config.json", "model.safetensors"]

    version = ModelVersion.objects.get(model__name="mlflow-flow", number=1)
    services.add_evaluation(version, user=erin, name="mmlu", metrics={"accuracy": 0.64}, passed=True)
    answered = client.transition_model_version_stage("mlflow-flow", "1", "Production")
    request = PromotionRequest.objects.get(version=version)
    assert (answered.current_stage, answered.status_message) == ("Staging", (
        f"Production needs a second person's approval: request #{request.pk} is pending until someone with "
        "models.approve approves it; the version stays in Staging until then"))
    assert (request.state, request.requested_by, sorted(request.evidence.values_list("name", flat=True))) == (
        "pending", erin, ["mmlu"])
    with pytest.raises(MlflowException) as nothing_yet:
        mlflow.artifacts.download_artifacts("models:/mlflow-flow/Production", dst_path=str(tmp_path / "early"))
    assert "Production" in str(nothing_yet.value)

    # The second person approves through the appliance's API, with their own token.
    approval = requests.post(f"{live_server.url}/api/v1/lifecycle/requests/{request.pk}/approve/",
                             json={"reason": "mmlu checked"}, timeout=60,
                             headers={"Authorization": f"Token {tokens.issue_token(amir, 'approve')[1]}"})
    assert approval.status_code == 200, approval.text
    produced = client.get_latest_versions("mlflow-flow", stages=["Production"])
    assert [(v.version, v.current_stage, v.status_message) for v in produced] == [("1", "Production", "")]
    assert client.get_registered_model("mlflow-flow").aliases == {"production": "1"}

    copy = Path(mlflow.artifacts.download_artifacts("models:/mlflow-flow/Production", dst_path=str(tmp_path / "p")))
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == {
        p.name: p.read_bytes() for p in model_dir.iterdir()}

    trail = AuditRecord.objects.filter(event__in=[
        "lifecycle.version.transition", "lifecycle.request.create", "lifecycle.request.approve"])
    assert list(trail.order_by("pk").values_list("event", "actor_username")) == [
        ("lifecycle.version.transition", "mlflow-erin"), ("lifecycle.version.transition", "mlflow-erin"),
        ("lifecycle.request.create", "mlflow-erin"), ("lifecycle.request.approve", "mlflow-amir")]


def test_only_the_registrant_moves_a_new_version_to_staging_in_one_call(live_server, settings, tmp_path,
                                                                        mlflow_env, people, make_user):
    root = use_artifact_root(settings, tmp_path)
    services.register_version("theirs", source=str(write_model(root / "theirs")), user=people["engineer"])
    other = make_user(Role.ML_ENGINEER, "mlflow-olga")
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(other, "t")[1])
    client = client_for(live_server)

    with pytest.raises(MlflowException) as refused:
        client.transition_model_version_stage("theirs", "1", "Staging")
    assert refused.value.error_code == "RESOURCE_CONFLICT"
    assert refused.value.message == (
        "RESOURCE_CONFLICT: stage: theirs v1 is registered (MLflow: None): only the one who registered it (mlflow-erin) moves it "
        "to Staging in one step; anyone else transitions it to 'validated' first, then to Staging.")
    assert client.get_model_version("theirs", "1").current_stage == "None"
    client.transition_model_version_stage("theirs", "1", "validated")
    assert client.transition_model_version_stage("theirs", "1", "Staging").current_stage == "Staging"


def test_an_mlflow_uri_as_source_is_named_for_what_it_is(live_server, settings, tmp_path, mlflow_env, people):
    root = use_artifact_root(settings, tmp_path)
    services.register_version("origin", source=str(write_model(root / "origin")), user=people["engineer"])
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(people["engineer"], "t")[1])
    client = client_for(live_server)

    for source, what in (("models:/origin/1", "an MLflow model URI (a version of a registered model)"),
                         ("runs:/0a1b2c/model", "an MLflow run URI (a tracking server's run artifacts)")):
        with pytest.raises(MlflowException) as refused:
            client.create_model_version("origin", source=source)
        assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
        assert refused.value.message == (
            f"INVALID_PARAMETER_VALUE: source: {source!r} is {what}, not files on the appliance; give the directory of the version's "
            "files under an artifact root (an absolute path or a file:// URI)")
    assert list(ModelVersion.objects.filter(model__name="origin").values_list("number", flat=True)) == [1]


def test_search_model_versions_takes_mlflows_limit_and_pages_past_the_appliances(
        live_server, settings, tmp_path, mlflow_env, people, monkeypatch):
    from appliance.lifecycle import mlflow_api

    root = use_artifact_root(settings, tmp_path)
    for seed in (1, 2, 3):
        services.register_version("paged", source=str(write_model(root / f"v{seed}", seed=seed)),
                                  user=people["engineer"])
    mlflow_env.setenv("MLFLOW_TRACKING_TOKEN", tokens.issue_token(people["engineer"], "t")[1])
    client = client_for(live_server)
    monkeypatch.setattr(mlflow_api, "VERSION_PAGE", 2)  # the appliance's page, made small to see it

    first = client.search_model_versions("name='paged'", max_results=200_000, order_by=["version_number"])
    assert [v.version for v in first] == ["1", "2"] and first.token
    rest = client.search_model_versions("name='paged'", max_results=200_000, order_by=["version_number"],
                                        page_token=first.token)
    assert [v.version for v in rest] == ["3"] and not rest.token
    with pytest.raises(MlflowException) as refused:
        client.search_model_versions("name='paged'", max_results=200_001)
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    assert refused.value.message == (
        "INVALID_PARAMETER_VALUE: Invalid value 200001 for parameter 'max_results' supplied: it must be between 1 and 200000.")
