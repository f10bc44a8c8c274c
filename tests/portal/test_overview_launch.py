"""The Overview as a launch pad: each figure links to the list behind it (the idle GPUs of the newest minute,
the open recommendations, the lending plans under way, the jobs and services on GPUs now, the open alerts,
the nodes), with the counts written out. The clock is set, so no minute turning changes what it shows."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics.models import CauseHour, Finding
from appliance.core.roles import Role
from appliance.lending.models import LendingPlan, PlanState
from appliance.telemetry.models import GpuRollup, HardwareEvent

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 5, 10, 10, 30, tzinfo=UTC)
MINUTE = NOW.replace(second=0) - timedelta(minutes=1)  # the newest complete minute


@pytest.fixture
def fleet(inventory, monkeypatch):
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)
    node, other = inventory.gpu_node, inventory.gpu_node_2
    rollups = [GpuRollup(node=node, gpu=gpu, step=60, start=MINUTE, samples=60, util=util, job=job)
               for gpu, util, job in [(0, 97.0, "4182"), (1, 96.0, "4182"), (2, 2.0, "4182"), (3, 0.0, ""),
                                         (5, 30.0, "4182")]]
    rollups.append(GpuRollup(node=other, gpu=0, step=60, start=MINUTE, samples=60, util=1.0, job="chat-7b"))
    rollups.append(GpuRollup(node=node, gpu=4, step=60, start=MINUTE - timedelta(minutes=5), samples=60, util=0.0,
                             job="4100"))  # an older minute: neither idle now nor a job now
    GpuRollup.objects.bulk_create(rollups)
    for number, state in enumerate([Finding.State.OPEN, Finding.State.OPEN, Finding.State.DISMISSED]):
        Finding.objects.create(key=f"allocated-idle:{number}", kind=Finding.Kind.ALLOCATED_IDLE, state=state,
                               subject=str(number), summary="s", proposal="p", window_start=NOW, window_end=NOW,
                               first_seen=NOW, last_seen=NOW)
    for state in (PlanState.ACTIVE, PlanState.RETURNED):
        LendingPlan.objects.create(appliance=inventory.appliance, from_pool=inventory.training,
                                   to_pool=inventory.inference, nodes=[node.name], window_start=NOW,
                                   window_end=NOW + timedelta(hours=2), reason="idle nights", state=state)
    HardwareEvent.objects.create(node=node, kind=HardwareEvent.Kind.XID, gpu=2, time=NOW, message="Xid 79")
    HardwareEvent.objects.create(node=node, kind=HardwareEvent.Kind.XID, gpu=3, time=NOW, message="Xid 48",
                                 acknowledged_at=NOW, acknowledged_by="admin")
    return inventory


def launch_figures(html: str) -> dict[str, tuple[str, str]]:
    """{figure: (its link, its count)} as the page's launch pad writes them."""
    pad = html[html.index('data-testid="overview-launch"'):]
    pad = pad[:pad.index("</nav>")]
    figures = {}
    for part in pad.split('<a class="card launch" ')[1:]:
        href = part.split('href="')[1].split('"')[0]
        name = part.split('data-figure="')[1].split('"')[0]
        count = part.split('<span class="big">')[1].split("</span>")[0]
        figures[name] = (href, count)
    return figures


def test_each_figure_links_to_the_list_behind_it(client_for, fleet):
    html = client_for(Role.VIEWER).get("/").content.decode()
    assert launch_figures(html) == {"findings": ("/analytics/recommendations/", "2"),
                                    "plans": ("/lending/", "1"),
                                    "jobs": ("/telemetry/jobs/", "2"),  # 4182 and chat-7b in the newest minute
                                    "alerts": ("/telemetry/alerts/", "1")}
    assert 'href="/inventory/nodes/" data-testid="appliance-nodes">3 nodes</a>' in html
    assert 'href="/inventory/nodes/?state=ready">' in html and 'href="/inventory/nodes/?state=failed">' in html


def test_the_idle_figure_leads_to_the_idle_gpus_each_to_its_page(client_for, fleet):
    html = client_for(Role.VIEWER).get("/").content.decode()
    assert '<a href="#idle-gpus" data-testid="gpu-live-idle">3</a>' in html  # under 5 % in the newest minute
    idle = html[html.index('data-testid="idle-gpus"'):]
    idle = idle[:idle.index("</ul>")]
    node, other = fleet.gpu_node.name, fleet.gpu_node_2.name
    links = [part.split('"')[0] for part in idle.split('<a href="')[1:]]
    assert links == [f"/telemetry/nodes/{node}/gpus/2/", f"/telemetry/nodes/{node}/gpus/3/",
                     f"/telemetry/nodes/{other}/gpus/0/"]
    assert "held by 4182" in idle and "not allocated" in idle and "held by chat-7b" in idle
    assert 'id="idle-gpus"' in html


def test_nothing_idle_nothing_to_follow(client_for, fleet):
    GpuRollup.objects.filter(util__lt=5).update(util=60.0)
    html = client_for(Role.VIEWER).get("/").content.decode()
    assert 'data-testid="idle-gpus"' not in html and 'href="#idle-gpus"' not in html


def test_an_hour_of_utilization_and_the_idle_gpu_hours_by_cause(client_for, fleet):
    node = fleet.gpu_node
    # Three earlier minutes of the hour (GPU 7 alone: 20 %, 40 %, 80 %), the fleet's older minute (GPU 4, 0 %)
    # and the newest (the mean of six GPUs: 226 / 6 = 37.7 %).
    GpuRollup.objects.bulk_create([GpuRollup(node=node, gpu=7, step=60, start=MINUTE - timedelta(minutes=ago),
                                             samples=60, util=util) for ago, util in [(50, 20.0), (30, 40.0), (10, 80.0)]])
    hour = NOW.replace(minute=0, second=0)
    CauseHour.objects.bulk_create([
        CauseHour(node=node, gpu=0, hour=hour, job="4182", pool="training", gpu_seconds=600, busy_s=300,
                  input_bound_s=300),
        CauseHour(node=node, gpu=3, hour=hour - timedelta(hours=1), pool="training", gpu_seconds=3600,
                  idle_unallocated_s=3600),
        CauseHour(node=node, gpu=3, hour=hour - timedelta(hours=2), pool="training", gpu_seconds=3600,
                  idle_unallocated_s=3600),  # before the last full hour: not counted
    ])
    html = client_for(Role.VIEWER).get("/").content.decode()
    # x: minutes since 09:10 (an hour before now's minute); y: 30 at 0 %, 0 at 100 %.
    assert '<polyline points="9,24.0 29,18.0 49,6.0 54,30.0 59,18.7" class="trend-line"/>' in html
    assert "Mean GPU utilization over the last hour: 20 % to 38 %, between 0 % and 80 %" in html
    causes = html[html.index('data-testid="overview-idle-causes"'):]
    causes = causes[:causes.index("</p>")]
    assert 'href="/analytics/?range=24h"' in causes
    assert [part.split('"')[0] for part in causes.split('data-cause="')[1:]] == ["idle-unallocated", "input-bound"]
    assert "Idle, not allocated 1.00" in causes and "Input-bound 0.08" in causes
