"""The ingest endpoint as a collector meets it: InfluxDB v2's write API at /telemetry/ingest/api/v2/write,
a node token per collector, rows in the database as the contract's wire format says, every write whole
or not at all."""

import gzip
import hashlib
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.inventory.models import GPU, Appliance, Node
from appliance.telemetry.models import GpuRollup, HardwareEvent, NodeCollector, NodeRollup
from tests.telemetry.rows import place

# The ingest writes through the frames and their per-vendor SQL, and PostgreSQL refuses what SQLite keeps
# (a NUL in text): run on PostgreSQL too (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

URL = "/telemetry/ingest/api/v2/write?org=appliance&bucket=rollups&precision=ns"
TOKEN_1 = "tok-gpu01-Qx7r2LmN9vB3kP5sT8wY1zA4cD6fH0jK"
TOKEN_2 = "tok-gpu02-Zr4tY7uI9oP2aS5dF8gH1jK3lQ6wE0xC"
T10_00 = 1796119200000000000  # 2026-12-01 10:00:00 UTC
T10_01 = 1796119260000000000
T10_02 = 1796119320000000000

GPU_LINE = ("gpu_rollup,Hostname=gpu01,gpu=0,UUID=GPU-0a1b2c3d,hpc_job=4711 step=60,samples=60,util=87.5,"
            "util_max=100,sm_active=0.62,tensor_active=0.41,dram_active=0.33,fb_used_mib=40960,"
            "fb_used_max_mib=41000,fb_total_mib=81559,power_w=512.25,power_max_w=640,energy_j=30735,temp_c=61.5,"
            "temp_max_c=66,sm_clock_mhz=1980,throttle_reasons=4,throttled_share=0.25,pcie_tx_bps=1200000000,"
            "pcie_rx_bps=900000000,nvlink_bps=250000000000,xid_count=0,ecc_dbe=0 " + str(T10_00))
MIG_LINE = ("gpu_rollup,Hostname=gpu01,gpu=6,GPU_I_ID=2,GPU_I_PROFILE=3g.40gb,UUID=MIG-77aa step=60,samples=60,"
            "fb_used_mib=12000,sm_active=0.5 " + str(T10_00))
NODE_LINE = ("node_rollup,Hostname=gpu01 step=60,samples=60,gpus=8,gpu_util=55.5,gpu_util_max=100,"
             "gpu_fb_used_mib=327680,gpu_power_w=4100,ib_tx_bps=20000000000,ib_rx_bps=18000000000,"
             "ib_line_bps=400000000000,ib_xmit_wait=1500,ib_errors=2,fs_read_bps=3000000000,fs_write_bps=100000000,"
             "disk_read_bps=5000000,disk_write_bps=7000000,cpu_busy=0.35,cpu_iowait=0.12 " + str(T10_00))
MOUNT_LINES = [
    r"mount_rollup,Hostname=gpu01,mount=/mnt/scratch,fstype=lustre step=60,read_bps=2900000000,write_bps=90000000 "
    + str(T10_00),
    r"mount_rollup,Hostname=gpu01,mount=/home,fstype=nfs step=60,read_bps=100000000,write_bps=10000000 " + str(T10_00),
]
XID_LINE = (r'event,Hostname=gpu01,kind=xid,gpu=3 message="XID 79 on GPU 3: GPU has fallen off the bus",'
            r'detail="{\"xid\": 79}" 1796119231250000000')
LINK_LINE = (r'event,Hostname=gpu01,kind=link_down,device=mlx5_2/1 message="mlx5_2 port 1 went down",'
             r'detail="{\"state\": \"Down\"}" 1796119245000000000')
NVML_LINE = r'event,Hostname=gpu01,kind=nvml_error,gpu=7 message="GPU 7: NVML_ERROR_GPU_IS_LOST" 1796119246000000000'
COLLECTOR_LINE = ('collector,Hostname=gpu01 interval_s=1,sweeps=3600,sweep_errors=1,buffer_rows=12,buffer_points=840,'
                  'dropped_points=0,last_sweep_ns=1796119319000000000,sink_error="http://10.0.0.5:8086: refused",'
                  'version="0.9.0" ' + str(T10_01))


