"""The job pages link to each other, never to a 404: the telemetry's job list (user and state from Slurm,
job ids in numeric order), a job's telemetry page (what Slurm says, its Efficiency page or when it will be
attributed, the model versions it trained), the Efficiency job page of a job not attributed yet, and the
version page's links back to its training job.

Slurm's answers are canned `scontrol --oneliner show job` lines (the client is replaced, not the parser);
the Slurm client's zone is Moscow, the portal's UTC, so the times printed prove the conversion."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from appliance.analytics.jobinfo import attribution_state
from appliance.analytics.models import AttributionCursor, CauseHour, JobOwner
from appliance.lending import jobinfo as lending_jobinfo
from appliance.lending import slurmctl
from appliance.lifecycle.models import ModelVersion, RegisteredModel
from appliance.telemetry.views import job_order
from tests.sample_inventory import build_sample_inventory

from .rows import gpu_row, minutes_before

pytestmark = pytest.mark.django_db

SCONTROL = "\n".join([
    "JobId=11 JobName=llama-pretrain UserId=alice(1001) GroupId=alice(1001) JobState=RUNNING Reason=None "
    "ExitCode=0:0 SubmitTime=2026-03-02T14:40:00 StartTime=2026-03-02T14:41:00 EndTime=2026-03-03T14:41:00 "
    "Partition=train NodeList=gpu-01 TRES=cpu=8,gres/gpu=8",
    "JobId=9 JobName=eval run UserId=bob(1002) GroupId=bob(1002) JobState=FAILED Reason=NonZeroExitCode "
    "ExitCode=1:0 SubmitTime=2026-03-02T14:30:00 StartTime=2026-03-02T14:30:05 EndTime=2026-03-02T14:55:10 "
    "Partition=debug NodeList=gpu-02 TRES=cpu=8,gres/gpu=1",
])


@pytest.fixture
def moscow_clock(monkeypatch):
    """The Slurm client's local zone (Slurm prints times without a zone): UTC+3."""
    monkeypatch.setenv("TZ", "Europe/Moscow")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def slurm(monkeypatch, moscow_clock):
    asked = []

    def client(appliance, *argv):
        asked.append(argv)
        if argv[:1] == ("scontrol",):
            return SCONTROL
        raise slurmctl.SlurmCommandError("sacct: Slurm accounting storage is disabled")

    monkeypatch.setattr(slurmctl, "_client", client)
    monkeypatch.setattr(lending_jobinfo, "_failed", {})
    return asked


@pytest.fixture
def jobs():
    """Jobs 1, 5, 9, 11 and the service chat-7b held GPUs of gpu-01 and gpu-02 in the last minutes."""
    inventory = build_sample_inventory()
    now = timezone.now()
    one, two = inventory.gpu_node, inventory.gpu_node_2
    for minute, (node, gpu, job) in enumerate([(one, 0, "1"), (one, 1, "5"), (two, 0, "9"), (one, 2, "11"),
                                               (two, 1, "chat-7b")], start=2):
        gpu_row(node, gpu, minutes_before(now, minute), util=50, fb_used_mib=1000, power_w=200, job=job)
    JobOwner.objects.create(job="5", user="carol")
    return inventory


def _rows(html: str) -> list[str]:
    return [chunk.split('"', 1)[0] for chunk in html.split('<tr data-job="')[1:]]


def test_the_jobs_list_sorts_ids_as_numbers_and_shows_user_and_state(client_for, jobs, slurm):
    html = client_for("viewer").get("/telemetry/jobs/").content.decode()
    assert _rows(html) == ["11", "9", "5", "1", "chat-7b"]
    assert [argv[:3] for argv in slurm] == [("scontrol", "--oneliner", "show"), ("sacct", "--noheader", "--parsable2")]
    row = {job: html.split(f'<tr data-job="{job}">', 1)[1].split("</tr>", 1)[0] for job in _rows(html)}
    assert '<td data-testid="job-user">alice</td>' in row["11"]
    assert '<td data-testid="job-state">RUNNING</td>' in row["11"]
    assert '<td data-testid="job-user">bob</td>' in row["9"] and ">FAILED<" in row["9"]
    assert '<td data-testid="job-user">carol</td>' in row["5"] and "ended, forgotten" in row["5"]  # the ledger's owner
    assert '<td data-testid="job-user">—</td>' in row["1"] and "ended, forgotten" in row["1"]
    assert "inference service" in row["chat-7b"] and "ended, forgotten" not in row["chat-7b"]


