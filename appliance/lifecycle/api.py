"""REST API of the model lifecycle under /api/v1/lifecycle/: registered models (list with search and filters,
create, detail, update, delete), versions (list, register: what `models register --url` on a compute node
calls, detail with lineage, files, evaluations, aliases, history), evaluations, transitions, verification,
the model card (JSON, Markdown or a printable HTML page), aliases, the history at any point in time,
promotion requests (the approvals inbox, four-eyes approval), and deployments on the inference pool (list,
create, detail with the pool's live state, rollback, stop).

Views are thin wrappers around services.py, integrity.py, deployments.py and cards.py. A refusal is one
error body naming the field: the services raise LifecycleError subclasses carrying the status (400, 403,
404, 409) and the field, mapped in one place (LifecycleAPIView.handle_exception). The lists and a
version's detail answer with a fixed number of queries whatever the number of versions (the querysets
below fetch everything their serializers show)."""

from django.db.models import Count, Max, OuterRef, Prefetch, Subquery
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, mixins
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response

from . import filtersets
from .errors import LifecycleError, NotFound
from .models import (
    Alias,
    Deployment,
    Evaluation,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    Stage,
    StageHistory,
)
from .serializers import (
    ALIAS_NAME,
    MODEL_NAME,
    ApprovalSerializer,
    DeploymentCreateSerializer,
    DeploymentDetailSerializer,
    DeploymentReasonSerializer,
    DeploymentSerializer,
    EvaluationCreateSerializer,
    EvaluationSerializer,
    ModelAliasSerializer,
    ModelAliasSetSerializer,
    ModelCardSerializer,
    ModelHistoryQuerySerializer,
    ModelHistorySerializer,
    ModelVersionDetailSerializer,
    ModelVersionRegisterSerializer,
    ModelVersionSerializer,
    PromotionRequestCreateSerializer,
    PromotionRequestSerializer,
    RegisteredModelCreateSerializer,
    RegisteredModelSerializer,
    RegisteredModelUpdateSerializer,
    RejectionSerializer,
    StageTransitionSerializer,
    VerifyResultSerializer,
)

ERROR_CODES = {400: "invalid", 403: "permission_denied", 404: "not_found", 409: "conflict"}

NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, pattern=MODEL_NAME, description="the model's name")
NUMBER = OpenApiParameter("number", int, OpenApiParameter.PATH, description="the version's number")
ALIAS = OpenApiParameter("alias", str, OpenApiParameter.PATH, pattern=ALIAS_NAME, description="the alias's name")
REQUEST_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the request's id")
DEPLOYMENT_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the deployment's id")
CONFLICT = OpenApiResponse(description="the object's state does not allow this (the message says why)")
NOT_FOUND = OpenApiResponse(description="no such model, version, evaluation, request or deployment")


def refusal_response(exc: LifecycleError, request) -> Response:
    """One error body for a service's refusal, naming the field when the refusal has one."""
    status = getattr(exc, "status", 400)
    extra = {"fields": {exc.field: [str(exc)]}} if exc.field else {}
    return error_response(status, ERROR_CODES.get(status, "invalid"), str(exc), request, **extra)


class LifecycleAPIView(APIView):
    """Every view here: a LifecycleError from a service becomes its one error body."""

    def handle_exception(self, exc):
        if isinstance(exc, LifecycleError):
            return refusal_response(exc, self.request)
        return super().handle_exception(exc)


class LifecycleListView(LifecycleAPIView, mixins.ListModelMixin, generics.GenericAPIView):
    """A paged list with the project's filters, search and ordering."""


# --- querysets: everything the serializers show, in a fixed number of queries -------------------------------

def models_with_counts():
    production = (ModelVersion.objects.filter(model=OuterRef("pk"), stage=Stage.PRODUCTION)
                  .order_by("-number").values("number")[:1])
    return (RegisteredModel.objects.select_related("owner")
            .annotate(version_count=Count("versions"), latest_version=Max("versions__number"),
                      production_version=Subquery(production))
            .prefetch_related(Prefetch("aliases", queryset=Alias.objects.select_related("version")
                                       .only("id", "name", "model_id", "version__id", "version__number")
                                       .order_by("name")))
            .order_by("name"))


