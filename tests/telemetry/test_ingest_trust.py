"""What a node token can write (issue 40): its own GPUs' numbers, in their physical ranges, job ids the
portal can route, strings without control or format characters, buckets not ahead of the appliance's
clock, at a bounded rate. Each attack of the issue, performed through the endpoint."""

from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from appliance.audit.models import AuditRecord
from appliance.inventory.models import GPU, Node
from appliance.telemetry.models import GpuRollup, HardwareEvent, NodeCollector
from tests.telemetry.rows import place
from tests.telemetry.test_ingest import TOKEN_1, nodes, post  # noqa: F401 (nodes: the fixture)

# The ingest writes through the frames and their per-vendor SQL, and PostgreSQL refuses what SQLite keeps
# (a NUL in text): run on PostgreSQL too (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


_CLOCK = []


@pytest.fixture(autouse=True)
def _one_clock_a_test():
    """Every minute_ns() of a test counts from the minute the test began, so a minute turning inside a test
    does not move a bucket it wrote away from the one it asserts on."""
    _CLOCK[:] = [timezone.now().replace(second=0, microsecond=0)]


def minute_ns(ago_minutes: int = 2) -> int:
    """A bucket start `ago_minutes` before the test's first minute (negative: ahead), in ns."""
    return int((_CLOCK[0] - timedelta(minutes=ago_minutes)).timestamp()) * 1_000_000_000


def gpu_line(tags: str = "", fields: str = "util=50", gpu: int = 0, start: int | None = None) -> str:
    return f"gpu_rollup,Hostname=gpu01,gpu={gpu}{tags} step=60,samples=60,{fields} {start or minute_ns()}"


def refused(response) -> str:
    assert response.status_code == 400, (response.status_code, response.content)
    return response.json()["message"]


@pytest.mark.parametrize("job, shown", [
    ("\u202egnp.exe", "'\\u202egnp.exe'"),
    (r"<img\ src\=x\ onerror\=alert(1)>", "'<img src=x onerror=alert(1)>'"),
    ("job\u200bid", "'job\\u200bid'"),
    ("-1", "'-1'"),
])
def test_a_job_id_the_portal_cannot_route_is_refused(nodes, job, shown):  # noqa: F811
    message = refused(post(gpu_line(f",hpc_job={job}")))
    assert message.startswith("line 1: tag hpc_job")
    assert shown in message or "a control or format character (U+" in message
    assert not GpuRollup.objects.exists()


def test_the_portal_job_list_renders_with_any_accepted_job_id(nodes, make_user):  # noqa: F811
    jobs = ["4711", "4711_7", "4711+1", "chat-7b", "svc.v2:blue@east+1", "A" * 100]
    place(nodes[0], *jobs[1:])  # and 4711 (the fixture)
    body = "\n".join(gpu_line(f",hpc_job={job}", gpu=index) for index, job in enumerate(jobs))
    assert post(body).status_code == 204
    assert sorted(GpuRollup.objects.values_list("job", flat=True)) == sorted(jobs)
    browser = Client()
    browser.force_login(make_user("viewer"))
    page = browser.get(reverse("telemetry:jobs"))
    assert page.status_code == 200
    for job in jobs:
        assert f'href="{reverse("telemetry:job", args=[job])}"' in page.content.decode()
        assert browser.get(reverse("telemetry:job", args=[job])).status_code == 200


def test_string_fields_and_tags_with_control_or_format_characters_are_refused(nodes):  # noqa: F811
    now = minute_ns(1)
    cases = [
        (f'event,Hostname=gpu01,kind=xid,gpu=3 message="a\x00b" {now}',
         "line 1: field message: a control or format character (U+0000 at character 2)"),
        (f'event,Hostname=gpu01,kind=xid,gpu=3 message="x",detail="{{\\"k\\": \\"a\\\\u0000b\\"}}" {now}',
         "line 1: field detail: a control or format character (U+0000 at character 2)"),
        (f'event,Hostname=gpu01,kind=xid,gpu=3 message="safe\u202etxt.exe" {now}',
         "line 1: field message: a control or format character (U+202E at character 5)"),
        (f'collector,Hostname=gpu01 interval_s=1,sink_error="x\x00y" {now}',
         "line 1: field sink_error: a control or format character (U+0000 at character 2)"),
        (f'collector,Hostname=gpu01 interval_s=1,version="1.0\x85" {now}',
         "line 1: field version: a control or format character (U+0085 at character 4)"),
        (f"mount_rollup,Hostname=gpu01,mount=/mnt/\u2066x,fstype=nfs step=60,read_bps=1 {now}",
         "line 1: tag mount: a control or format character (U+2066 at character 6)"),
    ]
    for body, message in cases:
        assert refused(post(body)) == message
    assert not HardwareEvent.objects.exists()
    assert NodeCollector.objects.get(node__name="gpu01").sink_error == ""


