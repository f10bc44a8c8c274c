"""Issue 15's "Done when", walked as one flow on the simulated demo appliance: a training job on the real Slurm
of the training pool registers its output from its batch script (`manage.py models register`, the job id from
SLURM_JOB_ID, the ML engineer's API token in APPLIANCE_TOKEN); an evaluation is attached; the engineer asks for
production with it as evidence and may not approve her own request; a second engineer approves; an operator
deploys it to the inference pool, sized by the advisor, and it becomes healthy. A second version goes the same
way and replaces the first; one of its files is then changed, so its redeployment is blocked naming the file;
rollback brings version 1 back in one action. Then what a person sees: the audit log in order with who did what,
the version page's lineage (the Slurm job) and the deployments page in Chromium, the node's job map and the
telemetry collector naming the service."""

import re
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from playwright.sync_api import expect

from appliance.accounts.tokens import issue_token
from appliance.audit.models import AuditRecord
from appliance.core.context import os_user
from appliance.core.roles import Role
from appliance.lifecycle import deployments, services
from appliance.lifecycle.errors import Conflict, IntegrityRefused
from appliance.lifecycle.models import Deployment, ModelVersion
from appliance.simulation import slurm
from tests.accounts.settled import make_user  # noqa: F401 (people older than the four-eyes cooling period)
from tests.conftest import PASSWORD
from tests.e2e.conftest import screenshot
from tests.lifecycle.deploy_support import inference_node, owners
from tests.lifecycle.registry_support import write_model
from tests.lifecycle.test_registry_slurm import database_url, training_slurm, wait_for  # noqa: F401 (fixture)
from tests.simulation.slurm_fixtures import demo_appliance  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MODEL = "llama-demo"
SHARD = "model-00002-of-00002.safetensors"
# What the order of events must show: (event, actor, outcome).
AUDITED = ("lifecycle.version.register", "lifecycle.evaluation.add", "lifecycle.request.create",
           "lifecycle.request.approve", "lifecycle.deployment.create", "lifecycle.version.tampered",
           "lifecycle.deployment.rollback")


def train_and_register(tmp_path, run: str, token: str, seed: int) -> tuple[str, ModelVersion]:
    """A batch job of the training pool whose last step registers the model it wrote. (job id, version)"""
    output = write_model(Path(django_settings.SIMULATION_DIR) / "filesystems" / "scratch" / MODEL / run, seed)
    script = tmp_path / f"train-{run}.sh"
    script.write_text(f"""#!/bin/bash
set -eu
cd {django_settings.BASE_DIR}
export APPLIANCE_STATE_DIR={django_settings.STATE_DIR} DATABASE_URL={database_url()}
export APPLIANCE_MODEL_SIGNING_KEY_FILE={django_settings.LIFECYCLE_SIGNING_KEY_FILE}
export APPLIANCE_TOKEN={token}
unset APPLIANCE_MODEL_ROOTS APPLIANCE_URL
# the training ran before this line and wrote {output}
exec {sys.executable} manage.py models register {MODEL} --source {output} \\
    --dataset name=wiki,uri=/scratch/data/wiki,sha256={"5f" * 32} --code-revision git:4f2a9c1 --metric loss=1.25
""")
    log = tmp_path / f"job-{run}.out"
    job = slurm.client("sbatch", "--parsable", f"--job-name=train-{run}", "--nodes=1", "--nodelist=gpu02",
                       "--gres=gpu:2", f"--output={log}", str(script)).stdout.strip()
    wait_for(f"job {job} ends", lambda: re.search(r"JobState=(COMPLETED|FAILED)", slurm.client(
        "scontrol", "show", "job", job, check=False).stdout), seconds=120)
    assert f"lineage: Slurm job {job} of {os_user()} on gpu02" in log.read_text(), log.read_text()
    return job, ModelVersion.objects.get(model__name=MODEL, source__startswith=str(output))


def promote(version, requester, approver) -> None:
    """validated, staging, an evaluation, production asked by one engineer; her own approval is refused,
    the second engineer's carries it out."""
    services.transition(version, "validated", user=requester)
    services.transition(version, "staging", user=requester)
    evaluation = services.add_evaluation(version, user=requester, name="mmlu", metrics={"accuracy": 0.62},
                                         passed=True, datasets=[{"name": "mmlu", "sha256": "ab" * 32}])
    request = services.request_transition(version, "production", user=requester, reason="mmlu passed",
                                          evidence=[evaluation.pk])
    with pytest.raises(Conflict, match="^approver: promotion to production needs a second person, not the one who asked$"):
        services.approve(request, user=requester, reason="mine")
    services.approve(request, user=approver, reason="evidence checked")
    version.refresh_from_db()
    assert version.stage == "production"