def versions_listed():
    return (ModelVersion.objects.select_related("model", "registered_by", "parent__model")
            .defer("signature", "verification_detail")
            .prefetch_related(Prefetch("aliases", queryset=Alias.objects.only("id", "name", "version_id")))
            .order_by("model__name", "-number"))


def version_detail_queryset():
    return (ModelVersion.objects.select_related("model", "registered_by", "parent__model")
            .prefetch_related(
                "artifacts", Prefetch("aliases", queryset=Alias.objects.only("id", "name", "version_id")),
                Prefetch("evaluations", queryset=Evaluation.objects.select_related("created_by")
                         .order_by("created", "pk")),
                Prefetch("stage_history", queryset=StageHistory.objects.order_by("started", "pk")),
                Prefetch("requests", queryset=requests_listed()),
                Prefetch("deployments", queryset=deployments_listed()),
                Prefetch("children", queryset=ModelVersion.objects.select_related("model").only(
                    "id", "number", "model_id", "parent_id", "model__id", "model__name")),
            ))


def requests_listed():
    return (PromotionRequest.objects.select_related("version__model").prefetch_related(
        Prefetch("evidence", queryset=Evaluation.objects.only("id"))).order_by("-created", "-pk"))


def deployments_listed():
    return (Deployment.objects.select_related("version__model", "appliance", "created_by")
            .order_by("-created", "-pk"))


def version_of(name: str, number: int, queryset=None) -> ModelVersion:
    """The version NUMBER of model NAME from `queryset` (default: with everything its detail shows)."""
    version = (queryset if queryset is not None else version_detail_queryset()).filter(
        model__name=name, number=number).first()
    if version is None:
        from . import services

        services.get_version(name, number)  # the refusal naming what is missing (model or version)
        raise NotFound(f"model {name} has no version {number}", "version")
    return version


def model_named(name: str) -> RegisteredModel:
    model = models_with_counts().filter(name=name).first()
    if model is None:
        raise NotFound(f"model {name!r} does not exist", "name")
    return model


def parse_boolean(request, name: str) -> bool:
    value = request.query_params.get(name, "").strip().lower()
    if value in ("", "false"):
        return False
    if value == "true":
        return True
    raise LifecycleError(f"{name}: enter true or false", name)


# --- models -------------------------------------------------------------------------------------------------

class ModelListAPIView(LifecycleListView):
    """Registered models with their number of versions, the latest, the one in production and their aliases;
    search in names and descriptions; filter by the stage of any version, risk class, owner or tag. POST
    registers a model (its versions come with versions/)."""

    capability = "models.view"
    write_capability = "models.change"
    serializer_class = RegisteredModelSerializer
    filterset_class = filtersets.ModelFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created", "updated"]

    def get_queryset(self):
        return models_with_counts()

    @extend_schema(operation_id="lifecycle_models_list")
    def get(self, request):
        return self.list(request)

    @extend_schema(operation_id="lifecycle_models_create", request=RegisteredModelCreateSerializer,
                   responses={201: RegisteredModelSerializer, 409: CONFLICT})
    def post(self, request):
        from . import services

        serializer = RegisteredModelCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = services.register_model(data.pop("name"), user=request.user, **data)
        return Response(RegisteredModelSerializer(model_named(model.name)).data, status=201)


class ModelAPIView(LifecycleAPIView):
    """One registered model; PATCH changes its description, tags, license, intended use or risk class;
    DELETE removes a model that has no version (409 otherwise: archive its versions instead)."""

    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["get", "patch", "delete", "head", "options"]

    @extend_schema(operation_id="lifecycle_models_retrieve", parameters=[NAME], responses={200: RegisteredModelSerializer})
    def get(self, request, name):
        return Response(RegisteredModelSerializer(model_named(name)).data)

    @extend_schema(operation_id="lifecycle_models_update", parameters=[NAME], request=RegisteredModelUpdateSerializer,
                   responses={200: RegisteredModelSerializer})
    def patch(self, request, name):
        from . import services

        serializer = RegisteredModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.update_model(services.get_model(name), user=request.user, **serializer.validated_data)
        return Response(RegisteredModelSerializer(model_named(name)).data)

    @extend_schema(operation_id="lifecycle_models_destroy", parameters=[NAME], responses={204: None, 409: CONFLICT})
    def delete(self, request, name):
        from . import services

        services.delete_model(services.get_model(name), user=request.user)
        return Response(status=204)


