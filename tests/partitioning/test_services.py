"""Partition plans on the demo appliance: saved against the current layout, applied as a partitioning run
(refused when the user, the plan or the appliance is not ready), following the run, rolled back."""

import pytest
from django.conf import settings
from django.core.exceptions import PermissionDenied

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import GPU, Appliance, Node
from appliance.inventory.services import import_site
from appliance.partitioning import services
from appliance.partitioning.models import Plan
from appliance.partitioning.renderers.stage_vars import partitioning_stage_vars
from appliance.provisioning.states import RunState
from appliance.simulation.services import demo_site_text, ensure_demo_credential

MIXED = [{"profile": "2g.20gb", "start": 0}, {"profile": "1g.10gb", "start": 2},
         {"profile": "1g.10gb", "start": 3}, {"profile": "3g.40gb", "start": 4}]
# GPU 0 of gpu04 in 3g+2g+1g+1g, GPU 1 time-sliced four ways (a planner result as `partition apply` reads it).
RESULT = {"gpus": [{"id": "gpu04/gpu0", "model": "h100-80gb", "mig": MIXED, "time_slicing": None},
                   {"id": "gpu04/gpu1", "model": "h100-80gb", "mig": None, "time_slicing": {"replicas": 4}}]}


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    appliance = Appliance.objects.get(name="demo")
    # Whole GPUs to start from: demo.yml's inference pool time-slices every GPU x4 (the `shared` fixture).
    appliance.pools.filter(name="inference").update(settings={})
    return appliance


@pytest.fixture
def shared(db, tmp_path, monkeypatch):
    """The demo as demo.yml has it: the inference pool time-slices each of gpu04's GPUs x4."""
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def test_a_pool_time_slicing_every_gpu_is_the_layout_a_plan_starts_from(shared, make_user):
    """gpu04's GPUs are time-sliced x4 by their pool: a plan that splits GPU 0 changes it from x4 to MIG, and
    the stage records the seven others as the pool has them (so the node keeps its pool's config for them)."""
    operator = make_user(Role.OPERATOR, "op")
    plan = services.save_result(shared, {"gpus": [{"id": "gpu04/gpu0", "mig": MIXED}]}, user=operator)
    assert plan.result["disruption"]["time_slicing_changes"] == [{"gpu": "gpu04/gpu0", "from": 4, "to": 0}]
    run = services.apply_plan(plan, user=operator)
    gpu04 = partitioning_stage_vars(run, [Node.objects.get(name="gpu04")])["appliance_partitioning"]["targets"]["gpu04"]
    assert gpu04["gpus"]["0"] == {"mig": MIXED} and gpu04["gpus"]["1"] == {"keep": True, "mig": None}
    assert gpu04["time_slicing"] == {"replicas": 4, "gpus": [1, 2, 3, 4, 5, 6, 7],
                                     "per_gpu": {"1": 4, "2": 4, "3": 4, "4": 4, "5": 4, "6": 4, "7": 4}}


@pytest.fixture
def operator(make_user):
    return make_user(Role.OPERATOR, "op")


def record_layout(node_name: str, mig: dict[int, list], sliced: dict | None = None) -> None:
    """What the partitioning stage's facts say after a run: instances per GPU index, time-slicing."""
    node = Node.objects.get(name=node_name)
    instances = []
    for index, layout in mig.items():
        GPU.objects.filter(node=node, index=index).update(mig_mode=GPU.MigMode.ENABLED)
        for n, instance in enumerate(layout):
            instances.append({**instance, "gpu": index, "gpu_instance": n + 1, "compute_instance": 0,
                              "uuid": f"MIG-{index}-{n}"})
    node.facts = {**node.facts, "mig_instances": instances, "time_slicing": sliced}
    node.save()


