"""The telemetry API and pages as each role sees them: every role that may view the inventory reads,
only an Administrator or an Operator acknowledges an alert (audited), bad parameters are a 400 naming
them, unknown nodes and jobs a 404. Rows are written by hand a minute before the real clock."""

import pytest
from django.test import Client
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.telemetry.models import HardwareEvent
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import event, minutes_before, sample_telemetry

pytestmark = pytest.mark.django_db

API = "/api/v1/telemetry"


@pytest.fixture
def telemetry():
    inventory = build_sample_inventory()
    sample_telemetry(inventory, now=timezone.now())
    return inventory


def error_of(response, status):
    assert response.status_code == status, response.content[:500]
    return response.json()["error"]


@pytest.mark.parametrize("role", Role.values)
def test_every_role_reads_the_fleet(client_for, telemetry, role):
    data = client_for(role).get(f"{API}/overview/").json()
    assert [n["name"] for n in data["nodes"]] == ["gpu-01", "gpu-02"]
    gpus = data["gpus"]  # the fleet's GPUs in columns, gpu-01's eight first
    assert [(gpus[f][0], gpus[f][1]) for f in ("node", "index", "live", "util", "power_w", "job")] == [
        (0, 0), (0, 1), (True, False), (70.0, None), (300.0, None), ("4242", None)]
    assert gpus["node"] == [0] * 8 + [1] * 8
    assert data["nodes"][1]["collector"]["state"] == "not deployed"
    assert data["summary"]["util_mean"] == 40.0
    assert data["fabric"]["ib_tx_bps"] == [1e9, 4e9]


def test_anonymous_reads_nothing(telemetry):
    for path in ("overview/", "live/", "nodes/gpu-01/", "jobs/", "alerts/"):
        assert Client().get(f"{API}/{path}").status_code == 401


def test_the_live_summary_of_the_overview_panel(client_for, telemetry):
    data = client_for(Role.VIEWER).get(f"{API}/live/").json()
    assert (data["gpus"], data["gpus_live"], data["util_mean"], data["power_w"], data["gpus_busy"]) == (
        16, 2, 40.0, 420.0, 1)


@pytest.mark.parametrize("path", ["overview/?range=2h", "nodes/gpu-01/?range=1y", "nodes/gpu-01/gpus/0/?range=week",
                                  "jobs/?range=60m"])
def test_a_range_that_is_not_a_choice_is_a_400_naming_it(client_for, telemetry, path):
    error = error_of(client_for(Role.VIEWER).get(f"{API}/{path}"), 400)
    assert error["message"].startswith("range: ")
    assert error["message"].endswith("is not one of 1h, 6h, 24h, 7d, 30d")
    assert list(error["fields"]) == ["range"]


def test_each_range_is_answered(client_for, telemetry):
    client = client_for(Role.VIEWER)
    steps = {name: client.get(f"{API}/nodes/gpu-01/?range={name}").json()["step"]
             for name in ("1h", "6h", "24h", "7d", "30d")}
    assert steps == {"1h": 60, "6h": 60, "24h": 60, "7d": 3600, "30d": 3600}


def test_unknown_node_gpu_job_and_appliance_are_404(client_for, telemetry):
    client = client_for(Role.VIEWER)
    assert error_of(client.get(f"{API}/nodes/gpu-99/"), 404)["code"] == "not_found"
    assert error_of(client.get(f"{API}/nodes/gpu-01/gpus/9/"), 404)["message"] == "gpu: gpu-01 has no GPU 9"
    assert error_of(client.get(f"{API}/jobs/999/"), 404)["message"] == "no GPU rollup names the job '999'"
    assert error_of(client.get(f"{API}/overview/?appliance=other"), 404)["message"] == (
        "appliance: no appliance is named 'other'")
    # Outside the patterns of a node's name or a job id: no route, no query.
    assert client.get(f"{API}/nodes/..%2Fetc/").status_code == 404
    assert client.get(f"{API}/jobs/a%20b/").status_code == 404


