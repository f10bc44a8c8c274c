"""Serializers of the lifecycle API. The read side shows rows the views fetched with everything they show
(see api.py's querysets: a constant number of queries whatever the number of versions). The write side
checks types, sizes and patterns; the services check the rest (the source inside an artifact root, the
transition table, the four-eyes rule) and answer with one message naming the field."""

from rest_framework import serializers

from appliance.partitioning.forms import DTYPES

from .models import (
    ArtifactFormat,
    Deployment,
    Evaluation,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    RiskClass,
    Stage,
    Verification,
)

# The same patterns as services.py (NAME, ALIAS, JOB, PARENT): written in the schema for clients.
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
ALIAS_NAME = r"^[a-z][a-z0-9_-]{0,63}$"
# Optional fields: empty means none, so each pattern admits "" as well.
SLURM_JOB_OR_NONE = r"^([0-9]{1,10}([_+][0-9]{1,7})?)?$"
PARENT_OR_NONE = r"^((models:/)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[0-9]{1,9})?$"
ALIAS_OR_NONE = r"^([a-z][a-z0-9_-]{0,63})?$"
SHA256_OR_NONE = r"^([0-9a-f]{64})?$"
APPLIANCE_NAME = r"^[-a-zA-Z0-9_]{1,64}$"
SERVICE_NAME = r"^[a-z]([-a-z0-9]{0,50}[a-z0-9])?$"
MAX_TEXT = 10_000


def _one_of(choices) -> str:
    return "one of " + ", ".join(choices.values)


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


# --- read side ----------------------------------------------------------------------------------------------

class RegisteredModelSerializer(serializers.ModelSerializer):
    """A registered model, with its versions counted and its aliases (from the list's annotations)."""

    owner = serializers.CharField(source="owner.username", read_only=True, default=None, allow_null=True)
    risk_class = serializers.CharField(read_only=True, help_text=_one_of(RiskClass))
    tags = serializers.DictField(child=serializers.CharField(allow_blank=True), read_only=True)
    versions = serializers.IntegerField(source="version_count", read_only=True, help_text="how many versions")
    latest_version = serializers.IntegerField(read_only=True, allow_null=True)
    production_version = serializers.IntegerField(read_only=True, allow_null=True,
                                                  help_text="the version in stage production, if any")
    aliases = serializers.SerializerMethodField(help_text="alias -> version number")

    class Meta:
        model = RegisteredModel
        fields = ["name", "owner", "description", "tags", "license", "intended_use", "risk_class", "created",
                  "updated", "versions", "latest_version", "production_version", "aliases"]
        read_only_fields = fields

    def get_aliases(self, model) -> dict[str, int]:
        return {alias.name: alias.version.number for alias in model.aliases.all()}


class ModelVersionSerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="model.name", read_only=True)
    stage = serializers.CharField(read_only=True, help_text=_one_of(Stage))
    format = serializers.CharField(read_only=True, help_text=_one_of(ArtifactFormat))
    verification = serializers.CharField(read_only=True, help_text=_one_of(Verification))
    tags = serializers.DictField(child=serializers.CharField(allow_blank=True), read_only=True)
    registered_by = serializers.SerializerMethodField()
    parent = serializers.SerializerMethodField(help_text="NAME/NUMBER of the version it was fine-tuned from")
    aliases = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = ["model", "number", "stage", "description", "tags", "source", "format", "training_job",
                  "parent", "aliases", "registered_by", "created", "updated", "verification", "verified_at",
                  "signed_at"]
        read_only_fields = fields

    def get_registered_by(self, version) -> str | None:
        return _username(version.registered_by)

    def get_parent(self, version) -> str | None:
        return f"{version.parent.model.name}/{version.parent.number}" if version.parent_id else None

    def get_aliases(self, version) -> list[str]:
        return sorted(alias.name for alias in version.aliases.all())


class ArtifactSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="relative to the version's storage path")
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    state = serializers.CharField(help_text=_one_of(Verification))


class EvaluationSerializer(serializers.ModelSerializer):
    datasets = serializers.ListField(child=serializers.DictField(), read_only=True)
    metrics = serializers.DictField(read_only=True)
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = ["id", "name", "datasets", "metrics", "job", "passed", "notes", "created", "created_by"]
        read_only_fields = fields

    def get_created_by(self, evaluation) -> str | None:
        return _username(evaluation.created_by)


