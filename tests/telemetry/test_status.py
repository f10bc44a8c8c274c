"""`telemetry status`: every node's collector with its state (ok, late, silent, not deployed), lag, buffer
and alerts; acknowledging an alert; revoking a node's token."""

import hashlib
import json
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node
from appliance.telemetry import services
from appliance.telemetry.models import HardwareEvent, NodeCollector

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(db):
    """gpu01 writing on time, gpu02 writing but behind, gpu03 gone quiet, gpu04 registered and never
    heard from, storage01 with no collector."""
    now = timezone.now()
    appliance = Appliance.objects.create(name="demo", simulated=True)
    nodes = {}
    for i, name in enumerate(["gpu01", "gpu02", "gpu03", "gpu04", "storage01"]):
        nodes[name] = Node.objects.create(appliance=appliance, name=name, role=Node.Role.GPU,
                                          management_address=f"10.0.0.{11 + i}")

    def collector(name, seen_s, bucket_s, **values):
        token = f"tok-{name}-status-0123456789abcdef"
        return NodeCollector.objects.create(
            node=nodes[name], token=token, token_digest=hashlib.sha256(token.encode()).hexdigest(),
            issued_at=now - timedelta(hours=2),
            last_seen=None if seen_s is None else now - timedelta(seconds=seen_s),
            last_bucket=None if bucket_s is None else now - timedelta(seconds=bucket_s), **values)

    collector("gpu01", 20, 80, buffer_rows=1, buffer_points=9, interval_s=1.0, version="0.9.0")
    collector("gpu02", 15, 600, buffer_rows=310, buffer_points=2790, sink_error="http://10.0.0.5:8086: refused")
    collector("gpu03", 900, 960, dropped_points=12)
    collector("gpu04", None, None)
    HardwareEvent.objects.create(node=nodes["gpu01"], kind="xid", gpu=3, time=now, message="XID 79")
    HardwareEvent.objects.create(node=nodes["gpu01"], kind="ecc", gpu=3, time=now, message="DBE",
                                 acknowledged_at=now, acknowledged_by="earlier")
    return nodes


def test_every_node_has_a_state_by_written_down_thresholds(fleet):
    status = {entry["node"]: entry for entry in services.collector_status()}
    assert {name: entry["state"] for name, entry in status.items()} == {
        "gpu01": "ok", "gpu02": "late", "gpu03": "silent", "gpu04": "silent", "storage01": "not deployed"}
    assert (status["gpu01"]["open_alerts"], status["gpu01"]["buffer_points"], status["gpu01"]["version"]) == (1, 9, "0.9.0")
    # 600 s when the fixture wrote it, and the seconds a loaded machine took since.
    assert 600 <= status["gpu02"]["lag_s"] < 630
    assert status["gpu02"]["sink_error"] == "http://10.0.0.5:8086: refused"
    assert (status["gpu03"]["dropped_points"], status["gpu04"]["last_seen"], status["storage01"]["registered"]) == \
        (12, None, False)


def test_the_state_moves_with_the_thresholds(fleet):
    later = timezone.now() + timedelta(seconds=services.OK_LAG_S)  # gpu01's bucket is now 80 + 180 s old
    assert [e["state"] for e in services.collector_status(now=later) if e["node"] == "gpu01"] == ["late"]
    much_later = timezone.now() + timedelta(seconds=services.SILENT_AFTER_S)
    assert [e["state"] for e in services.collector_status(now=much_later) if e["node"] == "gpu01"] == ["silent"]


def test_status_reads_a_constant_number_of_queries(fleet, django_assert_num_queries):
    with django_assert_num_queries(2):
        services.collector_status()


def test_status_command_as_a_table_and_as_json(fleet, capsys):
    call_command("telemetry", "status")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "LAST", "WRITE", "LAG", "BUFFER", "ROWS", "BUFFER", "POINTS",
                                "DROPPED", "ALERTS", "SINK", "ERROR"]
    # gpu01: last write 20 s ago, newest bucket 80 s old (a second or two more on a loaded machine)
    assert re.match(r"gpu01\s+ok\s+2\d s ago\s+8\d s\s+1\s+9\s+0\s+1$", lines[1]), lines[1]
    assert lines[2].split()[:2] == ["gpu02", "late"] and lines[2].endswith("http://10.0.0.5:8086: refused")
    assert lines[4].split()[:3] == ["gpu04", "silent", "never"]
    assert lines[5].split()[:3] == ["storage01", "not", "deployed"]
    assert lines[-1] == ("1 late, 1 not deployed, 1 ok, 2 silent; ok: newest bucket at most 180 s old, "
                         "silent: no write for 300 s")

    call_command("telemetry", "status", "--json")
    document = json.loads(capsys.readouterr().out)
    assert document["open_alerts"] == 1
    assert document["thresholds"] == {"ok_lag_s": 180, "silent_after_s": 300}
    assert [(c["node"], c["state"]) for c in document["collectors"]] == [
        ("gpu01", "ok"), ("gpu02", "late"), ("gpu03", "silent"), ("gpu04", "silent"), ("storage01", "not deployed")]


def test_acknowledging_an_alert_is_audited_once(fleet, make_user):
    operator = make_user(Role.OPERATOR, "operator1")
    alert = HardwareEvent.objects.get(kind="xid")
    assert services.acknowledge(alert, operator) is True
    first = alert.acknowledged_at
    assert services.acknowledge(alert, make_user(Role.OPERATOR, "operator2")) is False
    alert.refresh_from_db()
    assert (alert.acknowledged_by, alert.acknowledged_at) == ("operator1", first)
    records = AuditRecord.objects.filter(event="telemetry.alert.acknowledge")
    assert [(r.actor_username, r.details["node"], r.details["kind"], r.details["gpu"]) for r in records] == \
        [("operator1", "gpu01", "xid", 3)]
    assert services.collector_status()[0]["open_alerts"] == 0


def test_revoke_takes_the_token_away_and_names_bad_input(fleet, capsys):
    call_command("telemetry", "revoke", "--node", "gpu02")
    assert "Revoked the ingest token of gpu02" in capsys.readouterr().out
    assert not NodeCollector.objects.filter(node__name="gpu02").exists()
    assert AuditRecord.objects.filter(event="telemetry.collector.revoke", target_name="gpu02").count() == 1
    with pytest.raises(CommandError, match="--node gpu02: it has no ingest token"):
        call_command("telemetry", "revoke", "--node", "gpu02")
    with pytest.raises(CommandError, match="--node gpu99: no such node"):
        call_command("telemetry", "revoke", "--node", "gpu99")
    with pytest.raises(CommandError, match=r"--node '\.\./etc': expected a node name"):
        call_command("telemetry", "revoke", "--node", "../etc")
