"""The registry's services ("registry" part): registering versions from real files, the sources refused,
stages and aliases, and the history answered for any point in time."""

import hashlib
import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import services
from appliance.lifecycle.errors import Conflict, Forbidden, LifecycleError
from appliance.lifecycle.models import AliasHistory, ModelVersion, RegisteredModel, StageHistory
from tests.simulation.slurm_fixtures import demo_appliance  # noqa: F401 (fixture)

from .registry_support import MODEL_PARAMS, write_model

pytestmark = pytest.mark.django_db



@pytest.fixture
def engineer(make_user):
    return make_user(Role.ML_ENGINEER, "erin")


def test_a_version_registered_from_real_files_has_their_hashes_format_architecture_and_signature(root, engineer):
    directory = write_model(root / "llama-tiny" / "v1")
    version = services.register_version("llama-tiny", source=str(directory), user=engineer,
                                        datasets=[{"name": "wiki", "uri": "/data/wiki", "sha256": "ab" * 32}],
                                        code_revision="git:4f2a9c1", hyperparameters={"lr": 0.0003},
                                        metrics={"loss": 1.25})
    version.refresh_from_db()
    assert (version.model.name, version.number, version.stage) == ("llama-tiny", 1, "registered")
    assert version.format == "safetensors"
    assert version.architecture["params"] == MODEL_PARAMS
    assert version.architecture["layers"] == 2
    files = {a.path: (a.size, a.sha256) for a in version.artifacts.all()}
    shard = directory / "model-00001-of-00002.safetensors"
    assert sorted(files) == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert files["model-00001-of-00002.safetensors"] == (shard.stat().st_size,
                                                         hashlib.sha256(shard.read_bytes()).hexdigest())
    assert version.signature and version.signed_at is not None
    assert version.datasets == [{"name": "wiki", "uri": "/data/wiki", "sha256": "ab" * 32}]
    events = list(AuditRecord.objects.filter(event__startswith="lifecycle.").values_list("event", flat=True))
    assert events.count("lifecycle.version.register") == 1
    assert "lifecycle.version.sign" in events
    second = services.register_version("llama-tiny", source=f"file://{directory}", user=engineer,
                                       parent="models:/llama-tiny/1")
    assert second.number == 2 and second.parent == version


@pytest.mark.parametrize("source, message", [
    ("models/llama-tiny/v1", "is relative"),
    ("{root}/llama-tiny/v1/../v1", "'..' is not allowed"),
    ("file://{root}/llama-tiny/%2e%2e/%2e%2e/%2e%2e/etc", "'..' is not allowed"),
    ("FILE://{root}/llama-tiny/v1?x=1", "no query or fragment"),
    ("https://example.com/llama.safetensors", "'https' URIs are not allowed"),
    ("s3://bucket/llama", "'s3' URIs are not allowed"),
    ("file://otherhost{root}/llama-tiny/v1", "name no host"),
    ("/etc", "not inside an artifact root"),
    ("{root}/link-out", "not inside an artifact root"),
    ("{root}/llama-tiny/nothing-here", "does not exist"),
    ("{root}/llama-tiny/v1\n", "control characters"),
    ("{root}", "an artifact root itself"),
])
def test_sources_outside_the_roots_are_refused_naming_the_field_and_leaving_nothing(root, engineer, tmp_path,
                                                                                   source, message):
    write_model(root / "llama-tiny" / "v1")
    outside = write_model(tmp_path / "elsewhere")
    os.symlink(outside, root / "link-out")
    with pytest.raises(LifecycleError, match=message) as caught:
        services.register_version("llama-tiny", source=source.format(root=root), user=engineer)
    assert caught.value.field == "source" and caught.value.status == 400
    assert not RegisteredModel.objects.exists() and not ModelVersion.objects.exists()


def test_registration_is_no_file_existence_oracle_and_names_no_root(root, engineer, tmp_path):
    """A path outside the roots gets the same answer whether it exists or not, and no root's absolute path."""
    write_model(root / "llama-tiny" / "v1")
    os.symlink(tmp_path / "nothing-there", root / "dangling-out")
    os.symlink("/etc/hostname", root / "link-to-etc")
    answers = {}
    for source in ("/etc/shadow", "/etc/nonexistent", "/etc/hostname", "/nonexistent/deeper/path",
                   f"file://{root}/dangling-out", f"{root}/link-to-etc"):
        with pytest.raises(LifecycleError) as caught:
            services.register_version("llama-tiny", source=source, user=engineer)
        assert caught.value.field == "source"
        answers[source] = str(caught.value)
        assert str(root) not in answers[source].replace(source.removeprefix("file://"), "")
    shown = {source: answer.replace(source.removeprefix("file://"), "PATH") for source, answer in answers.items()}
    assert set(shown.values()) == {"source: PATH is not inside an artifact root (the appliance's model storage: "
                                   "APPLIANCE_MODEL_ROOTS, or its shared filesystems)"}


