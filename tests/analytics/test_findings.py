"""Findings from hand-built CauseHour and rollup rows: each detector's figures and proposal written out,
refresh opening, updating and resolving findings (audited), and the decisions by role (a Viewer can read,
not decide; a dismissal needs a reason; accepting an idle pool's finding proposes its lending plan)."""

import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from appliance.analytics import findings
from appliance.analytics.models import CauseHour, Finding
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import GPU, Appliance, Node, Platform, Pool, PoolMembership
from appliance.telemetry.models import GpuRollup, NodeRollup

DAY0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)   # a Monday
JOB_HOUR = DAY0 + timedelta(days=2, hours=10)
SINCE, UNTIL = DAY0 + timedelta(days=2), DAY0 + timedelta(days=3)
HOUR = 3600.0
GIB = 1024  # MiB
IDLE_HOURS = (22, 23, 0, 1, 2, 3, 4, 5, 6)


def cause(node, gpu, hour, job="", pool="training", user="", **seconds):
    values = {"gpu_seconds": HOUR, "used_seconds": 0.0} | seconds
    return CauseHour(hour=hour, node=node, gpu=gpu, job=job, pool=pool, user=user, **values)


@pytest.fixture
def site(db):
    appliance = Appliance.objects.create(name="demo")
    hgx = Platform.objects.create(slug="hgx-h100", name="HGX H100", file="platforms/hgx-h100.yml", digest="0" * 64,
                                  gpu_model="H100-SXM5-80GB", gpu_count=8, gpu_memory_mib=81920)
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    nodes = {}
    for number, pool in ((1, training), (2, training), (3, training), (9, inference)):
        facts = {}
        if number == 1:
            facts = {"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100, "write_mbps": 1800}]},
                     "gds": {"verified": True}}
        node = Node.objects.create(appliance=appliance, name=f"gpu0{number}", role=Node.Role.GPU, platform=hgx,
                                   management_address=f"10.0.0.{10 + number}", facts=facts)
        PoolMembership.objects.create(pool=pool, node=node)
        nodes[node.name] = node
    GPU.objects.create(node=nodes["gpu09"], index=0, model="H100-SXM5-80GB", memory_mib=80 * GIB)
    gpu01, gpu02, gpu03, gpu09 = (nodes[n] for n in ("gpu01", "gpu02", "gpu03", "gpu09"))
    rows = []
    # The training pool over three days: gpu01 and gpu02 unallocated from 22:00 to 07:00, gpu03 busy then;
    # all three busy the rest of the day. One row per node holds its 8 GPUs' seconds (brevity).
    for day in range(3):
        for hour in range(24):
            moment = DAY0 + timedelta(days=day, hours=hour)
            for node in (gpu01, gpu02, gpu03):
                idle = hour in IDLE_HOURS and node is not gpu03
                rows.append(cause(node, 7, moment, gpu_seconds=8 * HOUR, used_seconds=0.0 if idle else 8 * HOUR * 0.9,
                                  idle_unallocated_s=8 * HOUR if idle else 0.0, busy_s=0.0 if idle else 8 * HOUR))
    # Job 4182 of bob on gpu01 (GPUs 0 and 1): input-bound 38% of its 2 GPU-hours.
    for gpu in (0, 1):
        rows.append(cause(gpu01, gpu, JOB_HOUR, "4182", user="bob", used_seconds=0.6 * HOUR, input_bound_s=0.38 * HOUR,
                          busy_s=0.62 * HOUR))
    # Job 77 on gpu02 (GPUs 0-3): GPU 3 straggles 83% of its hour at 97% while the others compute at 35%.
    for gpu in (0, 1, 2):
        rows.append(cause(gpu02, gpu, JOB_HOUR, "77", used_seconds=0.35 * HOUR, communication_bound_s=0.83 * HOUR,
                          busy_s=0.17 * HOUR))
    rows.append(cause(gpu02, 3, JOB_HOUR, "77", used_seconds=0.97 * HOUR, straggler_s=0.83 * HOUR,
                      busy_s=0.17 * HOUR))
    # Job 88 on GPU 5 of gpu02: throttled 20% of its hour.
    rows.append(cause(gpu02, 5, JOB_HOUR, "88", used_seconds=0.8 * HOUR, throttled_s=0.2 * HOUR, busy_s=0.8 * HOUR))
    # A notebook of alice's on gpu03 (GPUs 0 and 1) for two hours, idle 83% of the time.
    for hour in (0, 1):
        for gpu in (0, 1):
            rows.append(cause(gpu03, gpu, JOB_HOUR + timedelta(hours=hour), "notebook-1", user="alice",
                              used_seconds=0.05 * HOUR, allocated_idle_s=3000.0, busy_s=600.0))
    # Service chat-7b on gpu09: 9 GiB of the 80 GiB GPU used, 12% of its compute, memory-only 90% of the hour.
    rows.append(cause(gpu09, 0, JOB_HOUR, "chat-7b", pool="inference", used_seconds=0.12 * HOUR,
                      memory_only_s=0.9 * HOUR, busy_s=0.1 * HOUR, memory_used_mib_s=9 * GIB * HOUR,
                      memory_held_mib_s=80 * GIB * HOUR))
    CauseHour.objects.bulk_create(rows)
    NodeRollup.objects.create(node=gpu01, step=60, start=JOB_HOUR + timedelta(minutes=5), samples=60,
                              fs_read_bps=1.995e9, cpu_busy=1.0, cpu_iowait=0.3,
                              mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 1.995e9}})
    NodeRollup.objects.create(node=gpu02, step=60, start=JOB_HOUR + timedelta(minutes=5), samples=60,
                              ib_tx_bps=30e9, ib_rx_bps=28e9, ib_line_bps=50e9, ib_xmit_wait=1200.0)
    GpuRollup.objects.bulk_create([
        GpuRollup(node=gpu02, gpu=3, step=3600, start=JOB_HOUR, samples=3600, job="77", util=97.0,
                  sm_clock_mhz=1620.0, throttle_reasons=0x4, throttled_share=0.6, temp_c=71.0, power_w=700.0),
        GpuRollup(node=gpu02, gpu=5, step=3600, start=JOB_HOUR, samples=3600, job="88", util=80.0,
                  sm_clock_mhz=1500.0, throttle_reasons=0x20, throttled_share=0.2, temp_c=52.0, temp_max_c=90.0,
                  power_w=520.0),
    ])
    return nodes


