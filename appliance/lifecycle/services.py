"""The model registry's domain logic: models, versions (their files hashed and signed, their lineage),
evaluations, stages and aliases with their history, four-eyes promotion requests, and the rollback of
production. The portal, the API, the MLflow-compatible API, the CLI and the Celery tasks all call these.

Every change happens in one transaction with its history rows (StageHistory / AliasHistory) and its one
audit event; a refusal of a state change is audited as a failure (outside the rolled-back transaction).
`user=None` is the appliance itself (a controller-side command, a task): the audit record names the OS user
and channel. Actions that need a person (requests, approvals, rejections, cancellations) refuse None.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance.accounts.services import ApproverNotIndependent, require_independent_approver
from appliance.audit import services as audit
from appliance.core import context
from appliance.core.roles import can

from . import roots
from .errors import Conflict, Forbidden, LifecycleError, NotFound
from .models import (
    Alias,
    AliasHistory,
    Artifact,
    ArtifactFormat,
    Deployment,
    Evaluation,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    RiskClass,
    Stage,
    StageHistory,
)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ALIAS = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
# The portal's own pages under /models/ (lifecycle/urls.py): a model of that name could not have a page.
RESERVED_NAMES = frozenset({"approvals", "deployments", "requests"})
# A Slurm job id: digits, an array task (123_4) or a heterogeneous component (123+1).
JOB = re.compile(r"^[0-9]{1,10}([_+][0-9]{1,7})?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
TAG_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
RUN_ID = re.compile(r"^[A-Za-z0-9._-]{0,64}$")
PARENT = re.compile(r"^(?:models:/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})/(?P<number>[0-9]{1,9})$")

TRANSITIONS: dict[str, frozenset[str]] = {
    Stage.REGISTERED: frozenset({Stage.VALIDATED, Stage.REJECTED, Stage.ARCHIVED}),
    Stage.VALIDATED: frozenset({Stage.STAGING, Stage.REJECTED, Stage.ARCHIVED}),
    Stage.STAGING: frozenset({Stage.PRODUCTION, Stage.VALIDATED, Stage.REJECTED, Stage.ARCHIVED}),
    Stage.PRODUCTION: frozenset({Stage.DEPRECATED}),
    Stage.DEPRECATED: frozenset({Stage.PRODUCTION, Stage.ARCHIVED}),
    Stage.REJECTED: frozenset({Stage.ARCHIVED}),
    Stage.ARCHIVED: frozenset(),
}
TRANSITIONS = {str(stage): frozenset(str(target) for target in targets) for stage, targets in TRANSITIONS.items()}
NEEDS_APPROVAL = frozenset({"production"})
RESERVED_ALIASES = frozenset({"production"})
# Stages whose version may not be a serving slot: an alias pointing at it is removed on the way there.
UNSERVABLE = frozenset({"rejected", "archived"})

MAX_TAGS = 50
MAX_TEXT = 10_000
MAX_DATASETS = 100
MAX_JSON_KEYS = 500


# -- who acts ------------------------------------------------------------------------------------------

def _actor_name(user) -> str:
    if user is not None:
        return user.get_username()
    return context.current().actor_username or context.os_user()


def _require(user, capability: str, what: str) -> None:
    """`user` None is the appliance itself and may; a person needs the capability."""
    if user is not None and not can(user, capability):
        raise Forbidden(_("%(user)s may not %(what)s (needs %(capability)s)") % {
            "user": user.get_username(), "what": what, "capability": capability})


def _require_person(user, capability: str, what: str) -> None:
    if user is None:
        raise Forbidden(_("%(what)s needs a person: sign in, or set APPLIANCE_TOKEN to your API token") % {
            "what": what})
    _require(user, capability, what)


def _audit_refusal(event: str, target, user, exc: LifecycleError, details: dict | None = None) -> None:
    audit.record(event, target=target, actor=user, outcome="failure", reason=str(exc), details=details or {})


# -- input checks --------------------------------------------------------------------------------------

def _text(value, field: str, limit: int = MAX_TEXT) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LifecycleError(_("%(field)s: text expected") % {"field": field}, field)
    if len(value) > limit:
        raise LifecycleError(_("%(field)s: at most %(n)d characters") % {"field": field, "n": limit}, field)
    if any(ord(c) < 32 and c not in "\n\t\r" or ord(c) == 127 for c in value):
        raise LifecycleError(_("%(field)s: control characters are not allowed") % {"field": field}, field)
    return value


def _line(value, field: str, limit: int) -> str:
    value = _text(value, field, limit)
    if "\n" in value or "\r" in value:
        raise LifecycleError(_("%(field)s: one line expected") % {"field": field}, field)
    return value.strip()


def _tags(value, field: str = "tags") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LifecycleError(_("%(field)s: a mapping of names to text expected") % {"field": field}, field)
    if len(value) > MAX_TAGS:
        raise LifecycleError(_("%(field)s: at most %(n)d tags") % {"field": field, "n": MAX_TAGS}, field)
    tags = {}
    for key, item in value.items():
        if not isinstance(key, str) or not TAG_KEY.fullmatch(key):
            raise LifecycleError(_("%(field)s: %(key)r is not a tag name (%(pattern)s)") % {
                "field": field, "key": key, "pattern": TAG_KEY.pattern}, field)
        tags[key] = _line("" if item is None else str(item) if isinstance(item, int | float) else item,
                          f"{field}.{key}", 500)
    return tags


def _check_name(name) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise LifecycleError(_("name: %(name)r is not a model name (%(pattern)s)") % {
            "name": name, "pattern": NAME.pattern}, "name")
    if name.lower() in RESERVED_NAMES:
        raise LifecycleError(_("name: %(name)r is reserved (the portal's pages %(reserved)s)") % {
            "name": name, "reserved": ", ".join(sorted(RESERVED_NAMES))}, "name")
    return name


def _check_job(job) -> str:
    job = (job or "").strip() if isinstance(job, str) else job
    if not job:
        return ""
    if not isinstance(job, str) or not JOB.fullmatch(job):
        raise LifecycleError(_("job: %(job)r is not a Slurm job id (digits, e.g. 4211 or 4211_3)") % {"job": job},
                             "job")
    return job


def _number(value, field: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float)
                                                                        and not math.isfinite(value)):
        raise LifecycleError(_("%(field)s: a finite number expected") % {"field": field}, field)
    return value


def _metrics(value, field: str = "metrics") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_JSON_KEYS:
        raise LifecycleError(_("%(field)s: a mapping of names to numbers expected (at most %(n)d)") % {
            "field": field, "n": MAX_JSON_KEYS}, field)
    result = {}
    for key, item in value.items():
        if not isinstance(key, str) or not TAG_KEY.fullmatch(key):
            raise LifecycleError(_("%(field)s: %(key)r is not a metric name (%(pattern)s)") % {
                "field": field, "key": key, "pattern": TAG_KEY.pattern}, field)
        result[key] = _number(item, f"{field}.{key}")
    return result


def _hyperparameters(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_JSON_KEYS:
        raise LifecycleError(_("hyperparameters: a mapping expected (at most %(n)d keys)") % {"n": MAX_JSON_KEYS},
                             "hyperparameters")
    result = {}
    for key, item in value.items():
        field = f"hyperparameters.{key}"
        if not isinstance(key, str) or not TAG_KEY.fullmatch(key):
            raise LifecycleError(_("hyperparameters: %(key)r is not a parameter name") % {"key": key},
                                 "hyperparameters")
        if isinstance(item, bool) or item is None:
            result[key] = item
        elif isinstance(item, int | float):
            result[key] = _number(item, field)
        else:
            result[key] = _line(item, field, 500)
    return result


def _datasets(value, field: str = "datasets") -> list[dict]:
    """[{name, uri, sha256}]: what the training or evaluation read, with the content hash of its bytes."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or len(value) > MAX_DATASETS:
        raise LifecycleError(_("%(field)s: a list expected (at most %(n)d)") % {"field": field, "n": MAX_DATASETS},
                             field)
    result = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise LifecycleError(_("%(field)s: {name, uri, sha256} expected") % {"field": where}, where)
        unknown = set(item) - {"name", "uri", "sha256"}
        if unknown:
            raise LifecycleError(_("%(field)s: unknown keys %(keys)s") % {
                "field": where, "keys": ", ".join(sorted(map(str, unknown)))}, where)
        name = _line(item.get("name"), f"{where}.name", 200)
        if not name:
            raise LifecycleError(_("%(field)s.name: a name is needed") % {"field": where}, f"{where}.name")
        uri = _line(item.get("uri"), f"{where}.uri", 1000)
        digest = item.get("sha256") or ""
        if not isinstance(digest, str) or (digest and not SHA256.fullmatch(digest.lower())):
            raise LifecycleError(_("%(field)s.sha256: 64 hexadecimal digits expected") % {"field": where},
                                 f"{where}.sha256")
        result.append({"name": name, "uri": uri, "sha256": digest.lower()})
    return result