@pytest.fixture
def nodes(db):
    appliance = Appliance.objects.create(name="demo", simulated=True)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    for node, token in ((gpu01, TOKEN_1), (gpu02, TOKEN_2)):
        for index in range(8):  # an HGX H100 board; the ingest takes GPU lines only for these
            GPU.objects.create(node=node, index=index, model="H100-SXM5-80GB", memory_mib=81559, mig_capable=True)
        NodeCollector.objects.create(node=node, token=token, token_digest=hashlib.sha256(token.encode()).hexdigest(),
                                     issued_at=timezone.now())
    place(gpu01, "4711")  # the scheduler runs GPU_LINE's job there
    return gpu01, gpu02


def post(body, token=TOKEN_1, url=URL, **headers):
    client = Client()
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Token {token}"
    data = body if isinstance(body, bytes) else body.encode()
    return client.generic("POST", url, data, content_type="text/plain; charset=utf-8", **headers)


def stored_counts():
    return GpuRollup.objects.count(), NodeRollup.objects.count(), HardwareEvent.objects.count()


def at(hour, minute, second=0, micro=0):
    return datetime(2026, 12, 1, hour, minute, second, micro, tzinfo=UTC)


def test_a_minute_of_a_node_becomes_its_rows(nodes):
    gpu01, _ = nodes
    body = "\n".join([GPU_LINE, MIG_LINE, NODE_LINE, *MOUNT_LINES, XID_LINE, LINK_LINE, NVML_LINE, COLLECTOR_LINE])
    response = post(body)
    assert response.status_code == 204, response.content

    gpu = GpuRollup.objects.get(node=gpu01, gpu=0)
    assert (gpu.instance, gpu.step, gpu.start, gpu.samples, gpu.job, gpu.uuid, gpu.profile) == \
        (-1, 60, at(10, 0), 60, "4711", "GPU-0a1b2c3d", "")
    assert (gpu.util, gpu.util_max, gpu.sm_active, gpu.tensor_active, gpu.dram_active) == (87.5, 100.0, 0.62, 0.41, 0.33)
    assert (gpu.fb_used_mib, gpu.fb_used_max_mib, gpu.fb_total_mib) == (40960.0, 41000.0, 81559.0)
    assert (gpu.power_w, gpu.power_max_w, gpu.energy_j, gpu.temp_c, gpu.temp_max_c) == (512.25, 640.0, 30735.0, 61.5, 66.0)
    assert (gpu.sm_clock_mhz, gpu.throttle_reasons, gpu.throttled_share) == (1980.0, 4, 0.25)
    assert (gpu.pcie_tx_bps, gpu.pcie_rx_bps, gpu.nvlink_bps, gpu.xid_count, gpu.ecc_dbe) == \
        (1.2e9, 9e8, 2.5e11, 0, 0)

    mig = GpuRollup.objects.get(node=gpu01, gpu=6)
    assert (mig.instance, mig.profile, mig.uuid, mig.job, mig.fb_used_mib, mig.sm_active) == \
        (2, "3g.40gb", "MIG-77aa", "", 12000.0, 0.5)
    assert (mig.util, mig.power_w, mig.throttle_reasons, mig.xid_count) == (None, None, 0, 0)  # absent: NULL / 0

    node = NodeRollup.objects.get(node=gpu01)
    assert (node.step, node.start, node.samples, node.gpus, node.gpu_util, node.gpu_util_max) == \
        (60, at(10, 0), 60, 8, 55.5, 100.0)
    assert (node.gpu_fb_used_mib, node.gpu_power_w, node.ib_tx_bps, node.ib_rx_bps, node.ib_line_bps) == \
        (327680.0, 4100.0, 2e10, 1.8e10, 4e11)
    assert (node.ib_xmit_wait, node.ib_errors, node.fs_read_bps, node.fs_write_bps) == (1500.0, 2, 3e9, 1e8)
    assert (node.disk_read_bps, node.disk_write_bps, node.cpu_busy, node.cpu_iowait) == (5e6, 7e6, 0.35, 0.12)
    assert node.mounts == {"/mnt/scratch": {"fstype": "lustre", "read_bps": 2.9e9, "write_bps": 9e7},
                           "/home": {"fstype": "nfs", "read_bps": 1e8, "write_bps": 1e7}}

    events = {event.kind: event for event in HardwareEvent.objects.filter(node=gpu01)}
    assert (events["xid"].gpu, events["xid"].device, events["xid"].time, events["xid"].message,
            events["xid"].detail, events["xid"].acknowledged_at) == \
        (3, "", at(10, 0, 31, 250000), "XID 79 on GPU 3: GPU has fallen off the bus", {"xid": 79}, None)
    assert (events["link_down"].gpu, events["link_down"].device, events["link_down"].detail,
            events["link_down"].acknowledged_at) == (None, "mlx5_2/1", {"state": "Down"}, None)
    # NVML failing on a GPU is information, not an alert: stored acknowledged
    assert events["nvml_error"].acknowledged_at is not None

    collector = NodeCollector.objects.get(node=gpu01)
    assert (collector.last_bucket, collector.last_sweep, collector.interval_s, collector.sweeps,
            collector.sweep_errors, collector.buffer_rows, collector.buffer_points, collector.dropped_points,
            collector.sink_error, collector.version) == \
        (at(10, 0), at(10, 1, 59), 1.0, 3600, 1, 12, 840, 0, "http://10.0.0.5:8086: refused", "0.9.0")
    assert collector.last_seen is not None


