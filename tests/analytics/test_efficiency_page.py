"""The Efficiency page as an operator reads it: bars on one absolute scale per table with its ticks and the
figures written out, a default range that fits the data the appliance has, a last hour that is not over
said to be so, and an inference pool's services named as services, not as "(no user)".

The clock is set (django.utils.timezone.now) so that nothing depends on the time the tests run."""

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from appliance.analytics import views
from appliance.analytics.models import CauseHour
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 5, 10, 10, tzinfo=UTC)  # ten minutes into the hour 10:00
HOUR = timedelta(hours=1)


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)


def nodes():
    appliance = Appliance.objects.create(name="demo")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    gpu01 = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11")
    gpu02 = Node.objects.create(appliance=appliance, name="gpu02", role=Node.Role.GPU, management_address="10.0.0.12")
    PoolMembership.objects.create(pool=training, node=gpu01)
    PoolMembership.objects.create(pool=inference, node=gpu02)
    return gpu01, gpu02


def two_pools(hour):
    """The training pool 1.1 GPU-hours (alice's job busy an hour on GPU 0, GPU 1 unallocated 6 minutes), the
    inference pool 0.5 (the chat service, no owner, holding memory half an hour)."""
    gpu01, gpu02 = nodes()
    CauseHour.objects.bulk_create([
        CauseHour(node=gpu01, gpu=0, hour=hour, job="4182", user="alice", pool="training", gpu_seconds=3600,
                  used_seconds=3000, busy_s=3600),
        CauseHour(node=gpu01, gpu=1, hour=hour, pool="training", gpu_seconds=360, idle_unallocated_s=360),
        CauseHour(node=gpu02, gpu=0, hour=hour, job="chat-7b", pool="inference", gpu_seconds=1800,
                  used_seconds=36, memory_only_s=1800),
    ])


class Rows(HTMLParser):
    """Each table row's data-key with its bar's rectangles (cause, width) and its GPU-hours cell."""

    def __init__(self, testid):
        super().__init__()
        self.testid, self.inside, self.key, self.cell = testid, False, None, None
        self.rows: dict[str, dict] = {}
        self.scale: list[str] = []
        self.in_scale = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.inside = attrs.get("data-testid") == self.testid
        if not self.inside:
            return
        if attrs.get("data-testid") == f"{self.testid}-scale":
            self.in_scale = 1
        elif self.in_scale and tag == "span":
            self.in_scale += 1
        if tag == "tr" and "data-key" in attrs:
            self.key = attrs["data-key"]
            self.rows[self.key] = {"rects": [], "hours": "", "name": "", "holder": attrs.get("data-holder")}
            self.cell = "name"
        elif tag == "rect" and self.key:
            self.rows[self.key]["rects"].append((attrs["data-cause"], attrs["width"]))
        elif tag == "td" and attrs.get("data-part") == "gpu-hours":
            self.cell = "hours"
        elif tag == "td":
            self.cell = None

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        if tag == "th" and self.cell == "name":
            self.cell = None
        if tag == "span" and self.in_scale:
            self.in_scale -= 1

    def handle_data(self, data):
        if self.in_scale > 1 and data.strip():
            self.scale.append(data.strip())
        if self.key and self.cell == "hours":
            self.rows[self.key]["hours"] += data.strip()
        elif self.key and self.cell == "name" and self.inside:
            self.rows[self.key]["name"] += data


def table(html: str, testid: str) -> Rows:
    parser = Rows(testid)
    parser.feed(html)
    return parser