def dataset_digest(uri: str, field: str = "datasets") -> str:
    """The content hash of a dataset on the appliance's filesystems (inside an artifact root): a file's
    SHA-256; for a directory the SHA-256 of its manifest, one line "<sha256>  <path>" per file sorted by
    path as sha256sum prints them, so that anyone can recompute it:
    cd DIR && find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum"""
    from . import hashing

    try:
        path = roots.resolve_source(uri)
        digests = hashing.hash_tree(path)
    except LifecycleError as exc:
        raise LifecycleError(f"{field}: " + str(exc).removeprefix("source: "), field) from None
    if path.is_file():
        return digests[0].sha256
    manifest = "".join(f"{digest.sha256}  {digest.path}\n" for digest in digests)
    return hashlib.sha256(manifest.encode()).hexdigest()


def _check_stage(stage) -> str:
    if stage not in Stage.values:
        raise LifecycleError(_("stage: %(stage)r is not one of %(stages)s") % {
            "stage": stage, "stages": ", ".join(Stage.values)}, "stage")
    return str(stage)


# -- lookups -------------------------------------------------------------------------------------------

def get_model(name) -> RegisteredModel:
    model = RegisteredModel.objects.filter(name=name).first() if isinstance(name, str) and NAME.fullmatch(name) else None
    if model is None:
        raise NotFound(_("model %(name)r does not exist") % {"name": name}, "name")
    return model


def get_version(name, number) -> ModelVersion:
    try:
        number = int(number)
    except (TypeError, ValueError):
        raise NotFound(_("version: %(number)r is not a version number") % {"number": number}, "version") from None
    model = get_model(name)
    version = ModelVersion.objects.select_related("model").filter(model=model, number=number).first()
    if version is None:
        raise NotFound(_("model %(name)s has no version %(number)d") % {"name": model.name, "number": number},
                       "version")
    return version


def _parent(parent) -> ModelVersion | None:
    if parent in (None, ""):
        return None
    if isinstance(parent, ModelVersion):
        return parent
    match = PARENT.fullmatch(parent) if isinstance(parent, str) else None
    if not match:
        raise LifecycleError(_("parent: %(parent)r is not NAME/VERSION or models:/NAME/VERSION") % {"parent": parent},
                             "parent")
    try:
        return get_version(match["name"], match["number"])
    except NotFound as exc:
        raise LifecycleError(f"parent: {exc}", "parent") from None


# -- registered models ---------------------------------------------------------------------------------