def by_kind(candidates):
    return {(c.kind, c.subject): c for c in candidates}


def test_input_bound_job_with_the_mounts_measured_throughput_cpu_and_gdscheck(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    job = found[("input-bound", "4182")]
    assert job.summary == ("job 4182 was input-bound 38% of its time (0.76 of 2.0 GPU-hours): reads on /mnt/scratch "
                           "at 95% of the mount's measured 2.1 GB/s, CPU at 100%, iowait 30% (user bob)")
    assert job.proposal == ("stage the dataset to local NVMe (/mnt/scratch delivers no more); move preprocessing off "
                            "the CPUs or pre-process the dataset once (CPU was at 100%: more data-loader workers cannot "
                            "help); enable GPUDirect Storage (gdscheck passes on gpu01)")
    assert job.evidence["mounts"] == [{"node": "gpu01", "mount": "/mnt/scratch", "read_bps": 1995000000,
                                       "measured_bps": 2100000000, "reference": "smoke test", "share": 0.95}]
    assert job.severity == 0.76
    assert job.evidence["user"] == "bob"
    assert {kind for kind, subject in found if subject == "4182"} == {"input-bound"}


def test_straggler_gpu_how_much_slower_and_its_throttle_cause(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    gpu = found[("straggler", "gpu02/gpu3")]
    assert gpu.summary == ("GPU 3 of gpu02 held back 1 of its 1 jobs (straggler 83% of its time): in the 1 hour(s) it "
                           "straggled (2026-01-07 10:00 to 11:00 UTC) it ran 64% slower than its peers (utilization "
                           "97% vs 35%) (throttled: power)")
    assert gpu.proposal == "check power: the power cap, the PSUs and the power brake of this node"
    assert (gpu.evidence["slower"], gpu.evidence["sm_clock_mhz"], gpu.node_id) == (0.6392, 1620.0, site["gpu02"].pk)
    assert ("straggler", "gpu02/gpu0") not in found


def test_communication_bound_job_points_at_the_gpu_its_peers_wait_for(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    job = found[("communication-bound", "77")]
    assert job.summary == ("job 77 waited on communication 62% of its time (2.49 of 4.0 GPU-hours): InfiniBand at 60% "
                           "of line rate")
    assert job.proposal == ("its GPUs wait for GPU 3 of gpu02 in every collective: fix that straggler first (see its "
                            "finding)")
    assert job.evidence["fabric"] == {"gpu02": {"line_share": 0.6, "xmit_wait": 1200.0}}


def test_throttled_gpu_with_reason_clock_and_temperature(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    gpu = found[("throttled", "gpu02/gpu5")]
    # The hour's mean (52 °C) is not the heat it throttled at: the hottest it read in the hours it reported
    # a thermal slowdown, against the 87 °C at which an H100 first slows for heat.
    assert gpu.summary == ("GPU 5 of gpu02 was throttled 20% of its time (0.2 GPU-hours; reason: thermal; SM clock "
                           "1500.0 MHz of 1980; up to 90 °C, at or above the 87 °C at which an H100 slows for heat)")
    assert gpu.proposal == "check cooling: airflow, fans, inlet temperature and the heatsink of this GPU"
    assert gpu.evidence["thermal_temp_max_c"] == 90.0
    assert [k for k in found if k[0] == "throttled"] == [("throttled", "gpu02/gpu5")]


def test_a_thermal_slowdown_at_a_temperature_no_h100_slows_at_doubts_the_sensor(site):
    GpuRollup.objects.filter(gpu=5).update(temp_c=49.7, temp_max_c=None)
    gpu = by_kind(findings.detect(SINCE, UNTIL).candidates)[("throttled", "gpu02/gpu5")]
    assert gpu.summary == ("GPU 5 of gpu02 was throttled 20% of its time (0.2 GPU-hours; reason: thermal; SM clock "
                           "1500.0 MHz of 1980; a thermal slowdown reported at no more than 50 °C, below the 87 °C at "
                           "which an H100 slows for heat: its temperature sensor or board is suspect)")
    assert gpu.proposal == ("check the GPU's temperature sensor and board (dcgmi diag -r 2): it reports a thermal "
                            "slowdown at 50 °C, far from the heat that slows an H100")
    assert "check cooling" not in gpu.proposal  # no fan makes a 50 °C GPU cooler


def test_allocated_idle_job_gpu_hours_held_idle(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    job = found[("allocated-idle", "notebook-1")]
    assert job.summary == ("job notebook-1 held 2 GPU(s) idle 83% of its time: 3.33 GPU-hours held doing nothing "
                           "(user alice)")
    assert "time limit" in job.proposal and job.evidence["gpus"] == ["gpu03/gpu0", "gpu03/gpu1"]


def test_memory_only_service_gets_the_smallest_mig_slice_that_fits(site):
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    service = found[("memory-only", "chat-7b")]
    assert service.summary == "service chat-7b uses 9.0 GB and 12% of a 80 GB GPU (memory only 90% of its time)"
    assert service.proposal == "a 1g.10gb MIG slice would serve it, freeing 6 slices"
    assert service.evidence["mig"]["profile"] == "1g.10gb" and service.pool == "inference"


def test_pool_idle_window_over_days_lends_the_idle_nodes(site):
    found = by_kind(findings.detect(SINCE, UNTIL, pool_since=DAY0).candidates)
    pool = found[("pool-idle", "training")]
    assert pool.summary == "training pool idle 67% between 22:00 and 07:00 (UTC) for 3 days"
    assert pool.proposal == "lend 2 node(s) (gpu01, gpu02) to the inference pool in that window"
    assert (pool.evidence["fewest_idle_gpus"], pool.evidence["window_hours"], pool.severity) == (16.0, [22, 7], 144.0)
    assert ("pool-idle", "inference") not in found  # one day measured: too few


def test_straggler_slowdown_is_measured_over_the_hours_it_straggled_only(site):
    # Job 77 runs two more hours on gpu02 with GPU 3 as fast as its peers (60%): over the job, GPU 3 ran
    # 1 - (0.35 + 0.6 + 0.6) / (0.97 + 0.6 + 0.6) = 29% slower; in the hour it straggled, 64%.
    for hour in (1, 2):
        for gpu in range(4):
            CauseHour.objects.create(hour=JOB_HOUR + timedelta(hours=hour), node=site["gpu02"], gpu=gpu, job="77",
                                     pool="training", gpu_seconds=HOUR, used_seconds=0.6 * HOUR, busy_s=HOUR)
    gpu = by_kind(findings.detect(SINCE, UNTIL).candidates)[("straggler", "gpu02/gpu3")]
    assert "in the 1 hour(s) it straggled (2026-01-07 10:00 to 11:00 UTC) it ran 64% slower" in gpu.summary
    assert (gpu.evidence["slower"], gpu.evidence["utilization"], gpu.evidence["peers_utilization"]) == (
        0.6392, 0.97, 0.35)
    assert gpu.evidence["hours_straggled"] == ["2026-01-07T10:00:00+00:00"]


def test_straggler_barely_slower_than_its_peers_is_no_finding(site):
    # GPU 3 straggles 83% of the hour but at 38% against its peers' 35%: 8% slower, under the 10% threshold.
    CauseHour.objects.filter(node=site["gpu02"], gpu=3, job="77").update(used_seconds=0.38 * HOUR)
    found = by_kind(findings.detect(SINCE, UNTIL).candidates)
    assert ("straggler", "gpu02/gpu3") not in found
    assert "straggler:gpu02/gpu3" in findings.detect(SINCE, UNTIL).measured  # measured: an open one resolves


def _long_job_on_gpu3(gpu02):
    # After job 77, GPU 3 of gpu02 runs job 90 alone for five hours at 90%, never straggling: GPU 3 straggled
    # 0.83 of the 6 hours it held for its jobs (14%), but 83% of job 77's hour.
    for hour in range(1, 6):
        CauseHour.objects.create(hour=JOB_HOUR + timedelta(hours=hour), node=gpu02, gpu=3, job="90",
                                 pool="training", gpu_seconds=HOUR, used_seconds=0.9 * HOUR, busy_s=HOUR)


def test_straggler_that_held_back_one_job_all_along_is_found_among_jobs_that_ran_well(site):
    _long_job_on_gpu3(site["gpu02"])
    gpu = by_kind(findings.detect(SINCE, UNTIL).candidates)[("straggler", "gpu02/gpu3")]
    assert gpu.summary == ("GPU 3 of gpu02 held back 1 of its 2 jobs (straggler 14% of its time, 83% of its time in "
                           "job 77): in the 1 hour(s) it straggled (2026-01-07 10:00 to 11:00 UTC) it ran 64% slower "
                           "than its peers (utilization 97% vs 35%) (throttled: power)")
    assert (gpu.evidence["share"], gpu.evidence["worst_job"], gpu.evidence["jobs"]) == (
        0.1383, {"job": "77", "share": 0.83}, ["77", "90"])
    assert gpu.severity == 0.83


def test_straggler_under_the_share_in_every_job_is_no_finding(site):
    # GPU 3 straggles 15% of job 77's hour and none of job 90's: under 20% overall and in each job.
    _long_job_on_gpu3(site["gpu02"])
    CauseHour.objects.filter(node=site["gpu02"], gpu=3, job="77").update(straggler_s=0.15 * HOUR, busy_s=0.85 * HOUR)
    result = findings.detect(SINCE, UNTIL)
    assert ("straggler", "gpu02/gpu3") not in by_kind(result.candidates)
    assert "straggler:gpu02/gpu3" in result.measured
    # The detector itself, given every row (not only those the database's sums flagged), agrees.
    rows = list(CauseHour.objects.filter(hour__gte=SINCE, hour__lt=UNTIL).values(*findings.ROW_FIELDS))
    assert ("straggler", "gpu02/gpu3") not in by_kind(findings.detect_stragglers(rows, SINCE, UNTIL).candidates)


def test_straggler_hours_and_pool_idle_window_in_the_appliances_time_zone(site, settings):
    settings.TIME_ZONE = "Europe/Berlin"  # UTC+1 in January: the idle hours 22-07 UTC are 23-08 local
    found = by_kind(findings.detect(SINCE, UNTIL, pool_since=DAY0).candidates)
    pool = found[("pool-idle", "training")]
    assert pool.summary == "training pool idle 67% between 23:00 and 08:00 (Europe/Berlin) for 3 days"
    assert (pool.evidence["window_hours"], pool.evidence["time_zone"]) == ([23, 8], "Europe/Berlin")
    assert "(2026-01-07 11:00 to 12:00 Europe/Berlin)" in found[("straggler", "gpu02/gpu3")].summary
    start, end = findings._next_window([23, 8], datetime(2026, 1, 8, 12, 0, tzinfo=UTC))
    assert (start, end) == (datetime(2026, 1, 8, 22, 0, tzinfo=UTC), datetime(2026, 1, 9, 7, 0, tzinfo=UTC))


def test_refresh_opens_updates_and_resolves_audited(site):
    first = findings.refresh(SINCE, UNTIL)
    assert first["opened"] == ["allocated-idle:notebook-1", "communication-bound:77", "input-bound:4182", "memory-only:chat-7b",
                               "pool-idle:training", "straggler:gpu02/gpu3", "throttled:gpu02/gpu5"]
    record = AuditRecord.objects.filter(event="analytics.findings.refresh").get()
    assert record.details["opened_count"] == 7 and record.details["resolved_count"] == 0
    again = findings.refresh(SINCE, UNTIL)
    assert (again["opened"], again["updated"], again["resolved"]) == ([], 7, [])
    assert AuditRecord.objects.filter(event="analytics.findings.refresh").count() == 1  # nothing opened or resolved
    CauseHour.objects.filter(job="4182").update(input_bound_s=0.0, busy_s=HOUR)
    third = findings.refresh(SINCE, UNTIL)
    assert third["resolved"] == ["input-bound:4182"]
    assert Finding.objects.get(key="input-bound:4182").state == "resolved"
    assert AuditRecord.objects.filter(event="analytics.findings.refresh").count() == 2


@pytest.fixture
def opened(site):
    findings.refresh(SINCE, UNTIL)
    return {f.key: f for f in Finding.objects.all()}


def test_viewer_reads_but_cannot_accept_or_dismiss(opened, client_for):
    viewer = client_for(Role.VIEWER)
    finding = opened["input-bound:4182"]
    listed = viewer.get("/api/v1/analytics/findings/?kind=input-bound")
    assert listed.status_code == 200 and [f["key"] for f in listed.json()["findings"]] == ["input-bound:4182"]
    assert viewer.get(f"/api/v1/analytics/findings/{finding.pk}/").json()["summary"] == finding.summary
    assert viewer.get("/analytics/recommendations/").status_code == 200
    page = viewer.get(f"/analytics/recommendations/{finding.pk}/")
    assert page.status_code == 200 and b"data-dismiss" not in page.content
    for path in (f"/api/v1/analytics/findings/{finding.pk}/accept/", f"/api/v1/analytics/findings/{finding.pk}/dismiss/",
                 f"/analytics/recommendations/{finding.pk}/accept/", f"/analytics/recommendations/{finding.pk}/dismiss/"):
        response = viewer.post(path, {"reason": "not now"}, content_type="application/json")
        assert response.status_code == 403, path
    assert Finding.objects.get(pk=finding.pk).state == "open"


def test_dismiss_requires_a_reason_and_is_audited(opened, client_for):
    operator = client_for(Role.OPERATOR)
    finding = opened["straggler:gpu02/gpu3"]
    refused = operator.post(f"/api/v1/analytics/findings/{finding.pk}/dismiss/", {"reason": "  "},
                            content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"]["fields"] == {
        "reason": ["reason: say why the finding is dismissed"]}
    assert operator.post(f"/analytics/recommendations/{finding.pk}/dismiss/", {"reason": ""}).status_code == 400
    done = operator.post(f"/api/v1/analytics/findings/{finding.pk}/dismiss/", {"reason": "GPU replaced on Monday"},
                         content_type="application/json")
    assert done.status_code == 200 and done.json()["state"] == "dismissed"
    record = AuditRecord.objects.filter(event="analytics.finding.dismiss").get()
    assert (record.reason, record.actor_username) == ("GPU replaced on Monday", "operator-user")
    again = operator.post(f"/api/v1/analytics/findings/{finding.pk}/dismiss/", {"reason": "twice"},
                          content_type="application/json")
    assert again.status_code == 400 and "dismissed already" in again.json()["error"]["message"]
    # A dismissed finding found again keeps the decision.
    findings.refresh(SINCE, UNTIL)
    assert Finding.objects.get(pk=finding.pk).state == "dismissed"


def test_accept_in_the_portal_is_audited(opened, client_for):
    operator = client_for(Role.OPERATOR)
    finding = opened["allocated-idle:notebook-1"]
    response = operator.post(f"/analytics/recommendations/{finding.pk}/accept/", {"reason": "told alice"})
    assert response.status_code == 302
    finding.refresh_from_db()
    assert (finding.state, finding.decided_by, finding.reason) == ("accepted", "operator-user", "told alice")
    assert AuditRecord.objects.filter(event="analytics.finding.accept", target_id=str(finding.pk)).count() == 1


def test_accepting_an_idle_pool_proposes_its_lending_plan(site, client_for):
    from appliance.lending.models import LendingPlan, LendingPolicy

    findings.refresh(DAY0 + timedelta(days=2), DAY0 + timedelta(days=3))
    finding = Finding.objects.get(key="pool-idle:training")
    LendingPolicy.objects.create(pool=Pool.objects.get(name="training"), may_lend=True, minimum_nodes=1)
    response = client_for(Role.OPERATOR).post(f"/api/v1/analytics/findings/{finding.pk}/accept/", {},
                                              content_type="application/json")
    assert response.status_code == 200, response.content
    plan = LendingPlan.objects.get(pk=response.json()["plan"])
    assert (plan.nodes, plan.from_pool.name, plan.to_pool.name, plan.finding_id) == (
        ["gpu01", "gpu02"], "training", "inference", finding.pk)
    assert (plan.window_end - plan.window_start) <= timedelta(hours=9) and plan.window_end.hour == 7
    assert AuditRecord.objects.filter(event="analytics.finding.accept").get().details["plan"] == plan.pk
    viewer = client_for(Role.VIEWER)
    assert viewer.get(f"/api/v1/analytics/findings/{finding.pk}/").json()["plans"] == [
        {"id": plan.pk, "state": plan.state}]
    assert f'href="/lending/plans/{plan.pk}/"' in viewer.get(f"/analytics/recommendations/{finding.pk}/").content.decode()


def test_accepting_an_idle_pool_whose_policy_forbids_lending_changes_nothing(site, client_for):
    findings.refresh(SINCE, UNTIL)
    finding = Finding.objects.get(key="pool-idle:training")
    response = client_for(Role.ADMINISTRATOR).post(f"/api/v1/analytics/findings/{finding.pk}/accept/", {},
                                                   content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "from_pool: the policy of pool training does not allow lending its nodes"
    assert Finding.objects.get(pk=finding.pk).state == "open"
    assert not AuditRecord.objects.filter(event="analytics.finding.accept").exists()


def test_list_refuses_an_unknown_state(opened, client_for):
    response = client_for(Role.VIEWER).get("/api/v1/analytics/findings/?state=closed")
    assert response.status_code == 400 and list(response.json()["error"]["fields"]) == ["state"]


def test_the_inbox_shows_an_operator_the_decisions_and_filters_by_kind(opened, client_for):
    operator = client_for(Role.OPERATOR)
    finding = opened["memory-only:chat-7b"]
    page = operator.get("/analytics/recommendations/?kind=memory-only").content.decode()
    assert "a 1g.10gb MIG slice would serve it, freeing 6 slices" in page and "job 4182" not in page
    detail = operator.get(f"/analytics/recommendations/{finding.pk}/").content.decode()
    assert f'data-accept="{finding.pk}"' in detail and f'data-dismiss="{finding.pk}"' in detail
    assert operator.get("/analytics/recommendations/?state=closed").status_code == 400


def test_the_refresh_task_runs_every_15_minutes(db):
    from appliance.analytics import tasks
    from appliance.celery import beat_schedule

    assert beat_schedule()["analytics-findings"] == {"task": "analytics.refresh_findings", "schedule": 900}
    result = tasks.refresh_findings()
    assert (result["found"], result["opened"], result["resolved"]) == (0, [], [])
    assert not AuditRecord.objects.filter(event="analytics.findings.refresh").exists()


def _findings_command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("analytics", "findings", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_refreshes_over_a_window_and_lists_the_largest_first(site):
    out, err = _findings_command("--refresh", "--since", "2026-01-07", "--until", "2026-01-08", "--json")
    assert err.strip() == ("Refreshed over 2026-01-07T00:00:00+00:00 to 2026-01-08T00:00:00+00:00: 7 found, "
                           "7 opened, 0 updated, 0 resolved")
    listed = json.loads(out)
    assert (listed["state"], listed["kind"], listed["count"]) == ("open", "", 7)
    assert {f["key"] for f in listed["findings"]} == {
        "allocated-idle:notebook-1", "communication-bound:77", "input-bound:4182", "memory-only:chat-7b",
        "pool-idle:training", "straggler:gpu02/gpu3", "throttled:gpu02/gpu5"}
    severities = [f["severity_gpu_hours"] for f in listed["findings"]]
    assert severities == sorted(severities, reverse=True)
    assert AuditRecord.objects.filter(event="analytics.findings.refresh").count() == 1


def test_the_command_prints_a_finding_with_its_figures_and_proposal(opened):
    out, _ = _findings_command("--kind", "input-bound")
    finding = opened["input-bound:4182"]
    assert out.splitlines() == [f"#{finding.pk} input-bound 4182 (open, 0.76 GPU-h at stake)",
                                f"  {finding.summary}", f"  Proposal: {finding.proposal}"]
    assert "/mnt/scratch" in out and "2.1 GB/s" in out
    assert _findings_command("--state", "dismissed")[0] == "No finding (state dismissed).\n"


@pytest.mark.parametrize(("args", "message"), [
    (("--state", "closed"), "argument --state: invalid choice: 'closed'"),
    (("--kind", "idle"), "argument --kind: invalid choice: 'idle'"),
    (("--until", "2026-01-08"), "--since/--until: only with --refresh"),
    (("--refresh", "--since", "yesterday"), "--since: 'yesterday' is not a time"),
    (("--refresh", "--since", "2026-01-08", "--until", "2026-01-07"),
     "--since/--until: until 2026-01-07T00:00:00+00:00 is not after since 2026-01-08T00:00:00+00:00"),
])
def test_the_command_names_a_bad_argument_and_changes_nothing(site, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        _findings_command(*args)
    assert not Finding.objects.exists()
    assert not AuditRecord.objects.filter(event="analytics.findings.refresh").exists()


# ---- a finding's figures are its own job's minutes, and its proposal follows from them ---------------------

SHARED_HOUR = DAY0 + timedelta(days=2, hours=14)


def shared_gpus(db, *, first: dict, second: dict, job_kind="input", pool_kind=Pool.Kind.TRAINING, gds=True,
                peers_sm=None):
    """gpu05 (its smoke test: /mnt/scratch at 2,100 MB/s) in one hour: job "A" holds GPUs 0 and 1 for the first 30
    minutes, job "B" for the last 30. `first` and `second` are the node's figures in each half; A's GPUs stall
    (SM activity 0.15) where `job_kind` is "input" or "nccl", B's compute (0.9). With `peers_sm`, A runs on
    GPUs 0-3 at full utilization, GPU 0 at SM activity 0.9 and the others at `peers_sm`."""
    appliance = Appliance.objects.create(name="shared")
    pool = Pool.objects.create(appliance=appliance, name="pool-a", kind=pool_kind)
    facts = {"storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 2100}]}} | (
        {"gds": {"verified": True}} if gds else {})
    node = Node.objects.create(appliance=appliance, name="gpu05", role=Node.Role.GPU, management_address="10.0.0.15",
                               facts=facts)
    PoolMembership.objects.create(pool=pool, node=node)
    gpus = (0, 1, 2, 3) if peers_sm is not None else (0, 1)
    rollups, nodes = [], []
    for minute in range(60):
        start = SHARED_HOUR + timedelta(minutes=minute)
        mine = minute < 30
        figures = first if mine else second
        nodes.append(NodeRollup(node=node, step=60, start=start, samples=60, cpu_busy=figures.get("cpu", 0.3),
                                cpu_iowait=figures.get("iowait", 0.01), fs_read_bps=figures.get("read", 0.1e9),
                                ib_tx_bps=figures.get("ib", 0.0), ib_rx_bps=figures.get("ib", 0.0),
                                ib_line_bps=figures.get("line", 400e9),
                                mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": figures.get("read", 0.1e9)}}))
        for gpu in gpus:
            if mine and peers_sm is not None:
                sm, util = (0.9 if gpu == 0 else peers_sm), 100.0
            elif mine:
                sm, util = 0.15, (30.0 if job_kind == "input" else 90.0)
            else:
                sm, util = 0.9, 98.0
            rollups.append(GpuRollup(node=node, gpu=gpu, step=60, start=start, samples=60, job="A" if mine else "B",
                                     util=util, sm_active=sm, fb_used_mib=60 * GIB, fb_total_mib=80 * GIB,
                                     sm_clock_mhz=1980.0, throttled_share=0.0))
    GpuRollup.objects.bulk_create(rollups)
    NodeRollup.objects.bulk_create(nodes)
    half = HOUR / 2
    cause_of_a = {"input": "input_bound_s", "nccl": "communication_bound_s", "memory": "memory_only_s"}[job_kind]
    rows = []
    for gpu in gpus:
        if peers_sm is not None:
            rows.append(cause(node, gpu, SHARED_HOUR, "A", pool="pool-a", gpu_seconds=half, used_seconds=half,
                              **({"straggler_s": half} if gpu == 0 else {"communication_bound_s": half})))
        else:
            rows.append(cause(node, gpu, SHARED_HOUR, "A", pool="pool-a", gpu_seconds=half, used_seconds=0.1 * half,
                              **{cause_of_a: half}))
        rows.append(cause(node, gpu, SHARED_HOUR, "B", pool="pool-a", gpu_seconds=half, used_seconds=0.9 * half,
                          busy_s=half))
    CauseHour.objects.bulk_create(rows)
    return node


def found(kind, subject="A"):
    return by_kind(findings.detect(SINCE, UNTIL).candidates).get((kind, subject))


def test_an_input_bound_jobs_reads_are_its_own_minutes_not_the_hours_it_shared(db):
    """A read /mnt/scratch at 1.9 of its 2.1 GB/s while it waited; B, on the same GPUs the next half hour,
    read 0.1 GB/s: over the hour, 48%; over A's own minutes, 90%. The mount is the limit: stage the data or
    read it with GPUDirect Storage, not more loaders."""
    shared_gpus(db, first={"read": 1.9e9, "iowait": 0.3, "cpu": 0.5}, second={"read": 0.1e9})
    finding = found("input-bound")
    assert finding.evidence["mounts"] == [{"node": "gpu05", "mount": "/mnt/scratch", "read_bps": 1900000000,
                                           "measured_bps": 2100000000, "reference": "smoke test", "share": 0.9048}]
    assert (finding.evidence["over"], finding.evidence["minutes"]) == ("the job's own input-bound minutes", 30)
    assert (finding.evidence["cpu_busy"], finding.evidence["cpu_iowait"]) == (0.5, 0.3)
    assert finding.summary == ("job A was input-bound 100% of its time (1.0 of 1.0 GPU-hours): reads on /mnt/scratch "
                               "at 90% of the mount's measured 2.1 GB/s, CPU at 50%, iowait 30%")
    assert finding.proposal == ("stage the dataset to local NVMe (/mnt/scratch delivers no more); enable GPUDirect "
                                "Storage (gdscheck passes on gpu05)")


def test_an_input_bound_job_on_a_mount_with_room_and_free_cpus_gets_more_loaders_not_staging(db):
    shared_gpus(db, first={"read": 0.6e9, "iowait": 0.3, "cpu": 0.5}, second={"read": 2.0e9})
    finding = found("input-bound")
    assert finding.evidence["mounts"][0]["share"] == 0.2857  # 0.6 of 2.1 GB/s (B's reads were 95%)
    assert finding.proposal == "raise data-loader workers and prefetching (CPU at 50%, iowait 30%)"


def test_an_input_bound_job_with_saturated_cpus_is_not_told_to_add_loaders(db):
    shared_gpus(db, first={"read": 0.6e9, "iowait": 0.05, "cpu": 0.95}, second={"read": 0.1e9, "cpu": 0.2}, gds=False)
    finding = found("input-bound")
    assert finding.evidence["cpu_busy"] == 0.95  # over the hour: 0.575
    assert finding.proposal == ("move preprocessing off the CPUs or pre-process the dataset once (CPU was at 95%: "
                                "more data-loader workers cannot help)")


def test_a_communication_bound_jobs_fabric_is_read_over_its_own_minutes(db):
    """InfiniBand at 90% of line rate while A waited, idle under B: 45% over the hour, which read "not
    saturated"."""
    shared_gpus(db, job_kind="nccl", first={"ib": 360e9}, second={"ib": 0.0})
    finding = found("communication-bound")
    assert finding.evidence["ib_line_share"] == 0.9
    assert "InfiniBand at 90% of line rate" in finding.summary
    assert finding.proposal == ("the fabric is the limit: place the job on nodes under fewer leaf switches "
                                "(topology-aware placement), overlap communication with compute (gradient bucketing), "
                                "or compress gradients")


def test_a_communication_bound_job_with_no_fabric_figures_is_not_told_the_fabric_is_free(db):
    shared_gpus(db, job_kind="nccl", first={"line": None}, second={})
    finding = found("communication-bound")
    assert finding.evidence["ib_line_share"] is None
    assert "not saturated" not in finding.proposal
    assert finding.proposal.startswith("the fabric's load was not measured in these minutes")


def test_a_stragglers_slowdown_compares_sm_activity_the_field_its_verdict_used(db):
    """Every GPU of A at 100% utilization (NCCL's kernels stay resident): by utilization GPU 0 is no slower;
    by SM activity, 0.9 against its peers' 0.6, they wait a third of each step."""
    shared_gpus(db, first={}, second={}, peers_sm=0.6)
    finding = found("straggler", "gpu05/gpu0")
    assert (finding.evidence["metric"], finding.evidence["utilization"], finding.evidence["peers_utilization"],
            finding.evidence["slower"]) == ("sm_active", 0.9, 0.6, 0.3333)
    assert "ran 33% slower than its peers (SM activity 90% vs 60% in the minutes it straggled)" in finding.summary


def test_a_training_jobs_memory_only_finding_does_not_call_it_a_service(db):
    shared_gpus(db, job_kind="memory", first={}, second={})
    finding = found("memory-only")
    assert finding.summary.startswith("job A uses ")
