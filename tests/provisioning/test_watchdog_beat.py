"""The watchdog runs on its own clock, not inside a page load: with no broker, the embedded beat of a
serving process (wsgi.py, asgi.py) fails a run whose worker died, with nobody asking."""

import socket
import time

import pytest

from appliance.audit.models import AuditRecord
from appliance.core import dispatch
from appliance.provisioning import services
from appliance.provisioning.models import Run
from appliance.provisioning.states import RunState
from tests.provisioning.test_watchdog import dead_pid


@pytest.mark.django_db(transaction=True)
def test_the_embedded_beat_fails_a_run_whose_worker_died(settings, state_dir, appliance, catalogue):
    settings.CELERY_BROKER_URL = ""
    settings.PROVISIONING_HEARTBEAT_TIMEOUT = 10  # the watchdog ticks every 5 s
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    run.worker_host, run.worker_pid = socket.gethostname(), dead_pid()
    run.transition(RunState.RUNNING)

    stop = dispatch.start_embedded_beat(only=("provisioning-watchdog",))
    assert stop is not None
    try:
        deadline = time.monotonic() + 30
        while Run.objects.get(pk=run.pk).state == RunState.RUNNING:
            assert time.monotonic() < deadline, "the embedded beat did not run the watchdog within 30 s"
            time.sleep(0.2)
    finally:
        dispatch.stop_embedded_beat()
    run.refresh_from_db()
    assert run.state == RunState.FAILED and run.reason.startswith(f"worker died: process {run.worker_pid}")
    end = AuditRecord.objects.get(event="provisioning.run.end", target_id=str(run.pk))
    assert end.outcome == "failure" and end.details["watchdog"] is True and end.details["to"] == "failed"