def _model_fields(fields: dict) -> dict:
    checked = {}
    if "description" in fields:
        checked["description"] = _text(fields["description"], "description")
    if "tags" in fields:
        checked["tags"] = _tags(fields["tags"])
    if "license" in fields:
        checked["license"] = _line(fields["license"], "license", 100)
    if "intended_use" in fields:
        checked["intended_use"] = _text(fields["intended_use"], "intended_use")
    if "risk_class" in fields:
        if fields["risk_class"] not in RiskClass.values:
            raise LifecycleError(_("risk_class: %(value)r is not one of %(values)s") % {
                "value": fields["risk_class"], "values": ", ".join(RiskClass.values)}, "risk_class")
        checked["risk_class"] = str(fields["risk_class"])
    return checked


def register_model(name, *, user, description="", tags=None, license="", intended_use="",
                   risk_class="unclassified") -> RegisteredModel:
    _require(user, "models.change", _("register models"))
    name = _check_name(name)
    fields = _model_fields({"description": description, "tags": tags, "license": license,
                            "intended_use": intended_use, "risk_class": risk_class})
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(name=name, owner=user, **fields)
            audit.record("lifecycle.model.register", target=model, actor=user, details={
                "name": name, "license": model.license, "risk_class": model.risk_class,
                "intended_use": model.intended_use[:500]})
    except IntegrityError:
        raise Conflict(_("name: a model %(name)r exists already") % {"name": name}, "name") from None
    return model


def update_model(model: RegisteredModel, *, user, **fields) -> RegisteredModel:
    _require(user, "models.change", _("change models"))
    unknown = set(fields) - {"description", "tags", "license", "intended_use", "risk_class"}
    if unknown:
        field = sorted(unknown)[0]
        raise LifecycleError(_("%(field)s: cannot be changed") % {"field": field}, field)
    checked = _model_fields(fields)
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
        changed = {key: value for key, value in checked.items() if getattr(model, key) != value}
        for key, value in changed.items():
            setattr(model, key, value)
        if changed:
            model.save()
            audit.record("lifecycle.model.update", target=model, actor=user, details={"changed": sorted(changed)})
    return model


def update_version(version: ModelVersion, *, user, description: str | None = None, tags: dict | None = None,
                   via: str = "") -> ModelVersion:
    """A version's description or tags: one audit event lifecycle.version.update naming what changed (none
    when nothing did). Its files, lineage and stage are not touched: they are evidence."""
    _require(user, "models.change", _("change model versions"))
    checked = {}
    if description is not None:
        checked["description"] = _text(description, "description")
    if tags is not None:
        checked["tags"] = _tags(tags)
    with transaction.atomic():
        version = ModelVersion.objects.select_for_update(of=("self",)).select_related("model").get(pk=version.pk)
        changed = sorted(key for key, value in checked.items() if getattr(version, key) != value)
        for key in changed:
            setattr(version, key, checked[key])
        if changed:
            version.save(update_fields=[*changed, "updated"])
            details = {"model": version.model.name, "version": version.number, "changed": changed}
            if via:
                details["via"] = via
            audit.record("lifecycle.version.update", target=version, actor=user, details=details)
    return version


def delete_model(model: RegisteredModel, *, user) -> None:
    _require(user, "models.change", _("delete models"))
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
            count = model.versions.count()
            if count:
                raise Conflict(_("model %(name)s has %(count)d versions; archive them instead") % {
                    "name": model.name, "count": count}, "name")
            audit.record("lifecycle.model.delete", target=model, actor=user, details={"name": model.name})
            model.delete()
    except Conflict as exc:
        _audit_refusal("lifecycle.model.delete", model, user, exc)
        raise


# -- versions ------------------------------------------------------------------------------------------

def detect_format(paths: list[str]) -> str:
    """The artifact format from the file names (the first kind found in this order of preference)."""
    suffixes = {Path(path).suffix.lower() for path in paths}
    names = {Path(path).name.lower() for path in paths}
    if ".safetensors" in suffixes:
        return ArtifactFormat.SAFETENSORS
    if ".gguf" in suffixes:
        return ArtifactFormat.GGUF
    if ".onnx" in suffixes:
        return ArtifactFormat.ONNX
    if ".engine" in suffixes or any(name.startswith("rank") and name.endswith(".engine") for name in names):
        return ArtifactFormat.TENSORRT_LLM
    if suffixes & {".bin", ".pt", ".pth", ".ckpt"}:
        return ArtifactFormat.PYTORCH
    return ArtifactFormat.OTHER


def _architecture(root: Path, allowed: list[Path]) -> tuple[dict, str]:
    from appliance.partitioning.modelfiles import ModelFileError, read_model_dir

    if not root.is_dir():
        return {}, _("a single file: no config.json to read the architecture from")
    try:
        shape = read_model_dir(str(root), roots=[str(r) for r in allowed])
    except ModelFileError as exc:
        return {}, str(exc)[:500]
    return shape.as_dict(), ""


def _single_appliance(appliance):
    if appliance is not None:
        return appliance
    from appliance.inventory.models import Appliance

    appliances = list(Appliance.objects.order_by("name")[:2])
    if len(appliances) != 1:
        raise LifecycleError(_("appliance: name the appliance whose Slurm ran the job (%(count)s appliances)") % {
            "count": len(appliances) if len(appliances) < 2 else _("several")}, "appliance")
    return appliances[0]