def test_a_bucket_sent_again_replaces_the_stored_one(nodes):
    gpu01, _ = nodes
    assert post("\n".join([GPU_LINE, NODE_LINE, *MOUNT_LINES])).status_code == 204
    resent = GPU_LINE.replace("util=87.5,", "util=90,").replace("sm_active=0.62,", "")
    node_again = NODE_LINE.replace("gpu_util=55.5", "gpu_util=56")
    assert post("\n".join([resent, node_again])).status_code == 204
    assert stored_counts() == (1, 1, 0)
    gpu = GpuRollup.objects.get(node=gpu01)
    assert (gpu.util, gpu.sm_active, gpu.samples) == (90.0, None, 60)
    node = NodeRollup.objects.get(node=gpu01)
    # the mounts came with the first write only: a write without mount lines keeps them
    assert (node.gpu_util, sorted(node.mounts)) == (56.0, ["/home", "/mnt/scratch"])


def test_an_event_sent_again_is_kept_once_with_its_acknowledgement(nodes):
    gpu01, _ = nodes
    assert post("\n".join([XID_LINE, LINK_LINE])).status_code == 204
    HardwareEvent.objects.filter(kind="link_down").update(acknowledged_at=at(12, 0), acknowledged_by="operator")
    assert post("\n".join([XID_LINE, LINK_LINE])).status_code == 204
    assert sorted(HardwareEvent.objects.values_list("kind", "acknowledged_by")) == \
        [("link_down", "operator"), ("xid", "")]


def test_a_write_is_not_audited_but_the_node_state_moves(nodes):
    before = AuditRecord.objects.count()
    assert post(GPU_LINE).status_code == 204
    assert post(GPU_LINE.replace(str(T10_00), str(T10_01))).status_code == 204
    assert AuditRecord.objects.count() == before
    assert NodeCollector.objects.get(node=nodes[0]).last_bucket == at(10, 1)


def test_an_older_collector_report_does_not_move_the_state_back(nodes):
    assert post(COLLECTOR_LINE).status_code == 204
    older = COLLECTOR_LINE.replace("sweeps=3600", "sweeps=100").replace("last_sweep_ns=1796119319000000000",
                                                                       "last_sweep_ns=1796119200000000000")
    assert post(older).status_code == 204
    assert NodeCollector.objects.values_list("sweeps", flat=True).get(node=nodes[0]) == 3600