class StageHeldSerializer(serializers.Serializer):
    stage = serializers.CharField()
    started = serializers.DateTimeField()
    started_by = serializers.CharField()
    ended = serializers.DateTimeField(allow_null=True)
    ended_by = serializers.CharField()
    request = serializers.IntegerField(source="request_id", allow_null=True)
    reason = serializers.CharField(help_text="why it moved: the transition's, request's or rollback's reason")


class PromotionRequestSerializer(serializers.ModelSerializer):
    """A promotion request: who asked, for what, with which evidence, and the decision."""

    model = serializers.CharField(source="version.model.name", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True)
    target_stage = serializers.CharField(read_only=True, help_text=_one_of(Stage))
    state = serializers.CharField(read_only=True, help_text=_one_of(PromotionRequest.State))
    requested_by = serializers.CharField(source="requested_by_username", read_only=True)
    decided_by = serializers.CharField(source="decided_by_username", read_only=True)
    evidence = serializers.SerializerMethodField(help_text="the ids of the evaluations it carries")

    class Meta:
        model = PromotionRequest
        fields = ["id", "model", "version", "target_stage", "alias", "state", "requested_by", "created", "reason",
                  "evidence", "expires_at", "decided_by", "decided_at", "decision_reason"]
        read_only_fields = fields

    def get_evidence(self, request) -> list[int]:
        return sorted(evaluation.pk for evaluation in request.evidence.all())


class DeploymentSerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="version.model.name", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True)
    appliance = serializers.CharField(source="appliance.name", read_only=True)
    state = serializers.CharField(read_only=True, help_text=_one_of(Deployment.State))
    runtime = serializers.CharField(read_only=True, help_text=_one_of(Deployment.Runtime))
    placement = serializers.ListField(child=serializers.DictField(), read_only=True,
                                      help_text="[{node, gpu, profile}]")
    previous = serializers.IntegerField(source="previous_id", read_only=True, allow_null=True)
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = Deployment
        fields = ["id", "name", "model", "version", "appliance", "pool", "runtime", "state", "state_detail",
                  "placement", "previous", "created", "updated", "created_by"]
        read_only_fields = fields

    def get_created_by(self, deployment) -> str | None:
        return _username(deployment.created_by)


class DeploymentDetailSerializer(DeploymentSerializer):
    sizing = serializers.DictField(read_only=True, help_text="the sizing advisor's result")
    health = serializers.DictField(read_only=True, help_text="the last health check")
    live = serializers.SerializerMethodField(help_text="what the inference pool reports now (replicas ready, "
                                                       "GPUs, health)")

    class Meta(DeploymentSerializer.Meta):
        fields = DeploymentSerializer.Meta.fields + ["sizing", "health", "manifests", "live"]
        read_only_fields = fields

    def get_live(self, deployment) -> dict:
        """The pool's report, or why there is none (a real appliance's pool this build cannot reach): the
        deployment's own record still answers."""
        from . import deployments
        from .errors import LifecycleError

        try:
            return deployments.live_state(deployment)
        except LifecycleError as exc:
            return {"healthy": None, "reason": "Unavailable", "message": str(exc)}


class LineageSerializer(serializers.Serializer):
    training_job = serializers.CharField(help_text="the Slurm job that produced it")
    training = serializers.DictField(help_text="the job as Slurm and analytics knew it: user, nodes, GPUs, start, "
                                               "end, GPU-hours, efficiency")
    datasets = serializers.ListField(child=serializers.DictField(), help_text="[{name, uri, sha256}]")
    code_revision = serializers.CharField()
    hyperparameters = serializers.DictField()
    metrics = serializers.DictField()
    parent = serializers.CharField(allow_null=True, help_text="NAME/NUMBER")
    children = serializers.ListField(child=serializers.CharField(), help_text="versions fine-tuned from it")
    run_id = serializers.CharField(help_text="an MLflow client's run id, if one was given")