def test_bars_share_one_absolute_scale_with_the_figures(clock, client_for):
    two_pools(NOW.replace(minute=0) - HOUR)
    html = client_for(Role.VIEWER).get("/analytics/").content.decode()
    pools = table(html, "by-pool")
    # One scale for the table, its end the round figure at or above 1.1: 1.2 GPU-hours. 1.1 of 1.2 is 91.7 %
    # of the width, 0.5 of 1.2 is 41.7 %: the smaller pool draws the shorter bar.
    assert pools.scale == ["0", "0.60", "1.2 GPU-h"]
    assert pools.rows["training"]["rects"] == [("busy", "83.333"), ("idle-unallocated", "8.333")]
    assert pools.rows["inference"]["rects"] == [("memory-only", "41.667")]
    assert (pools.rows["training"]["hours"], pools.rows["inference"]["hours"]) == ("1.1", "0.50")
    hours = table(html, "by-hour")  # 1.6 GPU-hours on a scale of 2: busy 1.0 is half the width
    assert {key: (row["rects"], row["hours"]) for key, row in hours.rows.items()} == {
        "2026-03-05T09:00Z": ([("busy", "50.000"), ("idle-unallocated", "5.000"), ("memory-only", "25.000")], "1.6")}
    assert hours.scale == ["0", "1.0", "2.0 GPU-h"]
    # The appliance's own bar is its whole (100 %), its figures written out per cause.
    assert 'data-testid="cause-values"' in html
    assert '<tr data-cause="memory-only"><th scope="row">' in html
    assert "<td class=\"num\">0.50</td><td class=\"num\">31.2 %</td>" in html  # 0.5 of 1.6 GPU-hours


def test_an_inference_pools_services_are_services_and_unheld_hours_not_allocated(clock, client_for):
    two_pools(NOW.replace(minute=0) - HOUR)
    users = table(client_for(Role.VIEWER).get("/analytics/").content.decode(), "by-user").rows
    assert {key: (row["holder"], row["name"].strip(), row["hours"]) for key, row in users.items()} == {
        "alice": ("user", "alice", "1.0"),
        "inference": ("services", "services (inference pool)", "0.50"),
        "(unallocated)": ("unallocated", "not allocated", "0.10")}
    assert "(no user)" not in client_for(Role.VIEWER).get("/analytics/report/?since=2026-03-05").content.decode()
    html = client_for(Role.VIEWER).get("/analytics/").content.decode()
    top = html[html.index('<tr data-job="chat-7b">'):]
    assert '<td data-part="who">service</td>' in top[:top.index("</tr>")]  # the jobs that left GPUs idle


def test_a_ten_minute_old_appliance_opens_on_its_hours_and_says_the_hour_is_not_over(clock, client_for):
    gpu01, _gpu02 = nodes()
    CauseHour.objects.create(node=gpu01, gpu=0, hour=NOW.replace(minute=0), job="4182", user="alice",
                             pool="training", gpu_seconds=600, used_seconds=500, busy_s=600)
    html = client_for(Role.VIEWER).get("/analytics/").content.decode()
    assert 'data-range="24h" aria-current="true"' in html  # not seven days of nothing
    window = html[html.index('data-testid="efficiency-window"'):]
    window = window[:window.index("</p>")]
    assert "2026-03-05 10:00 UTC</time>" in window  # the first attributed hour, not a day before
    assert "2026-03-05 10:10 UTC</time>" in window  # now, not 11:00: the hour is not over
    assert "the last hour is not over: its figures are those attributed so far" in window
    assert "from the first attributed hour" in window
    days = table(html, "by-day").rows
    assert "(so far)" in days["2026-03-05"]["name"]
    hours = table(html, "by-hour").rows  # the day hour by hour, the hour not over said so
    assert [(key, " ".join(row["name"].split()), row["hours"]) for key, row in hours.items()] == [
        ("2026-03-05T10:00Z", "2026-03-05 10:00 UTC (so far)", "0.17")]


def test_an_appliance_with_days_of_data_opens_on_seven_days(clock, client_for):
    two_pools(NOW.replace(minute=0) - 3 * 24 * HOUR)
    html = client_for(Role.VIEWER).get("/analytics/").content.decode()
    assert 'data-range="7d" aria-current="true"' in html
    assert 'data-testid="by-hour"' not in html  # hour by hour on the 24 hours only
    assert table(html, "by-pool").rows["training"]["hours"] == "1.1"


@pytest.mark.parametrize(("largest", "end"), [(0.0, 1.0), (0.5, 0.5), (1.1, 1.2), (7.3, 8.0), (38.0, 40.0),
                                               (101.0, 120.0), (0.047, 0.05)])
def test_the_scale_ends_on_a_round_figure_at_or_above_the_largest(largest, end):
    assert views.nice_ceiling(largest) == end
