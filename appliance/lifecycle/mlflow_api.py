"""MLflow's model registry REST API (/api/2.0/mlflow/...), served from the appliance's own registry so that
MLflow's client (`MlflowClient(registry_uri=<appliance URL>)`) registers and reads models here.

Wire format as MLflow's client sends and reads it (mlflow/protos/model_registry.proto): GET takes its
parameters in the query string (repeated ones repeated: `order_by=a&order_by=b`), POST/PATCH/DELETE a JSON
body; timestamps are milliseconds since the epoch, version numbers strings, tags `[{key, value}]`; errors
`{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "..."}` with the HTTP status MLflow gives that code.

Authentication (appliance.accounts.authentication.BearerOrBasicAuthentication): `Bearer <API token>`
(MLFLOW_TRACKING_TOKEN) or Basic (MLFLOW_TRACKING_USERNAME/PASSWORD, checked like a login: lockout,
per-address budget of wrong passwords, audit). No session: no CSRF. Reading needs models.view, writing
models.change (PERMISSION_DENIED otherwise).

Writes go through services.py, which checks the appliance's rules and audits every change:
- Stages. MLflow has four; the appliance seven. A version's MLflow stage is read as
      "None" <- registered, validated;  "Staging" <- staging;  "Production" <- production;
      "Archived" <- deprecated, archived, rejected,
  and its own stage is the tag `appliance.stage` (read-only; filterable: tags.`appliance.stage` = 'staging').
  transition-stage to "Staging" -> staging, "Archived" -> archived (deprecated from production), "None" ->
  validated (nothing from registered or validated); the appliance's own stage names are accepted too
  ("validated", "rejected", ...). The transition table applies: registered -> validated -> staging -> ...;
  MLflow's None -> Staging on a registered version is both steps in one call (each audited) for the one who
  registered it, as MLflow's flow (register, Staging, Production) expects; anyone else validates it first.
  archive_existing_versions archives the model's other Staging versions once this one reached Staging;
  for Production the approval itself deprecates the version it replaces.
- "Production" (and the alias "production", which follows the production stage) needs a second person:
  it becomes a PromotionRequest with the version's evaluations as evidence, and the response describes the
  version as it still is, with `status_message` (what MLflow's client shows: Production needs a second
  person's approval, request #N) and the tag `appliance.pending_request` naming the request. Once approved,
  `models:/NAME/Production` resolves to it.
- get-download-uri (what MLflow's client resolves models:/NAME/STAGE with before it reads the files itself)
  is refused with RESOURCE_CONFLICT for a version found tampered, as its deployment is, until an
  Administrator clears the verdict.
- Versions are never deleted (their files are signed evidence): delete-model-version is refused with
  RESOURCE_CONFLICT; archive them instead. A model is deleted only without versions.
- create-model-version's `source` must be a directory (or file) under the appliance's artifact roots
  (absolute path or file:// URI); its files are hashed and signed at registration. A `models:/` or `runs:/`
  URI is refused as what it is (MLflow names, not files).
- search-model-versions takes MLflow's max_results limit (200,000) and answers at most VERSION_PAGE
  versions per page, with a next_page_token when more match (see VERSION_PAGE).
"""

from __future__ import annotations

from django.db.models import Max, Prefetch
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.accounts.authentication import BearerOrBasicAuthentication, TokenAuthentication
from appliance.core.permissions import RolePermission, required_capability

from . import mlflow_search, services
from .errors import LifecycleError
from .models import Alias, Evaluation, ModelVersion, PromotionRequest, RegisteredModel, Stage, Verification

# The HTTP status MLflow's server answers each error code with (mlflow/exceptions.py).
STATUS_OF = {
    "INVALID_PARAMETER_VALUE": 400, "BAD_REQUEST": 400, "RESOURCE_ALREADY_EXISTS": 400, "MALFORMED_REQUEST": 400,
    "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "RESOURCE_DOES_NOT_EXIST": 404, "ENDPOINT_NOT_FOUND": 404,
    "RESOURCE_CONFLICT": 409, "REQUEST_LIMIT_EXCEEDED": 429, "INTERNAL_ERROR": 500,
}
MLFLOW_STAGE = {Stage.REGISTERED: "None", Stage.VALIDATED: "None", Stage.STAGING: "Staging",
                Stage.PRODUCTION: "Production", Stage.DEPRECATED: "Archived", Stage.ARCHIVED: "Archived",
                Stage.REJECTED: "Archived"}
