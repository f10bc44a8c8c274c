"""The demo's story: at the end of the simulated appliance's bootstrap, the models its inference services
serve are registered, promoted and deployed through the model lifecycle, and its pools get a lending policy,
so that every page a newcomer opens tells one appliance (issue 39).

What happens, each step through the product's own services (so each is audited as a user's would be):
- two people of the demo, made by the installation and unable to log in (no password): `demo-engineer`
  (ML engineer: trains, registers, evaluates, asks for production, deploys) and `demo-lead` (Administrator:
  approves, sets the lending policy). Their actions are theirs in the audit log, not the newcomer's.
- each model of DEMO_MODELS gets files on the scratch filesystem, as a training job writes them
  (/mnt/scratch/models/<name>/v1: config.json and safetensors weights; small, a demo's disk is not a
  cluster's), a version registered from that path with its lineage (the demo's first Slurm training job,
  the dataset it read, the code revision), a passing evaluation, the stages validated and staging, a
  production request with that evaluation as evidence, the lead's approval, and a deployment on the
  inference pool (the simulated Kubernetes; the workload model then serves it on the GPUs its pods hold).
- the inference pool lends idle nodes to training at night and the training pool lends nothing
  (LendingPolicy), so lending plans and the findings that propose them have a policy to follow.

The approval is a real four-eyes decision: on a production install (a day's cooling period for new
accounts, settings.FOUR_EYES_COOLING_PERIOD) it would be refused and the request would stay pending; the
story then stops there for that model and says why. The story is told once: a model that already exists is
left as it is (a second bootstrap, or an appliance whose people made their own), and so is a pool that has a
policy.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.contrib.auth import get_user_model
from django.db import transaction
from safetensors.numpy import save_file

from appliance.accounts.services import create_user, generate_password
from appliance.audit import services as audit
from appliance.core import context
from appliance.core.roles import Role
from appliance.inventory.models import Pool
from appliance.lending.models import LendingPolicy
from appliance.lifecycle import deployments, services
from appliance.lifecycle.errors import LifecycleError
from appliance.lifecycle.models import RegisteredModel
from appliance.lifecycle.roots import simulated_mount

from . import workload

ENGINEER, LEAD = "demo-engineer", "demo-lead"
JOB_WAIT_S = 20  # how long the story waits for the workload's first Slurm job, the lineage of its models


@dataclass(frozen=True)
class DemoModel:
    name: str           # the registered model and the service the deployment makes
    description: str
    hidden: int         # a small Llama-family decoder: the demo's files are kilobytes, not gigabytes
    layers: int
    dataset: str        # the dataset the training job read (a path on the scratch filesystem)
    evaluation: str
    metrics: dict
    intended_use: str
    risk_class: str     # lifecycle.models.RiskClass


DEMO_MODELS = (
    DemoModel("chat", "The demo's chat assistant: a small Llama-family decoder fine-tuned on the support "
              "dialogues.", 128, 4, "/mnt/scratch/datasets/support-dialogues", "support-dialogues-heldout",
              {"accuracy": 0.81, "latency_p95_ms": 240.0},
              "Answers employees' questions about internal tools; a person reviews any answer that changes a "
              "system.", "limited"),
    DemoModel("embeddings", "The demo's embedding model for the document search.", 64, 2,
              "/mnt/scratch/datasets/documents", "retrieval-recall-at-10", {"recall_at_10": 0.92},
              "Turns internal documents and queries into vectors for the search; no decision rests on it alone.",
              "minimal"),
)


@dataclass
class StoryResult:
    models: list[str]
    deployments: list[str]
    policies: list[str]
    waiting: list[str]      # what stopped short of production, and why

    def lines(self) -> list[str]:
        lines = []
        if self.models:
            lines.append(f"demo models registered and promoted: {', '.join(self.models)}")
        if self.deployments:
            lines.append(f"demo deployments on the inference pool: {', '.join(self.deployments)}")
        if self.policies:
            lines.append(f"lending policies: {', '.join(self.policies)}")
        lines.extend(self.waiting)
        return lines


def _person(username: str, role: str):
    """A person of the demo, made by the installation, who cannot log in."""
    existing = get_user_model().objects.filter(username=username).first()
    if existing is not None:
        return existing
    user = create_user(username, role, generate_password())
    user.set_unusable_password()
    user.save(update_fields=["password"])
    return user


def _first_training_job() -> str:
    """The Slurm id of the demo workload's first training job (its jobs.jsonl), waiting a little for the
    driver to submit it; "" where none comes."""
    path = workload.workload_dir() / "jobs.jsonl"
    end = time.monotonic() + JOB_WAIT_S
    while True:
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    job = str(json.loads(line).get("job") or "")
                except ValueError:
                    continue
                if job:
                    return job
        if time.monotonic() >= end:
            return ""
        time.sleep(0.5)


def _write_files(directory: Path, model: DemoModel) -> None:
    """config.json and the weights (safetensors, seeded: the same bytes on every demo)."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = 512
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": model.hidden, "num_hidden_layers": model.layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": model.hidden * 2,
        "vocab_size": vocab, "torch_dtype": "float16"}, indent=1) + "\n")
    rng = np.random.default_rng(sum(model.name.encode()))
    save_file({"model.embed_tokens.weight": rng.standard_normal((vocab, model.hidden)).astype(np.float16),
               "lm_head.weight": rng.standard_normal((vocab, model.hidden)).astype(np.float16)},
              str(directory / "model.safetensors"), metadata={"format": "pt"})