def test_a_training_job_to_a_rolled_back_inference_service_visible_everywhere(
        training_slurm, make_user, tmp_path, page, monkeypatch):  # noqa: F811
    erin, amir = make_user(Role.ML_ENGINEER, "erin"), make_user(Role.ML_ENGINEER, "amir")
    olga = make_user(Role.OPERATOR, "olga")
    _, token = issue_token(erin, "training jobs")

    # 1. A training job registers version 1 from its batch script, as erin.
    job1, v1 = train_and_register(tmp_path, "run-1", token, seed=7)
    assert (v1.number, v1.training_job, v1.training["nodes"], v1.registered_by) == (1, job1, ["gpu02"], erin)

    # 2-4. Evaluation, request, four-eyes approval.
    promote(v1, erin, amir)

    # 5. Deployed by an operator on the inference pool, sized by the advisor, healthy.
    first = deployments.deploy(v1, user=olga)
    assert (first.name, first.state, first.pool) == (MODEL, "healthy", "inference")
    assert first.sizing["fits"] is True and first.sizing["placement"]["kind"] in ("mig", "gpu")
    assert first.placement == [{"node": "gpu04", "gpu": 0, "profile": None, "gpu_instance": None,
                                "resource": "nvidia.com/gpu"}]
    assert owners()["0"] == {"kind": "inference", "service": MODEL}

    # 6. Version 2 from a second job, promoted (four-eyes again) and deployed: it replaces version 1.
    job2, v2 = train_and_register(tmp_path, "run-2", token, seed=8)
    assert (v2.number, v2.training_job) == (2, job2) and job2 != job1
    promote(v2, erin, amir)
    v1.refresh_from_db()
    assert v1.stage == "deprecated"
    second = deployments.deploy(v2, user=olga)
    first.refresh_from_db()
    assert (second.state, second.version.number, first.state) == ("healthy", 2, "replaced")

    # 7. A file of version 2 changes on the filesystem: its redeployment is blocked, naming the file.
    shard = Path(v2.storage_path) / SHARD
    shard.write_bytes(shard.read_bytes()[:-4] + b"\x00\x00\x00\x00")
    with pytest.raises(IntegrityRefused, match=SHARD):
        deployments.deploy(v2, user=olga)
    blocked = Deployment.objects.get(state="blocked")
    assert SHARD in blocked.state_detail and blocked.version == v2

    # 8. Rollback: version 1 serves again, in one action.
    restored = deployments.rollback(MODEL, user=olga, reason="version 2's files changed")
    v1.refresh_from_db(), v2.refresh_from_db()
    assert (restored.state, restored.version, restored.name) == ("healthy", v1, MODEL)
    assert (v1.stage, v2.stage, services.production_version(v1.model)) == ("production", "deprecated", v1)
    assert owners()["0"] == {"kind": "inference", "service": MODEL}

    # The audit log: every step, in order, with who did it.
    seen = [(r.event, r.actor_username, r.outcome) for r in
            AuditRecord.objects.filter(event__in=AUDITED).order_by("sequence")]
    round_of = [("lifecycle.version.register", "erin", "success"), ("lifecycle.evaluation.add", "erin", "success"),
                ("lifecycle.request.create", "erin", "success"), ("lifecycle.request.approve", "erin", "failure"),
                ("lifecycle.request.approve", "amir", "success")]
    assert seen == [*round_of, ("lifecycle.deployment.create", "olga", "success"),
                    *round_of, ("lifecycle.deployment.create", "olga", "success"),
                    ("lifecycle.version.tampered", "olga", "failure"),
                    ("lifecycle.deployment.create", "olga", "failure"),
                    ("lifecycle.deployment.rollback", "olga", "success")], seen
    register = AuditRecord.objects.filter(event="lifecycle.version.register").order_by("sequence").first()
    assert (register.details["job"], register.channel) == (job1, "cli")

    # Telemetry: the collector labels gpu04's GPU 0 with the service (the job map's owner).
    from appliance.simulation import nvml
    from appliance.simulation import state as node_state
    from appliance.telemetry.collector import Collector

    sysroot = inference_node().sysroot
    with node_state.update(sysroot) as state:   # the gpu stage's driver, loaded
        state["modules"] = [m for m in state["modules"] if m not in ("drm", "nouveau")] + ["nvidia"]
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", sysroot)
    with Collector("gpu04", sysroot, str(nvml.library_path())) as collector:
        gpus = {dict(s.labels)["gpu"]: s for s in collector.sweep().series if s.measurement == "gpu"}
    assert dict(gpus["0"].labels)["hpc_job"] == MODEL and gpus["0"].fields["DCGM_FI_DEV_FB_USED"] > 0

    # The portal, as a second person would look: the version page and the deployments page.
    page.goto("/accounts/login/")
    page.fill("#id_username", "amir")
    page.fill("#id_password", PASSWORD)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    page.goto(f"/models/{MODEL}/versions/1/")
    lineage = page.get_by_test_id("lineage")
    expect(lineage.locator('[data-kind="job"]')).to_contain_text(f"Slurm job {job1}")
    expect(lineage.locator('[data-kind="dataset"]')).to_contain_text("wiki")
    expect(lineage.locator('[data-kind="evaluation"]')).to_contain_text("mmlu")
    expect(lineage.locator('[data-kind="deployment"]').first).to_contain_text("Healthy")
    expect(page.get_by_test_id("timeline")).to_contain_text(f"deployed as {MODEL}")
    screenshot(page, "demo-version-1")
    page.goto("/models/deployments/")
    serving = page.locator(f'[data-deployment="{MODEL}"][data-state="healthy"]')
    expect(serving).to_have_count(1)
    expect(serving.locator("h3")).to_contain_text(f"{MODEL} v1")
    expect(serving.locator('[data-part="health"]')).to_have_text("serving")
    expect(serving.locator('[data-part="live"]')).to_contain_text(MODEL)
    expect(page.locator(f'[data-deployment="{MODEL}"][data-state="blocked"]')).to_contain_text(SHARD)
    screenshot(page, "demo-deployments")
    # The model list says it at a glance: served, and a version whose files changed.
    page.goto("/models/")
    health = page.locator(f'tr[data-model="{MODEL}"] [data-part="health"]')
    expect(health).to_contain_text("1 version with changed files")
    expect(health).to_contain_text("1 serving")
    screenshot(page, "demo-models")