def test_gzip_bodies_are_taken(nodes):
    response = post(gzip.compress("\n".join([GPU_LINE, NODE_LINE]).encode()), HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 204
    assert stored_counts() == (1, 1, 0)


@pytest.mark.parametrize(("token", "message"), [
    (None, "missing token: send Authorization: Token <the node's ingest token>"),
    ("tok-not-issued-to-anyone-123456789012345", "unknown token"),
])
def test_a_write_without_a_known_token_is_refused_with_401_and_audited_once_a_minute(nodes, token, message):
    with mock.patch("appliance.telemetry.ingest_views.time.time", return_value=1796119230.0):
        for _ in range(3):
            response = post(GPU_LINE, token=token)
            assert (response.status_code, response.json()) == (401, {"code": "unauthorized", "message": message})
    assert stored_counts() == (0, 0, 0)
    records = AuditRecord.objects.filter(event="telemetry.ingest.refused")
    assert [(r.outcome, r.reason, r.details["status"]) for r in records] == [("denied", message, 401)]
    # the request middleware's own records are not written beside it
    assert not AuditRecord.objects.filter(event__in=["api.request", "access.denied", "access.anonymous.denied"]).exists()
    assert all(TOKEN_1 not in str(r.details) + r.reason for r in AuditRecord.objects.all())


def test_a_node_token_cannot_write_another_nodes_series(nodes):
    """An attacker holding gpu02's token forges gpu01's numbers: the whole write is refused."""
    _, gpu02 = nodes
    own = GPU_LINE.replace("Hostname=gpu01", "Hostname=gpu02")
    # Both refusals fall in one minute (the clock is pinned): one record per node and minute.
    with mock.patch("appliance.telemetry.ingest_views.time.time", return_value=1796119230.0):
        response = post("\n".join([own, GPU_LINE]), token=TOKEN_2)
        assert (response.status_code, response.json()) == (403, {
            "code": "forbidden",
            "message": "line 2: Hostname='gpu01' is not this token's node (gpu02): a node writes only its own series"})
        assert stored_counts() == (0, 0, 0)
        assert post(GPU_LINE, token=TOKEN_2).status_code == 403
    records = AuditRecord.objects.filter(event="telemetry.ingest.refused")
    assert [(r.target_type, r.target_name, r.details["status"]) for r in records] == [("inventory.node", "gpu02", 403)]
    assert NodeCollector.objects.get(node=gpu02).last_seen is None
    # The next minute's refusal is a record of its own.
    with mock.patch("appliance.telemetry.ingest_views.time.time", return_value=1796119290.0):
        assert post(GPU_LINE, token=TOKEN_2).status_code == 403
    assert AuditRecord.objects.filter(event="telemetry.ingest.refused").count() == 2


@pytest.mark.parametrize(("line", "message"), [
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=oops " + str(T10_00),
     "line 3: field util: 'oops' is not a number, a boolean or a quoted string"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=1,bogus=2 " + str(T10_00),
     "line 3: unknown field 'bogus' of gpu_rollup"),
    ("gpu_metrics,Hostname=gpu01 util=1 " + str(T10_00), "line 3: unknown measurement 'gpu_metrics'"),
    ("gpu_rollup,Hostname=gpu01,gpu=0,rack=r1 util=1 " + str(T10_00), "line 3: unknown tag 'rack' of gpu_rollup"),
    ("gpu_rollup,Hostname=gpu01 util=1 " + str(T10_00), "line 3: no gpu tag"),
    ("gpu_rollup,gpu=0 util=1 " + str(T10_00), "line 3: no Hostname tag"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=1 1796119201000000000", "line 3: bucket start 1796119201000000000 is not on a minute boundary"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=1", "line 3: no timestamp"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=1 1796119200", "line 3: timestamp 1796119200 (1970-01-01 00:00:01 UTC) is out of range"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 step=3600,util=1 " + str(T10_00), "line 3: field step: a collector sends per-minute rollups"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 samples=1.5 " + str(T10_00), "line 3: field samples: expected a whole number"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 xid_count=-1 " + str(T10_00), "line 3: field xid_count: -1 is out of range"),
    ("gpu_rollup,Hostname=gpu01,gpu=0 util=\"high\" " + str(T10_00), "line 3: field util: expected a number"),
    ("gpu_rollup,Hostname=gpu01,gpu=x0 util=1 " + str(T10_00), "line 3: tag gpu='x0' does not match"),
    ("mount_rollup,Hostname=gpu01,mount=scratch,fstype=lustre read_bps=1 " + str(T10_00), "line 3: tag mount='scratch' does not match"),
    ('event,Hostname=gpu01,kind=meltdown message="x" ' + str(T10_00), "line 3: tag kind='meltdown': expected one of"),
    ('event,Hostname=gpu01,kind=xid detail="[1]" ' + str(T10_00), "line 3: field detail: expected a JSON object"),
    ('event,Hostname=gpu01,kind=xid detail="{" ' + str(T10_00), "line 3: field detail: not JSON"),
])
def test_a_malformed_line_refuses_the_whole_write_naming_the_line(nodes, line, message):
    body = "\n".join([GPU_LINE, "# the next line is bad", line, NODE_LINE])
    response = post(body)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert response.json()["message"].startswith(message), response.json()["message"]
    assert stored_counts() == (0, 0, 0)
    assert NodeCollector.objects.get(node=nodes[0]).last_seen is None


