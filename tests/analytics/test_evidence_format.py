"""Evidence for people: a finding's figures and a job's verdicts with units and a sensible precision, one
row for the GPUs whose evidence is the same; in both languages. (Presentation only: the rules write bytes/s
and ratios.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.analytics import services
from appliance.analytics.models import CauseHour, Finding
from appliance.analytics.templatetags.evidence import evidence, figure, readable_note
from appliance.analytics.views import gpu_names
from tests.sample_inventory import build_sample_inventory

RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru"}
EVIDENCE = {"share": 1.0, "gpu_hours": 0.27, "cpu_iowait": 0.157, "xmit_wait": 353542.9,
            "mounts": [{"node": "gpu01", "mount": "/mnt/scratch", "read_bps": 10115588884,
                        "measured_bps": 21400000000, "share": 0.961588}]}


def test_figures_take_their_unit_from_their_name():
    assert figure(10115588884, "read_bps") == "10.1 GB/s"
    assert figure(0.961588, "read_share /mnt/scratch") == "96.2%"
    assert figure(0.157, "cpu_iowait") == "15.7%"
    assert figure(0.27, "input_bound_gpu_hours") == "0.27 GPU-h"
    assert figure(353542.9, "xmit_wait") == "353543"
    assert figure(None, "read_bps") == "—"
    assert readable_note("20577986904.257416 B/s of 2.14e+10 B/s (3 nodes)") == "20.6 GB/s of 21.4 GB/s (3 nodes)"
    html = str(evidence(EVIDENCE))
    assert "<td>10.1 GB/s</td><td>21.4 GB/s</td><td>96.2%</td>" in html and "{" not in html
    assert "<dt>cpu_iowait</dt><dd>15.7%</dd>" in html


def test_gpus_with_the_same_evidence_read_as_ranges():
    assert gpu_names([("gpu01", g, -1) for g in range(8)] + [("gpu02", 3, -1), ("gpu02", 5, 2)]) == \
        "gpu01/0–7, gpu02/3, gpu02/5/gi2"


@pytest.mark.django_db
def test_the_recommendation_page_shows_figures_not_reprs(client_for):
    now = timezone.now()
    finding = Finding.objects.create(key="input-bound:1", kind="input-bound", subject="job 1", job="1", severity=0.27,
                                     summary="s", proposal="p", evidence=EVIDENCE, window_start=now - timedelta(hours=1),
                                     window_end=now, first_seen=now, last_seen=now)
    html = client_for("viewer").get(f"/analytics/recommendations/{finding.pk}/").content.decode()
    assert "10115588884" not in html and "0.961588" not in html and "{&#x27;" not in html
    assert '<td data-evidence="cpu_iowait">15.7%</td>' in html
    assert "<td>10.1 GB/s</td>" in html
    russian = client_for("viewer").get(f"/analytics/recommendations/{finding.pk}/", **RUSSIAN).content.decode()
    assert '<td data-evidence="gpu_hours">0.27 GPU-ч</td>' in russian


@pytest.mark.django_db
def test_a_jobs_verdicts_are_one_row_for_gpus_whose_evidence_is_the_same(client_for, monkeypatch):
    inventory = build_sample_inventory()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    CauseHour.objects.create(hour=hour, node=inventory.gpu_node, gpu=0, job="7", pool="training", gpu_seconds=60,
                             used_seconds=6, input_bound_s=60)
    check = {"metric": "read_share /mnt/scratch", "value": 0.961588, "op": ">=", "threshold": 0.8, "held": True,
             "note": "20577986904.257416 B/s of 2.14e+10 B/s"}
    start = hour + timedelta(minutes=5)
    # The figures differ past what is printed (94.71% and 94.74% both read 94.7%): still one row.
    intervals = [{"node": "gpu-01", "gpu": gpu, "instance": -1, "start_at": start, "end_at": start + timedelta(minutes=1),
                  "start": start.isoformat(), "end": (start + timedelta(minutes=1)).isoformat(), "minutes": 1,
                  "label": "input-bound", "rule": "input-bound",
                  "evidence": [check | {"value": 0.961588 + gpu * 1e-5}, {"metric": "sm_active", "value": 0.14,
                                                                           "op": "<", "threshold": 0.5, "held": True}]}
                 for gpu in range(8)]
    monkeypatch.setattr(services, "job_intervals", lambda job, since, until: [dict(i) for i in intervals])
    html = client_for("viewer").get("/analytics/jobs/7/").content.decode()
    table = html.split('data-testid="job-verdicts"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr data-gpu=") == 1
    assert '<th scope="row" data-testid="verdict-gpus">gpu-01/0–7</th>' in table
    assert "read_share /mnt/scratch = 96.2% &gt;= 80%: held" in table
    assert "(20.6 GB/s of 21.4 GB/s)" in table and "sm_active = 14% &lt; 50%: held" in table


@pytest.mark.django_db
def test_a_suggested_setting_reads_as_settings_not_a_dict(client_for, monkeypatch):
    from appliance.analytics import profiling

    now = timezone.now()
    finding = Finding.objects.create(key="input-bound:2", kind="input-bound", subject="job 2", job="2", severity=0.1,
                                     summary="s", proposal="p", evidence={}, window_start=now - timedelta(hours=1),
                                     window_end=now, first_seen=now, last_seen=now)
    monkeypatch.setattr(profiling, "suggest", lambda job, since, until: {"suggestions": [
        {"setting": "parallel_layout", "value": {"tensor_parallel": 8, "pipeline_parallel": 1}, "because": "b"},
        {"setting": "data_loader_workers", "value": 8, "because": "c"}]})
    html = client_for("viewer").get(f"/analytics/recommendations/{finding.pk}/").content.decode()
    assert '<strong data-testid="suggested-value">tensor_parallel=8, pipeline_parallel=1</strong>' in html
    assert '<strong data-testid="suggested-value">8</strong>' in html and "{&#x27;" not in html


@pytest.mark.django_db
def test_a_findings_and_a_jobs_times_are_in_the_portals_zone(client_for, settings):
    from datetime import UTC, datetime

    settings.TIME_ZONE = "Europe/Moscow"
    start, end = datetime(2026, 3, 2, 9, 0, tzinfo=UTC), datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    finding = Finding.objects.create(key="input-bound:3", kind="input-bound", subject="job 3", job="", severity=0.1,
                                     summary="s", proposal="p", evidence={}, window_start=start, window_end=end,
                                     first_seen=start, last_seen=end)
    html = client_for("viewer").get(f"/analytics/recommendations/{finding.pk}/").content.decode()
    assert ">2026-03-02 12:00 MSK</time> – <time" in html and ">2026-03-02 13:00 MSK</time></dd>" in html
    assert " UTC" not in html