def test_the_order_of_job_ids():
    ids = ["1", "11", "5", "9", "7_10", "7_9", "chat-7b", "a-service"]
    assert [job["job"] for job in sorted(({"job": job} for job in ids), key=job_order)] == [
        "11", "9", "7_10", "7_9", "5", "1", "a-service", "chat-7b"]


def test_a_slurm_that_does_not_answer_is_said_and_not_asked_again_at_once(client_for, jobs, monkeypatch):
    calls = []

    def down(appliance, *argv):
        calls.append(argv)
        raise slurmctl.SlurmCommandError("scontrol: Unable to contact slurm controller")

    monkeypatch.setattr(slurmctl, "_client", down)
    monkeypatch.setattr(lending_jobinfo, "_failed", {})
    client = client_for("viewer")
    html = client.get("/telemetry/jobs/").content.decode()
    assert "Slurm could not be asked: demo: scontrol: Unable to contact slurm controller" in html
    assert "ended, forgotten" not in html  # unknown, not forgotten
    client.get("/telemetry/jobs/")
    assert len(calls) == 1


def test_the_telemetry_job_page_says_what_slurm_says_in_the_portal_zone(client_for, jobs, slurm):
    response = client_for("viewer").get("/telemetry/jobs/9/")
    html = response.content.decode()
    assert response.status_code == 200
    for testid, text in [("slurm-name", "eval run"), ("slurm-user", "bob"), ("slurm-partition", "debug"),
                         ("slurm-state", "FAILED"), ("slurm-exit", "1"),
                         ("slurm-submit", "2026-03-02 11:30:00 UTC"), ("slurm-start", "2026-03-02 11:30:05 UTC"),
                         ("slurm-end", "2026-03-02 11:55:10 UTC")]:
        assert f'data-testid="{testid}">{text}</dd>' in html, testid
    running = client_for("viewer").get("/telemetry/jobs/11/").content.decode()
    assert 'data-testid="slurm-end"><span class="muted">not ended yet (time limit 2026-03-03 11:41:00 UTC)' in running
    service = client_for("viewer").get("/telemetry/jobs/chat-7b/").content.decode()
    assert "An inference service, not a Slurm job" in service


def test_a_job_not_attributed_yet_says_when_the_next_run_is_instead_of_linking_a_404(client_for, jobs, slurm):
    now = timezone.now()
    first = minutes_before(now, 4)  # job 9's minute
    AttributionCursor.objects.create(name="rollups", attributed_until=first - timedelta(minutes=1))
    # The last run saved the cursor 10 s ago: the next is 50 s from now, after job 9's minute is complete.
    AttributionCursor.objects.update(updated_at=now - timedelta(seconds=10))
    expected = timezone.localtime(now + timedelta(seconds=50)).strftime("%H:%M")
    client = client_for("viewer")
    html = client.get("/telemetry/jobs/9/").content.decode()
    assert f"not attributed yet (next run {expected})" in html
    assert 'href="/analytics/jobs/9/"' not in html
    # The Efficiency job page answers the same, with the facts and a link back, instead of a 404.
    response = client.get("/analytics/jobs/9/")
    assert response.status_code == 200
    page = response.content.decode()
    assert f"not attributed yet (next run {expected})" in page
    assert 'href="/telemetry/jobs/9/"' in page and 'data-testid="slurm-user">bob</dd>' in page
    # A job nobody knows is still a 404.
    assert client.get("/analytics/jobs/404404/").status_code == 404