class AliasAPIView(LifecycleAPIView):
    """PUT points the alias at a version (production is set only by an approval or a rollback: 409);
    DELETE removes it."""

    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["put", "delete", "options"]

    @extend_schema(operation_id="lifecycle_aliases_set", parameters=[NAME, ALIAS], request=ModelAliasSetSerializer,
                   responses={200: ModelAliasSerializer, 409: CONFLICT})
    def put(self, request, name, alias):
        from . import services

        serializer = ModelAliasSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = services.get_version(name, serializer.validated_data["version"])
        pointed = services.set_alias(version.model, alias, version, user=request.user)
        return Response({"model": version.model.name, "name": pointed.name, "version": version.number})

    @extend_schema(operation_id="lifecycle_aliases_delete", parameters=[NAME, ALIAS],
                   responses={204: None, 400: OpenApiResponse(description="not a name an alias may have (the "
                                                                          "message says why)"),
                              409: CONFLICT})
    def delete(self, request, name, alias):
        from . import services

        services.delete_alias(services.get_model(name), alias, user=request.user)
        return Response(status=204)


AT = OpenApiParameter("at", OpenApiTypes.DATETIME, description="the model as it stood then (ISO 8601 with its "
                                                               "time zone)")
HISTORY_VERSION = OpenApiParameter("version", {"type": "integer", "minimum": 1, "maximum": 999_999_999},
                                   description="only this version's events")


class HistoryAPIView(LifecycleAPIView):
    """What happened to the model, oldest first (stages, aliases, requests, evaluations, deployments, with
    who), and with ?at= which version held which stage and alias at that time."""

    capability = "models.view"

    @extend_schema(operation_id="lifecycle_history", parameters=[NAME, AT, HISTORY_VERSION],
                   responses={200: ModelHistorySerializer})
    def get(self, request, name):
        from . import services

        query = ModelHistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        model = services.get_model(name)
        version = query.validated_data.get("version")
        at = query.validated_data.get("at")
        return Response({
            "model": model.name, "at": at,
            "state": services.state_at(model, at) if at else None,
            "timeline": services.timeline(model, services.get_version(name, version) if version else None),
        })


# --- versions -----------------------------------------------------------------------------------------------

class VersionListAPIView(LifecycleListView):
    """Model versions, newest first per model; filter by model, stage, verification, format, training job.
    POST registers a version from its files (what `models register --url` sends from a Slurm job): its
    files hashed and signed, its lineage recorded; the model is made when it does not exist yet."""

    capability = "models.view"
    write_capability = "models.change"
    serializer_class = ModelVersionSerializer
    filterset_class = filtersets.VersionFilterSet
    search_fields = ["model__name", "description", "training_job"]
    ordering_fields = ["created", "number", "stage"]

    def get_queryset(self):
        return versions_listed()

    @extend_schema(operation_id="lifecycle_versions_list")
    def get(self, request):
        return self.list(request)

    @extend_schema(operation_id="lifecycle_versions_register", request=ModelVersionRegisterSerializer,
                   responses={201: ModelVersionDetailSerializer, 404: NOT_FOUND, 409: CONFLICT})
    def post(self, request):
        from . import services

        serializer = ModelVersionRegisterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        version = services.register_version(
            data["model"], source=data["source"], user=request.user, job=data["job"],
            datasets=[dict(dataset) for dataset in data["datasets"]], code_revision=data["code_revision"],
            hyperparameters=data["hyperparameters"], metrics=data["metrics"], parent=data["parent"] or None,
            description=data["description"], tags=data["tags"])
        return Response(ModelVersionDetailSerializer(version_of(version.model.name, version.number)).data, status=201)


class VersionAPIView(LifecycleAPIView):
    """One version: lineage (training job, datasets, code, parent and children), architecture, files with
    their SHA-256, signature and verification, evaluations, aliases, stage history, requests, deployments."""

    capability = "models.view"

    @extend_schema(operation_id="lifecycle_versions_retrieve", parameters=[NAME, NUMBER],
                   responses={200: ModelVersionDetailSerializer})
    def get(self, request, name, number):
        return Response(ModelVersionDetailSerializer(version_of(name, number)).data)