def training_info(appliance, job: str) -> dict:
    """What the scheduler and analytics know about training job `job`: {job, user, name, partition, nodes,
    gpus, start, end, state, gpu_hours, used_gpu_hours, efficiency, source}. gpu_hours and efficiency come
    from the GPU-hour attribution (None until analytics saw the job)."""
    from appliance.analytics.models import CauseHour
    from appliance.lending import slurmctl

    job = _check_job(job)
    if not job:
        raise LifecycleError(_("job: a Slurm job id is needed"), "job")
    appliance = _single_appliance(appliance)
    try:
        details = slurmctl.job_details(appliance, job)
    except slurmctl.SlurmCommandError as exc:
        raise LifecycleError(_("job: Slurm could not be asked about job %(job)s: %(error)s") % {
            "job": job, "error": exc}, "job") from None
    if details is None:
        raise LifecycleError(_("job: Slurm does not know job %(job)s") % {"job": job}, "job")
    totals = CauseHour.objects.filter(job=job).aggregate(gpu=Sum("gpu_seconds"), used=Sum("used_seconds"))
    gpu_hours = round(totals["gpu"] / 3600, 4) if totals["gpu"] else None
    used_hours = round(totals["used"] / 3600, 4) if totals["used"] is not None and totals["gpu"] else None
    efficiency = round(totals["used"] / totals["gpu"], 4) if totals["gpu"] else None
    return {**details, "appliance": appliance.name, "gpu_hours": gpu_hours, "used_gpu_hours": used_hours,
            "efficiency": efficiency,
            "source": details.get("source", "slurm") + (", analytics" if gpu_hours is not None else "")}


def refresh_training(version: ModelVersion) -> bool:
    """A version registered from its job's batch script holds what Slurm said while the job ran (state
    RUNNING, no end; the time limit as limit_end). Once Slurm says the job ended, its final state, end and
    GPU-hours replace that snapshot, one audited lifecycle.version.training (the registration's record
    keeps what was known then). When Slurm no longer knows the job at all (slurmctld forgets an ended job
    after MinJobAge, and no accounting is kept), the state becomes UNKNOWN with a note saying so, so that
    the version is not asked about again. Whether it changed: False while the job runs or when Slurm
    cannot be asked (asked again at the next pass)."""
    from appliance.inventory.models import Appliance
    from appliance.lending import slurmctl

    training = version.training or {}
    if not version.training_job or training.get("state") not in slurmctl.UNFINISHED_STATES:
        return False
    unknown = {**training, "state": "UNKNOWN", "end": None, "limit_end": None}
    try:
        appliance = _single_appliance(None) if not training.get("appliance") else (
            Appliance.objects.filter(name=training["appliance"]).first())
        if appliance is None:
            info = {**unknown, "note": f"appliance {training['appliance']} is gone: the job's end was not recorded"}
        elif slurmctl.job_details(appliance, version.training_job) is None:
            info = {**unknown, "note": "Slurm no longer knows the job (ended and forgotten, no accounting kept): "
                                       "its end was not recorded"}
        else:
            info = training_info(appliance, version.training_job)
    except (LifecycleError, slurmctl.SlurmCommandError):
        return False
    if info.get("state") in slurmctl.UNFINISHED_STATES or not info.get("state"):
        return False
    with transaction.atomic():
        locked = ModelVersion.objects.select_for_update(of=("self",)).get(pk=version.pk)
        if (locked.training or {}).get("state") not in slurmctl.UNFINISHED_STATES:
            return False
        locked.training = {**info, "registered_while": training.get("state")}
        locked.save(update_fields=["training"])
        audit.record("lifecycle.version.training", target=locked, details={
            "model": locked.model.name, "version": locked.number, "job": locked.training_job,
            "from": training.get("state"), "to": info.get("state"), "end": info.get("end"),
            "gpu_hours": info.get("gpu_hours"), "efficiency": info.get("efficiency")})
    version.training = locked.training
    return True


def refresh_unfinished_training(limit: int = 200) -> list[int]:
    """The periodic pass of refresh_training over versions whose job had not ended (oldest first, at most
    `limit` a pass); the ids of those that changed."""
    from appliance.lending import slurmctl

    changed = []
    rows = (ModelVersion.objects.exclude(training_job="").filter(training__state__in=sorted(slurmctl.UNFINISHED_STATES))
            .select_related("model").order_by("pk")[:limit])
    for version in rows:
        if refresh_training(version):
            changed.append(version.pk)
    return changed


def register_version(model_name, *, source, user, job="", datasets=None, code_revision="", hyperparameters=None,
                     metrics=None, parent=None, description="", tags=None, run_id="", create_model=True,
                     appliance=None) -> ModelVersion:
    """A new version of `model_name` from the files at `source`: every file hashed (hashing.hash_tree),
    its format and architecture read, its lineage recorded, its manifest signed. Atomic: a refusal or a
    failure leaves nothing behind."""
    from . import hashing, signing

    _require(user, "models.change", _("register model versions"))
    name = _check_name(model_name)
    job = _check_job(job)
    checked = {
        "datasets": _datasets(datasets),
        "code_revision": _line(code_revision, "code_revision", 200),
        "hyperparameters": _hyperparameters(hyperparameters),
        "metrics": _metrics(metrics),
        "description": _text(description, "description"),
        "tags": _tags(tags),
        "run_id": _line(run_id, "run_id", 64),
    }
    if not RUN_ID.fullmatch(checked["run_id"]):
        raise LifecycleError(_("run_id: letters, digits, '.', '_' and '-' only"), "run_id")
    parent_version = _parent(parent)
    if not create_model:
        get_model(name)
    root = roots.resolve_source(source)
    training = training_info(appliance, job) if job else {}
    # Hashing a large model takes minutes: done before the transaction, so the database is not held.
    digests = hashing.hash_tree(root)
    if not digests:
        raise LifecycleError(_("source: %(path)s holds no file") % {"path": root}, "source")
    architecture, architecture_error = _architecture(root, roots.artifact_roots())
    storage = root if root.is_dir() else root.parent

    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().filter(name=name).first()
        if model is None:
            if not create_model:
                raise NotFound(_("model %(name)r does not exist") % {"name": name}, "name")
            model = register_model(name, user=user)
            model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
        number = (model.versions.aggregate(top=Max("number"))["top"] or 0) + 1
        now = timezone.now()
        version = ModelVersion.objects.create(
            model=model, number=number, source=source, storage_path=str(storage),
            format=detect_format([digest.path for digest in digests]), architecture=architecture,
            architecture_error=architecture_error, registered_by=user, training_job=job, training=training,
            parent=parent_version, **checked)
        Artifact.objects.bulk_create([
            Artifact(version=version, path=digest.path, size=digest.size, sha256=digest.sha256,
                     mtime_ns=digest.mtime_ns, inode=digest.inode, ctime_ns=digest.ctime_ns) for digest in digests])
        StageHistory.objects.create(version=version, stage=Stage.REGISTERED, started=now,
                                    started_by=_actor_name(user))
        audit.record("lifecycle.version.register", target=version, actor=user, details={
            "model": model.name, "version": number, "source": source, "storage_path": str(storage),
            "files": len(digests), "bytes": sum(digest.size for digest in digests), "format": version.format,
            "job": job, "parent": f"{parent_version.model.name}/{parent_version.number}" if parent_version else "",
            "datasets": [{"name": d["name"], "sha256": d["sha256"]} for d in checked["datasets"]],
            "code_revision": checked["code_revision"]})
        signing.sign_version(version, user=user)
    return version