MLFLOW_STAGES = ("None", "Staging", "Production", "Archived")
STAGE_TAG, REQUEST_TAG = "appliance.stage", "appliance.pending_request"
RESERVED_TAG_PREFIX = "appliance."
# MLflow's limits on max_results (mlflow/store/model_registry: 1000 models, 200,000 versions). A version
# search answers at most VERSION_PAGE versions at a time (a page of 200,000 would be a response of about
# 120 MB held in memory at once): asked for more, it sends that many and a next_page_token, as MLflow's
# paging allows (max_results is an upper bound), and the client's next call goes on from there.
MAX_MODEL_RESULTS, MAX_VERSION_RESULTS = 1000, 200_000
VERSION_PAGE = 10_000   # also what MLflow's client asks for by default
VERSION_PATTERN_TEXT = "a version number (1, 2, ...)"


class MlflowError(Exception):
    def __init__(self, error_code: str, message: str):
        super().__init__(message)
        self.error_code, self.status = error_code, STATUS_OF[error_code]


def _as_mlflow_error(exc: Exception, *, conflict_code: str = "RESOURCE_CONFLICT") -> MlflowError | None:
    if isinstance(exc, MlflowError):
        return exc
    if isinstance(exc, LifecycleError):
        code = {400: "INVALID_PARAMETER_VALUE", 403: "PERMISSION_DENIED", 404: "RESOURCE_DOES_NOT_EXIST",
                409: conflict_code}.get(exc.status, "INVALID_PARAMETER_VALUE")
        return MlflowError(code, str(exc))
    if isinstance(exc, exceptions.Throttled):
        return MlflowError("REQUEST_LIMIT_EXCEEDED", str(exc.detail))
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return MlflowError("UNAUTHENTICATED", str(exc.detail))
    if isinstance(exc, exceptions.PermissionDenied):
        return MlflowError("PERMISSION_DENIED", str(exc.detail))
    if isinstance(exc, exceptions.ParseError | exceptions.UnsupportedMediaType):
        return MlflowError("MALFORMED_REQUEST", str(exc.detail))
    if isinstance(exc, exceptions.MethodNotAllowed):
        return MlflowError("ENDPOINT_NOT_FOUND", str(exc.detail))
    return None


class MlflowView(APIView):
    """models.view to read, models.change to write, through the project's one enforcement point; a view
    whose POST only reads (a search) declares models.view for it."""

    authentication_classes = [BearerOrBasicAuthentication, TokenAuthentication]
    permission_classes = [RolePermission]
    capability = "models.view"
    write_capability = "models.change"
    renderer_classes = [JSONRenderer]
    reading_methods: frozenset[str] = frozenset()
    conflict_code = "RESOURCE_CONFLICT"
    schema = None  # MLflow's API, described by MLflow's own protos, not by the appliance's OpenAPI schema

    def permission_denied(self, request, message=None, code=None):
        # MLflow's client shows only the message: say which capability the role lacks.
        if request.user and request.user.is_authenticated:
            message = _("Your role does not allow this (needs %(capability)s).") % {
                "capability": required_capability(self, request.method)}
        super().permission_denied(request, message, code)

    def handle_exception(self, exc):
        error = _as_mlflow_error(exc, conflict_code=self.conflict_code)
        if error is None:
            return super().handle_exception(exc)
        response = Response({"error_code": error.error_code, "message": str(error)}, status=error.status)
        if error.status == 401:
            response["WWW-Authenticate"] = 'Basic realm="appliance", Bearer'
        if isinstance(exc, exceptions.Throttled) and exc.wait:
            response["Retry-After"] = str(int(exc.wait) + 1)
        if error.status in (401, 403, 429):
            self.request._request.audit_denial_reason = str(error)
        return response

    def finalize_response(self, request, response, *args, **kwargs):
        if request.method in self.reading_methods and response.status_code < 400:
            # A search sent as POST changes nothing: no api.request record for it.
            request._request.audit_recorded_by_view = True
        return super().finalize_response(request, response, *args, **kwargs)

    def params(self) -> Params:
        request = self.request
        if request.method == "GET":
            return Params({key: request.query_params.getlist(key) for key in request.query_params}, query=True)
        data = request.data if request.data is not None else {}
        if not isinstance(data, dict):
            raise MlflowError("MALFORMED_REQUEST", "the body must be a JSON object")
        return Params(data, query=False)


