"""A training job on the simulated appliance's real Slurm registers its output from its batch script
("registry" part): `manage.py models register` inside the job, the job id from SLURM_JOB_ID, the lineage
from what slurmctld says about the job (its user, node and GPUs)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from appliance.audit.models import AuditRecord
from appliance.core.context import os_user
from appliance.lifecycle.models import ModelVersion
from appliance.simulation import slurm
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)

from .registry_support import MODEL_PARAMS, write_model

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
DATASET_SHA256 = "5f" * 32


def database_url() -> str:
    """The test database, for the command the batch script runs in its own process."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def wait_for(what, check, seconds=90.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {seconds} s ({(slurm.slurm_dir() / 'log' / 'slurmctld.log').read_text()[-2000:]})")


@pytest.fixture
def training_slurm(demo_appliance, settings, tmp_path):  # noqa: F811
    settings.LIFECYCLE_ARTIFACT_ROOTS = []   # the appliance's filesystem: SIMULATION_DIR/filesystems/scratch
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    write_stage_files(demo_appliance)
    try:
        slurm.start(demo_appliance)
        yield demo_appliance
    finally:
        slurm.stop(demo_appliance)


def test_a_training_job_registers_its_output_with_its_lineage(training_slurm, settings, tmp_path):
    output = write_model(Path(settings.SIMULATION_DIR) / "filesystems" / "scratch" / "llama-ft" / "run-1")
    script = tmp_path / "train.sh"
    script.write_text(f"""#!/bin/bash
set -eu
cd {django_settings.BASE_DIR}
export APPLIANCE_STATE_DIR={settings.STATE_DIR} DATABASE_URL={database_url()}
export APPLIANCE_MODEL_SIGNING_KEY_FILE={settings.LIFECYCLE_SIGNING_KEY_FILE}
unset APPLIANCE_MODEL_ROOTS APPLIANCE_TOKEN APPLIANCE_URL
# the training itself ran before; its output is {output}
exec {sys.executable} manage.py models register llama-ft --source {output} \\
    --dataset name=wiki,uri=/scratch/data/wiki,sha256={DATASET_SHA256} --code-revision git:4f2a9c1 \\
    --hyperparameter lr=0.0003 --metric loss=1.25
""")
    log = tmp_path / "job.out"
    job = slurm.client("sbatch", "--parsable", "--job-name=train-llama-ft", "--nodes=1", "--nodelist=gpu02", "--time=30",
                       "--gres=gpu:2", f"--output={log}", str(script)).stdout.strip()
    wait_for("the job ends", lambda: "JobState=COMPLETED" in (shown := slurm.client(
        "scontrol", "show", "job", job, check=False).stdout) or "JobState=FAILED" in shown, seconds=120)
    printed = log.read_text()
    assert f"lineage: Slurm job {job} of {os_user()} on gpu02, 8 GPUs" in printed, printed

    version = ModelVersion.objects.get(model__name="llama-ft")
    assert version.training_job == job
    assert version.training["job"] == job
    assert version.training["user"] == os_user()
    assert version.training["nodes"] == ["gpu02"]
    assert version.training["gpus"] == 8      # the training pool gives whole nodes: all of gpu02's H100s
    assert version.training["partition"] == "train"
    assert version.training["name"] == "train-llama-ft"
    assert version.training["state"] == "RUNNING"
    # While the job ran it had no end: scontrol's EndTime was its time limit, kept apart as such.
    assert version.training["end"] is None and version.training["limit_end"]
    assert version.datasets == [{"name": "wiki", "uri": "/scratch/data/wiki", "sha256": DATASET_SHA256}]
    assert version.architecture["params"] == MODEL_PARAMS
    assert version.artifacts.count() == 3 and version.signature
    record = AuditRecord.objects.get(event="lifecycle.version.register")
    assert record.details["job"] == job and record.channel == "cli"

    shown = subprocess.run([sys.executable, "manage.py", "models", "show", "llama-ft", "1"], cwd=django_settings.BASE_DIR,
                           env={**os.environ, "APPLIANCE_STATE_DIR": str(settings.STATE_DIR),
                                "DATABASE_URL": database_url()},
                           capture_output=True, text=True, timeout=120)
    assert f"training: Slurm job {job} of {os_user()} on gpu02, 8 GPUs" in shown.stdout, shown.stderr

    # The job has ended since: the periodic refresh records its end, once.
    from appliance.lifecycle import services

    assert services.refresh_unfinished_training() == [version.pk]
    version.refresh_from_db()
    assert (version.training["state"], version.training["registered_while"]) == ("COMPLETED", "RUNNING")
    assert version.training["end"] and version.training["limit_end"] is None
    record = AuditRecord.objects.get(event="lifecycle.version.training")
    assert (record.details["job"], record.details["from"], record.details["to"]) == (job, "RUNNING", "COMPLETED")
    assert services.refresh_unfinished_training() == []
    assert AuditRecord.objects.filter(event="lifecycle.version.training").count() == 1


def test_training_info_adds_the_jobs_gpu_hours_from_analytics_and_refuses_unknown_jobs(training_slurm, settings):
    from datetime import UTC, datetime

    from appliance.analytics.models import CauseHour
    from appliance.inventory.models import Node
    from appliance.lifecycle import services
    from appliance.lifecycle.errors import LifecycleError

    job = slurm.client("sbatch", "--parsable", "--job-name=pretrain", "--nodes=1", "--nodelist=gpu01",
                       "--gres=gpu:8", f"--output={slurm.slurm_dir() / 'job-%j.out'}", "--wrap", "sleep 120"
                       ).stdout.strip()
    wait_for("the job runs", lambda: "JobState=RUNNING" in slurm.client("scontrol", "show", "job", job).stdout)
    node = Node.objects.get(name="gpu01")
    hour = datetime(2026, 3, 2, 10, tzinfo=UTC)
    for gpu in range(2):   # two GPUs, one hour each, 75 % of it used
        CauseHour.objects.create(hour=hour, node=node, gpu=gpu, job=job, pool="training", user="root",
                                 gpu_seconds=3600.0, used_seconds=2700.0)
    info = services.training_info(training_slurm, job)
    assert (info["job"], info["nodes"], info["gpus"], info["state"]) == (job, ["gpu01"], 8, "RUNNING")
    assert (info["gpu_hours"], info["used_gpu_hours"], info["efficiency"]) == (2.0, 1.5, 0.75)
    assert info["source"] == "scontrol, analytics"
    slurm.client("scancel", job)

    output = write_model(Path(settings.SIMULATION_DIR) / "filesystems" / "scratch" / "m")
    with pytest.raises(LifecycleError, match="job: Slurm does not know job 999999") as caught:
        services.register_version("m", source=str(output), user=None, job="999999")
    assert caught.value.field == "job"
    assert not ModelVersion.objects.exists()

    # A version whose job Slurm has forgotten (no accounting kept) is marked so once, not asked about forever.
    version = services.register_version("m", source=str(output), user=None)
    ModelVersion.objects.filter(pk=version.pk).update(training_job="999998", training={
        "job": "999998", "appliance": training_slurm.name, "state": "RUNNING", "end": None})
    assert services.refresh_unfinished_training() == [version.pk]
    version.refresh_from_db()
    assert version.training["state"] == "UNKNOWN" and version.training["registered_while"] == "RUNNING"
    assert version.training["note"].startswith("Slurm no longer knows the job")
    assert services.refresh_unfinished_training() == []