def test_a_symlinked_file_inside_the_model_that_leaves_the_root_is_refused(root, engineer, tmp_path):
    directory = write_model(root / "sneaky")
    (tmp_path / "secret.txt").write_text("not a model file")
    os.symlink(tmp_path / "secret.txt", directory / "tokenizer.json")
    with pytest.raises(LifecycleError) as caught:
        services.register_version("sneaky", source=str(directory), user=engineer)
    assert caught.value.field == "source"
    assert not ModelVersion.objects.exists()


def test_names_and_lineage_fields_are_checked(root, engineer):
    directory = write_model(root / "m")
    for kwargs, field in [({"model_name": "../etc"}, "name"), ({"model_name": "Approvals"}, "name"),
                          ({"model_name": "ok", "job": "12; rm -rf /"}, "job"),
                          ({"model_name": "ok", "datasets": [{"name": "d", "sha256": "xyz"}]}, "datasets[0].sha256"),
                          ({"model_name": "ok", "metrics": {"loss": "low"}}, "metrics.loss"),
                          ({"model_name": "ok", "parent": "ok/../../1"}, "parent")]:
        with pytest.raises(LifecycleError) as caught:
            services.register_version(source=str(directory), user=engineer, **kwargs)
        assert caught.value.field == field
    assert not ModelVersion.objects.exists()


def test_a_viewer_cannot_register(root, make_user):
    directory = write_model(root / "m")
    with pytest.raises(Forbidden):
        services.register_version("m", source=str(directory), user=make_user(Role.VIEWER, "val"))


def test_transitions_follow_the_table_and_production_needs_a_request(root, engineer):
    version = services.register_version("m", source=str(write_model(root / "m")), user=engineer)
    with pytest.raises(Conflict, match="it can move to archived, rejected, validated, not staging"):
        services.transition(version, "staging", user=engineer)
    services.transition(version, "validated", user=engineer)
    services.transition(version, "staging", user=engineer)
    with pytest.raises(Conflict, match="needs a second person's approval"):
        services.transition(version, "production", user=engineer)
    version.refresh_from_db()
    assert version.stage == "staging"
    refused = AuditRecord.objects.filter(event="lifecycle.version.transition", outcome="failure")
    assert refused.count() == 2


def test_reserved_alias_and_alias_history(root, engineer):
    version = services.register_version("m", source=str(write_model(root / "m")), user=engineer)
    with pytest.raises(Conflict):
        services.set_alias(version.model, "production", version, user=engineer)
    with pytest.raises(LifecycleError) as caught:
        services.set_alias(version.model, "Champion!", version, user=engineer)
    assert caught.value.field == "alias"
    services.set_alias(version.model, "champion", version, user=engineer)
    services.transition(version, "rejected", user=engineer)
    assert not version.model.aliases.exists()
    row = AliasHistory.objects.get(name="champion")
    assert row.ended is not None and row.ended_by == "erin"


def test_removing_an_alias_is_one_action_record_apart_from_the_row_capture(root, engineer):
    version = services.register_version("m", source=str(write_model(root / "m")), user=engineer)
    services.set_alias(version.model, "champion", version, user=engineer)
    first = AuditRecord.objects.order_by("-sequence").values_list("sequence", flat=True).first()
    services.delete_alias(version.model, "champion", user=engineer)
    events = list(AuditRecord.objects.filter(sequence__gt=first).order_by("sequence")
                  .values_list("event", "actor_username"))
    assert ("lifecycle.alias.remove", "erin") in events
    assert [event for event, _ in events].count("lifecycle.alias.remove") == 1
    assert [event for event, _ in events].count("lifecycle.alias.delete") == 1  # the row capture's