class EvaluationListAPIView(LifecycleAPIView):
    """A version's evaluations; POST attaches one (datasets with their hashes, metrics, the job that ran it)."""

    capability = "models.view"
    write_capability = "models.change"

    @extend_schema(operation_id="lifecycle_evaluations_list", parameters=[NAME, NUMBER],
                   responses={200: EvaluationSerializer(many=True)})
    def get(self, request, name, number):
        version = version_of(name, number, ModelVersion.objects.all())
        evaluations = version.evaluations.select_related("created_by").order_by("created", "pk")
        return Response(EvaluationSerializer(evaluations, many=True).data)

    @extend_schema(operation_id="lifecycle_evaluations_create", parameters=[NAME, NUMBER],
                   request=EvaluationCreateSerializer, responses={201: EvaluationSerializer, 409: CONFLICT})
    def post(self, request, name, number):
        from . import services

        serializer = EvaluationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        evaluation = services.add_evaluation(
            services.get_version(name, number), user=request.user, name=data["name"],
            datasets=[dict(dataset) for dataset in data["datasets"]], metrics=data["metrics"], job=data["job"],
            passed=data["passed"], notes=data["notes"])
        return Response(EvaluationSerializer(evaluation).data, status=201)


class TransitionAPIView(LifecycleAPIView):
    """Move a version to another stage the transition table allows. Production needs a request approved by
    a second person (requests/): asked here, it is a 409."""

    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_versions_transition", parameters=[NAME, NUMBER],
                   request=StageTransitionSerializer, responses={200: ModelVersionDetailSerializer, 409: CONFLICT})
    def post(self, request, name, number):
        from . import services

        serializer = StageTransitionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.transition(services.get_version(name, number), serializer.validated_data["stage"],
                            user=request.user, reason=serializer.validated_data["reason"])
        return Response(ModelVersionDetailSerializer(version_of(name, number)).data)


FULL = OpenApiParameter("full", bool, description="re-hash every file (default: size, mtime and inode, and the "
                                                  "signature over the recorded hashes)")


class VerifyAPIView(LifecycleAPIView):
    """Check the version's files against their recorded hashes and signature, now. A changed or missing
    file marks the version tampered (an audited critical event) and blocks its deployment. The answer is
    the result, whatever it is (200)."""

    capability = "models.view"
    # Verification writes the result on the version: those who deploy (and change models) may run it.
    write_capability = "models.deploy"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_versions_verify", parameters=[NAME, NUMBER, FULL], request=None,
                   responses={200: VerifyResultSerializer})
    def post(self, request, name, number):
        from . import integrity, services

        full = parse_boolean(request, "full")
        result = integrity.verify(services.get_version(name, number), full=full, user=request.user)
        return Response(VerifyResultSerializer(result).data)


class ClearTamperedAPIView(LifecycleAPIView):
    """Lift the version's tampered verdict (which no later verification overwrites): an Administrator, with a
    reason, and only when the full verification run now passes; recorded as lifecycle.version.tamper_clear.
    409 when the version is not tampered or the full verification fails (the verdict stays)."""

    capability = "models.view"
    # Reaching the view takes models.change; the service then admits Administrators only (403 for others).
    write_capability = "models.change"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_versions_clear_tampered", parameters=[NAME, NUMBER],
                   request=RejectionSerializer, responses={200: VerifyResultSerializer, 409: CONFLICT})
    def post(self, request, name, number):
        from . import integrity, services

        serializer = RejectionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = integrity.clear_tampered(services.get_version(name, number), user=request.user,
                                          reason=serializer.validated_data["reason"])
        return Response(VerifyResultSerializer(result).data)


class _NoFormatOverride:
    """Content negotiation settings without DRF's ?format= override: the card's ?format= names the card's
    format (json, md, html), not a renderer."""

    URL_FORMAT_OVERRIDE = None


class CardNegotiation(DefaultContentNegotiation):
    settings = _NoFormatOverride()


CARD_FORMAT = OpenApiParameter("format", str, enum=["json", "md", "html"],
                               description="json (default): the card as data; md: Markdown; html: a standalone "
                                           "printable page (a download)")