def _promote_and_deploy(appliance, model: DemoModel, job: str, engineer, lead, result: StoryResult) -> None:
    source = f"/mnt/scratch/models/{model.name}/v1"
    _write_files(Path(simulated_mount(source)), model)
    dataset = Path(simulated_mount(model.dataset))
    dataset.mkdir(parents=True, exist_ok=True)
    (dataset / "README").write_text(f"The demo's {model.name} dataset.\n")
    with context.acting_as(engineer):
        services.register_model(model.name, user=engineer, description=model.description, license="Apache-2.0",
                                intended_use=model.intended_use, risk_class=model.risk_class,
                                tags={"demo": "true"})
        version = services.register_version(
            model.name, source=source, user=engineer, job=job, appliance=appliance,
            datasets=[{"name": Path(model.dataset).name, "uri": model.dataset,
                       "sha256": services.dataset_digest(model.dataset)}],
            code_revision="demo-1", description=f"Trained by the demo's first Slurm job on {model.dataset}.")
        evaluation = services.add_evaluation(version, user=engineer, name=model.evaluation, metrics=model.metrics,
                                             passed=True, job=job)
        services.transition(version, "validated", user=engineer, reason="the evaluation passed")
        services.transition(version, "staging", user=engineer, reason="ready for the production request")
        request = services.request_transition(version, "production", user=engineer, evidence=[evaluation],
                                              reason=f"{model.evaluation} passed; the demo's {model.name} service "
                                                     f"serves it")
    try:
        with context.acting_as(lead):
            services.approve(request, user=lead, reason="evidence reviewed")
    except LifecycleError as exc:
        result.waiting.append(f"{model.name} v1 waits for a production approval: {exc}")
        return
    result.models.append(f"{model.name} v1")
    version.refresh_from_db()
    with context.acting_as(engineer):
        deployment = deployments.deploy(version, user=engineer, name=model.name, appliance=appliance)
    result.deployments.append(f"{deployment.name} ({deployment.get_state_display().lower()})")


def _lending_policies(appliance, lead) -> list[str]:
    made = []
    with context.acting_as(lead), transaction.atomic():
        for pool in Pool.objects.filter(appliance=appliance).order_by("name"):
            if LendingPolicy.objects.filter(pool=pool).exists():
                continue
            if pool.kind == Pool.Kind.INFERENCE:
                # Inference load follows the day: its idle nodes go to training from 20:00 to 07:00 and come
                # back within 15 minutes; one node always stays to serve.
                LendingPolicy.objects.create(pool=pool, may_lend=True, minimum_nodes=1, window_start_hour=20,
                                             window_end_hour=7, reclaim_minutes=15)
                made.append(f"{pool.name} lends idle nodes 20:00-07:00")
            else:
                LendingPolicy.objects.create(pool=pool, may_lend=False)
                made.append(f"{pool.name} lends nothing")
    return made


def tell(appliance) -> StoryResult:
    """Tell the demo's story on `appliance` (simulated); see the module's docstring. What it did is recorded
    as one audit event, simulation.demo.story, whose `lines` the bootstrap prints."""
    result = StoryResult([], [], [], [])
    engineer, lead = _person(ENGINEER, Role.ML_ENGINEER), _person(LEAD, Role.ADMINISTRATOR)
    untold = [model for model in DEMO_MODELS if not RegisteredModel.objects.filter(name=model.name).exists()]
    job = _first_training_job() if untold else ""
    for model in untold:
        _promote_and_deploy(appliance, model, job, engineer, lead, result)
    result.policies = _lending_policies(appliance, lead)
    if not result.lines():
        return result  # told before: nothing changed, nothing to record
    audit.record("simulation.demo.story", target=appliance, outcome="success" if not result.waiting else "failure",
                 reason="; ".join(result.waiting), details={
                     "models": result.models, "deployments": result.deployments, "policies": result.policies,
                     "training_job": job, "lines": result.lines()})
    return result


def on_demo_workload_started(sender, *, appliance, run, **kwargs) -> StoryResult:
    """provisioning.signals.demo_workload_started's receiver."""
    return tell(appliance)
