"""The model registry: registered models and their versions, the files of each version (artifacts, with
their hashes), lineage (the training job, datasets, code, parent model), evaluations, stages and aliases
with their history, promotion requests (four-eyes approvals) and deployments on the inference pool.

A version's stage and a model's aliases change only through services.py, which checks the transition
table and the approvals, writes the history (StageHistory / AliasHistory: who held what, from when to when)
and records the audit event. Every model here is audited row by row as well (AuditedModel).
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.audit.tracking import AuditedModel
from appliance.core.models import TimestampedModel


class RiskClass(models.TextChoices):
    UNCLASSIFIED = "unclassified", _("Unclassified")
    MINIMAL = "minimal", _("Minimal risk")
    LIMITED = "limited", _("Limited risk")
    HIGH = "high", _("High risk")


class Stage(models.TextChoices):
    REGISTERED = "registered", _("Registered")
    VALIDATED = "validated", _("Validated")
    STAGING = "staging", _("Staging")
    PRODUCTION = "production", _("Production")
    DEPRECATED = "deprecated", _("Deprecated")
    ARCHIVED = "archived", _("Archived")
    REJECTED = "rejected", _("Rejected")


class ArtifactFormat(models.TextChoices):
    SAFETENSORS = "safetensors", "safetensors"
    GGUF = "gguf", "GGUF"
    ONNX = "onnx", "ONNX"
    TENSORRT_LLM = "tensorrt-llm", _("TensorRT-LLM engine")
    PYTORCH = "pytorch", _("PyTorch checkpoint")
    OTHER = "other", _("Other")


# What a version must hold to be served (ArtifactFormat.OTHER: configuration, tokenizer, ... only).
WEIGHT_FORMATS = "safetensors, GGUF, ONNX, a TensorRT-LLM engine or a PyTorch checkpoint"


class Verification(models.TextChoices):
    UNVERIFIED = "unverified", _("Not verified yet")
    VERIFIED = "verified", _("Verified")
    TAMPERED = "tampered", _("Changed since registration")
    MISSING = "missing", _("Files missing")


class RegisteredModel(AuditedModel, TimestampedModel):
    name = models.CharField(max_length=100, unique=True, help_text="^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    description = models.TextField(blank=True)
    tags = models.JSONField(default=dict, blank=True, help_text="{key: value}, both strings")
    license = models.CharField(max_length=100, blank=True)
    intended_use = models.TextField(blank=True)
    risk_class = models.CharField(max_length=16, choices=RiskClass.choices, default=RiskClass.UNCLASSIFIED)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class ModelVersion(AuditedModel, TimestampedModel):
    model = models.ForeignKey(RegisteredModel, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField(help_text="1, 2, ... per model")
    stage = models.CharField(max_length=16, choices=Stage.choices, default=Stage.REGISTERED)
    description = models.TextField(blank=True)
    tags = models.JSONField(default=dict, blank=True)
    # Where the files are: the URI as given, and the directory it resolved to (inside an allowed root).
    source = models.CharField(max_length=1000)
    storage_path = models.CharField(max_length=1000, blank=True)
    format = models.CharField(max_length=16, choices=ArtifactFormat.choices, default=ArtifactFormat.OTHER)
    # The architecture read from the model's own files (partitioning.modelfiles.ModelShape.as_dict()),
    # {} when they do not say (the reason in architecture_error).
    architecture = models.JSONField(default=dict, blank=True)
    architecture_error = models.CharField(max_length=500, blank=True)
    registered_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    # Lineage. training: the Slurm job that produced it as the scheduler and analytics knew it at registration:
    # {job, user, pool, nodes: [..], gpus, start, end, gpu_hours, efficiency, source}.
    training_job = models.CharField(max_length=32, blank=True)
    training = models.JSONField(default=dict, blank=True)
    datasets = models.JSONField(default=list, blank=True, help_text="[{name, uri, sha256}]")
    code_revision = models.CharField(max_length=200, blank=True)
    hyperparameters = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    # MLflow's run id, when a client gave one (kept for MLflow clients; lineage is the fields above).
    run_id = models.CharField(max_length=64, blank=True)
    # Integrity: the model-signing bundle (JSON) over every artifact's SHA-256, and the last verification.
    signature = models.TextField(blank=True)
    signed_at = models.DateTimeField(null=True, blank=True)
    verification = models.CharField(max_length=12, choices=Verification.choices, default=Verification.UNVERIFIED)
    verified_at = models.DateTimeField(null=True, blank=True)
    verified_full = models.BooleanField(default=False, help_text="the last verification re-hashed every file")
    verification_detail = models.TextField(blank=True)

    class Meta:
        ordering = ["model", "-number"]
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="model_version_unique_number")]
        indexes = [models.Index(fields=["stage"]), models.Index(fields=["training_job"])]

    def __str__(self):
        return f"{self.model.name} v{self.number}"


class Artifact(AuditedModel):
    """One file of a version, path relative to its storage_path. size, mtime_ns, inode and ctime_ns are the
    quick check: a file with the same four is taken as unchanged (no user can set a ctime back, as they can
    an mtime); any other file, or one registered before ctime was recorded, is re-hashed."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=1000)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    mtime_ns = models.BigIntegerField()
    inode = models.BigIntegerField()
    ctime_ns = models.BigIntegerField(null=True, blank=True, help_text="none: registered before it was recorded")
    state = models.CharField(max_length=12, choices=Verification.choices, default=Verification.VERIFIED)

    class Meta:
        ordering = ["version", "path"]
        constraints = [models.UniqueConstraint(fields=["version", "path"], name="artifact_unique_path")]

    def __str__(self):
        return f"{self.version}: {self.path}"

    def audit_state(self) -> dict:
        # A nanosecond mtime (and a 64-bit inode of a parallel filesystem) is past JSON's exact integers
        # (2**53), which the audit chain's canonical JSON refuses: the row's capture records them as text.
        state = super().audit_state()
        for name in ("mtime_ns", "inode", "ctime_ns"):
            if state.get(name) is not None:
                state[name] = str(state[name])
        return state