def add_evaluation(version: ModelVersion, *, user, name, datasets=(), metrics=None, job="", passed=None,
                   notes="") -> Evaluation:
    _require(user, "models.change", _("add evaluations"))
    name = _line(name, "name", 100)
    if not name:
        raise LifecycleError(_("name: an evaluation needs a name"), "name")
    if passed is not None and not isinstance(passed, bool):
        raise LifecycleError(_("passed: true, false or empty"), "passed")
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            version=version, name=name, datasets=_datasets(list(datasets or [])), metrics=_metrics(metrics),
            job=_check_job(job), passed=passed, notes=_text(notes, "notes"), created_by=user)
        audit.record("lifecycle.evaluation.add", target=evaluation, actor=user, details={
            "model": version.model.name, "version": version.number, "name": name, "metrics": evaluation.metrics,
            "passed": passed, "job": evaluation.job})
    return evaluation


# -- stages and aliases --------------------------------------------------------------------------------

def _move_stage(version: ModelVersion, stage: str, *, user, now, request=None, reason="") -> str:
    """Close the version's open stage row, open the next (with why it moved), drop its aliases where it may
    no longer serve and the production alias when it leaves production. Returns the stage it left."""
    former = version.stage
    actor = _actor_name(user)
    StageHistory.objects.filter(version=version, ended__isnull=True).update(ended=now, ended_by=actor)
    StageHistory.objects.create(version=version, stage=stage, started=now, started_by=actor, request=request,
                                reason=reason)
    version.stage = stage
    version.save(update_fields=["stage", "updated"])
    for alias in Alias.objects.filter(version=version):
        if stage in UNSERVABLE or (alias.name in RESERVED_ALIASES and stage != Stage.PRODUCTION):
            _drop_alias(alias, user=user, now=now)
    return former


def _point_alias(model: RegisteredModel, name: str, version: ModelVersion, *, user, now) -> Alias:
    actor = _actor_name(user)
    alias = Alias.objects.select_for_update().filter(model=model, name=name).first()
    if alias is not None and alias.version_id == version.pk:
        return alias
    AliasHistory.objects.filter(model=model, name=name, ended__isnull=True).update(ended=now, ended_by=actor)
    if alias is None:
        alias = Alias.objects.create(model=model, name=name, version=version)
    else:
        alias.version = version
        alias.save()
    AliasHistory.objects.create(model=model, name=name, version=version, started=now, started_by=actor)
    return alias


def _drop_alias(alias: Alias, *, user, now) -> None:
    AliasHistory.objects.filter(model_id=alias.model_id, name=alias.name, ended__isnull=True).update(
        ended=now, ended_by=_actor_name(user))
    alias.delete()


def _locked_version(version: ModelVersion) -> ModelVersion:
    return ModelVersion.objects.select_for_update(of=("self",)).select_related("model").get(pk=version.pk)


