"""REST API of lending: plans (read by every role, proposed by Operators and Administrators, approved,
rejected and rolled back by Administrators) and each pool's lending policy. Views are thin wrappers
around appliance.lending.services; a refusal is one 4xx naming the field or the rule."""

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response, refusal_status
from appliance.core.roles import can
from appliance.inventory.models import Pool

from . import services
from .models import LendingPlan, LendingPolicy, PlanState
from .serializers import (
    LendingPlanDetailSerializer,
    LendingPlanSerializer,
    LendingPolicySerializer,
    ProposeSerializer,
    ReasonSerializer,
)

STATE = OpenApiParameter("state", str, enum=PlanState.values, description="only plans in this state")
PLAN_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the plan's id")
PLAN_STATE_CONFLICT = OpenApiResponse(description="the plan's state does not allow this step (already decided, "
                                                 "not moved or active, ended)")
APPROVAL_CONFLICT = OpenApiResponse(description="the plan's state does not allow approval (already decided), or the "
                                               "four-eyes rule refuses it: `fields` names the account at fault "
                                               "(approver or requester)")
POOL_ID = OpenApiParameter("pool", int, OpenApiParameter.PATH, description="the pool's id")


def refusal(exc: services.LendingError, request) -> Response:
    message = str(exc)
    if isinstance(exc, services.LendingDenied):
        return error_response(403, "permission_denied", message, request)
    if isinstance(exc, services.LendingNotIndependent):
        # The four-eyes refusal, as every surface answers it (appliance.core.conflicts): the field at fault.
        return error_response(409, "conflict", message, request, fields={exc.field: [message]})
    if refusal_status(exc) == 409:
        return error_response(409, "conflict", message, request)
    field, _, _ = message.partition(":")
    extra = {"fields": {field: [message]}} if field.isidentifier() else {}
    return error_response(400, "invalid", message, request, **extra)


def plans():
    return LendingPlan.objects.select_related("appliance", "from_pool", "to_pool", "proposed_by", "approved_by")


class PlanListAPIView(APIView):
    """Lending plans, newest first; POST proposes one (checked against the lending pool's policy)."""

    capability = "analytics.view"
    write_capability = "analytics.change"

    @extend_schema(operation_id="lending_plans_list", parameters=[STATE],
                   responses={200: LendingPlanSerializer(many=True)})
    def get(self, request):
        queryset = plans()
        state = request.query_params.get("state", "").strip()
        if state:
            if state not in PlanState.values:
                message = f"state: {state[:40]!r} is not one of {', '.join(PlanState.values)}"
                return error_response(400, "invalid", message, request, fields={"state": [message]})
            queryset = queryset.filter(state=state)
        return Response(LendingPlanSerializer(queryset[:500], many=True).data)

    @extend_schema(operation_id="lending_plans_propose", request=ProposeSerializer,
                   responses={201: LendingPlanDetailSerializer})
    def post(self, request):
        from appliance.analytics.models import Finding

        serializer = ProposeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        finding = None
        if data.get("finding"):
            finding = Finding.objects.filter(pk=data["finding"]).first()
            if finding is None:
                message = f"finding: no finding {data['finding']}"
                return error_response(400, "invalid", message, request, fields={"finding": [message]})
        try:
            plan = services.propose(nodes=data["nodes"], from_pool=data["from_pool"], to_pool=data["to_pool"],
                                    window_start=data["window_start"], window_end=data["window_end"],
                                    reason=data["reason"], actor=request.user, finding=finding)
        except services.LendingError as exc:
            return refusal(exc, request)
        return Response(LendingPlanDetailSerializer(plans().get(pk=plan.pk)).data, status=201)


class PlanAPIView(APIView):
    """One plan with every step it took."""

    capability = "analytics.view"

    @extend_schema(operation_id="lending_plans_retrieve", parameters=[PLAN_ID],
                   responses={200: LendingPlanDetailSerializer})
    def get(self, request, pk):
        return Response(LendingPlanDetailSerializer(get_object_or_404(plans(), pk=pk)).data)


class _PlanAction(APIView):
    capability = "pools.approve"
    write_capability = "pools.approve"
    http_method_names = ["post", "options"]

    def act(self, plan, request):
        raise NotImplementedError

    def post(self, request, pk):
        plan = get_object_or_404(LendingPlan, pk=pk)
        try:
            plan = self.act(plan, request)
        except services.LendingError as exc:
            return refusal(exc, request)
        return Response(LendingPlanDetailSerializer(plans().get(pk=plan.pk)).data)


