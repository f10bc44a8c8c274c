"""The engine end to end on the test playbook: events, host results, facts, secrets, failure, cancel."""

import json
from pathlib import Path

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory.models import GPU, Node
from appliance.inventory.states import NodeState
from appliance.provisioning import services
from appliance.provisioning.models import AcceptanceReport, HostResult, Run, StageRun, TaskEvent
from appliance.provisioning.states import RunState, StageState

from .conftest import BMC_PASSWORD

pytestmark = pytest.mark.slow


def run_stages(appliance, catalogue, stages, progress=None, **options):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=stages, catalogue=catalogue, **options)
    return services.execute_run(run.pk, progress=progress, catalogue=catalogue)


def test_a_run_stores_every_event_and_updates_the_inventory(state_dir, appliance, catalogue, probe):
    probe["probe_gpus"] = [{"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                            "pci_bus_id": "00000000:18:00.0", "persistence_mode": True, "mig_mode": "disabled",
                            "nvlink_peers": [1, 2]}]
    probe["probe_hcas"] = [{"device": "mlx5_0", "port": 1, "guid": "0xabc", "state": "Active",
                            "physical_state": "LinkUp", "rate_gbps": 400, "link_layer": "InfiniBand"}]
    probe["probe_bios_changes"] = [{"attribute": "ProcCStates", "old": "Enabled", "new": "Disabled"}]
    probe["probe_loop"] = 40

    run = run_stages(appliance, catalogue, ["first"])

    assert run.state == RunState.SUCCEEDED, run.message
    stage_run = run.stage_runs.get()
    assert stage_run.state == StageState.SUCCEEDED
    assert stage_run.events_emitted > 40 * 3
    assert stage_run.events_emitted == stage_run.events_stored == TaskEvent.objects.filter(stage_run=stage_run).count()
    counters = list(TaskEvent.objects.filter(stage_run=stage_run).values_list("counter", flat=True))
    assert counters == list(range(1, len(counters) + 1))
    results = {r.host: r for r in HostResult.objects.filter(stage_run=stage_run)}
    assert set(results) == {"gpu01", "gpu02", "mgmt01"}
    assert all(r.failed == 0 and r.changed >= 2 for r in results.values())
    for node in Node.objects.all():
        assert node.state == NodeState.READY
        assert (Path(node.sysroot) / "etc/probe-marker").read_text() == f"stage first on {node.name}\n"
        assert node.facts["driver"] == {"version": "550.90.07", "cuda": "12.4"}
        assert node.bmc.system_id == f"sys-{node.name}"
    gpu = GPU.objects.get(node__name="gpu01", index=0)
    assert (gpu.uuid, gpu.pci_bus_id, gpu.nvlink_peers) == ("GPU-aaaa", "00000000:18:00.0", [1, 2])
    port = Node.objects.get(name="gpu02").hcas.get(device="mlx5_0").ports.get()
    assert (port.guid, port.state, port.rate_gbps) == ("0xabc", "Active", 400)
    changes = AuditRecord.objects.filter(event="provisioning.bios.change")
    assert sorted(r.target_name for r in changes) == ["gpu01", "gpu02", "mgmt01"]
    assert changes[0].details["attribute"] == "ProcCStates"
    assert (changes[0].details["old"], changes[0].details["new"]) == ("Enabled", "Disabled")
    report = AcceptanceReport.objects.get(run=run)
    assert report.passed and report.checks_total == 3
    events = set(AuditRecord.objects.values_list("event", flat=True))
    assert {"provisioning.run.start", "provisioning.run.end", "provisioning.stage.end"} <= events

    # Idempotent playbook: a second run changes nothing.
    again = run_stages(appliance, catalogue, ["first"])
    assert again.state == RunState.SUCCEEDED
    assert again.changed_count == 0


def test_secrets_never_reach_events_or_the_kept_files(state_dir, appliance, catalogue, probe):
    run = run_stages(appliance, catalogue, ["first"])
    assert run.state == RunState.SUCCEEDED, run.message
    stage_run = run.stage_runs.get()
    # The playbook really received the password...
    assert (Path(Node.objects.get(name="gpu01").sysroot) / "etc/bmc-secret").read_text() == BMC_PASSWORD
    # ...and it is nowhere in what was kept.
    for event in TaskEvent.objects.filter(stage_run=stage_run):
        assert BMC_PASSWORD not in event.stdout
        assert BMC_PASSWORD not in json.dumps(event.data)
    directory = Path(stage_run.private_data_dir)
    assert not (directory / "secrets" / "vars.json").exists()
    masked = json.loads((directory / "secrets.masked.json").read_text())
    assert masked == {"appliance_bmc_passwords": {"gpu01": "********", "gpu02": "********", "mgmt01": "********"}}
    for path in directory.rglob("*"):
        if path.is_file():
            assert BMC_PASSWORD not in path.read_text(errors="replace"), path
    assert not AuditRecord.objects.filter(details__icontains=BMC_PASSWORD).exists()