def test_a_node_a_gpu_and_a_job(client_for, telemetry):
    client = client_for(Role.ML_ENGINEER)
    node = client.get(f"{API}/nodes/gpu-01/?range=1h").json()
    assert node["series"]["gpu_util"] == [40.0, 60.0]
    assert node["mounts"]["/mnt/scratch"]["read_bps"] == [2e9, 4e9]
    gpu = client.get(f"{API}/nodes/gpu-01/gpus/0/").json()
    assert gpu["series"]["util"] == [40.0, 70.0] and gpu["jobs"] == ["4242"]
    jobs = client.get(f"{API}/jobs/").json()
    assert [(j["job"], j["gpus"], j["nodes"]) for j in jobs["jobs"]] == [("4242", 2, ["gpu-01", "gpu-02"])]
    job = client.get(f"{API}/jobs/4242/").json()
    assert (job["gpu_count"], job["util_mean"], job["duration_s"]) == (2, 32.5, 120)
    assert job["node_series"]["gpu-02"]["fs_read_bps"] == [None, 5e8]


@pytest.fixture
def alerts(telemetry):
    node = telemetry.gpu_node
    xid = event(node, "xid", minutes_before(timezone.now(), 1), gpu=2, message="Xid 79: GPU has fallen off the bus")
    info = event(node, "nvml_error", minutes_before(timezone.now(), 2), gpu=4, message="not an alert",
                 acknowledged_at=timezone.now())
    return xid, info


def test_alerts_open_and_all_and_a_bad_state(client_for, alerts):
    client = client_for(Role.AUDITOR)
    data = client.get(f"{API}/alerts/").json()
    assert (data["open"], data["total"]) == (1, 1)
    assert [(a["node"], a["kind"], a["gpu"]) for a in data["alerts"]] == [("gpu-01", "xid", 2)]
    assert error_of(client.get(f"{API}/alerts/?state=closed"), 400)["message"] == (
        "state: 'closed' is not one of open, all")


@pytest.mark.parametrize("role", [Role.VIEWER, Role.ML_ENGINEER, Role.AUDITOR])
def test_who_may_only_read_cannot_acknowledge(client_for, alerts, role):
    xid, _ = alerts
    response = client_for(role).post(f"{API}/alerts/{xid.pk}/acknowledge/")
    assert error_of(response, 403)["message"] == "Your role does not allow this."
    xid.refresh_from_db()
    assert xid.acknowledged_at is None
    assert not AuditRecord.objects.filter(event="telemetry.alert.acknowledge").exists()


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ADMINISTRATOR])
def test_an_operator_acknowledges_once_and_it_is_audited(client_for, alerts, users, role):
    xid, info = alerts
    client = client_for(role)
    response = client.post(f"{API}/alerts/{xid.pk}/acknowledge/")
    assert response.status_code == 200, response.content
    assert response.json()["acknowledged_by"] == users[role].username
    xid.refresh_from_db()
    assert xid.acknowledged_by == users[role].username and xid.acknowledged_at is not None
    record = AuditRecord.objects.get(event="telemetry.alert.acknowledge")
    assert record.actor_username == users[role].username
    assert client.get(f"{API}/alerts/").json()["open"] == 0
    again = error_of(client.post(f"{API}/alerts/{xid.pk}/acknowledge/"), 409)
    assert again["message"].startswith(f"alert {xid.pk} was already acknowledged by {users[role].username} at ")
    assert AuditRecord.objects.filter(event="telemetry.alert.acknowledge").count() == 1
    # An event that is information, not an alert, has nothing to acknowledge.
    assert client.post(f"{API}/alerts/{info.pk}/acknowledge/").status_code == 404


# --- the pages -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/telemetry/", "/telemetry/?range=30d", "/telemetry/nodes/gpu-01/",
                                  "/telemetry/nodes/gpu-01/gpus/0/", "/telemetry/jobs/", "/telemetry/jobs/4242/",
                                  "/telemetry/alerts/", "/telemetry/alerts/?state=all"])
