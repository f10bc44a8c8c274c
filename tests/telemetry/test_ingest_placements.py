"""A node's job ids are taken only where a scheduler puts that job on that node (issue 40): gpu02's token
naming job 1, which runs on gpu01, leaves job 1's page as Slurm made it and keeps gpu02's rows with the
job marked unverified. The schedulers are providers (telemetry.placements); here a stand-in that says
what a Slurm would, and at the end the simulated appliance's real Slurm."""

import hashlib
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.telemetry import placements, queries
from appliance.telemetry.models import GpuMinuteFrame, GpuRollup, JobPlacement, NodeCollector
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (a fixture)
from tests.telemetry.test_ingest import TOKEN_1, TOKEN_2, nodes, post  # noqa: F401 (nodes: the fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


_CLOCK = []


@pytest.fixture(autouse=True)
def _one_clock_a_test():
    """Every minute() of a test counts back from the minute the test began: a minute turning between a
    write and its assertion moved them apart once (a full run at 20:08:59)."""
    _CLOCK[:] = [timezone.now().replace(second=0, microsecond=0)]


def minute(ago: int):
    return _CLOCK[0] - timedelta(minutes=ago)


def ns(start) -> int:
    return int(start.timestamp()) * 1_000_000_000


def lines(host: str, job: str, start, gpus=range(8)) -> str:
    return "\n".join(f"gpu_rollup,Hostname={host},gpu={gpu},hpc_job={job} step=60,samples=60,util=90 {ns(start)}"
                     for gpu in gpus)


class Scheduler:
    """A stand-in Slurm: {node name: [Placement]}, counting the questions; `down` makes it not answer."""

    def __init__(self, jobs):
        self.jobs, self.asked, self.down = jobs, [], False

    def __call__(self, node):
        self.asked.append(node.name)
        if self.down:
            raise placements.Unavailable("squeue: Unable to contact slurm controller")
        return list(self.jobs.get(node.name, []))


@pytest.fixture
def slurm(monkeypatch):
    scheduler = Scheduler({"gpu01": [placements.Placement("1", minute(30), None)]})
    monkeypatch.setattr(placements, "_PROVIDERS", {"slurm": scheduler})
    return scheduler


def test_another_nodes_job_is_kept_unverified_and_off_the_jobs_page(nodes, slurm):  # noqa: F811
    gpu01, gpu02 = nodes
    assert post(lines("gpu01", "1", minute(3)), token=TOKEN_1).status_code == 204
    # The attack: gpu02's token names job 1 for its eight GPUs.
    assert post(lines("gpu02", "1", minute(3)), token=TOKEN_2).status_code == 204

    assert queries.job("1")["nodes"] == ["gpu01"]
    assert queries.job("1")["gpu_count"] == 8
    assert [(job["job"], job["nodes"], job["gpus"]) for job in queries.jobs("1h")] == [("1", ["gpu01"], 8)]
    # gpu02's rows are kept, their numbers its own, the job it named set apart.
    kept = GpuRollup.objects.filter(node=gpu02).order_by("gpu")
    assert [(row.gpu, row.job, row.unverified_job, row.util) for row in kept] == [
        (gpu, "", "1", 90.0) for gpu in range(8)]
    assert set(GpuRollup.objects.filter(node=gpu01).values_list("job", "unverified_job")) == {("1", "")}
    # what the attribution reads: gpu02's frame names no job
    assert GpuMinuteFrame.objects.get(node=gpu02).jobs == "\n" * 7
    assert GpuMinuteFrame.objects.get(node=gpu01).jobs == "\n".join(["1"] * 8)
    record = AuditRecord.objects.get(event="telemetry.ingest.unverified_job")
    assert (record.target_name, record.outcome, record.details) == (
        "gpu02", "denied", {"jobs": {"1": 8}, "job_count": 1, "schedulers_unavailable": []})
    assert record.reason == "gpu02 named jobs no scheduler puts on it: 1; its rows are kept without them"
    # gpu01's write named the job Slurm put there: nothing recorded for it
    assert not AuditRecord.objects.filter(event="telemetry.ingest.unverified_job", target_name="gpu01").exists()
    assert NodeCollector.objects.get(node=gpu02).live_gpu_jobs == "\n" * 7