def test_save_plan_plans_against_the_current_layout(demo, operator):
    requests = [{"name": "chat", "memory_gb": 18, "replicas": 2, "isolation": "hard", "pool": "inference"}]
    plan = services.save_plan(demo, requests, user=operator, description="chat service")
    assert (plan.number, plan.state, plan.created_by, plan.previous) == (1, "draft", operator, None)
    assert len(plan.gpus) == 32 and plan.current[0] == {"id": "gpu01/gpu0", "model": "h100-80gb", "mig": None,
                                                        "time_slicing": None}
    assert len(plan.result["placed"]) == 2 and plan.result["unplaced"] == []
    record = AuditRecord.objects.get(event="partitioning.plan.create")
    assert record.details["number"] == 1 and record.details["requests"] == 1
    assert services.save_plan(demo, requests, user=operator).number == 2

    with pytest.raises(services.PlanRefused) as refused:
        services.save_plan(demo, [{"name": "Bad Name", "memory_gb": 1}], user=operator)
    assert "requests[0].name" in str(refused.value)
    with pytest.raises(services.PlanRefused, match="gpu99/gpu0 not in appliance demo"):
        services.save_plan(demo, requests, user=operator, gpus=[{"id": "gpu99/gpu0", "model": "h100-80gb"}])


def test_a_result_with_an_impossible_layout_is_refused_naming_the_gpu(demo, operator):
    bad = {"gpus": [{"id": "gpu04/gpu0", "mig": [{"profile": "3g.40gb", "start": 0},
                                                 {"profile": "2g.20gb", "start": 2}]},
                    {"id": "gpu04/gpu1", "mig": [], "time_slicing": {"replicas": 2}},
                    {"id": "gpu04/gpu2", "time_slicing": {"replicas": 1000}},
                    {"id": "gpu09/gpu0", "mig": None}]}
    with pytest.raises(services.PlanRefused) as refused:
        services.save_result(demo, bad, user=operator)
    assert refused.value.errors == [
        "gpus[0] (gpu04/gpu0).mig: 2g.20gb at 2 overlaps 3g.40gb at 0 on memory slice 2",
        "gpus[1] (gpu04/gpu1): a GPU is MIG or time-sliced, never both",
        "gpus[2] (gpu04/gpu2).time_slicing.replicas: an integer from 2 to 64",
        "gpus[3] (gpu09/gpu0): the appliance has no such GPU",
    ]
    assert not Plan.objects.exists()


@pytest.mark.parametrize("role", [Role.ML_ENGINEER, Role.VIEWER, Role.AUDITOR])
def test_only_roles_that_may_run_provisioning_apply(demo, operator, make_user, role):
    plan = services.save_result(demo, RESULT, user=operator)
    with pytest.raises(PermissionDenied, match="provisioning.run"):
        services.apply_plan(plan, user=make_user(role, f"u-{role}"))
    plan.refresh_from_db()
    assert plan.state == "draft" and plan.run is None and not plan.runs.exists()


def test_apply_starts_the_partitioning_stage_on_the_changed_nodes(demo, operator):
    plan = services.save_result(demo, RESULT, user=operator)
    assert plan.result["disruption"]["gpus_changed"] == ["gpu04/gpu0", "gpu04/gpu1"]
    assert plan.result["disruption"]["mig_mode_changes"] == [{"gpu": "gpu04/gpu0", "enabled": True}]
    run = services.apply_plan(plan, user=operator)
    plan.refresh_from_db()
    assert run.stages == ["partitioning"] and run.node_names == ["gpu04"] and not run.dry_run
    assert (plan.state, plan.run, plan.applied_by) == ("applying", run, operator)
    assert AuditRecord.objects.filter(event="partitioning.plan.apply", outcome="success").count() == 1

    # The stage's vars: gpu04's targets from the plan, the GPUs it does not name only read (never recorded).
    target = partitioning_stage_vars(run, [Node.objects.get(name="gpu04")])["appliance_partitioning"]
    assert target["plan"] == plan.number
    gpu04 = target["targets"]["gpu04"]
    assert gpu04["gpus"]["0"] == {"mig": MIXED}
    assert gpu04["gpus"]["1"] == {"mig": None} and gpu04["gpus"]["2"] == {"keep": True, "mig": None}
    assert gpu04["time_slicing"] == {"replicas": 4, "gpus": [1], "per_gpu": {"1": 4}}
    assert gpu04["slurm_node"] is False
    assert gpu04["profiles"]["3g.40gb"] == {"nvml_profile": 2, "compute_slices": 3}

    # Applying twice, or another plan while the run is active, is refused (and audited).
    with pytest.raises(services.PlanRefused, match="plan 1 is applying"):
        services.apply_plan(plan, user=operator)
    other = services.save_result(demo, {"gpus": [{"id": "gpu03/gpu0", "mig": [{"profile": "7g.80gb", "start": 0}]}]},
                                 user=operator)
    with pytest.raises(services.PlanRefused, match="is pending; cancel it or wait for it"):
        services.apply_plan(other, user=operator)
    assert AuditRecord.objects.filter(event="partitioning.plan.apply", outcome="failure").count() == 2


