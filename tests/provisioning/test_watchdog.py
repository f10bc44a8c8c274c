"""The watchdog: a run whose worker is gone ends failed, with its stage and its nodes; a rerun resumes."""

import subprocess
from datetime import timedelta

from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Node
from appliance.inventory.states import NodeState
from appliance.provisioning import services
from appliance.provisioning.models import Run
from appliance.provisioning.states import RunState, StageState


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def running_run(appliance, catalogue, worker_host, worker_pid, heartbeat_age=0.0):
    run = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    run.worker_host, run.worker_pid = worker_host, worker_pid
    run.transition(RunState.RUNNING)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age))
    first = run.stage_runs.get(stage="first")
    first.hosts = ["gpu01", "gpu02", "mgmt01"]
    first.save()
    first.transition(StageState.RUNNING)
    first.transition(StageState.SUCCEEDED)
    second = run.stage_runs.get(stage="second")
    second.hosts = ["gpu01", "gpu02", "mgmt01"]
    second.save()
    second.transition(StageState.RUNNING)
    for node in Node.objects.all():
        node.transition(NodeState.PROVISIONING, f"run #{run.pk}")
    return run


def test_a_run_whose_local_worker_died_is_failed_at_once(state_dir, appliance, catalogue):
    import socket

    run = running_run(appliance, catalogue, socket.gethostname(), dead_pid())
    assert [r.pk for r in services.watchdog()] == [run.pk]
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.message.startswith("worker died: process")
    states = dict(run.stage_runs.values_list("stage", "state"))
    assert states == {"first": "succeeded", "second": "failed", "gpu-only": "cancelled"}
    assert all(n.state == NodeState.FAILED and "worker died" in n.state_reason for n in Node.objects.all())
    end = AuditRecord.objects.get(event="provisioning.run.end")
    assert end.outcome == "failure" and end.details["watchdog"] is True


def test_a_silent_remote_worker_is_failed_after_the_deadline(state_dir, appliance, catalogue, settings):
    settings.PROVISIONING_HEARTBEAT_TIMEOUT = 30
    run = running_run(appliance, catalogue, "another-host", 4242, heartbeat_age=5)
    assert services.watchdog() == []
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=31))
    assert [r.pk for r in services.watchdog()] == [run.pk]
    run.refresh_from_db()
    assert run.state == RunState.FAILED and "no heartbeat from another-host" in run.message


def test_a_live_worker_is_left_alone(state_dir, appliance, catalogue):
    import os
    import socket

    run = running_run(appliance, catalogue, socket.gethostname(), os.getppid())
    assert services.watchdog() == []
    run.refresh_from_db()
    assert run.state == RunState.RUNNING


def test_a_rerun_after_a_dead_worker_resumes_at_the_first_unfinished_stage(state_dir, appliance, catalogue, probe):
    import socket

    dead = running_run(appliance, catalogue, socket.gethostname(), dead_pid())
    rerun = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    dead.refresh_from_db()
    assert dead.state == RunState.FAILED  # the watchdog ran first
    assert rerun.resumes_id == dead.pk
    first = rerun.stage_runs.get(stage="first")
    assert first.state == StageState.SKIPPED and first.carried_from.run_id == dead.pk
    assert rerun.stage_runs.get(stage="second").state == StageState.PENDING
    rerun = services.execute_run(rerun.pk, catalogue=catalogue)
    assert rerun.state == RunState.SUCCEEDED, rerun.message
    assert all(n.state == NodeState.READY for n in Node.objects.all())
    # A further bootstrap after a successful one is a full run again (and carries nothing over).
    again = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, catalogue=catalogue)
    assert again.resumes_id is None
    assert set(again.stage_runs.values_list("state", flat=True)) == {StageState.PENDING}
    again.delete()


def test_force_reruns_completed_stages(state_dir, appliance, catalogue):
    import socket

    running_run(appliance, catalogue, socket.gethostname(), dead_pid())
    services.watchdog()
    forced = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, force=True, catalogue=catalogue)
    assert forced.resumes_id is None
    assert forced.stage_runs.get(stage="first").state == StageState.PENDING


def test_only_one_active_run_per_appliance(state_dir, appliance, catalogue):
    services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    try:
        services.create_run(appliance, kind=Run.Kind.STAGES, stages=["second"], catalogue=catalogue)
    except services.RunRefused as refused:
        assert "is pending; cancel it or wait for it" in str(refused)
    else:
        raise AssertionError("a second run was accepted while one is pending")


def test_cancelling_a_pending_run_ends_it_at_once(state_dir, appliance, catalogue):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    services.cancel_run(run)
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED
    assert set(run.stage_runs.values_list("state", flat=True)) == {StageState.CANCELLED}


def test_celery_beat_runs_the_watchdog_within_the_heartbeat_timeout(settings):
    from appliance.celery import app

    app.loader.import_default_modules()
    entry = app.conf.beat_schedule["provisioning-watchdog"]
    assert entry["task"] in app.tasks and app.tasks[entry["task"]].name == "provisioning.watchdog"
    assert 0 < entry["schedule"] < settings.PROVISIONING_HEARTBEAT_TIMEOUT
