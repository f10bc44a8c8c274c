"""Deploying production versions on the demo appliance's inference pool ("deploy" part): the rollout and
its health check, replacing a service, rolling back to the previous production version, a tampered
version blocked, failing health checks, who may deploy, and names a user chose refused."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import deployments, integrity, services
from appliance.lifecycle.errors import Conflict, Forbidden, IntegrityRefused, LifecycleError
from appliance.lifecycle.models import Deployment
from appliance.simulation import kubernetes
from appliance.simulation import state as node_state
from appliance.simulation.services import inject_fault

from .deploy_support import (  # noqa: F401 (fixtures)
    cluster_file,
    demo,
    inference_node,
    lay_out_mig,
    node_gpu,
    owners,
    people,
    production,
)
from .integrity_support import put_back, rewrite_last_bytes
from .registry_support import write_model

pytestmark = pytest.mark.django_db


def events(name):
    """The actions recorded as `name`, without the row-level captures of the same name (AuditedModel)."""
    return [record for record in AuditRecord.objects.filter(event=name).order_by("pk")
            if not {"after", "changes", "before"} & set(record.details)]


def test_deploy_rolls_out_healthy_and_the_service_owns_its_gpu(demo, root, people):  # noqa: F811
    version = production(root, people, "v1", 7)
    deployment = deployments.deploy(version, user=people["olga"], runtime="vllm")
    assert (deployment.name, deployment.state) == ("llama", "healthy")
    # The advisor put the small model on a 1g.10gb MIG profile; the demo pool has whole GPUs (time-sliced
    # x4), so it takes the first free one.
    assert deployment.sizing["placement"]["profile"] == "1g.10gb"
    assert deployment.placement == [{"node": "gpu04", "gpu": 0, "profile": None, "gpu_instance": None,
                                     "resource": "nvidia.com/gpu"}]
    assert "nvidia.com/gpu: 1" in deployment.manifests and "--served-model-name" in deployment.manifests
    assert owners()["0"] == {"kind": "inference", "service": "llama"}
    assert node_gpu(0)["memory_used_bytes"] > 0
    live = deployments.live_state(deployment)
    assert (live["phase"], live["ready"], live["loaded"], live["routed"], live["healthy"]) == (
        "Running", True, True, True, True)
    # Ready pods are not enough: the GPU must be serving the model (owner and memory in the node's state).
    with node_state.update(inference_node().sysroot) as state:
        state["gpu_owners"] = {"0": {"kind": "slurm", "job": "41", "user": "alice", "name": "train"}}
    live = deployments.live_state(deployment)
    assert (live["ready"], live["loaded"], live["healthy"], live["reason"]) == (True, False, False, "NotServing")
    assert "GPU 0 of gpu04 is not serving the model (owner 41" in live["message"]
    created = events("lifecycle.deployment.create")
    assert [(r.outcome, r.actor_username, r.details["placement"]) for r in created] == [
        ("success", "olga", ["gpu0"])]
    assert [r.details["to"] for r in events("lifecycle.deployment.state")] == ["healthy"]


def test_a_new_production_version_replaces_the_service_and_rollback_restores_the_previous(
        demo, root, people):  # noqa: F811
    first = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    second_version = production(root, people, "v2", 8)
    second = deployments.deploy(second_version, user=people["olga"])
    first.refresh_from_db()
    assert (first.state, second.state, second.previous_id) == ("replaced", "healthy", first.pk)
    assert [d["gpu"] for d in second.placement] == [1]   # the old one served on GPU 0 until the new one did
    assert owners() == {"1": {"kind": "inference", "service": "llama"}}
    assert kubernetes.read(cluster_file(demo))["services"] == {"llama": {"selects": f"llama-{second.pk}"}}

    back = deployments.rollback("llama", user=people["olga"], reason="v2 answers worse in production")
    second.refresh_from_db()
    assert back.version.number == 1 and back.state == "healthy" and second.state == "replaced"
    assert services.production_version(second_version.model).number == 1
    assert kubernetes.read(cluster_file(demo))["services"] == {"llama": {"selects": f"llama-{back.pk}"}}
    assert list(owners().values()) == [{"kind": "inference", "service": "llama"}]
    rollback = events("lifecycle.deployment.rollback")
    assert [(r.outcome, r.actor_username, r.reason, r.details["version"], r.details["from_version"])
            for r in rollback] == [("success", "olga", "v2 answers worse in production", 1, 2)]
    assert not [r for r in events("lifecycle.deployment.create") if r.details.get("deployment") == back.pk]


def test_a_version_whose_files_changed_is_blocked_and_the_pool_is_untouched(demo, root, people):  # noqa: F811
    version = production(root, people, "v1", 7)
    with open(root / "v1" / "model-00002-of-00002.safetensors", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(IntegrityRefused, match="model-00002-of-00002.safetensors"):
        deployments.deploy(version, user=people["olga"])
    blocked = Deployment.objects.get()
    assert blocked.state == "blocked" and "model-00002-of-00002.safetensors" in blocked.state_detail
    assert kubernetes.read(cluster_file(demo))["workloads"] == {}
    assert owners() == {}
    record = events("lifecycle.deployment.create")[-1]
    assert (record.outcome, record.actor_username) == ("failure", "olga")
    assert "model-00002-of-00002.safetensors" in record.reason
    assert events("lifecycle.version.tampered")


def test_rollback_to_a_tampered_version_changes_nothing(demo, root, people):  # noqa: F811
    deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    second = deployments.deploy(production(root, people, "v2", 8), user=people["olga"])
    (root / "v1" / "config.json").write_text("{}")
    with pytest.raises(IntegrityRefused):
        deployments.rollback("llama", user=people["olga"], reason="v2 is worse")
    second.refresh_from_db()
    assert second.state == "healthy"
    assert services.production_version(second.version.model).number == 2
    assert events("lifecycle.deployment.rollback")[-1].outcome == "failure"


def test_the_health_check_fails_when_the_pool_cannot_run_the_service(demo, root, people):  # noqa: F811
    version = production(root, people, "v1", 7)
    # GPU 0 fell off the bus after the inventory last saw it: the placement still names it, the node
    # does not offer it.
    inject_fault(inference_node(), "gpu_missing", index=0)
    failed = deployments.deploy(version, user=people["olga"])
    assert failed.state == "failed"
    assert "Unschedulable" in failed.state_detail and "fallen off the bus" in failed.state_detail
    assert owners() == {} and kubernetes.read(cluster_file(demo))["workloads"] == {}
    record = events("lifecycle.deployment.state")[-1]
    assert (record.outcome, record.details["to"]) == ("failure", "failed")

    # A MIG instance the partitioning stage recorded but the node no longer has.
    lay_out_mig(demo, 1, on_node=False)
    failed = deployments.deploy(version, user=people["olga"])
    assert failed.placement[0]["profile"] == "1g.10gb"
    assert failed.state == "failed" and "offers no 1g.10gb instance" in failed.state_detail


def test_a_healthy_service_whose_gpu_fails_is_reported_failed(demo, root, people):  # noqa: F811
    deployment = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    assert deployment.state == "healthy"
    deployment = deployments.follow(deployment)
    assert deployment.state == "healthy"
    kubernetes.inject_fault(cluster_file(demo), f"llama-{deployment.pk}", "crash_loop")
    assert deployments.follow_all() == [deployment.pk]
    deployment.refresh_from_db()
    assert deployment.state == "failed" and deployment.state_detail.startswith("CrashLoopBackOff")
    assert owners() == {}


def test_a_service_on_a_mig_instance_asks_for_it_by_profile(demo, root, people):  # noqa: F811
    [instance] = lay_out_mig(demo, 5)
    deployment = deployments.deploy(production(root, people, "v1", 7), user=people["olga"], runtime="triton")
    assert deployment.state == "healthy"
    assert deployment.placement == [{"node": "gpu04", "gpu": 5, "profile": "1g.10gb", "gpu_instance": instance,
                                     "resource": "nvidia.com/mig-1g.10gb"}]
    assert "nvidia.com/mig-1g.10gb: 1" in deployment.manifests
    assert owners() == {"5": {"kind": "inference", "service": "llama"},
                        f"5/{instance}": {"kind": "inference", "service": "llama"}}
    stopped = deployments.stop(deployment, user=people["olga"], reason="maintenance")
    assert stopped.state == "stopped" and owners() == {}
    assert events("lifecycle.deployment.stop")[-1].reason == "maintenance"


def test_a_viewer_may_not_deploy_and_a_staging_version_is_not_deployed(demo, root, people):  # noqa: F811
    version = production(root, people, "v1", 7)
    with pytest.raises(Forbidden, match="val may not deploy models"):
        deployments.deploy(version, user=people["val"])
    record = events("lifecycle.deployment.create")[-1]
    assert (record.outcome, record.actor_username) == ("failure", "val")
    staged = services.register_version("llama", source=str(write_model(root / "v2", 8)), user=people["erin"])
    with pytest.raises(Conflict, match="only a production version is deployed"):
        deployments.deploy(staged, user=people["olga"])
    assert not Deployment.objects.exists() and kubernetes.read(cluster_file(demo))["workloads"] == {}


@pytest.mark.parametrize("options,field", [
    ({"name": "llama; kubectl delete ns default"}, "name"),
    ({"name": "../../etc/passwd"}, "name"),
    ({"name": "Llama"}, "name"),
    ({"name": "a" * 53}, "name"),
    ({"runtime": "../../bin/sh"}, "runtime"),
    ({"runtime": "tgi"}, "runtime"),
    ({"context": "4096; rm"}, "context"),
    ({"dtype": "fp8 --trust-remote-code"}, "dtype"),
])
def test_a_name_or_runtime_a_user_chose_is_refused_naming_the_field(demo, root, people, options, field):  # noqa: F811
    version = production(root, people, "v1", 7)
    with pytest.raises(LifecycleError) as refused:
        deployments.deploy(version, user=people["olga"], **options)
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    assert refused.value.status == 400
    assert not Deployment.objects.exists() and kubernetes.read(cluster_file(demo))["workloads"] == {}
    assert events("lifecycle.deployment.create")[-1].outcome == "failure"


def test_the_service_gpu_use_shows_in_telemetry_under_its_name(demo, root, people, monkeypatch):  # noqa: F811
    from appliance.simulation import nvml
    from appliance.telemetry.collector import Collector

    deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    sysroot = inference_node().sysroot
    with node_state.update(sysroot) as state:  # the gpu stage's driver, loaded
        state["modules"] = [m for m in state["modules"] if m not in ("drm", "nouveau")] + ["nvidia"]
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", sysroot)
    with Collector("gpu04", sysroot, str(nvml.library_path())) as collector:
        sweep = collector.sweep()
    gpus = {dict(s.labels)["gpu"]: s for s in sweep.series if s.measurement == "gpu"}
    assert dict(gpus["0"].labels)["hpc_job"] == "llama"
    assert gpus["0"].fields["DCGM_FI_DEV_FB_USED"] > 0
    assert dict(gpus["1"].labels)["hpc_job"] == "" and gpus["1"].fields["DCGM_FI_DEV_FB_USED"] == 0


def test_two_deployments_planned_at_once_do_not_share_a_gpu(demo, root, people):  # noqa: F811
    from django.db import transaction

    version = production(root, people, "v1", 7)
    options = {"user": people["olga"], "runtime": "vllm", "appliance": None, "context": 4096, "concurrency": 8,
               "dtype": None, "event": "lifecycle.deployment.create"}
    first = deployments._plan(version, name="llama-a", **options)
    second = deployments._plan(version, name="llama-b", **options)
    assert first["devices"] == second["devices"]   # both saw GPU 0 free
    with transaction.atomic():
        deployments._create(first, user=people["olga"], event="lifecycle.deployment.create")
    with pytest.raises(Conflict, match="placement: gpu0 of gpu04 was just given to another deployment"):
        with transaction.atomic():
            deployments._create(second, user=people["olga"], event="lifecycle.deployment.create")
    assert list(Deployment.objects.values_list("name", flat=True)) == ["llama-a"]


def test_two_services_share_a_gpu_through_its_mig_instances_each_under_its_name(
        demo, root, people, monkeypatch):  # noqa: F811
    from appliance.simulation import nvml
    from appliance.telemetry.collector import Collector

    first_instance, second_instance = lay_out_mig(demo, 6, count=2)
    version = production(root, people, "v1", 7)
    first = deployments.deploy(version, user=people["olga"], name="chat-a")
    second = deployments.deploy(version, user=people["olga"], name="chat-b")
    assert (first.state, second.state) == ("healthy", "healthy")
    assert [(d["gpu"], d["gpu_instance"]) for d in first.placement + second.placement] == [
        (6, first_instance), (6, second_instance)]
    held = owners()
    assert (held[f"6/{first_instance}"]["service"], held[f"6/{second_instance}"]["service"]) == ("chat-a", "chat-b")
    sysroot = inference_node().sysroot
    with node_state.update(sysroot) as state:
        state["modules"] = [m for m in state["modules"] if m not in ("drm", "nouveau")] + ["nvidia"]
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", sysroot)
    with Collector("gpu04", sysroot, str(nvml.library_path())) as collector:
        sweep = collector.sweep()
    by_instance = {dict(s.labels)["GPU_I_ID"]: dict(s.labels)["hpc_job"] for s in sweep.series
                   if s.measurement == "gpu" and "GPU_I_ID" in dict(s.labels)}
    assert by_instance == {str(first_instance): "chat-a", str(second_instance): "chat-b"}


def test_a_model_rewritten_in_place_with_its_mtime_put_back_is_not_deployed(demo, root, people, make_user):  # noqa: F811
    """The issue's attack: the last 8 bytes of a production version's shard rewritten in place and its mtime
    set back to the nanosecond. The deployment is refused, and stays refused after another quick verification
    (even once the right bytes are back) until an Administrator clears the verdict with a reason."""
    version = production(root, people, "v1", 7)
    shard = root / "v1" / "model-00002-of-00002.safetensors"
    original = rewrite_last_bytes(shard)
    with pytest.raises(IntegrityRefused, match="changed: model-00002-of-00002.safetensors"):
        deployments.deploy(version, user=people["olga"])
    assert integrity.verify(version).state == "tampered"
    with pytest.raises(IntegrityRefused, match="the verdict stands until an Administrator clears it"):
        deployments.deploy(version, user=people["olga"])
    put_back(shard, original)
    assert integrity.verify(version).state == "tampered"
    with pytest.raises(IntegrityRefused, match="the verdict stands until an Administrator clears it"):
        deployments.deploy(version, user=people["olga"])
    assert [d.state for d in Deployment.objects.order_by("pk")] == ["blocked", "blocked", "blocked"]
    assert kubernetes.read(cluster_file(demo))["workloads"] == {}

    integrity.clear_tampered(version, user=make_user(Role.ADMINISTRATOR, "ada"), reason="restored from backup")
    deployed = deployments.deploy(version, user=people["olga"])
    assert deployed.state == "healthy"


def test_a_versions_first_deployment_to_a_node_hashes_its_files_and_later_ones_check_their_stat(
        demo, root, people):  # noqa: F811
    version = production(root, people, "v1", 7)
    first = deployments.deploy(version, user=people["olga"])
    deployments.stop(first, user=people["olga"], reason="maintenance")
    again = deployments.deploy(version, user=people["olga"])
    assert [d["node"] for d in first.placement + again.placement] == ["gpu04", "gpu04"]
    assert [(r.outcome, r.details["node"], r.details["first_on_node"], r.details["integrity"])
            for r in events("lifecycle.deployment.create")] == [
        ("success", "gpu04", True, "full"), ("success", "gpu04", False, "quick")]
    # The approval's quick check, the first deployment's re-hash, the second deployment's quick check.
    assert [r.details["mode"] for r in events("lifecycle.version.verify")] == ["quick", "full", "quick"]


def test_a_first_deployment_hashes_what_no_stat_can_tell_and_the_verdict_sticks(demo, root, people):  # noqa: F811
    """The issue's attack taken as far as it goes: the last 8 bytes of a shard rewritten in place, its mtime
    set back to the nanosecond, and even the ctime a write moves made to match (the recorded stat brought
    up to the file's, as someone able to set the clock back could make it). The quick check cannot tell; the
    first deployment to the node re-hashes the files, is blocked, and the version stays tampered."""
    version = production(root, people, "v1", 7)
    shard = root / "v1" / "model-00002-of-00002.safetensors"
    rewrite_last_bytes(shard)
    info = shard.stat()
    version.artifacts.filter(path="model-00002-of-00002.safetensors").update(
        mtime_ns=info.st_mtime_ns, inode=info.st_ino, ctime_ns=info.st_ctime_ns)
    quick = integrity.verify(version)
    assert (quick.ok, quick.full, quick.state) == (True, False, "verified")

    with pytest.raises(IntegrityRefused, match="changed: model-00002-of-00002.safetensors"):
        deployments.deploy(version, user=people["olga"])
    version.refresh_from_db()
    assert (version.verification, version.verified_full) == ("tampered", True)
    assert [d.state for d in Deployment.objects.all()] == ["blocked"]
    assert kubernetes.read(cluster_file(demo))["workloads"] == {}
    record = events("lifecycle.deployment.create")[-1]
    assert (record.outcome, record.details["node"], record.details["first_on_node"], record.details["integrity"],
            record.details["state"]) == ("failure", "gpu04", True, "full", "blocked")
    assert [r.details["mode"] for r in events("lifecycle.version.tampered")] == ["full"]

    # Sticky: the quick check, which finds nothing, does not lift it, and the next attempt is blocked too.
    assert integrity.verify(version).state == "tampered"
    with pytest.raises(IntegrityRefused, match="the verdict stands until an Administrator clears it"):
        deployments.deploy(version, user=people["olga"])
    assert [d.state for d in Deployment.objects.all()] == ["blocked", "blocked"]
    assert kubernetes.read(cluster_file(demo))["workloads"] == {}
