"""Progress read while a real stage runs (the probe playbook through ansible-runner, in the in-process
worker): counts are there before the stage ends, task N of M takes M from the previous run of the
stage, and once the stage has ended the counts taken from its events equal Ansible's own recap."""

import time

import pytest

from appliance.core import dispatch
from appliance.provisioning import progress, services
from appliance.provisioning.models import HostResult, Run, TaskEvent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def embedded_worker(settings, catalogue, state_dir):
    settings.CELERY_BROKER_URL = ""
    settings.PROVISIONING_CATALOGUE = "tests.provisioning.catalogue:CATALOGUE"


def test_counts_and_task_n_of_m_while_a_real_stage_runs(appliance, catalogue, probe):
    probe["probe_sleep"] = 4
    first = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], nodes=["gpu01"],
                                catalogue=catalogue)
    first = services.execute_run(first.pk, catalogue=catalogue)
    assert first.state == "succeeded", first.reason
    # The probe playbook has 8 tasks: each starts once, whatever the number of hosts.
    assert TaskEvent.objects.filter(stage_run__run=first, event="playbook_on_task_start").count() == 8

    run = services.start_run(appliance, stages=["first"], nodes=["gpu01", "gpu02"])
    seen = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        shown = progress.run_progress(Run.objects.get(pk=run.pk))
        current = shown.current
        if current is not None and shown.totals.ok > 0:
            seen = shown
            break
        time.sleep(0.1)
    assert seen is not None, "no count while the stage ran"
    current = seen.current
    assert current.live and current.stage_run.state == "running"
    assert current.tasks_expected == 8 and 1 <= current.tasks_started <= 8
    assert 0 < seen.percent < 100 and seen.remaining is not None
    assert set(current.hosts) <= {"gpu01", "gpu02"}

    assert dispatch.drain(timeout=90)
    run.refresh_from_db()
    assert run.state == "succeeded", run.reason
    stage_run = run.stage_runs.get()
    recap = {r.host: [r.ok, r.changed, r.failed, r.unreachable, r.skipped]
             for r in HostResult.objects.filter(stage_run=stage_run)}
    counted = {host: [c.ok, c.changed, c.failed, c.unreachable, c.skipped]
               for host, c in progress._live_counts([stage_run.pk])[stage_run.pk].items()}
    assert counted == recap
    assert progress.run_progress(run).percent == 100