class ModelVersionDetailSerializer(ModelVersionSerializer):
    """One version: lineage, architecture, files with their hashes, evaluations, aliases, stage history,
    requests and deployments."""

    lineage = serializers.SerializerMethodField()
    architecture = serializers.DictField(read_only=True)
    artifacts = ArtifactSerializer(many=True, read_only=True)
    evaluations = EvaluationSerializer(many=True, read_only=True)
    stage_history = StageHeldSerializer(many=True, read_only=True)
    requests = PromotionRequestSerializer(many=True, read_only=True)
    deployments = DeploymentSerializer(many=True, read_only=True)
    signed = serializers.SerializerMethodField()

    class Meta(ModelVersionSerializer.Meta):
        fields = ModelVersionSerializer.Meta.fields + [
            "storage_path", "architecture", "architecture_error", "lineage", "signed", "verified_full",
            "verification_detail", "artifacts", "evaluations", "stage_history", "requests", "deployments"]
        read_only_fields = fields

    def get_signed(self, version) -> bool:
        return bool(version.signature)

    def get_lineage(self, version) -> LineageSerializer:
        return {
            "training_job": version.training_job, "training": version.training, "datasets": version.datasets,
            "code_revision": version.code_revision, "hyperparameters": version.hyperparameters,
            "metrics": version.metrics, "parent": self.get_parent(version), "run_id": version.run_id,
            "children": [f"{version.model.name}/{child.number}" if child.model_id == version.model_id
                         else f"{child.model.name}/{child.number}" for child in version.children.all()],
        }


class ModelAliasSerializer(serializers.Serializer):
    model = serializers.CharField()
    name = serializers.CharField()
    version = serializers.IntegerField()


class VerifyResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    state = serializers.CharField(help_text=_one_of(Verification))
    changed = serializers.ListField(child=serializers.CharField(), help_text="files whose content changed")
    missing = serializers.ListField(child=serializers.CharField())
    added = serializers.ListField(child=serializers.CharField())
    signature_ok = serializers.BooleanField()
    full = serializers.BooleanField(help_text="every file re-hashed (else: size, mtime and inode)")
    seconds = serializers.FloatField()
    detail = serializers.CharField()


class ModelHistorySerializer(serializers.Serializer):
    model = serializers.CharField()
    at = serializers.DateTimeField(allow_null=True)
    state = serializers.DictField(allow_null=True, help_text="with ?at: {stages: {number: stage}, aliases: "
                                                             "{alias: number}} as they stood then")
    timeline = serializers.ListField(child=serializers.DictField(),
                                     help_text="oldest first: [{at, kind: stage|alias|request|evaluation|"
                                               "deployment, version, by, ...}]")


class ModelHistoryQuerySerializer(serializers.Serializer):
    at = serializers.DateTimeField(required=False, help_text="ISO 8601 with its time zone")
    version = serializers.IntegerField(required=False, min_value=1, max_value=999_999_999)


class ModelCardSerializer(serializers.Serializer):
    """cards.card(version): model, version, lineage, datasets, evaluations, approvals, artifacts, signature,
    verification, history, deployments."""

    card_format = serializers.IntegerField()
    generated = serializers.DateTimeField()
    model = serializers.DictField()
    version = serializers.DictField()
    lineage = serializers.DictField()
    datasets = serializers.ListField(child=serializers.DictField())
    evaluations = serializers.ListField(child=serializers.DictField())
    approvals = serializers.ListField(child=serializers.DictField())
    artifacts = serializers.ListField(child=serializers.DictField())
    total_size = serializers.IntegerField()
    signature = serializers.DictField()
    verification = serializers.DictField()
    history = serializers.DictField()
    deployments = serializers.ListField(child=serializers.DictField())


# --- write side ---------------------------------------------------------------------------------------------

def _text(max_length: int = MAX_TEXT, **kwargs):
    return serializers.CharField(max_length=max_length, required=False, allow_blank=True, default="",
                                 trim_whitespace=False, **kwargs)


class RegisteredModelCreateSerializer(serializers.Serializer):
    name = serializers.RegexField(MODEL_NAME, max_length=100)
    description = _text()
    tags = serializers.DictField(child=serializers.CharField(max_length=500, allow_blank=True), required=False,
                                 default=dict, help_text="{name: text}, at most 50")
    license = _text(100)
    intended_use = _text()
    risk_class = serializers.ChoiceField(choices=RiskClass.choices, default=RiskClass.UNCLASSIFIED.value)


class RegisteredModelUpdateSerializer(serializers.Serializer):
    description = serializers.CharField(max_length=MAX_TEXT, required=False, allow_blank=True, trim_whitespace=False)
    tags = serializers.DictField(child=serializers.CharField(max_length=500, allow_blank=True), required=False,
                                 help_text="{name: text}, at most 50: replaces the tags")
    license = serializers.CharField(max_length=100, required=False, allow_blank=True)
    intended_use = serializers.CharField(max_length=MAX_TEXT, required=False, allow_blank=True, trim_whitespace=False)
    risk_class = serializers.ChoiceField(choices=RiskClass.choices, required=False)