class Params:
    """The request's parameters: the query string of a GET (every value a list of text), the JSON body of
    the other methods."""

    def __init__(self, data: dict, *, query: bool):
        self.data, self.query = data, query

    def text(self, name: str, *, required: bool = False, limit: int = 5000) -> str:
        value = self.data.get(name)
        if self.query and isinstance(value, list):
            value = value[-1] if value else None
        if value is None or value == "":
            if required:
                raise MlflowError("INVALID_PARAMETER_VALUE", f"Missing value for required parameter '{name}'.")
            return ""
        if not isinstance(value, str):
            raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}: text expected")
        if len(value) > limit:
            raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}: at most {limit} characters")
        return value

    def texts(self, name: str) -> list[str]:
        value = self.data.get(name) or []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value) or len(value) > 20:
            raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}: a list of at most 20 texts expected")
        return value

    def integer(self, name: str, default: int, maximum: int) -> int:
        value = self.text(name) if self.query else self.data.get(name)
        if value in (None, ""):
            return default
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}: a whole number expected") from None
        if not 1 <= number <= maximum:
            raise MlflowError("INVALID_PARAMETER_VALUE", f"Invalid value {number} for parameter '{name}' "
                              f"supplied: it must be between 1 and {maximum}.")
        return number

    def boolean(self, name: str) -> bool:
        value = self.text(name).lower() if self.query else self.data.get(name)
        return value in (True, "true", "1")

    def tags(self, name: str = "tags") -> dict[str, str]:
        value = self.data.get(name) or []
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}: a list of {{key, value}} objects expected")
        tags = {}
        for position, item in enumerate(value):
            key, text = item.get("key"), item.get("value", "")
            if not isinstance(key, str) or not isinstance(text, str | None):
                raise MlflowError("INVALID_PARAMETER_VALUE", f"{name}[{position}]: key and value must be text")
            _writable_tag(key)
            tags[key] = text or ""
        return tags


def _writable_tag(key: str) -> None:
    if key.startswith(RESERVED_TAG_PREFIX):
        raise MlflowError("INVALID_PARAMETER_VALUE",
                          f"tags: {key!r}: tags starting with {RESERVED_TAG_PREFIX!r} are the appliance's own "
                          "(read-only)")


def _number(text: str) -> int:
    if not text.isdigit() or len(text) > 9 or int(text) < 1:
        raise MlflowError("INVALID_PARAMETER_VALUE", f"version: {text!r} is not {VERSION_PATTERN_TEXT}")
    return int(text)


def _ms(moment) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def _tag_list(tags: dict) -> list[dict]:
    return [{"key": key, "value": "" if value is None else str(value)} for key, value in sorted(tags.items())]


# -- reading ---------------------------------------------------------------------------------------------

def versions_queryset():
    """Everything a version's JSON reads, in a constant number of queries whatever the count."""
    return ModelVersion.objects.select_related("model", "registered_by").prefetch_related(
        Prefetch("aliases", queryset=Alias.objects.only("id", "name", "version_id")),
        Prefetch("requests", queryset=PromotionRequest.objects.filter(state=PromotionRequest.State.PENDING)
                 .only("id", "version_id", "target_stage", "alias", "state"), to_attr="pending_requests"))