def test_a_gzip_bomb_is_refused_with_413_before_it_inflates(nodes, settings):
    from appliance.telemetry import ingest

    bomb = gzip.compress(b"#" * (ingest.MAX_BODY_BYTES + 1024))  # about 16 KB that inflate to 16 MiB
    assert len(bomb) < 100_000
    response = post(bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert response.json() == {"code": "request too large",
                               "message": "the body is over 16777216 bytes once decompressed"}
    assert stored_counts() == (0, 0, 0)


def test_a_gzip_bomb_never_inflates_past_the_limit_in_memory():
    import io
    import tracemalloc

    from appliance.telemetry import ingest

    bomb = gzip.compress(b"\0" * (64 * 2**20), compresslevel=9)  # 64 KiB that inflate to 64 MiB
    tracemalloc.start()
    try:
        with pytest.raises(ingest.IngestError) as refused:
            ingest.read_body(io.BytesIO(bomb), str(len(bomb)), "gzip", limit=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (refused.value.status, refused.value.message) == (413, "the body is over 1048576 bytes once decompressed")
    assert peak < 8 * 2**20, f"inflating the bomb took {peak} bytes"


def test_a_body_declared_over_the_limit_is_refused_unread(nodes):
    response = post(GPU_LINE, CONTENT_LENGTH=str(17 * 2**20))
    assert (response.status_code, response.json()["code"]) == (413, "request too large")


def test_a_damaged_gzip_body_and_an_unknown_encoding_are_refused(nodes):
    damaged = gzip.compress(GPU_LINE.encode())[:-12]
    assert post(damaged, HTTP_CONTENT_ENCODING="gzip").json() == {"code": "invalid",
                                                                  "message": "the gzip body is cut short"}
    response = post(GPU_LINE, HTTP_CONTENT_ENCODING="br")
    assert (response.status_code, response.json()["message"]) == (415, "Content-Encoding 'br': expected gzip or none")
    assert stored_counts() == (0, 0, 0)


def test_only_post_writes():
    response = Client().get(URL)
    assert (response.status_code, response["Allow"]) == (405, "POST")


def test_health_and_ping_answer_as_influxdb(db):
    health = Client().get("/telemetry/ingest/health")
    assert (health.status_code, health.json()["status"], health.json()["name"]) == (200, "pass", "appliance")
    assert Client().get("/telemetry/ingest/ping").status_code == 204


@pytest.mark.django_db(transaction=True)
def test_influxdb_client_writes_through_the_collectors_sink_unchanged(nodes, live_server):
    """The collector's own InfluxSink (influxdb-client, gzip) against the endpoint served over HTTP."""
    from appliance.telemetry.sinks import InfluxSink, SinkError

    sink = InfluxSink(f"{live_server.url}/telemetry/ingest", TOKEN_1, org="appliance", bucket="rollups")
    try:
        sink.write("\n".join([GPU_LINE, NODE_LINE, *MOUNT_LINES, XID_LINE]) + "\n")
        with pytest.raises(SinkError) as refused:
            sink.write(GPU_LINE.replace("Hostname=gpu01", "Hostname=gpu02"))
    finally:
        sink.close()
    assert "403" in str(refused.value)
    assert stored_counts() == (1, 1, 1)
    assert GpuRollup.objects.get().util == 87.5