def test_a_plan_made_before_the_layout_changed_is_stale(demo, operator):
    plan = services.save_result(demo, RESULT, user=operator)
    record_layout("gpu04", {0: [{"profile": "7g.80gb", "start": 0}]})
    with pytest.raises(services.PlanRefused, match="plan 1 is stale: the layout of gpu04/gpu0 changed"):
        services.apply_plan(plan, user=operator)


def test_a_plan_that_changes_nothing_is_refused(demo, operator):
    record_layout("gpu04", {0: MIXED}, {"replicas": 4, "gpus": [1]})
    plan = services.save_result(demo, RESULT, user=operator)
    with pytest.raises(services.PlanRefused, match="plan 1 changes no GPU"):
        services.apply_plan(plan, user=operator)


def finish(run, state):
    run.transition(RunState.RUNNING)
    run.transition(state)


def test_plan_follows_its_run_and_rollback_restores_the_layout_before(demo, operator):
    first = services.save_result(demo, RESULT, user=operator)
    run = services.apply_plan(first, user=operator)
    finish(run, RunState.SUCCEEDED)
    first.refresh_from_db()
    assert first.state == "applied" and first.applied_at is not None
    record_layout("gpu04", {0: MIXED}, {"replicas": 4, "gpus": [1]})

    second = services.save_result(demo, {"gpus": [{"id": "gpu04/gpu0", "mig": [{"profile": "7g.80gb", "start": 0}]}]},
                                  user=operator)
    assert second.previous == first
    failed = services.apply_plan(second, user=operator)
    finish(failed, RunState.FAILED)
    second.refresh_from_db()
    first.refresh_from_db()
    assert (second.state, first.state) == ("failed", "applied")

    # Rolling back the applied plan (the first, which had no previous plan) restores the layout it was made
    # against: gpu04's GPUs 0 and 1 whole again.
    back = services.rollback(demo, user=operator)
    assert back.number == 3 and back.state == "applying"
    assert back.result["gpus"] == [
        {"id": "gpu04/gpu0", "model": "h100-80gb", "mig": None, "time_slicing": None},
        {"id": "gpu04/gpu1", "model": "h100-80gb", "mig": None, "time_slicing": None}]
    assert back.result["disruption"]["destroyed"] == [
        {"gpu": "gpu04/gpu0", "profile": "2g.20gb", "start": 0}, {"gpu": "gpu04/gpu0", "profile": "1g.10gb", "start": 2},
        {"gpu": "gpu04/gpu0", "profile": "1g.10gb", "start": 3}, {"gpu": "gpu04/gpu0", "profile": "3g.40gb", "start": 4}]
    assert back.result["disruption"]["time_slicing_changes"] == [{"gpu": "gpu04/gpu1", "from": 4, "to": 0}]
    finish(back.run, RunState.SUCCEEDED)
    back.refresh_from_db()
    first.refresh_from_db()
    assert (back.state, first.state) == ("applied", "superseded")
    assert AuditRecord.objects.filter(event="partitioning.plan.rollback").count() == 1


def test_rollback_with_nothing_applied_is_refused(demo, operator, make_user):
    with pytest.raises(services.PlanRefused, match="has no applied partition plan"):
        services.rollback(demo, user=operator)
    with pytest.raises(PermissionDenied):
        services.rollback(demo, user=make_user(Role.VIEWER, "v"))


def test_the_workloads_rerun_covers_every_slurm_node_when_a_slurm_node_changed(demo):
    """The demo: gpu01-gpu03 are Slurm's (training), gpu04 inference, mgmt01 the controller. slurm.conf
    must be the same file on every Slurm node, so a change on gpu01 rewrites it on all three."""
    assert services.workloads_nodes(demo, ["gpu01"]) == ["gpu01", "gpu02", "gpu03", "mgmt01"]
    assert services.workloads_nodes(demo, ["gpu04"]) == ["gpu04", "mgmt01"]


