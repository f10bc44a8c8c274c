"""The ledger's `user`: each Slurm job's owner as the simulated appliance's real Slurm names it (squeue),
asked once a job and kept; an inference service has none; a job whose rows were written while Slurm could
not answer gets its user once Slurm answers, and the Efficiency summaries follow."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from appliance.analytics import ledger, owners, services
from appliance.analytics.models import CauseHour, JobOwner, JobTotal, PoolUserHour
from appliance.inventory.models import Node
from appliance.simulation import slurm
from appliance.telemetry.models import GpuRollup
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def rollup(node, gpu, minute, job):
    return GpuRollup(node=node, gpu=gpu, step=60, start=T0 + minute * MINUTE, samples=60, job=job, util=90.0,
                     sm_active=0.8, fb_used_mib=40960, fb_total_mib=81920, sm_clock_mhz=1980.0, throttled_share=0.0)


def users():
    """{job: user} of the ledger's rows held by a job (the GPUs that sent no line are no-data rows, no job's)."""
    return dict(CauseHour.objects.exclude(job="").values_list("job", "user").distinct())


def test_slurm_job_ids_are_the_only_jobs_asked_about():
    assert [bool(owners.SLURM_JOB.match(j)) for j in ("4182", "4182_7", "4182+1", "chat-7b", "1;id", "-1", "")] == [
        True, True, True, False, False, False, False]


def test_without_slurm_users_stay_blank_and_are_asked_again(demo_appliance):  # noqa: F811
    gpu01 = Node.objects.get(name="gpu01")
    GpuRollup.objects.bulk_create([rollup(gpu01, 0, 0, "41"), rollup(gpu01, 1, 0, "chat-7b")])
    owners._failed_at.clear()
    ledger.run_incremental(until=T0 + 2 * MINUTE)
    assert users() == {"41": "", "chat-7b": ""}
    assert not JobOwner.objects.exists()  # not "unknown": Slurm was not asked, it will be


@pytest.mark.slow
def test_each_jobs_user_comes_from_slurm_and_late_answers_fill_written_rows(demo_appliance, settings):  # noqa: F811
    for node in demo_appliance.nodes.filter(name__in=["gpu01", "gpu02", "gpu03"]):
        node.facts = {**node.facts, "gpu_cores": {str(gpu): "0-55" if gpu < 4 else "56-111" for gpu in range(8)}}
        node.save(update_fields=["facts"])
    write_stage_files(demo_appliance)
    gpu01, gpu02 = Node.objects.get(name="gpu01"), Node.objects.get(name="gpu02")
    # Minute 0 is attributed while Slurm is not running: job "1"'s rows are written without a user.
    GpuRollup.objects.bulk_create([rollup(gpu01, 0, 0, "1")])
    owners._failed_at.clear()
    ledger.run_incremental(until=T0 + MINUTE)
    services.refresh_summary()
    assert users() == {"1": ""}
    try:
        slurm.start(demo_appliance)
        mine = slurm.client("sbatch", "--parsable", "--job-name=a", "--nodelist=gpu01", "--nodes=1",
                            "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
        theirs = slurm.client("sbatch", "--parsable", "--job-name=b", "--nodelist=gpu02", "--nodes=1", "--uid=nobody",
                              "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
        assert (mine, theirs) == ("1", "2")
        deadline = time.monotonic() + 20
        while "2" not in slurm.client("squeue", "--noheader", "--format=%i").stdout.split():
            assert time.monotonic() < deadline, "job 2 is not in squeue"
            time.sleep(0.2)
        GpuRollup.objects.bulk_create([rollup(gpu01, 0, 1, "1"), rollup(gpu02, 0, 1, "2"),
                                       rollup(gpu02, 1, 1, "chat-7b"), rollup(gpu02, 2, 1, "999")])
        owners._failed_at.clear()  # the pause after a failed question has passed
        ledger.run_incremental(until=T0 + 2 * MINUTE)
    finally:
        slurm.stop(demo_appliance)
    assert users() == {"1": "root", "2": "nobody", "chat-7b": "", "999": ""}
    assert sorted(JobOwner.objects.values_list("job", "user", "source")) == [
        ("1", "root", "squeue/sacct"), ("2", "nobody", "squeue/sacct"), ("999", "", "unknown")]
    # The minute written while Slurm was down has its user now, and so do the summaries.
    assert set(CauseHour.objects.filter(job="1").values_list("hour", "user")) == {(T0, "root")}
    services.refresh_summary()
    assert sorted(PoolUserHour.objects.values_list("user", flat=True).distinct()) == ["", "nobody", "root"]
    assert dict(JobTotal.objects.values_list("job", "user")) == {"1": "root", "2": "nobody", "chat-7b": "", "999": ""}
    # Asked once: a job Slurm did not know is not asked again (no Slurm now, no error, nothing changes).
    GpuRollup.objects.bulk_create([rollup(gpu02, 2, 2, "999")])
    ledger.run_incremental(until=T0 + 3 * MINUTE)
    assert JobOwner.objects.count() == 3


def test_the_demo_users_are_those_the_host_has(monkeypatch):
    from appliance.simulation import workload

    monkeypatch.setattr(workload, "DEMO_USERS", ("nobody", "no-such-user-here", "daemon"))
    assert workload.host_users() == ["nobody", "daemon"]


@pytest.mark.slow
def test_the_workload_submits_its_jobs_as_distinct_users_slurm_names(demo_appliance, tmp_path):  # noqa: F811
    from appliance.simulation import workload

    for node in demo_appliance.nodes.filter(name__in=["gpu01", "gpu02", "gpu03"]):
        node.facts = {**node.facts, "gpu_cores": {str(gpu): "0-55" if gpu < 4 else "56-111" for gpu in range(8)}}
        node.save(update_fields=["facts"])
    write_stage_files(demo_appliance)
    nodes, training, inference = workload.node_specs(demo_appliance)
    config = {"directory": str(tmp_path), "profile": "demo", "speed": 60.0, "seed": 1, "nodes": nodes,
              "training_mount": training, "inference_mount": inference, "started_at": time.time(),
              "slurm_conf": str(slurm.conf_path()), "user": "root", "users": ["nobody", "daemon"]}
    driver = workload.Driver(config)
    try:
        slurm.start(demo_appliance)
        for name, node in (("train-a", "gpu01"), ("train-b", "gpu02")):
            driver._submit(workload.Activity(name, "compute-bound", node, (0,), 0, 3600), 0.0)
        assert driver.jobs == {"train-a": "1", "train-b": "2"}
        shown = slurm.client("squeue", "--noheader", "--states=all", "--format=%j %u").stdout.split("\n")
        assert sorted(line.strip() for line in shown if line.strip()) == ["train-a daemon", "train-b nobody"]
        from appliance.lending import slurmctl

        assert slurmctl.job_users(demo_appliance, ["1", "2", "3"]) == {"1": "daemon", "2": "nobody"}
    finally:
        slurm.stop(demo_appliance)
    submitted = [json.loads(line) for line in (tmp_path / "jobs.jsonl").read_text().splitlines()]
    assert [(s["job"], s["user"]) for s in submitted] == [("1", "daemon"), ("2", "nobody")]
