"""MLflow's own client (mlflow-skinny from PyPI) against the appliance as its registry ("mlflow" part):
models, versions from real files, aliases, search, download URIs, a transition to Production that becomes a
request for approval, roles, and Basic authentication checked like a login."""

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

    # The transition table holds: from registered, MLflow's Staging is two steps (validated first).
    with pytest.raises(MlflowException) as refused:
        client.transition_model_version_stage("mlflow-llama", "1", "Staging")
    assert refused.value.error_code == "RESOURCE_CONFLICT"
    client.transition_model_version_stage("mlflow-llama", "1", "validated")
    staged = client.transition_model_version_stage("mlflow-llama", "1", "Staging")
    assert (staged.current_stage, staged.tags["appliance.stage"]) == ("Staging", "staging")

    services.add_evaluation(stored, user=engineer, name="mmlu", metrics={"accuracy": 0.61}, passed=True)
    answered = client.transition_model_version_stage("mlflow-llama", "1", "Production")
    # A second person must approve: the version is still in Staging, with the request named.
    request = PromotionRequest.objects.get(version=stored)
    assert (request.state, request.target_stage, request.requested_by) == ("pending", "production", engineer)
    assert answered.current_stage == "Staging"
    assert answered.tags["appliance.pending_request"] == str(request.pk)
    assert f"request #{request.pk}" in answered.status_message
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
