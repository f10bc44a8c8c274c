"""`manage.py models ...` of the registry ("registry" part): who the command acts as, the job from the
environment, and the four-eyes flow from the command line."""

import json
import subprocess
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from appliance.accounts.tokens import issue_token
from appliance.audit.models import AuditRecord
from appliance.core.context import os_user
from appliance.core.roles import Role
from appliance.lifecycle.models import ModelVersion, PromotionRequest

from .registry_support import write_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(root, monkeypatch):
    """The artifact root (conftest.py), with none of the variables a job's environment would give the command."""
    for name in ("APPLIANCE_TOKEN", "SLURM_JOB_ID", "APPLIANCE_URL"):
        monkeypatch.delenv(name, raising=False)
    return root


def models(*args) -> str:
    out = StringIO()
    call_command("models", *args, stdout=out)
    return out.getvalue()


def test_register_as_the_appliance_itself_then_read_it_back(root):
    directory = write_model(root / "llama" / "v1")
    printed = models("register", "llama", "--source", str(directory), "--metric", "loss=1.25",
                     "--dataset", f"name=wiki,uri=/data/wiki,sha256={'cd' * 32}", "--code-revision", "git:4f2a9c1")
    assert "registered llama v1: 3 files" in printed and "signed" in printed
    version = ModelVersion.objects.get()
    assert version.registered_by is None and version.metrics == {"loss": 1.25}
    record = AuditRecord.objects.get(event="lifecycle.version.register")
    assert (record.actor_username, record.channel) == (os_user(), "cli")

    shown = json.loads(models("show", "llama", "1", "--json"))
    assert shown["lineage"]["datasets"] == [{"name": "wiki", "uri": "/data/wiki", "sha256": "cd" * 32}]
    assert [a["path"] for a in shown["artifacts"]] == ["config.json", "model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors"]
    assert json.loads(models("list", "--json")) == [
        {"name": "llama", "versions": 1, "production": None, "risk_class": "unclassified", "owner": ""}]
    assert "v1 -> registered" in models("history", "llama")


def test_the_job_comes_from_slurm_job_id_checked_like_any_input(root, monkeypatch):
    directory = write_model(root / "m")
    monkeypatch.setenv("SLURM_JOB_ID", "12; rm -rf /")
    with pytest.raises(CommandError, match="SLURM_JOB_ID: '12; rm -rf /' is not a Slurm job id"):
        models("register", "m", "--source", str(directory))
    with pytest.raises(CommandError, match="--job: 'abc' is not a Slurm job id"):
        models("register", "m", "--source", str(directory), "--job", "abc")
    with pytest.raises(CommandError, match=r"^--job: '12\\n' is not a Slurm job id$"):
        models("register", "m", "--source", str(directory), "--job", "12\n")
    monkeypatch.setenv("SLURM_JOB_ID", "12\n")
    with pytest.raises(CommandError, match=r"^SLURM_JOB_ID: '12\\n' is not a Slurm job id$"):
        models("register", "m", "--source", str(directory))
    assert not ModelVersion.objects.exists()


def test_a_source_outside_the_roots_is_one_clear_line(root, tmp_path):
    with pytest.raises(CommandError, match=r"^source: /etc is not inside an artifact root"):
        models("register", "m", "--source", "/etc")


def test_changes_need_a_person_and_four_eyes_hold_on_the_command_line(root, make_user, monkeypatch):
    directory = write_model(root / "m")
    models("register", "m", "--source", str(directory))
    with pytest.raises(CommandError, match="needs a person: set APPLIANCE_TOKEN"):
        models("transition", "m", "1", "validated")

    erin, amir = make_user(Role.ML_ENGINEER, "erin"), make_user(Role.ML_ENGINEER, "amir")
    erin_token, amir_token = issue_token(erin)[1], issue_token(amir)[1]
    monkeypatch.setenv("APPLIANCE_TOKEN", erin_token)
    models("transition", "m", "1", "validated")
    models("transition", "m", "1", "staging")
    assert "evaluation #" in models("evaluate", "m", "1", "--name", "mmlu", "--metric", "accuracy=0.61", "--passed")
    evaluation = ModelVersion.objects.get().evaluations.get()
    printed = models("request", "m", "1", "--reason", "beats v0", "--evidence", str(evaluation.pk))
    request = PromotionRequest.objects.get()
    assert f"request #{request.pk}: m v1 to production" in printed
    with pytest.raises(CommandError, match="needs a second person, not the one who asked"):
        models("approve", str(request.pk))

    monkeypatch.setenv("APPLIANCE_TOKEN", amir_token)
    assert "m v1 is production" in models("approve", str(request.pk), "--reason", "checked")
    assert json.loads(models("history", "m", "--at", "2999-01-01T00:00:00+00:00", "--json")) == {
        "stages": {"1": "production"}, "aliases": {"production": 1}}
    record = AuditRecord.objects.get(event="lifecycle.request.approve", outcome="success")
    assert (record.actor_username, record.channel) == ("amir", "cli")

    monkeypatch.setenv("APPLIANCE_TOKEN", "apl_000000000000.forged")
    with pytest.raises(CommandError, match="APPLIANCE_TOKEN: Invalid token."):
        models("list")


