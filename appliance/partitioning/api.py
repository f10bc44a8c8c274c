"""REST API of partitioning: the GPUs' layout now, plans (list, create = plan and save, detail), a preview
(plan without saving), apply (a provisioning run), rollback, and the sizing advisor. Views are thin wrappers
around layout.py, planner.py, services.py and sizing.py; a refusal is one 4xx naming the field
(400), the role (403) or the state that forbids it (409: a stale plan, a run already active)."""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response
from appliance.inventory.models import Appliance

from .models import Plan
from .serializers import (
    ApplianceSerializer,
    LayoutSerializer,
    PlanCreateSerializer,
    PlanDetailSerializer,
    PlanRequestSerializer,
    PlanSerializer,
    PreviewSerializer,
    SizeRequestSerializer,
    SizeResultSerializer,
)

APPLIANCE = OpenApiParameter("appliance", str, description="the appliance's name; default: the first appliance")
NO_APPLIANCE = OpenApiResponse(description="no appliance of that name (or none in the inventory)")
NOTHING_TO_ROLL_BACK = OpenApiResponse(description="no applied plan to roll back to, or a run is active")
PLAN_NUMBER = OpenApiParameter("number", int, OpenApiParameter.PATH, description="the plan's number")


class PlanningRefused(Exception):
    """A refusal with its HTTP status and the field it names ("" for none)."""

    def __init__(self, status: int, message: str, field: str = ""):
        super().__init__(message)
        self.status = status
        self.field = field


def appliance_named(name: str | None) -> Appliance:
    """The appliance of that name, or the first one; a 404 when there is none."""
    if name:
        return get_object_or_404(Appliance, name=name)
    appliance = Appliance.objects.order_by("name").first()
    if appliance is None:
        raise Http404("no appliance in the inventory")
    return appliance


def plans_of(appliance: Appliance):
    return Plan.objects.filter(appliance=appliance).select_related(
        "appliance", "created_by", "applied_by", "previous", "run").order_by("-number")


def input_refusal(exc: Exception) -> PlanningRefused:
    """The planner's PlanInputError ("requests[3].memory_gb: ..."): a 400 naming the item."""
    message = str(exc)
    field = message.partition(":")[0].strip() if ":" in message else "requests"
    return PlanningRefused(400, message, field if len(field) <= 80 else "requests")


def service_refusal(exc: Exception, status: int = 400) -> PlanningRefused:
    """A refusal of services (PlanRefused, one line per problem, each naming its place): the field is the
    first line's prefix when it names one (requests[3].memory_gb, gpus)."""
    message = str(exc)
    prefix = message.partition(":")[0].strip() if ":" in message else ""
    field = prefix if prefix and prefix.replace(".", "").replace("_", "").replace("[", "").replace("]", "").isalnum() \
        and " " not in prefix else ""
    return PlanningRefused(status, message, field)


def preview_plan(appliance: Appliance, requests: list[dict]) -> tuple[dict, dict]:
    """(the planner's result for `requests` on the appliance's GPUs against their layout now, that layout).
    Saves nothing. Raises PlanningRefused for input the planner refuses."""
    from . import layout, planner
    from .services import with_applied_placements, with_service_moves

    now = layout.current_layout(appliance)
    try:
        result = planner.plan(layout.planner_gpus(now), requests,
                              with_applied_placements(appliance, layout.planner_current(now)))
    except planner.PlanInputError as exc:
        raise input_refusal(exc) from None

    return with_service_moves(appliance, result), now


def save_plan(appliance: Appliance, requests: list[dict], *, user, description: str = "") -> Plan:
    from . import services

    try:
        return services.save_plan(appliance, requests, user=user, description=description)
    except services.PlanRefused as exc:
        raise service_refusal(exc) from None


def apply_plan(plan: Plan, *, user):
    """services.apply_plan: the provisioning run. 409 for a state that forbids it, 400 for a plan with errors."""
    from . import services

    try:
        return services.apply_plan(plan, user=user)
    except PermissionDenied as exc:
        raise PlanningRefused(403, str(exc)) from None
    except services.PlanRefused as exc:
        raise service_refusal(exc, 409 if exc.conflict else 400) from None


def rollback(appliance: Appliance, *, user) -> Plan:
    """services.rollback: 409 while a run is active or when no plan was applied."""
    from . import services

    try:
        return services.rollback(appliance, user=user)
    except PermissionDenied as exc:
        raise PlanningRefused(403, str(exc)) from None
    except services.PlanRefused as exc:
        raise service_refusal(exc, 409 if exc.conflict else 400) from None


def size(values: dict) -> dict:
    """sizing.size for typed values (params, layers, kv_heads, head_dim, optional hidden_size and
    attention_heads; dtype, context, concurrency, gpu, gpus_per_node, nodes)."""
    from . import sizing

    shape = {key: values[key] for key in ("params", "layers", "kv_heads", "head_dim")}
    shape.update({key: values[key] for key in ("hidden_size", "attention_heads") if values.get(key)})
    try:
        return sizing.size(shape, dtype=values["dtype"], context=values["context"],
                           concurrency=values["concurrency"], gpu_model=values["gpu"],
                           gpus_per_node=values["gpus_per_node"], nodes=values["nodes"])
    except sizing.SizingError as exc:
        raise service_refusal(exc) from None


def refusal_response(refused: PlanningRefused, request) -> Response:
    extra = {"fields": {refused.field: [str(refused)]}} if refused.field else {}
    code = "conflict" if refused.status == 409 else "invalid"
    return error_response(refused.status, code, str(refused), request, **extra)


