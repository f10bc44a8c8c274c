"""A no_log task's result reaches the event handler censored ({"censored": ...}: ansible-runner drops
"changed" with the rest); whether it changed something is still known from Ansible's own line, and is
stored: the live counts and an aborted run's "what changed on this node" depend on it."""

import pytest
from django.utils import timezone

from appliance.provisioning.events import EventIngestor, Scrubber
from appliance.provisioning.models import Run, StageRun, TaskEvent

CENSORED = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"


@pytest.mark.django_db
def test_a_censored_result_is_changed_when_ansible_says_so(appliance):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"])
    stage_run = StageRun.objects.create(run=run, stage="first", order=1, hosts=["gpu01", "gpu02"])
    ingestor = EventIngestor(stage_run, Scrubber([]))
    for counter, (host, stdout) in enumerate([("gpu01", "changed: [gpu01]"), ("gpu02", "ok: [gpu02]")], start=1):
        ingestor.handle({"counter": counter, "event": "runner_on_ok", "stdout": stdout,
                         "created": timezone.now().isoformat(),
                         "event_data": {"host": host, "task": "Keep the BMC password", "res": {"censored": CENSORED}}})
    result = ingestor.consume(lambda: False)
    assert (result.hosts["gpu01"].changed, result.hosts["gpu02"].changed) == (1, 0)
    assert dict(TaskEvent.objects.values_list("host", "changed")) == {"gpu01": True, "gpu02": False}