def test_service_moves_compare_the_new_placements_with_the_applied_plans():
    serving = [
        {"request": "chat", "replica": 0, "gpu": "g/gpu0", "kind": "mig", "profile": "3g.40gb", "start": 0},
        {"request": "chat", "replica": 1, "gpu": "g/gpu0", "kind": "mig", "profile": "3g.40gb", "start": 4},
        {"request": "embed", "replica": 0, "gpu": "g/gpu1", "kind": "time_slicing", "profile": None, "start": None},
        {"request": "old", "replica": 0, "gpu": "g/gpu2", "kind": "whole", "profile": None, "start": None}]
    placed = [
        {"request": "chat", "replica": 0, "gpu": "g/gpu0", "kind": "mig", "profile": "3g.40gb", "start": 0},
        {"request": "chat", "replica": 1, "gpu": "g/gpu3", "kind": "mig", "profile": "3g.40gb", "start": 4},
        {"request": "embed", "replica": 0, "gpu": "g/gpu1", "kind": "time_slicing", "profile": None, "start": None},
        {"request": "new", "replica": 0, "gpu": "g/gpu2", "kind": "whole", "profile": None, "start": None}]
    moves = services.service_moves(serving, placed, destroyed=[{"gpu": "g/gpu0", "profile": "3g.40gb", "start": 0}])
    assert moves == {
        "moved": [{"request": "chat", "replica": 1,
                   "from": {"gpu": "g/gpu0", "kind": "mig", "profile": "3g.40gb", "start": 4},
                   "to": {"gpu": "g/gpu3", "kind": "mig", "profile": "3g.40gb", "start": 4}}],
        "restarted": [{"request": "chat", "replica": 0,
                       "at": {"gpu": "g/gpu0", "kind": "mig", "profile": "3g.40gb", "start": 0}}],
        "stopped": [{"request": "old", "replica": 0,
                     "from": {"gpu": "g/gpu2", "kind": "whole", "profile": None, "start": None}}],
        "started": [{"request": "new", "replica": 0,
                     "to": {"gpu": "g/gpu2", "kind": "whole", "profile": None, "start": None}}]}


def test_a_saved_plan_says_which_services_of_the_applied_plan_move(demo, operator):
    applied = services.save_plan(demo, [{"name": "chat", "memory_gb": 35, "isolation": "hard", "pool": "inference"}],
                                 user=operator)
    Plan.objects.filter(pk=applied.pk).update(state=Plan.State.APPLIED)
    placed = applied.result["placed"][0]
    # The same request, now needing a whole GPU: it moves off its MIG instance.
    second = services.save_plan(demo, [{"name": "chat", "memory_gb": 70, "isolation": "exclusive", "pool": "inference"}],
                                user=operator)
    moved = second.result["disruption"]["services"]["moved"]
    assert [(m["request"], m["replica"], m["from"]["profile"], m["to"]["kind"]) for m in moved] == [
        ("chat", 0, placed["profile"], "whole")]


def test_slurm_nodes_a_plan_changed_stay_drained_when_the_workloads_run_after_it_fails(demo, operator):
    """The stage drains a Slurm node before its GPUs change and leaves it drained; the workloads run after the
    plan rewrites gres.conf and resumes it; when that run fails the node stays drained, and the audit log says
    so (a job must not be given GPUs by a configuration that no longer exists)."""
    from appliance.provisioning import services as provisioning

    result = {"gpus": [{"id": "gpu01/gpu0", "mig": [{"profile": "3g.40gb", "start": 0}]},
                       {"id": "gpu04/gpu0", "mig": [{"profile": "3g.40gb", "start": 4}]}]}
    plan = services.save_result(demo, result, user=operator)
    assert services.drained_nodes(plan) == ["gpu01"]  # gpu04 is the inference pool's: not in Slurm
    Plan.objects.filter(pk=plan.pk).update(state=Plan.State.APPLIED)
    run = provisioning.create_run(demo, kind="stages", stages=["workloads"], nodes=["gpu01", "mgmt01"])
    plan.runs.add(run)
    finish(run, RunState.FAILED)
    record = AuditRecord.objects.filter(event="partitioning.plan.state", outcome="failure").get()
    assert record.details["nodes"] == ["gpu01"] and record.details["workloads_run"] == run.pk
    assert "stay drained" in record.reason


