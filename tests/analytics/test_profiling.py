"""Auto-profiling: suggested settings from what a job measured, each with the figure it rests on."""

from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import profiling
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Platform
from appliance.telemetry.models import GpuRollup, NodeRollup

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
GIB = 1024


def test_mig_fit_takes_the_smallest_slice_that_holds_the_peak_with_room():
    assert profiling.mig_fit(9 * GIB, 81920) == {"profile": "1g.10gb", "compute_slices": 1, "memory_gib": 10,
                                                 "freed_slices": 6, "fits_per_gpu": 7, "need_gib": 9.9}
    assert profiling.mig_fit(12 * GIB, 81559)["profile"] == "1g.20gb"
    assert profiling.mig_fit(30 * GIB, 143771)["profile"] == "1g.35gb"       # H200 names
    assert profiling.mig_fit(75 * GIB, 81920) is None                         # only the whole GPU holds it
    assert profiling.mig_fit(5 * GIB, 40960) is None                          # no MIG table for a 40 GB part


def test_a_large_job_is_laid_out_tensor_parallel_in_the_node_and_pipelined_across():
    figures = {"util_mean": 92.0, "memory_peak_mib": 70 * GIB, "memory_need_mib": 16 * 70 * GIB,
               "gpu_memory_mib": 80 * GIB, "cpu_busy": 0.3, "cpu_iowait": 0.01, "cpus": 224, "gpus_per_node": 8}
    assert profiling.suggest_from(figures) == [{
        "setting": "parallel_layout", "value": {"tensor_parallel": 8, "pipeline_parallel": 2},
        "because": "memory need 1120.0 GiB (peak used, all its GPUs) against 72 GiB usable per GPU: tensor parallel 8 "
                   "within the NVLink domain of 8 GPUs, 2 pipeline stage(s) across nodes"}]


def test_a_small_service_gets_a_mig_slice_or_time_slicing_replicas():
    figures = {"util_mean": 8.0, "memory_peak_mib": 9 * GIB, "memory_need_mib": 9 * GIB, "gpu_memory_mib": 80 * GIB,
               "cpu_busy": None, "cpu_iowait": None, "cpus": None, "gpus_per_node": 8}
    suggestions = {s["setting"]: s for s in profiling.suggest_from(figures)}
    assert suggestions["mig_profile"]["value"] == "1g.10gb"
    assert suggestions["mig_profile"]["because"] == ("peak memory 9.0 GiB (+10% room) fits a 1g.10gb slice; "
                                                     "utilization 8.0% of a whole GPU; 6 compute slices freed per GPU")
    assert suggestions["time_slicing_replicas"]["value"] == 8
    assert suggestions["time_slicing_replicas"]["because"] == ("8 replicas of a GPU: by memory 9.0 of 80 GiB and by "
                                                               "utilization 8.0%")
    assert "batch_size_factor" not in suggestions and "data_loader_workers" not in suggestions


@pytest.fixture
def measured_job(db):
    appliance = Appliance.objects.create(name="demo")
    hgx = Platform.objects.create(slug="hgx-h100", name="HGX H100", file="platforms/hgx-h100.yml", digest="0" * 64,
                                  gpu_model="H100-SXM5-80GB", gpu_count=8, gpu_memory_mib=81920)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, platform=hgx,
                               management_address="10.0.0.11", facts={"cpus": 224})
    rows, node_rows = [], []
    for minute in range(3):
        start = T0 + timedelta(minutes=minute)
        for gpu in (0, 1):
            rows.append(GpuRollup(node=node, gpu=gpu, step=60, start=start, samples=60, job="5001", util=60.0,
                                  fb_used_mib=28 * GIB, fb_used_max_mib=30 * GIB, fb_total_mib=80 * GIB))
        node_rows.append(NodeRollup(node=node, step=60, start=start, samples=60, cpu_busy=0.4, cpu_iowait=0.25))
    GpuRollup.objects.bulk_create(rows)
    NodeRollup.objects.bulk_create(node_rows)
    return node


def test_a_job_stalled_with_cpus_to_spare_gets_workers_and_a_larger_batch(measured_job):
    result = profiling.suggest("5001", T0, T0 + timedelta(hours=1))
    assert result["figures"] == {"job": "5001", "gpus": 2, "nodes": ["gpu01"], "util_mean": 60.0,
                                      "memory_peak_mib": 30720, "memory_need_mib": 61440, "gpu_memory_mib": 81920,
                                      "cpu_busy": 0.4, "cpu_iowait": 0.25, "cpus": 224, "gpus_per_node": 8}
    assert result["suggestions"] == [
        {"setting": "data_loader_workers", "value": 28,
         "because": "GPUs at 60.0% with CPUs 40% busy and iowait 25%: up to 28 workers per GPU (the node's cores per "
                    "GPU), with prefetching"},
        {"setting": "batch_size_factor", "value": 2,
         "because": "peak memory 30.0 GiB of 80 GiB (38%): a batch about 2 times larger fills 90%"},
        {"setting": "parallel_layout", "value": {"tensor_parallel": 1, "pipeline_parallel": 1},
         "because": "memory need 60.0 GiB (peak used, all its GPUs) against 72 GiB usable per GPU: tensor parallel 1 "
                    "within the NVLink domain of 8 GPUs, 1 pipeline stage(s) across nodes"},
    ]


def test_profile_api_for_every_role_and_its_errors(measured_job, client_for):
    viewer = client_for(Role.VIEWER)
    window = "since=2026-01-01T10:00:00Z&until=2026-01-01T11:00:00Z"
    response = viewer.get(f"/api/v1/analytics/profiles/5001/?{window}")
    assert response.status_code == 200 and response.json()["suggestions"][0]["value"] == 28
    missing = viewer.get(f"/api/v1/analytics/profiles/9999/?{window}")
    assert missing.status_code == 404 and missing.json()["error"]["message"].startswith(
        "job 9999: no GPU measurements between")
    bad = viewer.get("/api/v1/analytics/profiles/5001/?since=yesterday")
    assert bad.status_code == 400 and bad.json()["error"]["fields"] == {
        "since": ["since: 'yesterday' is not a time (ISO 8601, e.g. 2026-01-05 or 2026-01-05T10:00:00Z)"]}


@pytest.mark.postgres
def test_a_time_with_any_offset_python_takes_is_read_in_utc(measured_job, client_for):
    """Found by schemathesis on PostgreSQL (a 500): an offset Python takes and PostgreSQL does not (past 15:59)."""
    viewer = client_for(Role.VIEWER)
    far = viewer.get("/api/v1/analytics/profiles/5001/", {"since": "2026-01-01T00:00:00+16:23",
                                                           "until": "2026-01-01T11:00:00+00:00"})
    assert far.status_code == 200, far.content
    out = viewer.get("/api/v1/analytics/profiles/5001/", {"since": "0001-01-01T00:00:00+16:00"})
    assert out.status_code == 400 and out.json()["error"]["fields"] == {
        "since": ["since: 0001-01-01T00:00:00+16:00 is out of range in UTC"]}