class CardAPIView(LifecycleAPIView):
    """The version's model card for certification: lineage, datasets with hashes, evaluations, approvals with
    who and when, files with their SHA-256, the signature and its public key, the verification, the stage and
    alias history, the deployments. Each export is audited (lifecycle.card.export)."""

    capability = "models.view"
    content_negotiation_class = CardNegotiation

    @extend_schema(operation_id="lifecycle_versions_card", parameters=[NAME, NUMBER, CARD_FORMAT],
                   responses={(200, "application/json"): ModelCardSerializer, (200, "text/markdown"): OpenApiTypes.STR,
                              (200, "text/html"): OpenApiTypes.STR})
    def get(self, request, name, number):
        import json

        from . import cards, services

        form = request.query_params.get("format", "") or "json"
        if form not in cards.FORMATS:
            raise LifecycleError(f"format: {form!r} is not one of {', '.join(cards.FORMATS)}", "format")
        content, content_type, filename = cards.export(services.get_version(name, number), form, user=request.user,
                                                       style_nonce=getattr(request, "csp_nonce", ""))
        if form == "json":
            return Response(json.loads(content))
        response = HttpResponse(content, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


# --- requests (four-eyes) -----------------------------------------------------------------------------------

class RequestListAPIView(LifecycleListView):
    """Promotion requests, newest first: the approvals inbox (?state=pending). POST asks for a transition that
    needs approval (to production), with the evaluations that are its evidence; another person approves."""

    capability = "models.view"
    write_capability = "models.change"
    serializer_class = PromotionRequestSerializer
    filterset_class = filtersets.RequestFilterSet
    search_fields = ["version__model__name", "reason", "requested_by_username"]
    ordering_fields = ["created", "expires_at"]

    def get_queryset(self):
        return requests_listed()

    @extend_schema(operation_id="lifecycle_requests_list")
    def get(self, request):
        return self.list(request)

    @extend_schema(operation_id="lifecycle_requests_create", request=PromotionRequestCreateSerializer,
                   responses={201: PromotionRequestSerializer, 404: NOT_FOUND, 409: CONFLICT})
    def post(self, request):
        from . import services

        serializer = PromotionRequestCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        created = services.request_transition(
            services.get_version(data["model"], data["version"]), data["stage"], user=request.user,
            reason=data["reason"], evidence=data["evidence"], alias=data["alias"])
        return Response(PromotionRequestSerializer(request_numbered(created.pk)).data, status=201)


def request_numbered(pk: int) -> PromotionRequest:
    found = requests_listed().filter(pk=pk).first()
    if found is None:
        raise NotFound(f"request #{pk} does not exist", "request")
    return found


class RequestAPIView(LifecycleAPIView):
    capability = "models.view"

    @extend_schema(operation_id="lifecycle_requests_retrieve", parameters=[REQUEST_ID],
                   responses={200: PromotionRequestSerializer})
    def get(self, request, pk):
        return Response(PromotionRequestSerializer(request_numbered(pk)).data)


class RequestApproveAPIView(LifecycleAPIView):
    """Approve a request (four-eyes, accounts.services.require_independent_approver): the approver holds
    models.approve, is another person with no creator link to the requester either way, and neither account
    was made, re-enabled or given its role within the cooling period before the request; the request is
    pending and not expired. The version then reaches production and the production alias; the former one is deprecated."""

    capability = "models.view"
    write_capability = "models.approve"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_requests_approve", parameters=[REQUEST_ID], request=ApprovalSerializer,
                   responses={200: PromotionRequestSerializer, 409: CONFLICT})
    def post(self, request, pk):
        from . import services

        serializer = ApprovalSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.approve(request_numbered(pk), user=request.user, reason=serializer.validated_data["reason"])
        return Response(PromotionRequestSerializer(request_numbered(pk)).data)


class RequestRejectAPIView(LifecycleAPIView):
    """Reject a pending request, with the reason."""

    capability = "models.view"
    write_capability = "models.approve"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_requests_reject", parameters=[REQUEST_ID], request=RejectionSerializer,
                   responses={200: PromotionRequestSerializer, 409: CONFLICT})
    def post(self, request, pk):
        from . import services

        serializer = RejectionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.reject(request_numbered(pk), user=request.user, reason=serializer.validated_data["reason"])
        return Response(PromotionRequestSerializer(request_numbered(pk)).data)