# One line with something besides white space and no control character (services._datasets' rule).
DATASET_NAME = r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$"


class DatasetSerializer(serializers.Serializer):
    name = serializers.RegexField(DATASET_NAME, max_length=200)
    uri = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    sha256 = serializers.RegexField(SHA256_OR_NONE, required=False, allow_blank=True,
                                    help_text="the dataset's content hash (64 lowercase hex digits)")


class ModelVersionRegisterSerializer(serializers.Serializer):
    """What `models register --url` on a compute node sends: keep these names."""

    model = serializers.RegexField(MODEL_NAME, max_length=100, help_text="the model's name (made if new)")
    source = serializers.CharField(max_length=1000, help_text="an absolute path or file:// URI inside an artifact "
                                                              "root of the appliance: a directory or one file")
    job = serializers.RegexField(SLURM_JOB_OR_NONE, required=False, allow_blank=True, default="",
                                 help_text="the Slurm job that produced it (its id)")
    datasets = DatasetSerializer(many=True, required=False, default=list, max_length=100)
    code_revision = _text(200)
    hyperparameters = serializers.DictField(required=False, default=dict)
    metrics = serializers.DictField(child=serializers.FloatField(), required=False, default=dict,
                                    help_text="{name: number}")
    parent = serializers.RegexField(PARENT_OR_NONE, required=False, allow_blank=True, default="",
                                    help_text="NAME/NUMBER or models:/NAME/NUMBER of the version it was tuned from")
    description = _text()
    tags = serializers.DictField(child=serializers.CharField(max_length=500, allow_blank=True), required=False,
                                 default=dict, help_text="{name: text}, at most 50")


class EvaluationCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    datasets = DatasetSerializer(many=True, required=False, default=list, max_length=100)
    metrics = serializers.DictField(child=serializers.FloatField(), required=False, default=dict,
                                    help_text="{name: number}")
    job = serializers.RegexField(SLURM_JOB_OR_NONE, required=False, allow_blank=True, default="")
    passed = serializers.BooleanField(required=False, allow_null=True, default=None)
    notes = _text()


class StageTransitionSerializer(serializers.Serializer):
    stage = serializers.ChoiceField(choices=Stage.choices, help_text="production needs a request (requests/)")
    reason = _text(2000)


class PromotionRequestCreateSerializer(serializers.Serializer):
    model = serializers.RegexField(MODEL_NAME, max_length=100)
    version = serializers.IntegerField(min_value=1, max_value=999_999_999)
    # Only production needs approval today (services.NEEDS_APPROVAL); other stages are transitions.
    stage = serializers.RegexField(r"^production$", required=False, default=Stage.PRODUCTION.value,
                                   help_text="the stage asked for: production")
    reason = serializers.CharField(max_length=2000)
    evidence = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
                                     max_length=100, help_text="ids of evaluations of this version")
    alias = serializers.RegexField(ALIAS_OR_NONE, required=False, allow_blank=True, default="",
                                   help_text="an alias the approval points at the version, besides production")


class ApprovalSerializer(serializers.Serializer):
    reason = _text(2000)


class RejectionSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class ModelAliasSetSerializer(serializers.Serializer):
    version = serializers.IntegerField(min_value=1, max_value=999_999_999)


class DeploymentCreateSerializer(serializers.Serializer):
    model = serializers.RegexField(MODEL_NAME, max_length=100)
    version = serializers.IntegerField(min_value=1, max_value=999_999_999, required=False,
                                       help_text="default: the model's production version")
    runtime = serializers.ChoiceField(choices=Deployment.Runtime.choices, default=Deployment.Runtime.VLLM.value)
    name = serializers.RegexField(SERVICE_NAME, max_length=52, required=False,
                                  help_text="the service's name, a DNS label (default: made from the model's name)")
    appliance = serializers.RegexField(APPLIANCE_NAME, required=False,
                                       help_text="the appliance's name; default: the only (first) appliance")
    context = serializers.IntegerField(min_value=1, max_value=10_000_000, default=4096)
    concurrency = serializers.IntegerField(min_value=1, max_value=100_000, default=8)
    dtype = serializers.ChoiceField(choices=DTYPES, required=False,
                                    help_text="default: the model's own")


class DeploymentReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)