def test_the_next_run_follows_the_cursor_and_the_minute_being_complete():
    first = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    AttributionCursor.objects.create(name="rollups", attributed_until=datetime(2026, 3, 2, 11, 58, tzinfo=UTC))
    AttributionCursor.objects.update(updated_at=datetime(2026, 3, 2, 12, 0, 5, tzinfo=UTC))
    # 12:00's minute is complete at 12:03:00 (its end and ledger.COMPLETE_AFTER_S, 120 s); runs come at :05.
    state = attribution_state("9", first, now=datetime(2026, 3, 2, 12, 1, tzinfo=UTC))
    assert state["next_run"] == datetime(2026, 3, 2, 12, 3, 5, tzinfo=UTC)
    assert not state["attributed"] and not state["passed"]
    # Past that, the next run from now.
    state = attribution_state("9", first, now=datetime(2026, 3, 2, 12, 3, 30, tzinfo=UTC))
    assert state["next_run"] == datetime(2026, 3, 2, 12, 4, 5, tzinfo=UTC)
    # A cursor not saved for five runs: no run is promised.
    state = attribution_state("9", first, now=datetime(2026, 3, 2, 12, 6, 0, tzinfo=UTC))
    assert state["next_run"] is None and state["stalled_since"] == datetime(2026, 3, 2, 12, 0, 5, tzinfo=UTC)
    # The attribution went past the job's minutes without a GPU-hour of it: said, no run promised.
    AttributionCursor.objects.update(attributed_until=datetime(2026, 3, 2, 12, 5, tzinfo=UTC))
    assert attribution_state("9", first, now=datetime(2026, 3, 2, 12, 5, 30, tzinfo=UTC))["passed"] is True


def test_telemetry_efficiency_and_lineage_link_each_other(client_for, jobs, slurm, users):
    CauseHour.objects.create(hour=minutes_before(timezone.now(), 4).replace(minute=0), node=jobs.gpu_node_2, gpu=0,
                             job="9", pool="training", user="bob", gpu_seconds=60, used_seconds=30, busy_s=60)
    model = RegisteredModel.objects.create(name="llama", owner=users["viewer"])
    ModelVersion.objects.create(model=model, number=3, source="/models/llama/3", training_job="9")
    client = client_for("viewer")
    telemetry = client.get("/telemetry/jobs/9/").content.decode()
    assert '<a href="/analytics/jobs/9/">Where its GPU-hours went (Efficiency)</a>' in telemetry
    assert '<a href="/models/llama/versions/3/">llama v3</a>' in telemetry
    efficiency = client.get("/analytics/jobs/9/").content.decode()
    assert '<a href="/telemetry/jobs/9/" data-testid="link-telemetry">Its telemetry</a>' in efficiency
    assert '<a href="/models/llama/versions/3/">llama v3</a>' in efficiency
    assert 'data-testid="slurm-exit">1</dd>' in efficiency
    version = client.get("/models/llama/versions/3/").content.decode()
    assert '<a href="/telemetry/jobs/9/">its telemetry</a>' in version
    assert '<a href="/analytics/jobs/9/">where its GPU-hours went</a>' in version
    # A job without rollups or GPU-hours has no links to pages that would be a 404.
    ModelVersion.objects.create(model=model, number=4, source="/models/llama/4", training_job="77")
    assert 'data-testid="training-job-pages"' not in client.get("/models/llama/versions/4/").content.decode()



def test_jobs_slurmctld_forgot_are_read_from_accounting_where_it_is_kept(monkeypatch):
    def client(appliance, *argv):
        if argv[0] == "scontrol":
            return SCONTROL
        assert "--jobs=7" in argv
        return "7|dave|train run|train|gpu-[01-02]|billing=16,cpu=16,gres/gpu=16,node=2|2026-03-01T09:00:00|" \
               "2026-03-01T09:00:01|2026-03-01T10:00:00|CANCELLED by 1003|0:15\n"

    monkeypatch.setattr(slurmctl, "_client", client)
    known = lending_jobinfo.jobs_known(None, ["7", "9"])
    assert known["9"]["exit_code"] == "1:0" and known["9"]["submit"] == "2026-03-02T14:30:00"
    assert known["7"] == {"job": "7", "user": "dave", "name": "train run", "partition": "train",
                          "nodes": ["gpu-[01-02]"], "gpus": 16, "gpu_indices": {}, "submit": "2026-03-01T09:00:00",
                          "start": "2026-03-01T09:00:01", "end": "2026-03-01T10:00:00", "limit_end": None,
                          "state": "CANCELLED", "exit_code": "0:15", "source": "sacct"}
    assert lending_jobinfo.exit_text("0:15") == "0, signal 15" and lending_jobinfo.exit_text("0:0") == "0"
