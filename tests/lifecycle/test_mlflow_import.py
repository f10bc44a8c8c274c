"""Importing an MLflow registry ("mlflow" part): exported through the appliance's own MLflow API (the live
server) into the files the importer reads, then imported into a clean registry by `manage.py models
mlflow-import`: models, versions (their files hashed again), tags and aliases arrive, a version whose files
are elsewhere is reported and skipped, and a second run adds nothing."""

import json
from io import StringIO

import requests
from django.core.management import call_command
from mlflow import MlflowClient

from appliance.accounts import tokens
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import mlflow_import
from appliance.lifecycle.models import Alias, Artifact, ModelVersion, RegisteredModel

from .mlflow_support import use_artifact_root, write_model


def run_import(*arguments) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("models", "mlflow-import", *arguments, stdout=out, stderr=err)
        status = 0
    except SystemExit as exc:
        status = exc.code
    return status, out.getvalue(), err.getvalue()


def export(base_url: str, token: str, directory) -> None:
    """What a site does to export a registry: save the two search endpoints' answers."""
    directory.mkdir()
    headers = {"Authorization": f"Bearer {token}"}
    for endpoint, file in (("registered-models/search", "registered-models.json"),
                           ("model-versions/search", "model-versions.json")):
        answer = requests.get(f"{base_url}/api/2.0/mlflow/{endpoint}", headers=headers, timeout=60)
        assert answer.status_code == 200
        (directory / file).write_text(answer.text)


def test_an_export_of_the_mlflow_api_imports_into_a_clean_registry_once(live_server, settings, tmp_path,
                                                                       monkeypatch, make_user):
    root = use_artifact_root(settings, tmp_path)
    engineer = make_user(Role.ML_ENGINEER, "mlflow-ivan")
    token = tokens.issue_token(engineer, "import")[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    client = MlflowClient(tracking_uri=live_server.url, registry_uri=live_server.url)
    client.create_registered_model("imp-llama", tags={"team": "nlp"}, description="imported llama")
    client.create_model_version("imp-llama", source=str(write_model(root / "llama-v1", seed=1)),
                                tags={"dataset": "wiki"}, description="first")
    client.create_model_version("imp-llama", source=f"file://{write_model(root / 'llama-v2', seed=2)}",
                                run_id="0a1b2c3d4e5f")
    client.set_registered_model_alias("imp-llama", "champion", "2")
    client.create_registered_model("imp-empty")

    exported = tmp_path / "export"
    export(live_server.url, token, exported)
    # A third version whose files live in object storage: not reachable from the appliance.
    (exported / "model-versions-2.json").write_text(json.dumps({"model_versions": [
        {"name": "imp-llama", "version": "3", "source": "s3://bucket/llama-v3", "current_stage": "Staging"}]}))

    # The REST path reads the same, page by page.
    monkeypatch.setattr(mlflow_import, "PAGE_SIZE", 1)
    models, versions = mlflow_import.fetch_rest(live_server.url, token)
    assert sorted(m["name"] for m in models) == ["imp-empty", "imp-llama"]
    assert sorted((v["name"], v["version"]) for v in versions) == [("imp-llama", "1"), ("imp-llama", "2")]

    # A clean registry: the rows gone (the files stay where they are).
    Alias.objects.all().delete()
    ModelVersion.objects.all().delete()
    RegisteredModel.objects.all().delete()

    monkeypatch.setenv("APPLIANCE_TOKEN", token)
    status, out, err = run_import("--export", str(exported))
    assert status == 2, (out, err)
    assert "2 models created, 2 versions imported, 0 already there, 1 skipped" in out
    assert "skipped imp-llama/3: source: 's3' URIs are not allowed" in err

    model = RegisteredModel.objects.get(name="imp-llama")
    assert (model.description, model.tags) == ("imported llama", {"team": "nlp"})
    assert RegisteredModel.objects.filter(name="imp-empty").exists()
    first, second = ModelVersion.objects.filter(model=model).order_by("number")
    assert (first.number, first.source, first.description, first.stage) == (
        1, str(root / "llama-v1"), "first", "registered")
    assert first.tags == {"dataset": "wiki", "mlflow.import.version": "1", "mlflow.import.stage": "None"}
    assert (second.run_id, second.tags["mlflow.import.version"]) == ("0a1b2c3d4e5f", "2")
    assert sorted(Artifact.objects.filter(version=second).values_list("path", flat=True)) == [
        "config.json", "model.safetensors"]
    assert second.signature
    assert Alias.objects.get(model=model, name="champion").version == second
    assert not ModelVersion.objects.filter(model=model, number=3).exists()
    record = AuditRecord.objects.get(event="lifecycle.mlflow.import")
    assert (record.actor_username, record.outcome) == ("mlflow-ivan", "success")
    assert record.details["counts"] == {"models_created": 2, "models_existing": 0, "versions_imported": 2,
                                        "versions_existing": 0, "aliases_set": 1, "skipped": 1}
    assert record.details["skipped"][0]["version"] == "3"

    status, out, err = run_import("--export", str(exported))
    assert status == 2
    assert "0 models created, 0 versions imported, 2 already there, 1 skipped" in out
    assert ModelVersion.objects.filter(model=model).count() == 2
    assert AuditRecord.objects.filter(event="lifecycle.mlflow.import").count() == 2


def test_import_refusals_name_the_input_and_are_audited(db, settings, tmp_path, monkeypatch, make_user):
    use_artifact_root(settings, tmp_path)
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)
    status, _out, err = run_import("--url", "ftp://registry.example/")
    assert status == 1
    assert "url: an http:// or https:// URL of an MLflow server expected" in err
    (tmp_path / "broken.json").write_text("{not json")
    status, _out, err = run_import("--export", str(tmp_path / "broken.json"))
    assert status == 1 and "broken.json: not JSON" in err
    assert list(AuditRecord.objects.filter(event="lifecycle.mlflow.import").values_list("outcome", flat=True)) == [
        "failure", "failure"]

    viewer = make_user(Role.VIEWER, "mlflow-viv")
    (tmp_path / "one.json").write_text(json.dumps({"registered_models": [{"name": "x"}], "model_versions": []}))
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(viewer, "v")[1])
    status, _out, err = run_import("--export", str(tmp_path / "one.json"))
    assert status == 1 and "may not import models" in err
    assert not RegisteredModel.objects.exists()


