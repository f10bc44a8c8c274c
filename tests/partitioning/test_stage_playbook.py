"""The partitioning stage's playbook on one simulated HGX H100 node, over SSH as the engine runs it (the
shared one-node appliance of tests/playbooks): a dry run shows the instance diff and changes nothing; the
run creates 2g+1g+1g+3g on GPU 0 with explicit placements and records the time-slicing of GPU 1; NVML (the
node's simulated library, read by pynvml) shows the instances, the facts carry them; a second run changes
nothing; the layout before (whole GPUs) is restored by the next run.

The tests of this module share one node and run in file order."""

import pytest

from appliance.partitioning import profiles
from appliance.simulation import gpu_ops
from appliance.simulation import state as node_state
from tests.playbooks.conftest import NODE, simulated_appliance  # noqa: F401 (the module's shared node)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

PROFILES = {p.name: {"nvml_profile": p.nvml_profile, "compute_slices": p.compute_slices}
            for p in profiles.model("h100-80gb").profiles}
MIXED = [{"profile": "2g.20gb", "start": 0}, {"profile": "1g.10gb", "start": 2},
         {"profile": "1g.10gb", "start": 3}, {"profile": "3g.40gb", "start": 4}]


def stage_vars(gpus: dict, time_slicing=None) -> dict:
    """What partitioning_stage_vars gives the node (tests/partitioning/test_services.py checks the provider)."""
    return {"appliance_partitioning": {
        "plan": 1, "scontrol": "scontrol", "squeue": "squeue", "slurm_environment": {}, "drain_checks": 2,
        "targets": {NODE: {"gpus": gpus, "time_slicing": time_slicing, "slurm_node": False, "profiles": PROFILES}},
    }}


PLANNED = stage_vars({"0": {"mig": MIXED}, "1": {"mig": None}, **{str(i): {"keep": True, "mig": None}
                                                                  for i in range(2, 8)}},
                     {"replicas": 4, "gpus": [1]})
ACCEPTANCE_PLAY = """
- name: The MIG layout acceptance check only
  hosts: all
  gather_facts: false
  environment: "{{ node_environment | default({}) }}"
  tasks:
    - name: Measure the MIG layout
      appliance.hgx.appliance_acceptance:
        node: "{{ inventory_hostname }}"
        groups: [mig_layout]
        platform: "{{ platform }}"
        mig_layout: "{{ target }}"
      vars:
        ansible_python_interpreter: "{{ appliance_node_python }}"
"""
WHOLE = stage_vars({str(i): {"mig": None} for i in range(8)})


def instances(sim, index: int):
    gpu = sim.state()["gpus"][index]
    if not gpu["mig"]["current"]:
        return None
    return sorted((gi["placement_start"], gi["profile"], len(gi["compute_instances"]))
                  for gi in gpu["mig"]["gpu_instances"])


def test_the_os_and_gpu_stages_first(simulated_appliance):  # noqa: F811
    for stage in ("stages/os.yml", "stages/gpu.yml"):  # nouveau off, then the driver and the node's venv
        run = simulated_appliance.run(stage)
        assert run.returncode == 0, run.output


def test_a_dry_run_shows_the_instance_diff_and_changes_nothing(simulated_appliance):  # noqa: F811
    # As the engine runs a dry run: --check --diff.
    run = simulated_appliance.run("stages/partitioning.yml", "--check", "--diff", extra_vars=PLANNED)
    assert run.returncode == 0, run.output
    assert instances(simulated_appliance, 0) is None
    assert "-GPU 0: whole (MIG off)\n+GPU 0: MIG 2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4" in run.output, run.output


def test_the_stage_creates_the_planned_instances_through_nvml(simulated_appliance):  # noqa: F811
    sim = simulated_appliance
    run = sim.run("stages/partitioning.yml", extra_vars=PLANNED)
    assert run.returncode == 0, run.output
    assert run.changed() >= 1
    assert instances(sim, 0) == [(0, "2g.20gb", 1), (2, "1g.10gb", 1), (3, "1g.10gb", 1), (4, "3g.40gb", 1)]
    assert instances(sim, 1) is None
    facts = run.facts[NODE]
    records = facts["appliance_mig_instances"]
    assert [(r["gpu"], r["profile"], r["start"], r["compute_instance"]) for r in records] == [
        (0, "2g.20gb", 0, 0), (0, "1g.10gb", 2, 0), (0, "1g.10gb", 3, 0), (0, "3g.40gb", 4, 0)]
    state = {gi["placement_start"]: gi for gi in sim.state()["gpus"][0]["mig"]["gpu_instances"]}
    assert [r["uuid"] for r in records] == [state[s]["compute_instances"][0]["uuid"] for s in (0, 2, 3, 4)]
    assert [r["gpu_instance"] for r in records] == [state[s]["id"] for s in (0, 2, 3, 4)]
    assert facts["appliance_time_slicing"] == {"replicas": 4, "gpus": [1]}
    # The stage's own acceptance through NVML: one record per GPU it set, all passed.
    checks = {r["check"]: r for r in facts["appliance_acceptance"]}
    assert sorted(checks) == ["mig_layout_gpu0", "mig_layout_gpu1"]
    assert checks["mig_layout_gpu0"]["measured"] == "2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4"
    assert checks["mig_layout_gpu1"]["measured"] == "whole GPU (MIG off)"
    assert all(r["passed"] for r in checks.values())


