"""The Efficiency page, the job page, the weekly report and their API, over ledger rows written by hand and
over a job's rollups attributed by the ledger itself: every role reads them, nobody signed out does; bad
input gets one 400 naming the option; a job's intervals carry the rule and the evidence of their cause."""

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from appliance.analytics import ledger, services
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from appliance.telemetry.models import GpuRollup, NodeRollup
from tests.analytics.test_efficiency import ledger_rows

pytestmark = pytest.mark.django_db
API = "/api/v1/analytics"
WINDOW = "since=2026-01-01&until=2026-01-03"
T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rows(db):
    ledger_rows()


def test_nobody_signed_out_reads_analytics(rows):
    for path in ("efficiency/", "report/", "jobs/4182/verdicts/", ""):
        assert Client().get(f"{API}/{path}").status_code == 401, path
    for path in ("/analytics/", "/analytics/report/", "/analytics/jobs/4182/"):
        response = Client().get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), path


@pytest.mark.parametrize("role", [Role.VIEWER, Role.AUDITOR, Role.ML_ENGINEER])
def test_every_role_reads_the_figures(rows, client_for, role):
    client = client_for(role)
    response = client.get(f"{API}/efficiency/?{WINDOW}&group=user")
    assert response.status_code == 200
    assert {g["key"]: g["gpu_hours"] for g in response.json()["groups"]} == {"(no user)": 2.0, "alice": 3.0,
                                                                           "bob": 1.1429}
    report = client.get(f"{API}/report/?{WINDOW}&pool=training").json()
    assert (report["pool"], report["total"]["gpu_hours"], [j["job"] for j in report["top_jobs"]]) == \
        ("training", 4.0, ["4182"])
    assert client.get(f"{API}/").json()["efficiency"].endswith("/api/v1/analytics/efficiency/")


@pytest.mark.parametrize(("query", "field", "message"), [
    ("group=rack", "group", "group: 'rack' is not one of appliance, pool, node, gpu, job, user, hour, day"),
    ("pool=nosuch", "pool", "pool: no pool is named 'nosuch'"),
    ("since=monday", "since", "since: 'monday' is not a time"),
    ("since=2026-01-02&until=2026-01-01", "until", "until: 2026-01-01T00:00:00+00:00 is not after since"),
])
def test_bad_input_is_one_400_naming_the_option(rows, client_for, query, field, message):
    response = client_for(Role.VIEWER).get(f"{API}/efficiency/?{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(message) and list(error["fields"]) == [field]


def test_the_efficiency_page_and_the_report(rows, client_for):
    client = client_for(Role.VIEWER)
    page = client.get("/analytics/?range=30d")
    assert page.status_code == 200  # the rows are of January 2026: outside the last 30 days
    assert "No attributed GPU-hours in this window." in page.content.decode()
    report = client.get(f"/analytics/report/?{WINDOW}").content.decode()
    assert 'data-key="alice"' in report and 'href="/analytics/jobs/4182/"' in report
    assert 'class="cause-memory-only" data-cause="memory-only"' in report  # bob's chat service's share
    assert "98.3 % of GPU-seconds on held-out telemetry written apart from the rules" in report
    assert client.get("/analytics/?range=9d").status_code == 400
    assert client.get("/analytics/report/?since=2026-01-03&until=2026-01-01").status_code == 400


@pytest.fixture
def attributed_job(db):
    """Job 4190 on gpu01 for three minutes: two waiting on /mnt/scratch (reads at 1.9 of the 2.1 GB/s the
    node's smoke test measured), one computing; attributed by the ledger."""
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11",
                                facts={"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100,
                                                                "write_mbps": 1800}]}})
    PoolMembership.objects.create(pool=training, node=gpu01)
    for minute, (util, sm, read) in enumerate([(25.0, 0.15, 1.9e9), (25.0, 0.15, 1.9e9), (98.0, 0.9, 0.1e9)]):
        GpuRollup.objects.create(node=gpu01, gpu=0, step=60, start=T0 + minute * MINUTE, samples=60, job="4190",
                                 util=util, sm_active=sm, fb_used_mib=60000.0, fb_total_mib=81559.0,
                                 sm_clock_mhz=1980.0, throttled_share=0.0)
        NodeRollup.objects.create(node=gpu01, step=60, start=T0 + minute * MINUTE, samples=60, fs_read_bps=read,
                                  cpu_iowait=0.05, cpu_busy=0.4,
                                  mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": read, "write_bps": 0.0}})
    assert ledger.run_incremental(until=T0 + 3 * MINUTE)["minutes"] == 3


def test_a_jobs_verdicts_with_their_evidence(attributed_job, client_for):
    figures = services.efficiency(since=T0, until=T0 + timedelta(hours=1), job="4190", group="appliance")["total"]
    assert (figures["gpu_hours"], figures["by_cause"]["input-bound"], figures["by_cause"]["busy"]) == \
        (0.05, 0.0333, 0.0167)
    client = client_for(Role.VIEWER)
    data = client.get(f"{API}/jobs/4190/verdicts/").json()
    assert (data["since"], data["until"]) == ("2026-02-01T09:00:00+00:00", "2026-02-01T10:00:00+00:00")
    assert [(i["gpu"], i["start"], i["end"], i["minutes"], i["label"], i["rule"]) for i in data["intervals"]] == [
        (0, "2026-02-01T09:00:00+00:00", "2026-02-01T09:02:00+00:00", 2, "input-bound", "waits-on-input"),
        (0, "2026-02-01T09:02:00+00:00", "2026-02-01T09:03:00+00:00", 1, "busy", "computes")]
    read = next(c for c in data["intervals"][0]["evidence"] if c["metric"] == "read_share /mnt/scratch")
    assert (read["value"], read["op"], read["threshold"], read["held"]) == (0.904762, ">=", 0.8, True)
    page = client.get("/analytics/jobs/4190/").content.decode()
    assert 'data-cause="input-bound"' in page and "read_share /mnt/scratch = 90.5% &gt;= 80%: held" in page  # the API keeps the ratio
    assert client.get(f"{API}/jobs/4191/verdicts/").status_code == 404
    assert client.get("/analytics/jobs/4191/").status_code == 404
    too_long = client.get(f"{API}/jobs/4190/verdicts/?since=2026-01-30")
    assert too_long.status_code == 400 and too_long.json()["error"]["fields"] == {
        "since": ["since: a job's verdicts are read at most 24 hours at a time (2026-01-30T00:00:00+00:00 to "
                  "2026-02-01T10:00:00+00:00 asked)"]}