def test_a_task_failing_on_one_host_names_it_and_the_others_go_on(state_dir, appliance, catalogue, probe):
    probe["probe_fail_on"] = ["gpu02"]
    run = run_stages(appliance, catalogue, ["first", "second"])

    assert run.state == RunState.FAILED
    assert (run.failed_stage, run.failed_host, run.failed_task) == ("first", "gpu02", "Break on the hosts told to")
    assert "stage first, host gpu02, task 'Break on the hosts told to'" in run.message
    assert "non-zero return code" in run.message
    first, second = run.stage_runs.order_by("order")
    assert first.state == StageState.FAILED
    # The other hosts finished the failed stage and went on to the next one.
    assert second.state == StageState.SUCCEEDED and sorted(second.hosts) == ["gpu01", "mgmt01"]
    nodes = {n.name: n for n in Node.objects.all()}
    assert nodes["gpu02"].state == NodeState.FAILED
    assert "Break on the hosts told to" in nodes["gpu02"].state_reason
    assert nodes["gpu01"].state == nodes["mgmt01"].state == NodeState.READY
    assert (Path(nodes["gpu01"].sysroot) / "etc/probe-marker").read_text() == "stage second on gpu01\n"
    failed = HostResult.objects.get(stage_run=first, host="gpu02")
    assert failed.failed == 1 and failed.failed_task == "Break on the hosts told to"


def test_a_user_cancel_ends_cancelled(state_dir, appliance, catalogue, probe):
    probe["probe_sleep"] = 60

    def cancel_when_sleeping(what, **data):
        if what == "event" and data["event_kind"] == "playbook_on_task_start" and data["task"] == "Sleep when asked":
            services.cancel_run(data["stage_run"].run)

    run = run_stages(appliance, catalogue, ["first", "second"], progress=cancel_when_sleeping)

    assert run.state == RunState.CANCELLED
    first, second = run.stage_runs.order_by("order")
    assert first.state == StageState.CANCELLED
    assert second.state == StageState.CANCELLED
    assert first.events_emitted == first.events_stored
    assert (first.ended - first.started).total_seconds() < 30
    assert AuditRecord.objects.filter(event="provisioning.run.cancel").count() == 1
    # The run wrote the marker file and the (no_log) secret file before it was cancelled: an abort after a
    # change fails the node, saying so.
    reason = (f"run #{run.pk} (cancelled by a user) was aborted after changing: first: Write the marker file, "
              f"Keep the BMC password where only this test looks on it")
    assert {n.name: (n.state, n.state_reason) for n in Node.objects.all()} == {
        name: (NodeState.FAILED, reason) for name in ("gpu01", "gpu02", "mgmt01")}
    # Nothing of the cancelled playbook lives on: not ansible-playbook, not its Mitogen multiplexers.
    state = str(state_dir)
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, state)]
    assert not leftovers, [(p.name, _cmdline(p)) for p in leftovers]


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _cmdline_mentions(proc: Path, text: str) -> bool:
    return "ansible" in (line := _cmdline(proc)) and text in line


def test_check_mode_changes_nothing(state_dir, appliance, catalogue, probe):
    run = run_stages(appliance, catalogue, ["first"], dry_run=True)
    assert run.state == RunState.SUCCEEDED, run.message
    assert run.changed_count >= 3  # what would change
    for node in Node.objects.all():
        assert not (Path(node.sysroot) / "etc/probe-marker").exists()
        assert node.state == NodeState.NEW
    assert not AuditRecord.objects.filter(event="provisioning.bios.change").exists()


def test_a_stage_runs_only_on_the_roles_it_names(state_dir, appliance, catalogue, probe):
    run = run_stages(appliance, catalogue, ["gpu-only"])
    assert run.state == RunState.SUCCEEDED
    assert sorted(run.stage_runs.get().hosts) == ["gpu01", "gpu02"]


def test_the_stage_run_of_a_node_run_targets_only_those_nodes(state_dir, appliance, catalogue, probe):
    run = services.create_run(appliance, kind=Run.Kind.NODE, stages=["first"], nodes=["gpu02"], catalogue=catalogue)
    run = services.execute_run(run.pk, catalogue=catalogue)
    assert run.state == RunState.SUCCEEDED
    assert StageRun.objects.get(run=run).hosts == ["gpu02"]
    assert Node.objects.get(name="gpu01").state == NodeState.NEW