def version_json(version: ModelVersion) -> dict:
    pending = getattr(version, "pending_requests", None)
    if pending is None:
        pending = list(version.requests.filter(state=PromotionRequest.State.PENDING))
    tags = {**(version.tags or {}), STAGE_TAG: version.stage}
    status_message = ""
    if pending:
        request = pending[0]
        tags[REQUEST_TAG] = str(request.pk)
        status_message = (f"{MLFLOW_STAGE.get(request.target_stage, request.target_stage)} needs a second "
                          f"person's approval: request #{request.pk} is pending until someone with models.approve "
                          f"approves it; the version stays in {MLFLOW_STAGE[version.stage]} until then")
    return {
        "name": version.model.name, "version": str(version.number),
        "creation_timestamp": _ms(version.created), "last_updated_timestamp": _ms(version.updated),
        "user_id": version.registered_by.get_username() if version.registered_by else "",
        "current_stage": MLFLOW_STAGE[version.stage], "description": version.description,
        "source": version.source, "run_id": version.run_id, "status": "READY", "status_message": status_message,
        "tags": _tag_list(tags), "aliases": sorted(alias.name for alias in version.aliases.all()),
    }


def _latest_per_stage(models: list[RegisteredModel], stages: list[str] | None = None) -> dict[int, list]:
    """model pk -> the highest-numbered version in each MLflow stage (`stages`: those only)."""
    wanted = set(stages or MLFLOW_STAGES)
    tops = (ModelVersion.objects.filter(model__in=models).values("model_id", "stage")
            .annotate(top=Max("number")).order_by())
    best: dict[tuple[int, str], int] = {}
    for row in tops:
        stage = MLFLOW_STAGE[row["stage"]]
        if stage in wanted:
            key = (row["model_id"], stage)
            best[key] = max(best.get(key, 0), row["top"])
    pairs = {(model_id, number) for (model_id, _stage), number in best.items()}
    found = versions_queryset().filter(model__in=models, number__in={number for _m, number in pairs})
    result: dict[int, list] = {model.pk: [] for model in models}
    for version in sorted(found, key=lambda v: (v.model_id, MLFLOW_STAGES.index(MLFLOW_STAGE[v.stage]))):
        if (version.model_id, version.number) in pairs:
            result[version.model_id].append(version)
    return result


def models_queryset():
    return RegisteredModel.objects.select_related("owner").prefetch_related(
        Prefetch("aliases", queryset=Alias.objects.select_related("version").only(
            "id", "name", "model_id", "version__id", "version__number")))


def models_json(models: list[RegisteredModel]) -> list[dict]:
    latest = _latest_per_stage(models)
    return [{
        "name": model.name, "creation_timestamp": _ms(model.created), "last_updated_timestamp": _ms(model.updated),
        "user_id": model.owner.get_username() if model.owner else "", "description": model.description,
        "latest_versions": [version_json(version) for version in latest[model.pk]],
        "tags": _tag_list(model.tags or {}),
        "aliases": [{"alias": alias.name, "version": str(alias.version.number)} for alias in model.aliases.all()],
    } for model in models]


def _model(name: str) -> RegisteredModel:
    model = models_queryset().filter(name=name).first()
    if model is None:
        raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"Registered Model with name={name} not found")
    return model


def _version(name: str, number_text: str) -> ModelVersion:
    number = _number(number_text)
    version = versions_queryset().filter(model__name=name, number=number).first()
    if version is None:
        raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"Model Version (name={name}, version={number}) not found")
    return version


def _fresh_version(version: ModelVersion) -> dict:
    return version_json(versions_queryset().get(pk=version.pk))


def _fresh_model(model: RegisteredModel) -> dict:
    return models_json([models_queryset().get(pk=model.pk)])[0]


def _page(queryset, params: Params, default: int, maximum: int, page: int | None = None) -> tuple[list, str]:
    """One page: `max_results` (default `default`, at most `maximum`) rows, or at most `page` of them."""
    limit = params.integer("max_results", default, maximum)
    if page is not None:
        limit = min(limit, page)
    offset = mlflow_search.page_offset(params.text("page_token", limit=200))
    rows = list(queryset[offset:offset + limit + 1])
    following = mlflow_search.page_token(offset + limit) if len(rows) > limit else ""
    return rows[:limit], following


# -- writing that services.py does not cover ------------------------------------------------------------