def test_the_scheduler_is_asked_once_a_write_and_its_answer_kept(nodes, slurm):  # noqa: F811
    gpu01, _ = nodes
    body = "\n".join(lines("gpu01", "1", minute(m)) for m in (5, 4, 3))  # 24 lines, one job
    assert post(body).status_code == 204
    assert slurm.asked == ["gpu01"]
    assert list(JobPlacement.objects.filter(source="slurm").values_list("node__name", "source", "job", "end")) == [
        ("gpu01", "slurm", "1", None)]
    # The next minutes of a job confirmed running are taken without asking again.
    assert post(lines("gpu01", "1", minute(2))).status_code == 204
    assert slurm.asked == ["gpu01"]
    assert GpuRollup.objects.filter(job="1").count() == 32


def test_a_new_job_on_the_node_is_asked_about_and_taken(nodes, slurm):  # noqa: F811
    assert post(lines("gpu01", "1", minute(4), gpus=[0])).status_code == 204
    slurm.jobs["gpu01"].append(placements.Placement("2", minute(3), None))
    # A question less than half a minute after the last is not asked for a minute the last answer came
    # after (it knew that minute's jobs) ...
    assert post(lines("gpu01", "2", minute(4), gpus=[1])).status_code == 204
    assert slurm.asked == ["gpu01"]
    assert GpuRollup.objects.get(gpu=1).unverified_job == "2"
    # ... and is, once the interval has passed.
    later = mock.patch("appliance.telemetry.placements.time.time",
                       return_value=timezone.now().timestamp() + placements.ASK_INTERVAL_S)
    with later:
        assert post(lines("gpu01", "2", minute(2), gpus=[1])).status_code == 204
    assert slurm.asked == ["gpu01", "gpu01"]
    assert GpuRollup.objects.get(gpu=1, start=minute(2)).job == "2"


def test_a_minute_outside_the_jobs_time_on_the_node_is_unverified(nodes, slurm):  # noqa: F811
    slurm.jobs["gpu01"] = [placements.Placement("1", minute(30), minute(10))]  # ended ten minutes ago
    body = "\n".join([lines("gpu01", "1", minute(15), gpus=[0]), lines("gpu01", "1", minute(3), gpus=[0]),
                      lines("gpu01", "1", minute(40), gpus=[0])])
    assert post(body).status_code == 204
    assert dict(GpuRollup.objects.values_list("start", "unverified_job")) == {
        minute(15): "", minute(3): "1", minute(40): "1"}


def test_with_the_scheduler_down_a_job_it_last_saw_running_is_taken_and_others_are_not(nodes, slurm):  # noqa: F811
    assert post(lines("gpu01", "1", minute(3), gpus=[0])).status_code == 204
    # Slurm last said job 1 ran there ten minutes ago, and now does not answer.
    JobPlacement.objects.filter(job="1").update(seen_at=timezone.now() - timedelta(minutes=10))
    slurm.down = True
    later = mock.patch("appliance.telemetry.placements.time.time",
                       return_value=timezone.now().timestamp() + placements.ASK_INTERVAL_S)
    with later:
        assert post("\n".join([lines("gpu01", "1", minute(2), gpus=[0]),
                               lines("gpu01", "7", minute(2), gpus=[1])])).status_code == 204
    assert slurm.asked == ["gpu01", "gpu01"]
    assert sorted(GpuRollup.objects.values_list("gpu", "start", "job", "unverified_job")) == [
        (0, minute(3), "1", ""), (0, minute(2), "1", ""), (1, minute(2), "", "7")]
    record = AuditRecord.objects.get(event="telemetry.ingest.unverified_job")
    assert record.details == {"jobs": {"7": 1}, "job_count": 1, "schedulers_unavailable": ["slurm"]}