def transition(version: ModelVersion, stage, *, user, reason="") -> ModelVersion:
    """Move `version` to `stage` when the table allows it and no approval is needed."""
    details = {"model": version.model.name, "version": version.number, "to": stage}
    try:
        _require(user, "models.change", _("change a version's stage"))
        stage = _check_stage(stage)
        reason = _text(reason, "reason", 2000)
        with transaction.atomic():
            version = _locked_version(version)
            details["from"] = version.stage
            if stage not in TRANSITIONS[version.stage]:
                raise Conflict(_("stage: %(model)s v%(number)d is %(current)s; it can move to %(allowed)s, not "
                                 "%(stage)s") % {"model": version.model.name, "number": version.number,
                                                 "current": version.stage, "stage": stage,
                                                 "allowed": ", ".join(sorted(TRANSITIONS[version.stage])) or _("nothing")},
                               "stage")
            if stage in NEEDS_APPROVAL:
                raise Conflict(_("stage: %(stage)s needs a second person's approval: request it (models request)")
                               % {"stage": stage}, "stage")
            _move_stage(version, stage, user=user, now=timezone.now(), reason=reason.strip())
            audit.record("lifecycle.version.transition", target=version, actor=user, reason=reason,
                         details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.version.transition", version, user, exc, details)
        raise
    return version


def _check_alias_name(name) -> str:
    if not isinstance(name, str) or not ALIAS.fullmatch(name):
        raise LifecycleError(_("alias: %(name)r is not an alias name (%(pattern)s)") % {
            "name": name, "pattern": ALIAS.pattern}, "alias")
    return name


def set_alias(model: RegisteredModel, name, version: ModelVersion, *, user) -> Alias:
    details = {"model": model.name, "alias": name, "version": getattr(version, "number", None)}
    try:
        _require(user, "models.change", _("set aliases"))
        name = _check_alias_name(name)
        if name in RESERVED_ALIASES:
            raise Conflict(_("alias: %(name)s follows the production stage; it moves only by an approved request "
                             "or a rollback") % {"name": name}, "alias")
        if version.model_id != model.pk:
            raise LifecycleError(_("version: v%(number)d belongs to model %(other)s, not %(name)s") % {
                "number": version.number, "other": version.model.name, "name": model.name}, "version")
        with transaction.atomic():
            version = _locked_version(version)
            if version.stage in UNSERVABLE:
                raise Conflict(_("version: v%(number)d is %(stage)s; an alias cannot point at it") % {
                    "number": version.number, "stage": version.stage}, "version")
            alias = _point_alias(model, name, version, user=user, now=timezone.now())
            audit.record("lifecycle.alias.set", target=alias, actor=user, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.alias.set", model, user, exc, details)
        raise
    return alias


def delete_alias(model: RegisteredModel, name, *, user) -> None:
    details = {"model": model.name, "alias": name}
    try:
        _require(user, "models.change", _("remove aliases"))
        name = _check_alias_name(name)
        if name in RESERVED_ALIASES:
            raise Conflict(_("alias: %(name)s follows the production stage; move the version out of production "
                             "instead") % {"name": name}, "alias")
        with transaction.atomic():
            alias = Alias.objects.select_for_update().filter(model=model, name=name).first()
            if alias is None:
                raise NotFound(_("alias: model %(model)s has no alias %(name)s") % {"model": model.name, "name": name},
                               "alias")
            details["version"] = alias.version.number
            audit.record("lifecycle.alias.remove", target=alias, actor=user, details=details)
            _drop_alias(alias, user=user, now=timezone.now())
    except LifecycleError as exc:
        _audit_refusal("lifecycle.alias.remove", model, user, exc, details)
        raise


def production_version(model: RegisteredModel) -> ModelVersion | None:
    return model.versions.filter(stage=Stage.PRODUCTION).order_by("-number").first()


def previous_production(model: RegisteredModel) -> ModelVersion | None:
    """The version that held production before the current one and may return to it (deprecated now)."""
    current = production_version(model)
    rows = (StageHistory.objects.filter(version__model=model, stage=Stage.PRODUCTION, ended__isnull=False)
            .exclude(version=current).select_related("version").order_by("-ended", "-pk"))
    for row in rows:
        if row.version.stage == Stage.DEPRECATED:
            return row.version
    return None


def rollback_production(model: RegisteredModel, *, user, reason) -> ModelVersion:
    """Production back to the previous production version (approved before: no new request); the current
    one deprecated, the production alias moved."""
    details = {"model": model.name, "rollback": True}
    try:
        _require(user, "models.deploy", _("roll production back"))
        reason = _text(reason, "reason", 2000).strip()
        if not reason:
            raise LifecycleError(_("reason: say why production is rolled back"), "reason")
        with transaction.atomic():
            RegisteredModel.objects.select_for_update().get(pk=model.pk)
            previous = previous_production(model)
            if previous is None:
                raise Conflict(_("model %(name)s has no earlier production version to roll back to") % {
                    "name": model.name}, "name")
            current = production_version(model)
            now = timezone.now()
            rolled_back = f"rolled back: {reason}"   # data, as the audit log keeps it: not translated
            if current is not None:
                _move_stage(_locked_version(current), Stage.DEPRECATED, user=user, now=now, reason=rolled_back)
            previous = _locked_version(previous)
            _move_stage(previous, Stage.PRODUCTION, user=user, now=now, reason=rolled_back)
            _point_alias(model, "production", previous, user=user, now=now)
            details.update({"from": Stage.DEPRECATED, "to": Stage.PRODUCTION, "version": previous.number,
                            "replaced": current.number if current else None})
            audit.record("lifecycle.version.transition", target=previous, actor=user, reason=reason, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.version.transition", model, user, exc, details)
        raise
    return previous


# -- four-eyes requests --------------------------------------------------------------------------------

def request_transition(version: ModelVersion, stage, *, user, reason, evidence=(), alias="") -> PromotionRequest:
    details = {"model": version.model.name, "version": version.number, "to": stage}
    try:
        _require_person(user, "models.change", _("requesting a transition"))
        stage = _check_stage(stage)
        if stage not in NEEDS_APPROVAL:
            raise LifecycleError(_("stage: %(stage)s needs no approval; make the transition directly") % {
                "stage": stage}, "stage")
        reason = _text(reason, "reason", 2000).strip()
        if not reason:
            raise LifecycleError(_("reason: say why the version should reach %(stage)s") % {"stage": stage}, "reason")
        if alias:
            alias = _check_alias_name(alias)
        try:
            evidence_ids = sorted({int(item.pk if isinstance(item, Evaluation) else item) for item in evidence or ()})
        except (TypeError, ValueError):
            raise LifecycleError(_("evidence: evaluation ids expected"), "evidence") from None
        with transaction.atomic():
            version = _locked_version(version)
            if stage not in TRANSITIONS[version.stage]:
                raise Conflict(_("stage: %(model)s v%(number)d is %(current)s; it cannot move to %(stage)s") % {
                    "model": version.model.name, "number": version.number, "current": version.stage,
                    "stage": stage}, "stage")
            evaluations = list(Evaluation.objects.filter(version=version, pk__in=evidence_ids))
            if len(evaluations) != len(evidence_ids):
                missing = sorted(set(evidence_ids) - {e.pk for e in evaluations})
                raise LifecycleError(_("evidence: %(ids)s are not evaluations of %(model)s v%(number)d") % {
                    "ids": ", ".join(map(str, missing)), "model": version.model.name, "number": version.number},
                    "evidence")
            if stage == Stage.PRODUCTION and not evaluations:
                # Name the evaluations to choose from: the asker rarely knows their ids.
                known = ", ".join(f"#{e.pk} {e.name}" for e in version.evaluations.order_by("pk")[:10])
                raise LifecycleError(_("evidence: production needs at least one evaluation of this version (%(known)s)")
                                     % {"known": _("its evaluations: %(list)s") % {"list": known} if known
                                        else _("it has none yet: add one first")}, "evidence")
            now = timezone.now()
            if PromotionRequest.objects.filter(version=version, target_stage=stage, state=PromotionRequest.State.PENDING,
                                               expires_at__gt=now).exists():
                raise Conflict(_("stage: a request to move %(model)s v%(number)d to %(stage)s is pending already") % {
                    "model": version.model.name, "number": version.number, "stage": stage}, "stage")
            request = PromotionRequest.objects.create(
                version=version, target_stage=stage, alias=alias, requested_by=user,
                requested_by_username=user.get_username(), reason=reason,
                expires_at=now + timedelta(hours=settings.LIFECYCLE_REQUEST_TTL_HOURS))
            request.evidence.set(evaluations)
            details.update({"from": version.stage, "evidence": [e.pk for e in evaluations], "alias": alias,
                            "expires_at": request.expires_at.isoformat()})
            audit.record("lifecycle.request.create", target=request, actor=user, reason=reason, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.request.create", version, user, exc, details)
        raise
    return request


def _locked_request(request: PromotionRequest) -> PromotionRequest:
    return (PromotionRequest.objects.select_for_update(of=("self",)).select_related("version__model", "requested_by")
            .get(pk=request.pk))


def _expire(request: PromotionRequest, now) -> None:
    request.state = PromotionRequest.State.EXPIRED
    request.decided_at = now
    request.save()
    audit.record("lifecycle.request.expire", target=request, details={
        "model": request.version.model.name, "version": request.version.number, "to": request.target_stage,
        "requested_by": request.requested_by_username, "expires_at": request.expires_at.isoformat()})


def _require_pending(request: PromotionRequest, now) -> None:
    if request.state != PromotionRequest.State.PENDING:
        raise Conflict(_("request #%(id)d is %(state)s, not pending") % {"id": request.pk, "state": request.state},
                       "request")
    if request.expires_at <= now:
        raise Conflict(_("request #%(id)d expired at %(at)s; ask again") % {
            "id": request.pk, "at": request.expires_at.isoformat(timespec="seconds")}, "request")


def approve(request: PromotionRequest, *, user, reason="") -> PromotionRequest:
    """Four-eyes approval, carried out at once: the version reaches the target stage (production), the alias
    production (and the request's alias) points at it, the former production version is deprecated."""
    details = {"request": request.pk, "model": request.version.model.name, "version": request.version.number,
               "to": request.target_stage, "requested_by": request.requested_by_username}
    expired = False
    try:
        _require_person(user, "models.approve", _("approving a request"))
        reason = _text(reason, "reason", 2000)
        if request.target_stage == Stage.PRODUCTION and request.state == PromotionRequest.State.PENDING:
            # Files that changed since the evidence was gathered are not what the approver approves; the
            # quick check reads no file, and its alert is recorded outside the approval's transaction.
            from . import integrity

            integrity.require_intact(request.version, user=user)
        with transaction.atomic():
            request = _locked_request(request)
            now = timezone.now()
            if request.state == PromotionRequest.State.PENDING and request.expires_at <= now:
                expired = True
            _require_pending(request, now)
            try:
                require_independent_approver(
                    user, request.requested_by, since=request.created,
                    what=_("promotion to %(stage)s") % {"stage": request.target_stage}, second=_("a second person"))
            except ApproverNotIndependent as exc:
                raise Conflict(str(exc), exc.field) from None
            version = _locked_version(request.version)
            if request.target_stage not in TRANSITIONS[version.stage]:
                raise Conflict(_("stage: %(model)s v%(number)d is %(current)s now; it cannot move to %(stage)s") % {
                    "model": version.model.name, "number": version.number, "current": version.stage,
                    "stage": request.target_stage}, "stage")
            model = RegisteredModel.objects.select_for_update().get(pk=version.model_id)
            replaced = []
            if request.target_stage == Stage.PRODUCTION:
                for other in model.versions.filter(stage=Stage.PRODUCTION).exclude(pk=version.pk):
                    _move_stage(_locked_version(other), Stage.DEPRECATED, user=user, now=now,
                                reason=f"replaced in production by v{version.number} (request #{request.pk})")
                    replaced.append(other.number)
            details["from"] = _move_stage(version, request.target_stage, user=user, now=now, request=request,
                                          reason=request.reason)
            if request.target_stage == Stage.PRODUCTION:
                _point_alias(model, "production", version, user=user, now=now)
            if request.alias and request.alias not in RESERVED_ALIASES:
                _point_alias(model, request.alias, version, user=user, now=now)
            request.state = PromotionRequest.State.APPROVED
            request.decided_by, request.decided_by_username = user, user.get_username()
            request.decided_at, request.decision_reason = now, reason
            request.save()
            details.update({"deprecated": replaced, "alias": request.alias})
            audit.record("lifecycle.request.approve", target=request, actor=user, reason=reason, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.request.approve", request, user, exc, details)
        if expired:
            with transaction.atomic():
                request = _locked_request(request)
                if request.state == PromotionRequest.State.PENDING:
                    _expire(request, timezone.now())
        raise
    return request


def reject(request: PromotionRequest, *, user, reason) -> PromotionRequest:
    details = {"request": request.pk, "model": request.version.model.name, "version": request.version.number,
               "to": request.target_stage, "requested_by": request.requested_by_username}
    try:
        _require_person(user, "models.approve", _("rejecting a request"))
        reason = _text(reason, "reason", 2000).strip()
        if not reason:
            raise LifecycleError(_("reason: say why the request is rejected"), "reason")
        with transaction.atomic():
            request = _locked_request(request)
            _require_pending(request, timezone.now())
            request.state = PromotionRequest.State.REJECTED
            request.decided_by, request.decided_by_username = user, user.get_username()
            request.decided_at, request.decision_reason = timezone.now(), reason
            request.save()
            audit.record("lifecycle.request.reject", target=request, actor=user, reason=reason, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.request.reject", request, user, exc, details)
        raise
    return request


def cancel(request: PromotionRequest, *, user) -> PromotionRequest:
    details = {"request": request.pk, "model": request.version.model.name, "version": request.version.number,
               "to": request.target_stage}
    try:
        _require_person(user, "models.change", _("withdrawing a request"))
        with transaction.atomic():
            request = _locked_request(request)
            if request.requested_by_id != user.pk:
                raise Forbidden(_("request #%(id)d was made by %(requester)s; only they can withdraw it") % {
                    "id": request.pk, "requester": request.requested_by_username}, "request")
            _require_pending(request, timezone.now())
            request.state = PromotionRequest.State.CANCELLED
            request.decided_by, request.decided_by_username = user, user.get_username()
            request.decided_at = timezone.now()
            request.save()
            audit.record("lifecycle.request.cancel", target=request, actor=user, details=details)
    except LifecycleError as exc:
        _audit_refusal("lifecycle.request.cancel", request, user, exc, details)
        raise
    return request


def expire_requests(now=None) -> int:
    """Mark pending requests past their lifetime expired (one audit event each); how many."""
    now = now or timezone.now()
    count = 0
    for pk in PromotionRequest.objects.filter(state=PromotionRequest.State.PENDING, expires_at__lte=now).values_list(
            "pk", flat=True):
        with transaction.atomic():
            request = (PromotionRequest.objects.select_for_update(of=("self",)).select_related("version__model")
                       .filter(pk=pk, state=PromotionRequest.State.PENDING, expires_at__lte=now).first())
            if request is not None:
                _expire(request, now)
                count += 1
    return count


# -- history -------------------------------------------------------------------------------------------

def _held_at(at: datetime):
    return Q(started__lte=at) & (Q(ended__isnull=True) | Q(ended__gt=at))


def state_at(model: RegisteredModel, at: datetime) -> dict:
    """The model as it stood at `at`: {"stages": {version number: stage}, "aliases": {alias: version number}}.
    Versions registered after `at` are absent."""
    if timezone.is_naive(at):
        raise LifecycleError(_("at: a time with its time zone is needed"), "at")
    stages = {}
    for number, stage in (StageHistory.objects.filter(_held_at(at), version__model=model)
                          .order_by("started", "pk").values_list("version__number", "stage")):
        stages[number] = stage
    aliases = {}
    for name, number in (AliasHistory.objects.filter(_held_at(at), model=model)
                         .order_by("started", "pk").values_list("name", "version__number")):
        aliases[name] = number
    return {"stages": dict(sorted(stages.items())), "aliases": dict(sorted(aliases.items()))}


def timeline(model: RegisteredModel, version: ModelVersion | None = None) -> list[dict]:
    """Everything that happened to the model (or one version), oldest first:
    [{at, kind: stage|alias|request|evaluation|deployment, version, by, ...}]."""
    events = []
    stage_rows = StageHistory.objects.filter(version__model=model).select_related("version")
    alias_rows = AliasHistory.objects.filter(model=model).select_related("version")
    requests = PromotionRequest.objects.filter(version__model=model).select_related("version")
    evaluations = Evaluation.objects.filter(version__model=model).select_related("version", "created_by")
    deployments = Deployment.objects.filter(version__model=model).select_related("version", "created_by")
    if version is not None:
        stage_rows, alias_rows = stage_rows.filter(version=version), alias_rows.filter(version=version)
        requests, evaluations = requests.filter(version=version), evaluations.filter(version=version)
        deployments = deployments.filter(version=version)
    for row in stage_rows:
        events.append({"at": row.started, "kind": "stage", "version": row.version.number, "stage": row.stage,
                       "by": row.started_by, "ended": row.ended, "ended_by": row.ended_by,
                       "request": row.request_id, "reason": row.reason})
    for row in alias_rows:
        events.append({"at": row.started, "kind": "alias", "version": row.version.number, "alias": row.name,
                       "by": row.started_by, "ended": row.ended, "ended_by": row.ended_by})
    for row in requests:
        events.append({"at": row.created, "kind": "request", "version": row.version.number, "request": row.pk,
                       "stage": row.target_stage, "state": row.state, "by": row.requested_by_username,
                       "reason": row.reason, "decided_by": row.decided_by_username, "decided_at": row.decided_at})
    for row in evaluations:
        events.append({"at": row.created, "kind": "evaluation", "version": row.version.number, "evaluation": row.pk,
                       "name": row.name, "metrics": row.metrics, "passed": row.passed,
                       "by": row.created_by.get_username() if row.created_by else ""})
    for row in deployments:
        events.append({"at": row.created, "kind": "deployment", "version": row.version.number,
                       "deployment": row.pk, "name": row.name, "state": row.state,
                       "by": row.created_by.get_username() if row.created_by else ""})
    order = {"stage": 0, "alias": 1, "request": 2, "evaluation": 3, "deployment": 4}
    events.sort(key=lambda event: (event["at"], order[event["kind"]]))
    return events