def test_state_at_answers_for_any_point_in_time(root, engineer):
    """History rows at explicit times: v1 registered 10:00, validated 11:00; v2 registered 12:00; the alias
    champion on v1 from 11:30, moved to v2 at 13:00."""
    v1 = services.register_version("m", source=str(write_model(root / "m1")), user=engineer)
    v2 = services.register_version("m", source=str(write_model(root / "m2", seed=8)), user=engineer)
    model = v1.model
    StageHistory.objects.all().delete()
    AliasHistory.objects.all().delete()
    day = timezone.now().replace(year=2026, month=3, day=2, hour=0, minute=0, second=0, microsecond=0)
    at = {h: day + timedelta(hours=h) for h in (10, 11, 12, 13)}
    StageHistory.objects.create(version=v1, stage="registered", started=at[10], ended=at[11])
    StageHistory.objects.create(version=v1, stage="validated", started=at[11])
    StageHistory.objects.create(version=v2, stage="registered", started=at[12])
    AliasHistory.objects.create(model=model, name="champion", version=v1, started=at[11] + timedelta(minutes=30),
                                ended=at[13])
    AliasHistory.objects.create(model=model, name="champion", version=v2, started=at[13])

    assert services.state_at(model, at[10] - timedelta(seconds=1)) == {"stages": {}, "aliases": {}}
    assert services.state_at(model, at[10]) == {"stages": {1: "registered"}, "aliases": {}}
    assert services.state_at(model, at[11] + timedelta(minutes=45)) == {"stages": {1: "validated"},
                                                                       "aliases": {"champion": 1}}
    assert services.state_at(model, at[12]) == {"stages": {1: "validated", 2: "registered"},
                                                "aliases": {"champion": 1}}
    assert services.state_at(model, at[13]) == {"stages": {1: "validated", 2: "registered"},
                                                "aliases": {"champion": 2}}


def test_history_written_by_the_services_reads_back_before_and_after_a_change(root, engineer):
    version = services.register_version("m", source=str(write_model(root / "m")), user=engineer)
    before = timezone.now()
    services.transition(version, "validated", user=engineer)
    after = timezone.now()
    assert services.state_at(version.model, before)["stages"] == {1: "registered"}
    assert services.state_at(version.model, after)["stages"] == {1: "validated"}
    kinds = [(e["kind"], e.get("stage")) for e in services.timeline(version.model)]
    assert kinds == [("stage", "registered"), ("stage", "validated")]


def test_without_configured_roots_the_appliances_filesystems_are_the_roots(demo_appliance, settings):  # noqa: F811
    from appliance.inventory.models import Appliance
    from appliance.lifecycle.roots import artifact_roots

    settings.LIFECYCLE_ARTIFACT_ROOTS = []
    simulated = Path(settings.SIMULATION_DIR) / "filesystems"
    assert artifact_roots() == [(simulated / "datasets").resolve(), (simulated / "scratch").resolve()]
    assert (simulated / "scratch").is_dir()
    Appliance.objects.filter(pk=demo_appliance.pk).update(simulated=False)
    assert artifact_roots() == [Path("/mnt/datasets"), Path("/mnt/scratch")]


def test_a_model_is_updated_and_deleted_only_without_versions(root, engineer):
    model = services.register_model("m", user=engineer, license="apache-2.0", risk_class="limited")
    services.update_model(model, user=engineer, description="a small llama", tags={"team": "nlp"})
    model.refresh_from_db()
    assert (model.description, model.tags, model.owner) == ("a small llama", {"team": "nlp"}, engineer)
    with pytest.raises(LifecycleError) as caught:
        services.update_model(model, user=engineer, risk_class="extreme")
    assert caught.value.field == "risk_class"
    with pytest.raises(Conflict, match="a model 'm' exists already"):
        services.register_model("m", user=engineer)
    services.register_version("m", source=str(write_model(root / "m")), user=engineer)
    with pytest.raises(Conflict, match="has 1 versions"):
        services.delete_model(model, user=engineer)
    assert AuditRecord.objects.filter(event="lifecycle.model.delete", outcome="failure").count() == 1
    empty = services.register_model("empty", user=engineer)
    services.delete_model(empty, user=engineer)
    assert list(RegisteredModel.objects.values_list("name", flat=True)) == ["m"]


def test_a_trailing_newline_does_not_spoof_a_reserved_alias_or_name(root, engineer):
    version = services.register_version("llama-tiny", source=str(write_model(root / "llama-tiny" / "v1")),
                                        user=engineer)
    with pytest.raises(LifecycleError) as alias:
        services.set_alias(version.model, "production\n", version, user=engineer)
    assert alias.value.field == "alias"
    with pytest.raises(LifecycleError) as name:
        services.register_model("approvals\n", user=engineer)
    assert name.value.field == "name"
    assert not version.model.aliases.exists()
    assert list(RegisteredModel.objects.values_list("name", flat=True)) == ["llama-tiny"]
