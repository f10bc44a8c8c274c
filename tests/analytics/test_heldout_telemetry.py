"""Attribution graded on held-out telemetry (tests/analytics/heldout.py: written apart from the rules), sent
to the ingest endpoint with each node's token as a collector sends it, read back and judged by the ledger's
own path (frames or rows, the inventory's references), graded GPU-second by GPU-second."""

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from appliance.analytics import ledger, rules
from appliance.analytics.models import CAUSE_FIELDS, CauseHour
from appliance.inventory.models import GPU, Appliance, Node, Pool, PoolMembership
from appliance.telemetry.models import GpuRollup, JobPlacement, NodeCollector
from tests.analytics import heldout

pytestmark = pytest.mark.django_db

URL = "/telemetry/ingest/api/v2/write?org=appliance&bucket=rollups&precision=ns"
MINUTES = 60


def appliance_of(telemetry: heldout.Telemetry) -> dict[str, str]:
    """The nodes of the generated data in the inventory, each with its collector's token; the Lustre mount's
    smoke-test figure where the storage stage measured it (not the NFS one)."""
    appliance = Appliance.objects.create(name="graded", simulated=True)
    pools = {kind: Pool.objects.create(appliance=appliance, name=kind, kind=kind) for kind in ("training", "inference")}
    tokens = {}
    for number, plan in enumerate(telemetry.nodes):
        facts = {"storage": {"results": [{"mount_point": "/mnt/lustre", "read_mbps": 12000}]}} \
            if plan.fstype == "lustre" else {}
        node = Node.objects.create(appliance=appliance, name=plan.name, role=Node.Role.GPU,
                                   management_address=f"10.0.1.{number + 1}", facts=facts)
        PoolMembership.objects.create(pool=pools[plan.pool], node=node)
        for index in range(8):
            GPU.objects.create(node=node, index=index, model="H100-SXM5-80GB", memory_mib=81559, mig_capable=True)
        token = f"tok-{plan.name}-graded-0123456789abcdefghij"
        NodeCollector.objects.create(node=node, token=token, token_digest=hashlib.sha256(token.encode()).hexdigest(),
                                     issued_at=timezone.now())
        tokens[plan.name] = token
    return tokens


def schedule(telemetry: heldout.Telemetry) -> None:
    """Where the schedulers put the jobs the data names, on the node that names them (the ingest keeps a job
    id only where a scheduler places it: telemetry/placements.py)."""
    for name, lines in telemetry.lines.items():
        node = Node.objects.get(name=name)
        jobs = {tag.split("=", 1)[1] for line in lines for tag in line.split(" ", 1)[0].split(",")
                if tag.startswith("hpc_job=")}
        jobs |= {part.rpartition(":")[0] for line in lines for found in re.findall(r'holders="([^"]*)"', line)
                 for part in found.split(",")}
        JobPlacement.objects.bulk_create([JobPlacement(node=node, source="heldout", job=job, seen_at=timezone.now())
                                          for job in sorted(jobs)])


def send(telemetry: heldout.Telemetry, tokens: dict[str, str]) -> None:
    client = Client()
    for name, lines in telemetry.lines.items():
        for first in range(0, len(lines), 2000):  # a forwarder's writes after an outage: a few thousand lines
            body = "\n".join(lines[first:first + 2000]).encode()
            response = client.generic("POST", URL, body, content_type="text/plain; charset=utf-8",
                                      HTTP_AUTHORIZATION=f"Token {tokens[name]}")
            assert response.status_code == 204, response.content[:500]


def attributed(since: datetime, until: datetime) -> dict[tuple[str, int, int], list[tuple[float, str]]]:
    """Each GPU-minute's causes with their seconds (a minute that changed hands has a part per holder and
    one for the seconds nobody held)."""
    window = ledger.attribute_window(since, until)
    names = {pk: info.name for pk, info in window["info"].items()}
    gpu = window["gpu"]
    base = int(since.timestamp())
    found: dict[tuple[str, int, int], list[tuple[float, str]]] = {}
    for n, g, t, label, seconds in zip(gpu["node_id"], gpu["gpu"], gpu["t"], gpu["label"], gpu["seconds"],
                                       strict=True):
        found.setdefault((names[int(n)], int(g), (int(t) - base) // 60), []).append(
            (float(seconds), rules.LABELS[int(label)]))
    return found


@pytest.fixture
def graded():
    since = (timezone.now() - timedelta(hours=3)).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    telemetry = heldout.generate(MINUTES, seed=7, start_ns=int(since.timestamp()) * 10**9)
    tokens = appliance_of(telemetry)
    schedule(telemetry)
    send(telemetry, tokens)
    return telemetry, since, since + timedelta(minutes=MINUTES)


def test_every_line_sent_is_stored(graded):
    telemetry, since, until = graded
    sent = sum(1 for lines in telemetry.lines.values() for line in lines if line.startswith("gpu_rollup"))
    lost = sum(1 for parts in telemetry.truth.values() if parts == [(60.0, "no-data")])
    assert GpuRollup.objects.filter(step=60, start__gte=since, start__lt=until).count() == sent
    assert sent + lost == 4 * 8 * MINUTES
    assert lost >= 8 * 7  # the inference node's collector outage, and the lines lost on the way


def test_each_cause_is_attributed_right_for_90_percent_and_all_for_97(graded):
    """Issue 32's bar (seed 7, 1,920 GPU-minutes): every cause right for 90% or more of its GPU-seconds, 97% of
    the GPU-seconds received. The NFS mount nobody measured is judged against its own ceiling, learned from
    its reads. A minute with no line is graded "no-data" by the grader itself."""
    telemetry, since, until = graded
    result = heldout.grade(telemetry, attributed(since, until))
    right, changed = result["changed_hands"]
    print(heldout.table(result), f"\nreceived: {100 * result['received_accuracy']:.2f}%; minutes that changed hands: "
          f"{100 * right / changed:.1f}% of {changed / 60:.1f} GPU-minutes")
    recall = result["recall"]
    assert set(recall) == set(rules.LABELS) | {"no-data"}  # every cause is in the data
    assert all(share >= 0.9 for share in recall.values()), heldout.table(result)
    assert result["received_accuracy"] >= 0.97, heldout.table(result)


def test_the_ledger_adds_up_to_wall_time_times_gpus_with_the_lost_minutes_as_no_data(graded):
    """Every GPU-second of the hour has one cause: 32 GPUs x 60 minutes, the minutes with no line (the
    collector outage, the lines lost on the way) as "no data", each in its own GPU's row."""
    telemetry, since, until = graded
    ledger.run_incremental(until=until)
    rows = list(CauseHour.objects.filter(hour__gte=since, hour__lt=until).values())
    assert sum(row["gpu_seconds"] for row in rows) == pytest.approx(32 * 60 * 60)
    lost = {(node, gpu): 0 for node, gpu, _ in telemetry.truth}
    for (node, gpu, _), parts in telemetry.truth.items():
        lost[(node, gpu)] += 60 * (parts == [(60.0, "no-data")])
    names = dict(Node.objects.values_list("pk", "name"))
    no_data = {(names[row["node_id"]], row["gpu"]): row["no_data_s"] for row in rows if row["no_data_s"]}
    assert no_data == {key: float(seconds) for key, seconds in lost.items() if seconds}
    assert sum(no_data.values()) >= 8 * 7 * 60  # the inference node's outage at least
    for row in rows:
        assert sum(row[column] for column in CAUSE_FIELDS.values()) == pytest.approx(row["gpu_seconds"])