def _request_production(version: ModelVersion, *, user, alias: str = "", asked: str) -> PromotionRequest:
    evidence = list(Evaluation.objects.filter(version=version).values_list("pk", flat=True))
    return services.request_transition(
        version, Stage.PRODUCTION, user=user, alias=alias, evidence=evidence,
        reason=f"requested through the MLflow API ({asked}); evidence: the version's evaluations")


def _staging_path(version: ModelVersion, target: str, *, user, asked: str) -> list[str]:
    """The appliance stages a transition to `target` takes. MLflow's client moves a new version (None) to
    Staging in one call; here a registered version is validated first, and only by the one who registered
    it (an MLflow user's own new version): two transitions, each audited. Anyone else validates it
    explicitly ("validated"), as in the appliance's own tools."""
    if not (target == Stage.STAGING and version.stage == Stage.REGISTERED):
        return [target]
    if version.registered_by_id is not None and version.registered_by_id == getattr(user, "pk", None):
        return [Stage.VALIDATED, Stage.STAGING]
    registrant = version.registered_by.get_username() if version.registered_by else "its registrant"
    raise MlflowError("RESOURCE_CONFLICT",
                      f"stage: {version} is registered (MLflow: None): only the one who registered it "
                      f"({registrant}) moves it to Staging in one step; anyone else transitions it to "
                      f"'validated' first, then to {asked}.")


def _target_stage(version: ModelVersion, asked: str) -> str | None:
    """The appliance stage an MLflow stage (or an appliance stage name) asks for; None: already there."""
    wanted = asked.strip().lower()
    if wanted in Stage.values:
        return wanted
    if wanted == "none":
        return None if version.stage in (Stage.REGISTERED, Stage.VALIDATED) else Stage.VALIDATED
    if wanted == "staging":
        return Stage.STAGING
    if wanted == "production":
        return Stage.PRODUCTION
    if wanted == "archived":
        if version.stage == Stage.ARCHIVED:
            return None
        return Stage.DEPRECATED if version.stage == Stage.PRODUCTION else Stage.ARCHIVED
    raise MlflowError("INVALID_PARAMETER_VALUE", f"stage: {asked!r} is not one of {', '.join(MLFLOW_STAGES)} "
                      f"(or the appliance's {', '.join(Stage.values)})")


# -- registered models ----------------------------------------------------------------------------------

class CreateRegisteredModel(MlflowView):
    conflict_code = "RESOURCE_ALREADY_EXISTS"   # mlflow.register_model() goes on to add a version on it

    def post(self, request):
        params = self.params()
        tags = params.tags()
        model = services.register_model(params.text("name", required=True, limit=200), user=request.user,
                                        description=params.text("description"), tags=tags)
        return Response({"registered_model": _fresh_model(model)})


class GetRegisteredModel(MlflowView):
    def get(self, request):
        return Response({"registered_model": models_json([_model(self.params().text("name", required=True))])[0]})


class SearchRegisteredModels(MlflowView):
    reading_methods = frozenset({"POST"})
    write_capability = "models.view"
    FIELDS = {"name": "name"}
    COLUMNS = {"name": "name", "timestamp": "updated", "last_updated_timestamp": "updated",
               "creation_timestamp": "created"}

    def get(self, request):
        params = self.params()
        clauses = mlflow_search.parse(params.text("filter"), {"name": "string"})
        queryset = mlflow_search.apply(models_queryset(), clauses, self.FIELDS)
        queryset = queryset.order_by(*mlflow_search.ordering(params.texts("order_by"), self.COLUMNS, ["name", "pk"]))
        models, following = _page(queryset, params, 100, MAX_MODEL_RESULTS)
        body = {"registered_models": models_json(models)}
        if following:
            body["next_page_token"] = following
        return Response(body)

    post = get