def test_planning_again_keeps_the_services_where_the_applied_plan_put_them(demo, operator):
    # The applied plan put chat's replica 0 on the 1g.10gb at 3 and replica 1 on the one at 2 (the planner
    # alone, knowing only the layout, would give replica 0 the lower one): planning the same requests again
    # moves no service and changes no GPU.
    requests = [{"name": "chat", "memory_gb": 9, "replicas": 2, "isolation": "hard", "pool": "inference"},
                {"name": "mid", "memory_gb": 18, "isolation": "hard", "pool": "inference"},
                {"name": "big", "memory_gb": 35, "isolation": "hard", "pool": "inference"}]
    placed = [{"request": "chat", "replica": 0, "gpu": "gpu04/gpu0", "profile": "1g.10gb", "start": 3, "kind": "mig"},
              {"request": "chat", "replica": 1, "gpu": "gpu04/gpu0", "profile": "1g.10gb", "start": 2, "kind": "mig"},
              {"request": "mid", "replica": 0, "gpu": "gpu04/gpu0", "profile": "2g.20gb", "start": 0, "kind": "mig"},
              {"request": "big", "replica": 0, "gpu": "gpu04/gpu0", "profile": "3g.40gb", "start": 4, "kind": "mig"}]
    applied = services.save_result(demo, {"gpus": [{"id": "gpu04/gpu0", "mig": MIXED, "time_slicing": None}],
                                          "placed": placed}, user=operator)
    Plan.objects.filter(pk=applied.pk).update(state=Plan.State.APPLIED)
    record_layout("gpu04", {0: MIXED})
    again = services.save_plan(demo, requests, user=operator)
    assert again.result["disruption"]["gpus_changed"] == []
    assert [(p["request"], p["replica"], p["profile"], p["start"]) for p in again.result["placed"]] == [
        ("chat", 0, "1g.10gb", 3), ("chat", 1, "1g.10gb", 2), ("mid", 0, "2g.20gb", 0), ("big", 0, "3g.40gb", 4)]
    assert again.result["disruption"]["services"] == {"moved": [], "restarted": [], "stopped": [], "started": []}


def test_gpus_time_sliced_differently_on_one_node_keep_their_own_counts(demo, operator):
    """GPU 1 of gpu04 planned x4 and GPU 2 x2: the stage records each count, the layout a plan starts from
    reads them back, and the node's device plugin config shares each GPU as planned (one resource entry per
    count, with its devices), never GPU 2 four ways (its services' memory was planned for two)."""
    from appliance.partitioning import formats
    from appliance.partitioning.layout import current_layout
    from appliance.partitioning.renderers import kubernetes
    from appliance.partitioning.renderers.site import site_view

    result = {"gpus": [{"id": "gpu04/gpu1", "model": "h100-80gb", "mig": None, "time_slicing": {"replicas": 4}},
                       {"id": "gpu04/gpu2", "model": "h100-80gb", "mig": None, "time_slicing": {"replicas": 2}}]}
    run = services.apply_plan(services.save_result(demo, result, user=operator), user=operator)
    target = partitioning_stage_vars(run, [Node.objects.get(name="gpu04")])["appliance_partitioning"]["targets"]
    assert target["gpu04"]["time_slicing"] == {"replicas": 4, "gpus": [1, 2], "per_gpu": {"1": 4, "2": 2}}

    record_layout("gpu04", {}, target["gpu04"]["time_slicing"])   # what the stage's facts then say
    sliced = {g["index"]: g["time_slicing"] for g in current_layout(demo)["gpus"] if g["node"] == "gpu04"}
    assert sliced == {0: None, 1: {"replicas": 4}, 2: {"replicas": 2}, 3: None, 4: None, 5: None, 6: None,
                      7: None}
    config = kubernetes.node_layout_configs(site_view(demo))["gpu04"]
    assert config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "devices": ["1"], "replicas": 4},
        {"name": "nvidia.com/gpu", "devices": ["2"], "replicas": 2}]
    # A record made before counts were kept per GPU still reads as one count for the GPUs it lists.
    assert formats.time_sliced({"replicas": 4, "gpus": [1, 2]}) == {1: 4, 2: 4}
    with pytest.raises(ValueError):
        formats.time_sliced({"replicas": 4, "gpus": [1], "per_gpu": ["1"]})
