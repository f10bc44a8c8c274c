"""The job list and a job's page count every minute a job held any seconds of: a minute that changed hands
(GpuRollup.holders, as the ingest keeps it: the holders its scheduler placed there) is each holder's for its
seconds, and a holder the scheduler did not place there (unverified_holders) is on no page, as an unverified
`job` is not. Rows written by hand (rows.py); every expected number is worked out here from them.

The rows, on gpu-01 (its GPU 0 and 1), the clock at 12:00:30 (rows.NOW) or, for the API and the pages, at
the moment the test starts (their window is the last hour: the rows are a few minutes old):
- GPU 0, 11:57 and 11:58: job 4182 throughout, utilization 90 %, 12,000 J a minute;
- GPU 0, 11:59: 4182 for 40 s, then 4190 for 20 s (its `job` 4182, the holder of the most seconds),
  utilization 30 % over the minute, 6,000 J;
- GPU 1, 11:59: 4182 for 45 s and 9999 for 15 s, which no scheduler placed on gpu-01 (unverified),
  utilization 36 %, memory 30,000 of 81,559 MiB, 3,000 J; nobody computes on the unverified seconds, so
  4182's part is 36 x 60 / 45 = 48 % over its 45 s, and 30,000 x 60 / 45 = 40,000 MiB;
- GPU 2, 11:58: nobody for 45 s, then 4300 for 15 s (its `job` blank: nobody held most of it), 4300 placed
  utilization 10 %, so 10 x 60 / 15 = 40 % over 4300's seconds.
4182, 4190 and 4300 are placed on gpu-01 by its scheduler (the ingest keeps a holder only where it is:
placements.py); a job's page looks for the minutes it held a part of there and next to those it held most of.
"""

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from appliance.telemetry import queries
from tests.sample_inventory import build_sample_inventory

from .rows import NOW, gpu_row, minutes_before, place

pytestmark = pytest.mark.django_db

T_1158, T_1159 = 1772452680, 1772452740  # 2026-03-02 11:58 and 11:59 UTC, seconds since 1970


def handovers(node, now: datetime) -> None:
    m1, m2, m3 = (minutes_before(now, minutes) for minutes in (1, 2, 3))
    for start in (m3, m2):
        gpu_row(node, 0, start, util=90, fb_used_mib=20000, fb_total_mib=81559, energy_j=12000, job="4182")
    gpu_row(node, 0, m1, util=30, fb_used_mib=20000, fb_total_mib=81559, energy_j=6000, job="4182",
            holders="4182:40,4190:20")
    gpu_row(node, 1, m1, util=36, fb_used_mib=30000, fb_total_mib=81559, energy_j=3000, job="4182",
            holders="4182:45", unverified_holders="9999:15")
    gpu_row(node, 2, m2, util=10, fb_used_mib=5000, fb_total_mib=81559, energy_j=1200, job="",
            holders="4300:15")
    # where the scheduler put them (a holder is kept only where it is placed): 9999 is not
    place(node, "4182", "4190", "4300")


@pytest.fixture
def inventory():
    inventory = build_sample_inventory()
    handovers(inventory.gpu_node, NOW)
    return inventory


def test_the_jobs_list_counts_each_holder_for_its_seconds_and_no_unverified_one(inventory):
    assert queries.jobs("1h", now=NOW) == [
        # 20 s of GPU 0 at 11:59, at 30 % (its holders held all 60 s: no scaling)
        {"job": "4190", "nodes": ["gpu-01"], "gpus": 1, "first": "2026-03-02T11:59:00+00:00",
         "last": "2026-03-02T11:59:00+00:00", "gpu_hours": 0.006, "util_mean": 30.0},
        # GPU 0: 60 + 60 + 40 s, (90 x 60 + 90 x 60 + 30 x 40) / 160 = 75 %; GPU 1: 45 s at 48 %;
        # 205 s = 0.057 GPU-hours, the mean of its GPUs (75 + 48) / 2 = 61.5 %
        {"job": "4182", "nodes": ["gpu-01"], "gpus": 2, "first": "2026-03-02T11:57:00+00:00",
         "last": "2026-03-02T11:59:00+00:00", "gpu_hours": 0.057, "util_mean": 61.5},
        # 15 s of GPU 2 at 11:58, 40 % over them
        {"job": "4300", "nodes": ["gpu-01"], "gpus": 1, "first": "2026-03-02T11:58:00+00:00",
         "last": "2026-03-02T11:58:00+00:00", "gpu_hours": 0.004, "util_mean": 40.0},
    ]


def test_a_job_that_held_20_seconds_of_another_jobs_minute_has_that_minute_on_its_page(inventory):
    data = queries.job("4190")
    assert (data["first"], data["end"], data["duration_s"]) == ("2026-03-02T11:59:00+00:00",
                                                                "2026-03-02T12:00:00+00:00", 60)
    assert (data["nodes"], data["gpu_count"], data["gpu_hours"], data["util_mean"]) == (["gpu-01"], 1, 0.006, 30.0)
    assert data["energy_j"] == 2000.0  # 20 s of the minute's 6,000 J
    [gpu] = data["gpus"]
    assert (gpu["node"], gpu["gpu"], gpu["buckets"], gpu["held_s"], gpu["util"], gpu["fb_used_mib"]) == (
        "gpu-01", 0, 1, 20, 30.0, 20000.0)
    assert data["t"] == [T_1159]
    assert data["gpu_series"] == {"gpu-01/0": {"util": [30.0], "fb_used_mib": [20000.0]}}


