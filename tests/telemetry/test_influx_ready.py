"""The ingest endpoint answers /ready as InfluxDB does (influxdb-client's `ready()` probes it before writing),
not with the portal's HTML 404."""

import pytest
from django.test import Client
from influxdb_client import InfluxDBClient


@pytest.mark.django_db(transaction=True)
def test_influxdb_clients_ready_probe_reads_ready(live_server):
    with InfluxDBClient(url=f"{live_server.url}/telemetry/ingest", token="", org="appliance") as client:
        ready = client.ready()
    assert ready.status == "ready"
    assert ready.started is not None and ready.up.endswith("s")


def test_ready_is_json_and_read_only(db):
    answer = Client().get("/telemetry/ingest/ready")
    assert (answer.status_code, answer["Content-Type"], sorted(answer.json())) == (
        200, "application/json", ["started", "status", "up"])
    assert answer.json()["status"] == "ready"
    assert Client().post("/telemetry/ingest/ready").status_code == 405


def test_up_is_a_go_duration():
    from appliance.telemetry.ingest_views import _go_duration

    assert [_go_duration(s) for s in (0.5, 14.045, 75, 3723.5)] == ["0.5s", "14.045s", "1m15s", "1h2m3.5s"]