def test_an_administrator_cannot_approve_on_the_command_line_through_an_account_made_for_the_occasion(
        root, make_user, monkeypatch):
    """The issue's attack from the command line: the Administrator makes an ML engineer `sock`, which asks for
    production a moment later with its token; `models approve` with the Administrator's token is refused with
    the message the REST API and the portal give (naming the approver), and so is a third person's while
    `sock` is new (naming the requester); each refusal is recorded; the version stays in staging."""
    from appliance.accounts.services import create_user

    from ..conftest import PASSWORD

    ada, amir = make_user(Role.ADMINISTRATOR, "ada"), make_user(Role.ML_ENGINEER, "amir")
    sock = create_user("sock", Role.ML_ENGINEER, PASSWORD, created_by=ada)
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(sock)[1])
    models("register", "m", "--source", str(write_model(root / "m")))
    models("transition", "m", "1", "validated")
    models("transition", "m", "1", "staging")
    models("evaluate", "m", "1", "--name", "mmlu", "--metric", "accuracy=0.61", "--passed")
    models("request", "m", "1", "--reason", "ship it", "--evidence",
           str(ModelVersion.objects.get().evaluations.get().pk))
    request = PromotionRequest.objects.get()

    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(ada)[1])
    with pytest.raises(CommandError) as refused:
        models("approve", str(request.pk), "--reason", "ok")
    assert str(refused.value) == ("approver: 'ada' created 'sock', who asked (directly or through accounts they "
                                  "made); the approver must not have made the requester's account")
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(amir)[1])
    with pytest.raises(CommandError, match="^requester: 'sock' was created at .*, less than 24 h before the "
                                           "request; "):
        models("approve", str(request.pk), "--reason", "ok")
    assert ModelVersion.objects.get().stage == "staging"
    assert PromotionRequest.objects.get().state == "pending"
    refusals = AuditRecord.objects.filter(event="lifecycle.request.approve").order_by("sequence")
    assert [(r.outcome, r.actor_username, r.channel) for r in refusals] == [
        ("failure", "ada", "cli"), ("failure", "amir", "cli")]


def test_datasets_are_hashed_from_their_bytes_as_sha256sum_would(root, tmp_path):
    corpus = root / "data" / "wiki"
    (corpus / "shards").mkdir(parents=True)
    (corpus / "shards" / "part-0001.jsonl").write_text('{"text": "first"}\n')
    (corpus / "shards" / "part-0002.jsonl").write_text('{"text": "second"}\n')
    (corpus / "README").write_text("wiki dump 2026-03\n")
    labels = root / "data" / "labels.csv"
    labels.write_text("id,label\n1,positive\n")
    directory = write_model(root / "m")
    printed = models("register", "m", "--source", str(directory), "--hash-datasets",
                     "--dataset", f"name=wiki,uri={corpus}", "--dataset", f"name=labels,uri=file://{labels}")
    assert "hashing dataset wiki" in printed
    reference = subprocess.run(
        "find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum", shell=True,
        cwd=corpus, check=True, capture_output=True, text=True).stdout.split()[0]
    labels_sum = subprocess.run(["sha256sum", str(labels)], check=True, capture_output=True, text=True).stdout.split()[0]
    assert ModelVersion.objects.get().datasets == [
        {"name": "wiki", "uri": str(corpus), "sha256": reference},
        {"name": "labels", "uri": f"file://{labels}", "sha256": labels_sum}]

    (tmp_path / "private.csv").write_text("secret\n")
    with pytest.raises(CommandError, match=r"^datasets\[0\]\.uri: .* is not inside an artifact root"):
        models("register", "m", "--source", str(directory), "--hash-datasets",
               "--dataset", f"name=x,uri={tmp_path / 'private.csv'}")
    assert ModelVersion.objects.count() == 1