def test_every_role_opens_the_pages(client_for, telemetry, path):
    for role in Role.values:
        assert client_for(role).get(path).status_code == 200, (role, path)
    assert Client().get(path).status_code == 302  # to the login page


def test_the_pages_name_their_api_and_list_jobs(client_for, telemetry):
    client = client_for(Role.VIEWER)
    index = client.get("/telemetry/?range=24h").content.decode()
    assert 'data-api="/api/v1/telemetry/overview/?range=24h"' in index
    assert 'href="?range=24h" data-range="24h" aria-current="true"' in index
    jobs = client.get("/telemetry/jobs/").content.decode()
    assert 'href="/telemetry/jobs/4242/"' in jobs
    job = client.get("/telemetry/jobs/4242/").content.decode()
    assert '<dd data-testid="job-gpu-count">2</dd>' in job
    assert '<dd data-testid="job-util">32.5 %</dd>' in job
    assert "(2 minutes)" in job and "0.011 kWh" in job  # 15000 + 18000 + 7200 J
    assert "1.5 GiB" in job  # GPU 0 of gpu-01: (1000 + 2000) / 2 MiB


def test_bad_range_unknown_node_and_unknown_job_pages(client_for, telemetry):
    client = client_for(Role.VIEWER)
    bad = client.get("/telemetry/nodes/gpu-01/?range=2h")
    assert bad.status_code == 400
    assert "range: &#x27;2h&#x27; is not one of 1h, 6h, 24h, 7d, 30d" in bad.content.decode()
    assert client.get("/telemetry/nodes/gpu-99/").status_code == 404
    unknown = client.get("/telemetry/jobs/31337/")
    assert unknown.status_code == 404
    assert "No GPU rollup names this job yet" in unknown.content.decode()


def test_the_alerts_page_offers_acknowledge_to_operators_only(client_for, alerts, users):
    xid, _ = alerts
    assert f'data-acknowledge="{xid.pk}"' not in client_for(Role.VIEWER).get("/telemetry/alerts/").content.decode()
    assert client_for(Role.VIEWER).post(f"/telemetry/alerts/{xid.pk}/acknowledge/").status_code == 403
    operator = client_for(Role.OPERATOR)
    page = operator.get("/telemetry/alerts/").content.decode()
    assert f'data-acknowledge="{xid.pk}"' in page and "Xid 79: GPU has fallen off the bus" in page
    response = operator.post(f"/telemetry/alerts/{xid.pk}/acknowledge/", {"state": "open"}, follow=True)
    assert response.redirect_chain[-1][0] == "/telemetry/alerts/?state=open"
    assert "Alert acknowledged: gpu-01, Xid 79: GPU has fallen off the bus" in response.content.decode()
    assert HardwareEvent.objects.get(pk=xid.pk).acknowledged_by == users[Role.OPERATOR].username


def test_the_overview_shows_the_live_gpu_panel(client_for, telemetry):
    page = client_for(Role.VIEWER).get("/").content.decode()
    assert '<dd data-testid="gpu-live-util">40.0 %</dd>' in page
    assert '<dd data-testid="gpu-live-count">2 of 16</dd>' in page
    assert 'href="/telemetry/"' in page


def test_the_overview_says_why_there_is_no_gpu_data(client_for):
    build_sample_inventory()
    page = client_for(Role.VIEWER).get("/").content.decode()
    assert "No data yet: no telemetry collector is deployed" in page


def test_the_node_page_carries_its_telemetry_panel(client_for, telemetry):
    page = client_for(Role.VIEWER).get("/inventory/nodes/gpu-01/").content.decode()
    assert 'data-api="/api/v1/telemetry/nodes/gpu-01/?range=1h"' in page
    assert "/static/telemetry/vendor/uPlot.iife.min.js" in page