def test_a_node_no_scheduler_manages_keeps_every_job_unverified(nodes, monkeypatch):  # noqa: F811
    monkeypatch.setattr(placements, "_PROVIDERS", {"slurm": lambda node: None})
    assert post(lines("gpu02", "4712", minute(3), gpus=[0]), token=TOKEN_2).status_code == 204
    assert list(GpuRollup.objects.values_list("job", "unverified_job")) == [("", "4712")]


def test_a_job_that_left_the_schedulers_list_ended_when_last_seen(nodes, slurm):  # noqa: F811
    gpu01, _ = nodes
    assert post(lines("gpu01", "1", minute(3), gpus=[0])).status_code == 204
    seen = JobPlacement.objects.get(job="1").seen_at
    slurm.jobs["gpu01"] = []
    placements.ask(gpu01)
    assert JobPlacement.objects.get(job="1").end == seen


@pytest.mark.slow
def test_the_simulated_appliances_slurm_places_the_jobs(demo_appliance):  # noqa: F811
    """The attack as the issue ran it, against the demo's real slurmctld: job 1 runs on gpu01."""
    import time

    from appliance.inventory.models import Node
    from appliance.simulation import slurm

    gpu01, gpu02 = Node.objects.get(name="gpu01"), Node.objects.get(name="gpu02")
    tokens = {}
    for node in (gpu01, gpu02):
        token = f"tok-{node.name}-placements-0123456789abcdef"
        NodeCollector.objects.create(node=node, token=token, token_digest=hashlib.sha256(token.encode()).hexdigest(),
                                     issued_at=timezone.now())
        tokens[node.name] = token
    gpus = sorted(gpu01.gpus.values_list("index", flat=True))
    assert gpus == list(range(8))
    write_stage_files(demo_appliance)
    try:
        slurm.start(demo_appliance)
        job = slurm.client("sbatch", "--parsable", "--job-name=train", "--nodelist=gpu01", "--nodes=1", "--exclusive",
                           "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
        assert job == "1"
        deadline = time.monotonic() + 20
        while "RUNNING" not in slurm.client("squeue", "--noheader", "--format=%T", "--jobs=1").stdout:
            assert time.monotonic() < deadline, "job 1 does not run"
            time.sleep(0.2)
        now = minute(0) + timedelta(minutes=1)  # the minute job 1 started in, closed
        at = now - timedelta(minutes=1)
        assert post(lines("gpu02", "1", at), token=tokens["gpu02"]).status_code == 204
        assert post(lines("gpu01", "1", at), token=tokens["gpu01"]).status_code == 204
    finally:
        slurm.stop(demo_appliance)
    assert queries.job("1")["nodes"] == ["gpu01"]
    assert set(GpuRollup.objects.filter(node=gpu02).values_list("job", "unverified_job")) == {("", "1")}
    assert set(GpuRollup.objects.filter(node=gpu01).values_list("job", "unverified_job")) == {("1", "")}
    placed = JobPlacement.objects.get(node=gpu01, job="1")
    assert (placed.source, placed.end) == ("slurm", None)
    assert placed.start is not None and abs((placed.start - timezone.now()).total_seconds()) < 60
    # gpu02 was asked about too: Slurm runs nothing there
    assert not JobPlacement.objects.filter(node=gpu02).exists()


def test_a_write_of_a_known_job_costs_one_query_whatever_its_lines(nodes, slurm):  # noqa: F811
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    gpu01, _ = nodes
    assert post(lines("gpu01", "1", minute(5), gpus=[0])).status_code == 204  # the answer is kept
    rows = {(gpu, -1, minute(m)): {"job": "1"} for gpu in range(8) for m in (4, 3, 2)}
    with CaptureQueriesContext(connection) as captured:
        verdict = placements.verify(gpu01, rows)
    assert (len(captured), verdict.unverified, slurm.asked) == (1, {}, ["gpu01"])
    with CaptureQueriesContext(connection) as captured:
        placements.verify(gpu01, {(0, -1, minute(2)): {"job": ""}})
    assert len(captured) == 0