@pytest.mark.parametrize("fields, message", [
    ("util=1e308", "field util: 1e+308 is out of range (0 to 100)"),
    ("util=-1e300", "field util: -1e+300 is out of range (0 to 100)"),
    ("util=100.5", "field util: 100.5 is out of range (0 to 100)"),
    ("sm_active=1.01", "field sm_active: 1.01 is out of range (0 to 1)"),
    ("throttled_share=-0.1", "field throttled_share: -0.1 is out of range (0 to 1)"),
    ("temp_c=151", "field temp_c: 151.0 is out of range (-40 to 150)"),
    ("temp_max_c=-41", "field temp_max_c: -41.0 is out of range (-40 to 150)"),
    ("power_w=1e308", "field power_w: 1e+308 is out of range (0 to 1050: 1.5 x the H100-SXM5-80GB limit of 700 W)"),
    ("power_max_w=1051", "field power_max_w: 1051.0 is out of range (0 to 1050: 1.5 x the H100-SXM5-80GB limit of "
                         "700 W)"),
    ("power_w=-1", "field power_w: -1.0 is out of range (0 to inf)"),
    ("energy_j=63001", "field energy_j: 63001.0 is out of range (0 to 63000: 1.5 x 700 W over 60 s)"),
    ("fb_used_mib=1e12", "field fb_used_mib: 1000000000000.0 is out of range (0 to 2097152)"),
    ("nvlink_bps=1e20", "field nvlink_bps: 1e+20 is out of range (0 to 10000000000000.0)"),
])
def test_a_number_outside_its_physical_range_is_refused_naming_line_and_field(nodes, fields, message):  # noqa: F811
    body = gpu_line(fields="util=50", gpu=1) + "\n" + gpu_line(fields=fields)
    assert refused(post(body)) == f"line 2: {message}"
    assert not GpuRollup.objects.exists()


def test_node_fields_have_ranges_too(nodes):  # noqa: F811
    start = minute_ns()
    cases = [
        ("gpu_util=1e308", "field gpu_util: 1e+308 is out of range (0 to 100)"),
        ("cpu_iowait=2", "field cpu_iowait: 2.0 is out of range (0 to 1)"),
        ("gpus=9", "field gpus: 9 is out of range (0 to 8: the GPUs of gpu01 in the inventory)"),
        ("gpu_power_w=8401", "field gpu_power_w: 8401.0 is out of range (0 to 8400: 1.5 x the 8 GPUs' limits of "
                             "5600 W)"),
    ]
    for fields, message in cases:
        assert refused(post(f"node_rollup,Hostname=gpu01 step=60,{fields} {start}")) == f"line 1: {message}"


def test_a_node_writes_only_for_the_gpus_its_inventory_has(nodes):  # noqa: F811
    gpu01, _ = nodes
    assert refused(post(gpu_line(gpu=100))) == (
        "line 1: tag gpu=100: gpu01 has no GPU 100 in the inventory (its GPUs: 0, 1, 2, 3, 4, 5, 6, 7)")
    GPU.objects.filter(node=gpu01, index=5).update(mig_capable=False)
    assert refused(post(gpu_line(",GPU_I_ID=1,GPU_I_PROFILE=1g.10gb", gpu=5))) == (
        "line 1: tag GPU_I_ID=1: GPU 5 of gpu01 (H100-SXM5-80GB) is not MIG-capable in the inventory")
    # A storage node has no GPUs: it writes none.
    gpu01.gpus.all().delete()
    Node.objects.filter(pk=gpu01.pk).update(role=Node.Role.STORAGE)
    assert refused(post(gpu_line())) == "line 1: tag gpu=0: gpu01 has no GPU 0 in the inventory (its GPUs: none)"
    assert not GpuRollup.objects.exists()


def test_a_bucket_ahead_of_the_clock_is_refused_beyond_five_minutes(nodes):  # noqa: F811
    # 7, not 6: the test's first minute may have turned by the time the ingest reads its clock (a minute
    # ahead of the boundary is then 5 min 59 s ahead at most, never less than 5 with up to a minute to spare).
    for minutes_ahead in (24 * 60, 10, 7):
        message = refused(post(gpu_line(start=minute_ns(-minutes_ahead))))
        assert message.startswith(f"line 1: timestamp {minute_ns(-minutes_ahead)} (")
        assert "is out of range (before 2000 or more than 5 minutes ahead of the appliance's clock" in message
    assert post(gpu_line(start=minute_ns(-4))).status_code == 204  # a clock a little ahead
    collector = NodeCollector.objects.get(node__name="gpu01")
    assert collector.last_bucket <= timezone.now() + timedelta(minutes=5)


@override_settings(TELEMETRY_INGEST_WRITES_PER_MINUTE=3)
def test_writes_of_a_node_token_are_limited_per_minute(nodes):  # noqa: F811
    statuses = [post(gpu_line(fields=f"util={n}")).status_code for n in range(4)]
    if statuses != [204, 204, 204, 429]:  # the minute turned between two writes: once more
        statuses = [post(gpu_line(fields=f"util={n}")).status_code for n in range(4)]
    assert statuses == [204, 204, 204, 429]
    response = post(gpu_line())
    assert response.status_code == 429 and 1 <= int(response["Retry-After"]) <= 60
    assert response.json()["message"].startswith("gpu01: at most 3 writes and 20000 lines a minute per node token")
    refusal = AuditRecord.objects.filter(event="telemetry.ingest.refused").last()
    assert refusal.target_name == "gpu01" and refusal.details["status"] == 429


def test_one_flood_of_lines_is_refused_before_it_is_read(nodes):  # noqa: F811
    flood = "\n".join(f"node_rollup,Hostname=gpu01 step=60,cpu_busy=0.5 {minute_ns(n)}" for n in range(1, 25_002))
    response = post(flood)
    assert response.status_code == 429, response.content
    assert "this minute: 1 writes, 25001 lines with this one of 25001" in response.json()["message"]