class LayoutAPIView(APIView):
    """The appliance's GPUs and their layout now (MIG instances with placements, time-slicing), as the
    partitioning stage last read it through NVML."""

    capability = "partitioning.view"

    @extend_schema(operation_id="partitioning_layout_retrieve", parameters=[APPLIANCE],
                   responses={200: LayoutSerializer, 404: NO_APPLIANCE})
    def get(self, request):
        from . import layout

        appliance = appliance_named(request.query_params.get("appliance", "")[:64])
        return Response({"appliance": appliance.name, **layout.current_layout(appliance)})


class PlanListAPIView(APIView):
    """An appliance's partition plans, newest first; POST plans the requests against the layout now and
    saves the plan (a draft: nothing changes on the GPUs until it is applied)."""

    capability = "partitioning.view"
    write_capability = "partitioning.change"

    @extend_schema(operation_id="partitioning_plans_list", parameters=[APPLIANCE],
                   responses={200: PlanSerializer(many=True), 404: NO_APPLIANCE})
    def get(self, request):
        appliance = appliance_named(request.query_params.get("appliance", "")[:64])
        return Response(PlanSerializer(plans_of(appliance)[:500], many=True).data)

    @extend_schema(operation_id="partitioning_plans_create", request=PlanCreateSerializer,
                   responses={201: PlanDetailSerializer, 404: NO_APPLIANCE})
    def post(self, request):
        serializer = PlanCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        appliance = appliance_named(data.get("appliance"))
        try:
            plan = save_plan(appliance, data["requests"], user=request.user, description=data["description"])
        except PlanningRefused as refused:
            return refusal_response(refused, request)
        return Response(PlanDetailSerializer(plans_of(appliance).get(pk=plan.pk)).data, status=201)


class PlanAPIView(APIView):
    """One plan: its requests, the layout it was planned against, and the planner's result."""

    capability = "partitioning.view"

    @extend_schema(operation_id="partitioning_plans_retrieve", parameters=[PLAN_NUMBER, APPLIANCE],
                   responses={200: PlanDetailSerializer})
    def get(self, request, number):
        appliance = appliance_named(request.query_params.get("appliance", "")[:64])
        return Response(PlanDetailSerializer(get_object_or_404(plans_of(appliance), number=number)).data)


class ApplyAPIView(APIView):
    """Apply a plan: a provisioning run of the `partitioning` stage on the nodes whose GPUs change. Needs
    partitioning.change and provisioning.run; 409 for a stale plan or while a run is active."""

    capability = "partitioning.view"
    write_capability = "partitioning.change"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="partitioning_plans_apply", parameters=[PLAN_NUMBER], request=ApplianceSerializer,
                   responses={202: PlanDetailSerializer,
                              409: OpenApiResponse(description="the plan is stale or not a draft, or a run is active")})
    def post(self, request, number):
        from appliance.core.permissions import ROLE_REFUSED
        from appliance.core.roles import can

        if not can(request.user, "provisioning.run"):
            return error_response(403, "permission_denied", str(ROLE_REFUSED), request)
        serializer = ApplianceSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        appliance = appliance_named(serializer.validated_data.get("appliance"))
        plan = get_object_or_404(plans_of(appliance), number=number)
        try:
            apply_plan(plan, user=request.user)
        except PlanningRefused as refused:
            return refusal_response(refused, request)
        return Response(PlanDetailSerializer(plans_of(appliance).get(pk=plan.pk)).data, status=202)


class RollbackAPIView(APIView):
    """Roll back: a new plan equal to the layout of the plan applied before the current one, applied
    (needs partitioning.change and provisioning.run)."""

    capability = "partitioning.view"
    write_capability = "partitioning.change"
    http_method_names = ["post", "options"]

    @extend_schema(operation_id="partitioning_rollback", request=ApplianceSerializer,
                   responses={202: PlanDetailSerializer, 404: NO_APPLIANCE, 409: NOTHING_TO_ROLL_BACK})
    def post(self, request):
        from appliance.core.permissions import ROLE_REFUSED
        from appliance.core.roles import can

        if not can(request.user, "provisioning.run"):
            return error_response(403, "permission_denied", str(ROLE_REFUSED), request)
        serializer = ApplianceSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        appliance = appliance_named(serializer.validated_data.get("appliance"))
        try:
            plan = rollback(appliance, user=request.user)
        except PlanningRefused as refused:
            return refusal_response(refused, request)
        return Response(PlanDetailSerializer(plans_of(appliance).get(pk=plan.pk)).data, status=202)


class PreviewAPIView(APIView):
    """Plan the requests against the layout now without saving anything: placements, what does not fit
    and why, and the disruption (instances destroyed, created and kept)."""

    capability = "partitioning.view"
    write_capability = "partitioning.change"

    @extend_schema(operation_id="partitioning_preview", request=PlanRequestSerializer,
                   responses={200: PreviewSerializer, 404: NO_APPLIANCE})
    def post(self, request):
        serializer = PlanRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        appliance = appliance_named(serializer.validated_data.get("appliance"))
        try:
            result, _layout = preview_plan(appliance, serializer.validated_data["requests"])
        except PlanningRefused as refused:
            return refusal_response(refused, request)
        return Response(result)


class SizeAPIView(APIView):
    """The sizing advisor: memory (weights, KV cache, activations, overhead), where the model fits (a MIG
    profile, a GPU, tensor or pipeline parallel), throughput ceilings and every assumption. Writes nothing."""

    capability = "partitioning.view"
    write_capability = "partitioning.view"

    @extend_schema(operation_id="partitioning_size", request=SizeRequestSerializer,
                   responses={200: SizeResultSerializer})
    def post(self, request):
        serializer = SizeRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            return Response(size(serializer.validated_data))
        except PlanningRefused as refused:
            return refusal_response(refused, request)