def test_a_second_run_changes_nothing(simulated_appliance):  # noqa: F811
    run = simulated_appliance.run("stages/partitioning.yml", extra_vars=PLANNED)
    assert run.returncode == 0, run.output
    assert run.changed() == 0, run.output


def test_an_instance_lost_behind_the_stage_fails_acceptance_and_the_next_run_restores_it(
        simulated_appliance, tmp_path):  # noqa: F811
    sim = simulated_appliance
    gi = next(g["id"] for g in sim.state()["gpus"][0]["mig"]["gpu_instances"] if g["placement_start"] == 4)
    # Destroyed behind the stage's back (as `nvidia-smi mig -dci/-dgi` by hand would).
    with node_state.update(sim.sysroot) as state:
        gpu_ops.destroy_compute_instance(state, 0, gi, 0)
        gpu_ops.destroy_gpu_instance(state, 0, gi)
    play = tmp_path / "acceptance_mig.yml"
    play.write_text(ACCEPTANCE_PLAY)
    checked = sim.run(str(play), extra_vars={"target": PLANNED["appliance_partitioning"]["targets"][NODE]})
    [record] = [r for r in checked.facts[NODE]["appliance_acceptance"] if r["check"] == "mig_layout_gpu0"]
    assert record["passed"] is False
    assert record["message"] == ("GPU 0: NVML shows 2g.20gb@0 1g.10gb@2 1g.10gb@3, "
                                 "the plan has 2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4")

    run = sim.run("stages/partitioning.yml", extra_vars=PLANNED)
    assert run.returncode == 0, run.output
    assert instances(sim, 0) == [(0, "2g.20gb", 1), (2, "1g.10gb", 1), (3, "1g.10gb", 1), (4, "3g.40gb", 1)]


def test_the_layout_before_is_restored(simulated_appliance):  # noqa: F811
    sim = simulated_appliance
    run = sim.run("stages/partitioning.yml", extra_vars=WHOLE)
    assert run.returncode == 0, run.output
    assert instances(sim, 0) is None and not sim.state()["gpus"][0]["mig"]["gpu_instances"]
    assert run.facts[NODE]["appliance_mig_instances"] == []
    again = sim.run("stages/partitioning.yml", extra_vars=WHOLE)
    assert again.changed() == 0, again.output


def test_the_engine_applies_a_saved_plan_and_rolls_it_back(simulated_appliance, make_user):  # noqa: F811
    """Through the services and the provisioning engine, as the portal and `partition apply` do."""
    from appliance.core.roles import Role
    from appliance.inventory.models import GPU
    from appliance.partitioning import services
    from appliance.partitioning.layout import current_layout
    from appliance.provisioning.services import execute_run

    sim = simulated_appliance
    node = sim.node
    for index in range(8):  # what the gpu stage's facts give the inventory in a bootstrap
        GPU.objects.get_or_create(node=node, index=index, defaults={
            "model": sim.platform["gpu"]["model"], "memory_mib": 81559, "mig_capable": True})
    operator = make_user(Role.OPERATOR, "stage-operator")
    plan = services.save_result(node.appliance, {"gpus": [
        {"id": f"{NODE}/gpu0", "mig": MIXED},
        {"id": f"{NODE}/gpu1", "mig": None, "time_slicing": {"replicas": 4}}]}, user=operator)

    dry = execute_run(services.apply_plan(plan, user=operator, dry_run=True).pk)
    assert dry.state == "succeeded", dry.reason
    assert instances(sim, 0) is None
    plan.refresh_from_db()
    assert plan.state == "draft"

    run = execute_run(services.apply_plan(plan, user=operator).pk)
    assert run.state == "succeeded", run.reason
    plan.refresh_from_db()
    assert plan.state == "applied"
    assert instances(sim, 0) == [(0, "2g.20gb", 1), (2, "1g.10gb", 1), (3, "1g.10gb", 1), (4, "3g.40gb", 1)]
    gpus = {g["id"]: g for g in current_layout(node.appliance)["gpus"]}
    assert [(i["profile"], i["start"]) for i in gpus[f"{NODE}/gpu0"]["mig"]] == [
        ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
    assert gpus[f"{NODE}/gpu1"]["time_slicing"] == {"replicas": 4}
    checks = {c.name: c.passed for c in run.acceptance_report.checks.all()}
    assert checks == {"mig_layout_gpu0": True, "mig_layout_gpu1": True}

    back = services.rollback(node.appliance, user=operator)
    rolled = execute_run(back.run.pk)
    assert rolled.state == "succeeded", rolled.reason
    back.refresh_from_db()
    plan.refresh_from_db()
    assert (back.state, plan.state) == ("applied", "superseded")
    assert instances(sim, 0) is None and instances(sim, 1) is None
    gpus = {g["id"]: g for g in current_layout(node.appliance)["gpus"]}
    assert gpus[f"{NODE}/gpu0"]["mig"] is None and gpus[f"{NODE}/gpu1"]["time_slicing"] is None