class Evaluation(AuditedModel, TimestampedModel):
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="evaluations")
    name = models.CharField(max_length=100)
    datasets = models.JSONField(default=list, blank=True, help_text="[{name, uri, sha256}]")
    metrics = models.JSONField(default=dict, blank=True, help_text="{name: number}")
    job = models.CharField(max_length=32, blank=True, help_text="the Slurm job that ran it, if any")
    passed = models.BooleanField(null=True, blank=True)
    notes = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["version", "created"]

    def __str__(self):
        return f"{self.name} of {self.version}"


class Alias(AuditedModel, TimestampedModel):
    """A serving slot of a model (production, champion, ...): which version it points at now."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=64, help_text="^[a-z][a-z0-9_-]{0,63}$")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="aliases")

    class Meta:
        ordering = ["model", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="alias_unique_name")]

    def __str__(self):
        return f"{self.model.name}@{self.name}"


class StageHistory(models.Model):
    """A version held `stage` from `started` until `ended` (None: still holds it). Written only by
    services.py, in the transaction of the change; the audit log records the same change."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="stage_history")
    stage = models.CharField(max_length=16, choices=Stage.choices)
    started = models.DateTimeField()
    started_by = models.CharField(max_length=150, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True)
    request = models.ForeignKey("PromotionRequest", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+", help_text="the approved request that made it, if any")
    reason = models.TextField(blank=True, help_text="why it moved: the transition's, request's or rollback's reason")

    class Meta:
        ordering = ["version", "started", "pk"]
        indexes = [models.Index(fields=["version", "started"])]

    def __str__(self):
        return f"{self.version} {self.stage} from {self.started:%Y-%m-%d %H:%M}"


class AliasHistory(models.Model):
    """Alias `name` of `model` pointed at `version` from `started` until `ended` (None: still does)."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="alias_history")
    name = models.CharField(max_length=64)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="alias_history")
    started = models.DateTimeField()
    started_by = models.CharField(max_length=150, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["model", "name", "started", "pk"]
        indexes = [models.Index(fields=["model", "name", "started"])]

    def __str__(self):
        return f"{self.model}@{self.name} -> v{self.version.number} from {self.started:%Y-%m-%d %H:%M}"


class PromotionRequest(AuditedModel, TimestampedModel):
    """Four-eyes: one person asks for a transition that needs approval (to production), another approves."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        EXPIRED = "expired", _("Expired")
        CANCELLED = "cancelled", _("Cancelled")

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="requests")
    target_stage = models.CharField(max_length=16, choices=Stage.choices)
    alias = models.CharField(max_length=64, blank=True, help_text="the alias the approval sets, if any")
    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    requested_by_username = models.CharField(max_length=150)
    reason = models.TextField()
    evidence = models.ManyToManyField(Evaluation, blank=True, related_name="requests")
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    decided_by_username = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["state", "expires_at"])]

    def __str__(self):
        return f"request #{self.pk}: {self.version} to {self.target_stage}"


class Deployment(AuditedModel, TimestampedModel):
    """A version served as an inference service on an inference pool. On a real appliance the manifests go
    to Kubernetes; on the simulated one (no Kubernetes API server can be installed) they are the pool's
    state in the simulation, which the workload model serves (see deployments.py)."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        ROLLING_OUT = "rolling_out", _("Rolling out")
        HEALTHY = "healthy", _("Healthy")
        FAILED = "failed", _("Failed")
        REPLACED = "replaced", _("Replaced")
        STOPPED = "stopped", _("Stopped")
        BLOCKED = "blocked", _("Blocked")

    class Runtime(models.TextChoices):
        VLLM = "vllm", "vLLM"
        TRITON = "triton", "Triton"
        NIM = "nim", "NIM"

    name = models.CharField(max_length=63, help_text="the service's name, a DNS label")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="deployments")
    appliance = models.ForeignKey("inventory.Appliance", on_delete=models.CASCADE, related_name="deployments")
    pool = models.CharField(max_length=64)
    runtime = models.CharField(max_length=8, choices=Runtime.choices, default=Runtime.VLLM)
    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    state_detail = models.TextField(blank=True)
    # The sizing advisor's result (placement, memory, assumptions) and where it runs: [{node, gpu, profile}].
    sizing = models.JSONField(default=dict, blank=True)
    placement = models.JSONField(default=list, blank=True)
    manifests = models.TextField(blank=True, help_text="the rendered Kubernetes manifests (YAML)")
    health = models.JSONField(default=dict, blank=True)
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["name", "state"])]

    def __str__(self):
        return f"deployment {self.name} ({self.version})"