def test_the_job_that_held_most_of_the_minute_keeps_its_own_seconds(inventory):
    data = queries.job("4182")
    assert (data["gpu_count"], data["gpu_hours"], data["util_mean"]) == (2, 0.057, 61.5)
    # GPU 0: 12,000 + 12,000 + 40/60 of 6,000; GPU 1: 45/60 of 3,000
    assert data["energy_j"] == 30250.0
    assert [(g["gpu"], g["buckets"], g["held_s"], g["util"], g["fb_used_mib"]) for g in data["gpus"]] == [
        (0, 3, 160, 75.0, 20000.0),
        # memory over 45 s: 30,000 x 60 / 45
        (1, 1, 45, 48.0, 40000.0)]
    assert data["t"] == [T_1158 - 60, T_1158, T_1159]
    assert data["gpu_series"] == {"gpu-01/0": {"util": [90.0, 90.0, 30.0], "fb_used_mib": [20000.0] * 3},
                                  "gpu-01/1": {"util": [None, None, 48.0], "fb_used_mib": [None, None, 40000.0]}}


def test_a_job_that_never_held_most_of_a_minute_has_a_page(inventory):
    data = queries.job("4300")
    assert (data["first"], data["gpu_count"], data["gpu_hours"]) == ("2026-03-02T11:58:00+00:00", 1, 0.004)
    assert [(g["gpu"], g["buckets"], g["held_s"], g["util"]) for g in data["gpus"]] == [(2, 1, 15, 40.0)]
    assert queries.job_bounds("4300") == (datetime(2026, 3, 2, 11, 58, tzinfo=UTC),
                                          datetime(2026, 3, 2, 11, 58, tzinfo=UTC), ["gpu-01"])


def test_an_unverified_holder_is_on_no_page(inventory):
    with pytest.raises(queries.UnknownJob):
        queries.job("9999")
    assert queries.job_bounds("9999") is None
    # "1" is in "4182:45" and "4190:20" as text ("1:..." of "41:..."): not a holder
    with pytest.raises(queries.UnknownJob):
        queries.job("1")


def test_the_api_and_the_pages_show_the_holders_and_not_the_unverified_one(client_for):
    inventory = build_sample_inventory()
    now = timezone.now()  # the clock of this test, read once
    handovers(inventory.gpu_node, now)
    client = client_for("viewer")
    listed = client.get("/api/v1/telemetry/jobs/?range=1h").json()["jobs"]
    assert [(job["job"], job["gpus"], job["gpu_hours"]) for job in listed] == [
        ("4190", 1, 0.006), ("4182", 2, 0.057), ("4300", 1, 0.004)]
    job = client.get("/api/v1/telemetry/jobs/4190/").json()
    assert [(g["node"], g["gpu"], g["held_s"]) for g in job["gpus"]] == [("gpu-01", 0, 20)]
    assert client.get("/api/v1/telemetry/jobs/9999/").status_code == 404
    page = client.get("/telemetry/jobs/4190/")
    assert page.status_code == 200
    row = page.content.decode().split('<tr data-gpu="gpu-01/0">', 1)[1].split("</tr>", 1)[0]
    assert "<td>30.0 %</td>" in row and row.endswith("<td>1</td>")  # its utilization, one minute
    assert client.get("/telemetry/jobs/9999/").status_code == 404


def test_a_job_that_held_whole_minutes_on_one_node_and_a_part_on_another_has_both(inventory):
    """4190 held GPU 3 of gpu-02 for the two minutes before 11:59 (placed there too): its page has gpu-02's
    two minutes and gpu-01's 20 s."""
    two = inventory.gpu_node_2
    for minute in (57, 58):
        gpu_row(two, 3, datetime(2026, 3, 2, 11, minute, tzinfo=UTC), util=50, energy_j=9000, job="4190")
    place(two, "4190")
    data = queries.job("4190")
    assert data["nodes"] == ["gpu-01", "gpu-02"]
    assert [(g["node"], g["gpu"], g["buckets"], g["held_s"]) for g in data["gpus"]] == [
        ("gpu-01", 0, 1, 20), ("gpu-02", 3, 2, 120)]
    assert data["gpu_hours"] == 0.039  # 140 s
    assert data["energy_j"] == 20000.0  # 2,000 + 2 x 9,000
    assert data["t"] == [T_1158 - 60, T_1158, T_1159]
    assert queries.job_bounds("4190") == (datetime(2026, 3, 2, 11, 57, tzinfo=UTC),
                                          datetime(2026, 3, 2, 11, 59, tzinfo=UTC), ["gpu-01", "gpu-02"])