def _reason(request) -> str:
    serializer = ReasonSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data["reason"]


class ApproveAPIView(_PlanAction):
    """Approve a proposed plan: another person, independent of the proposer by the one four-eyes rule (a 409
    naming the account at fault otherwise), unless the lending pool's policy allows automatic approval."""

    @extend_schema(operation_id="lending_plans_approve", request=None, parameters=[PLAN_ID],
                   responses={200: LendingPlanDetailSerializer, 409: APPROVAL_CONFLICT})
    def post(self, request, pk):
        return super().post(request, pk)

    def act(self, plan, request):
        return services.approve(plan, request.user)


class RejectAPIView(_PlanAction):
    """Reject a proposed plan, with the reason."""

    @extend_schema(operation_id="lending_plans_reject", request=ReasonSerializer, parameters=[PLAN_ID],
                   responses={200: LendingPlanDetailSerializer, 409: PLAN_STATE_CONFLICT})
    def post(self, request, pk):
        return super().post(request, pk)

    def act(self, plan, request):
        return services.reject(plan, request.user, _reason(request))


class RollbackAPIView(_PlanAction):
    """Roll a plan back: its nodes return to their pool and are resumed in Slurm."""

    @extend_schema(operation_id="lending_plans_rollback", request=ReasonSerializer, parameters=[PLAN_ID],
                   responses={200: LendingPlanDetailSerializer, 409: PLAN_STATE_CONFLICT})
    def post(self, request, pk):
        return super().post(request, pk)

    def act(self, plan, request):
        return services.rollback(plan, request.user, _reason(request))


class ReclaimAPIView(_PlanAction):
    """The lending pool asks for its nodes back before the window ends."""

    capability = "analytics.change"
    write_capability = "analytics.change"

    @extend_schema(operation_id="lending_plans_reclaim", request=None, parameters=[PLAN_ID],
                   responses={200: LendingPlanDetailSerializer, 409: PLAN_STATE_CONFLICT})
    def post(self, request, pk):
        return super().post(request, pk)

    def act(self, plan, request):
        return services.request_reclaim(plan, request.user)


class PolicyListAPIView(APIView):
    """Every pool's lending policy (a pool without one lends nothing)."""

    capability = "analytics.view"

    @extend_schema(operation_id="lending_policies_list", responses={200: LendingPolicySerializer(many=True)})
    def get(self, request):
        queryset = LendingPolicy.objects.select_related("pool").order_by("pool__appliance", "pool__name")
        return Response(LendingPolicySerializer(queryset, many=True).data)


class PolicyAPIView(APIView):
    """One pool's lending policy; PUT sets it (roles with analytics.change, as the portal's form; turning
    automatic approval on or off stays with the roles that approve plans, pools.approve)."""

    capability = "analytics.view"
    write_capability = "analytics.change"
    http_method_names = ["get", "put", "options"]

    @extend_schema(operation_id="lending_policies_retrieve", parameters=[POOL_ID],
                   responses={200: LendingPolicySerializer})
    def get(self, request, pool):
        # The pool first, by its own key: an id past the database's integer range is then "not found" (Django
        # treats an out-of-range primary key as no match), where a lookup on the foreign key column overflowed.
        target = get_object_or_404(Pool, pk=pool)
        return Response(LendingPolicySerializer(get_object_or_404(LendingPolicy, pool=target)).data)

    @extend_schema(operation_id="lending_policies_set", parameters=[POOL_ID], request=LendingPolicySerializer,
                   responses={200: LendingPolicySerializer})
    def put(self, request, pool):
        target = get_object_or_404(Pool, pk=pool)
        with transaction.atomic():
            policy = LendingPolicy.objects.select_for_update().filter(pool=target).first() or LendingPolicy(pool=target)
            serializer = LendingPolicySerializer(policy, data=request.data, partial=True)
            serializer.is_valid(raise_exception=True)
            wanted = serializer.validated_data.get("automatic_approval", policy.automatic_approval)
            if wanted != policy.automatic_approval and not can(request.user, "pools.approve"):
                raise PermissionDenied(_("automatic_approval: only a role that approves lending plans may "
                                         "turn the policy's automatic approval on or off"))
            policy = serializer.save(pool=target)
        return Response(LendingPolicySerializer(policy).data)