def test_sources_of_the_other_registry_are_read_under_this_appliances_roots(db, settings, tmp_path, monkeypatch):
    root = use_artifact_root(settings, tmp_path)
    write_model(root / "teams" / "nlp" / "llama")
    monkeypatch.delenv("APPLIANCE_TOKEN", raising=False)
    export_file = tmp_path / "registry.json"
    export_file.write_text(json.dumps({
        "registered_models": [
            {"name": "moved", "aliases": [{"alias": "production", "version": "4"}]},
            {"name": "a-prompt", "tags": [{"key": "mlflow.prompt.is_prompt", "value": "true"}]}],
        "model_versions": [
            {"name": "moved", "version": "4", "source": "file:///mnt/mlflow/nlp/llama", "current_stage": "Production"},
            {"name": "a-prompt", "version": "1", "source": "/mnt/mlflow/nlp/llama"}]}))

    status, out, err = run_import("--export", str(export_file), "--rewrite-source", f"/mnt/mlflow={root}/teams")

    assert status == 2
    assert "version imported: moved/4 -> moved/1" in out
    assert "skipped moved/4: alias production: follows the production stage here" in err
    assert "skipped a-prompt: an MLflow prompt, not a model" in err
    version = ModelVersion.objects.get(model__name="moved")
    assert (version.source, version.stage) == (str(root / "teams" / "nlp" / "llama"), "registered")
    assert version.tags == {"mlflow.import.version": "4", "mlflow.import.stage": "Production"}
    assert not RegisteredModel.objects.filter(name="a-prompt").exists()
    assert not Alias.objects.exists()
    # Nobody's token: the appliance itself, named by the OS user on the command line.
    assert AuditRecord.objects.get(event="lifecycle.mlflow.import").outcome == "success"