class UpdateRegisteredModel(MlflowView):
    def patch(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        if "description" in params.data:
            model = services.update_model(model, user=request.user, description=params.text("description"))
        return Response({"registered_model": _fresh_model(model)})


class RenameRegisteredModel(MlflowView):
    def post(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        new_name = params.text("new_name", required=True, limit=200)
        if new_name == model.name:
            return Response({"registered_model": _fresh_model(model)})
        raise MlflowError("INVALID_PARAMETER_VALUE",
                          f"new_name: models are not renamed here: the name is what lineage, approvals, "
                          f"deployments and the audit log refer to. Register {new_name!r} as a new model instead.")


class DeleteRegisteredModel(MlflowView):
    def delete(self, request):
        services.delete_model(_model(self.params().text("name", required=True)), user=request.user)
        return Response({})


class SetRegisteredModelTag(MlflowView):
    def post(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        key = params.text("key", required=True, limit=250)
        _writable_tag(key)
        services.update_model(model, user=request.user, tags={**model.tags, key: params.text("value")})
        return Response({})


class DeleteRegisteredModelTag(MlflowView):
    def delete(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        key = params.text("key", required=True, limit=250)
        if key not in model.tags:
            raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"No tag with name: {key} in registered model {model.name}")
        services.update_model(model, user=request.user,
                              tags={name: value for name, value in model.tags.items() if name != key})
        return Response({})


class RegisteredModelAlias(MlflowView):
    """GET: the version an alias points at; POST: point it (the alias "production": a request for
    approval); DELETE: remove it."""

    def get(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        alias_name = params.text("alias", required=True, limit=64)
        alias = Alias.objects.filter(model=model, name=alias_name).first()
        if alias is None:
            raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"Registered model alias {alias_name} not found.")
        return Response({"model_version": _fresh_version(alias.version)})

    def post(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        alias_name = params.text("alias", required=True, limit=64)
        version = _version(model.name, params.text("version", required=True, limit=12))
        if alias_name in services.RESERVED_ALIASES:
            current = Alias.objects.filter(model=model, name=alias_name).first()
            if current is None or current.version_id != version.pk:
                _request_production(version, user=request.user, alias=alias_name,
                                    asked=f"alias {alias_name} -> version {version.number}")
        else:
            services.set_alias(model, alias_name, version, user=request.user)
        return Response({})

    def delete(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        services.delete_alias(model, params.text("alias", required=True, limit=64), user=request.user)
        return Response({})


class GetLatestVersions(MlflowView):
    reading_methods = frozenset({"POST"})
    write_capability = "models.view"

    def get(self, request):
        params = self.params()
        model = _model(params.text("name", required=True))
        stages = []
        for stage in params.texts("stages"):
            canonical = next((name for name in MLFLOW_STAGES if name.lower() == stage.lower()), None)
            if canonical is None:
                raise MlflowError("INVALID_PARAMETER_VALUE",
                                  f"stages: {stage!r} is not one of {', '.join(MLFLOW_STAGES)}")
            stages.append(canonical)
        latest = _latest_per_stage([model], stages or None)[model.pk]
        return Response({"model_versions": [version_json(version) for version in latest]})

    post = get


# -- model versions -------------------------------------------------------------------------------------

class CreateModelVersion(MlflowView):
    def post(self, request):
        params = self.params()
        name = params.text("name", required=True, limit=200)
        _model(name)
        version = services.register_version(
            name, source=params.text("source", required=True, limit=1000), user=request.user,
            description=params.text("description"), tags=params.tags(), run_id=params.text("run_id", limit=64),
            create_model=False)
        return Response({"model_version": _fresh_version(version)})


class GetModelVersion(MlflowView):
    def get(self, request):
        params = self.params()
        return Response({"model_version": version_json(
            _version(params.text("name", required=True), params.text("version", required=True, limit=12)))})


class UpdateModelVersion(MlflowView):
    def patch(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        if "description" in params.data:
            version = services.update_version(version, user=request.user, via="mlflow", description=params.text("description"))
        return Response({"model_version": _fresh_version(version)})


class DeleteModelVersion(MlflowView):
    def delete(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        raise MlflowError("RESOURCE_CONFLICT",
                          f"Model versions are kept: {version} is evidence (signed files, lineage, approvals). "
                          "Transition it to Archived instead.")


class SearchModelVersions(MlflowView):
    reading_methods = frozenset({"POST"})
    write_capability = "models.view"
    ATTRIBUTES = {"name": "string", "run_id": "string", "source_path": "string", "version_number": "number"}
    FIELDS = {"name": "model__name", "run_id": "run_id", "source_path": "source", "version_number": "number"}
    COLUMNS = {"name": "model__name", "version_number": "number", "creation_timestamp": "created",
               "timestamp": "updated", "last_updated_timestamp": "updated"}

    def get(self, request):
        params = self.params()
        clauses = mlflow_search.parse(params.text("filter"), self.ATTRIBUTES)
        queryset = mlflow_search.apply(versions_queryset(), clauses, self.FIELDS, synthetic_tags={STAGE_TAG: "stage"})
        queryset = queryset.order_by(*mlflow_search.ordering(
            params.texts("order_by"), self.COLUMNS, ["-updated", "model__name", "-number", "pk"]))
        versions, following = _page(queryset, params, VERSION_PAGE, MAX_VERSION_RESULTS, VERSION_PAGE)
        body = {"model_versions": [version_json(version) for version in versions]}
        if following:
            body["next_page_token"] = following
        return Response(body)

    post = get


class SetModelVersionTag(MlflowView):
    def post(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        key = params.text("key", required=True, limit=250)
        _writable_tag(key)
        services.update_version(version, user=request.user, via="mlflow", tags={**version.tags, key: params.text("value")})
        return Response({})


class DeleteModelVersionTag(MlflowView):
    def delete(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        key = params.text("key", required=True, limit=250)
        if key not in version.tags:
            raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"No tag with key: {key} in model version {version}")
        services.update_version(version, user=request.user, via="mlflow",
                       tags={name: value for name, value in version.tags.items() if name != key})
        return Response({})


class GetModelVersionDownloadUri(MlflowView):
    """Where the registered (hashed, signed) files are: the directory the source resolved to. Not for a
    version found tampered: MLflow's client resolves models:/NAME/STAGE through here and reads the files
    itself, so the verdict holds here as it holds for a deployment (until an Administrator clears it)."""

    def get(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        if version.verification == Verification.TAMPERED:
            raise MlflowError("RESOURCE_CONFLICT",
                              f"version: {version} was found changed since registration (tampered): its files are "
                              "not handed out until an Administrator clears the verdict after a full verification "
                              "passes")
        uri = f"file://{version.storage_path}" if version.storage_path else version.source
        return Response({"artifact_uri": uri})


class TransitionModelVersionStage(MlflowView):
    def post(self, request):
        params = self.params()
        version = _version(params.text("name", required=True), params.text("version", required=True, limit=12))
        asked = params.text("stage", required=True, limit=40)
        target = _target_stage(version, asked)
        if target == Stage.PRODUCTION:
            if version.stage != Stage.PRODUCTION:
                _request_production(version, user=request.user, asked=f"transition-stage to {asked}")
        elif target is not None and target != version.stage:
            # No transaction around these: each is one audited action, and a refusal's record must stay.
            # The version first: when it is refused, no other version has moved.
            for step in _staging_path(version, target, user=request.user, asked=asked):
                version = services.transition(
                    version, step, user=request.user, reason=f"transition-stage to {asked} (MLflow API)"
                    + (f"; validated by its registrant on the way to {target}" if step != target else ""))
            if params.boolean("archive_existing_versions") and target == Stage.STAGING:
                for other in version.model.versions.filter(stage=Stage.STAGING).exclude(pk=version.pk):
                    services.transition(other, Stage.ARCHIVED, user=request.user,
                                        reason=f"archive_existing_versions: version {version.number} moved to "
                                               "staging (MLflow API)")
        return Response({"model_version": _fresh_version(version)})


class UnknownEndpoint(MlflowView):
    """Anything else under /api/2.0/mlflow/: MLflow's client falls back on ENDPOINT_NOT_FOUND."""

    permission_classes: list = []
    authentication_classes: list = []

    def _refuse(self, request, *args, **kwargs):
        raise MlflowError("ENDPOINT_NOT_FOUND", f"{request.path}: not an endpoint of this registry "
                          "(the appliance serves MLflow's model registry API only)")

    get = post = patch = delete = put = _refuse