class RequestCancelAPIView(LifecycleAPIView):
    """Withdraw one's own pending request."""

    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_requests_cancel", parameters=[REQUEST_ID], request=None,
                   responses={200: PromotionRequestSerializer, 409: CONFLICT})
    def post(self, request, pk):
        from . import services

        services.cancel(request_numbered(pk), user=request.user)
        return Response(PromotionRequestSerializer(request_numbered(pk)).data)


# --- deployments --------------------------------------------------------------------------------------------

class DeploymentListAPIView(LifecycleListView):
    """Deployments on the inference pool, newest first. POST deploys a production version (default: the
    model's): its files verified first (a changed file blocks it: 409), sized by the advisor, placed on free
    GPUs or MIG instances, rolled out with a health check."""

    capability = "models.view"
    write_capability = "models.deploy"
    serializer_class = DeploymentSerializer
    filterset_class = filtersets.DeploymentFilterSet
    search_fields = ["name", "version__model__name"]
    ordering_fields = ["created", "name", "state"]

    def get_queryset(self):
        return deployments_listed()

    @extend_schema(operation_id="lifecycle_deployments_list")
    def get(self, request):
        return self.list(request)

    @extend_schema(operation_id="lifecycle_deployments_create", request=DeploymentCreateSerializer,
                   responses={201: DeploymentDetailSerializer, 404: NOT_FOUND, 409: CONFLICT})
    def post(self, request):
        from . import deployments, services

        serializer = DeploymentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data.get("version"):
            version = services.get_version(data["model"], data["version"])
        else:
            version = services.production_version(services.get_model(data["model"]))
            if version is None:
                raise NotFound(f"model {data['model']} has no production version", "version")
        deployment = deployments.deploy(version, user=request.user, runtime=data["runtime"], name=data.get("name"),
                                        appliance=data.get("appliance"), context=data["context"],
                                        concurrency=data["concurrency"], dtype=data.get("dtype"))
        return Response(DeploymentDetailSerializer(deployment_numbered(deployment.pk)).data, status=201)


def deployment_numbered(pk: int) -> Deployment:
    found = deployments_listed().filter(pk=pk).first()
    if found is None:
        raise NotFound(f"deployment #{pk} does not exist", "deployment")
    return found


class DeploymentAPIView(LifecycleAPIView):
    """One deployment: its sizing, placement, manifests, last health check and the pool's live state."""

    capability = "models.view"

    @extend_schema(operation_id="lifecycle_deployments_retrieve", parameters=[DEPLOYMENT_ID],
                   responses={200: DeploymentDetailSerializer})
    def get(self, request, pk):
        return Response(DeploymentDetailSerializer(deployment_numbered(pk)).data)


class DeploymentRollbackAPIView(LifecycleAPIView):
    """Roll the service back in one action: the previous production version returns to production (it was
    approved before) and is deployed in place of this one."""

    capability = "models.view"
    write_capability = "models.deploy"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_deployments_rollback", parameters=[DEPLOYMENT_ID],
                   request=DeploymentReasonSerializer, responses={201: DeploymentDetailSerializer, 409: CONFLICT})
    def post(self, request, pk):
        from . import deployments

        serializer = DeploymentReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        restored = deployments.rollback(deployment_numbered(pk), user=request.user,
                                        reason=serializer.validated_data["reason"])
        return Response(DeploymentDetailSerializer(deployment_numbered(restored.pk)).data, status=201)


class DeploymentStopAPIView(LifecycleAPIView):
    """Stop the service: its GPUs are freed."""

    capability = "models.view"
    write_capability = "models.deploy"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="lifecycle_deployments_stop", parameters=[DEPLOYMENT_ID], request=DeploymentReasonSerializer,
                   responses={200: DeploymentDetailSerializer, 409: CONFLICT})
    def post(self, request, pk):
        from . import deployments

        serializer = DeploymentReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        deployments.stop(deployment_numbered(pk), user=request.user, reason=serializer.validated_data["reason"])
        return Response(DeploymentDetailSerializer(deployment_numbered(pk)).data)
