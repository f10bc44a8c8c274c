"""REST API of the findings: list, detail, accept, dismiss, and a job's suggested settings.

Reading needs analytics.view (every role); deciding needs analytics.change (Administrator, Operator).
Views are thin wrappers around appliance.analytics.findings and profiling."""

from datetime import UTC, datetime, timedelta

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response

from . import findings, profiling, services
from .models import Finding

STATES = ("open", "accepted", "dismissed", "resolved", "all")
MAX_LIST = 500
PROFILE_WINDOW = timedelta(hours=24)

STATE = OpenApiParameter("state", str, enum=list(STATES), default="open", description="which findings")
KIND = OpenApiParameter("kind", str, enum=list(Finding.Kind.values), description="only this kind")
ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the finding's id")
ACCEPT_BODY = inline_serializer("FindingAccept", {"note": serializers.CharField(required=False, max_length=2000)})
DISMISS_BODY = inline_serializer("FindingDismiss", {"reason": serializers.CharField(max_length=2000)})


def _invalid(request, field: str, message: str):
    return error_response(400, "invalid", message, request, fields={field: [message]})


class FindingsView(APIView):
    capability = "analytics.view"
    write_capability = "analytics.change"


class FindingListAPIView(FindingsView):
    """Findings (recommendations), the largest GPU-hours at stake first."""

    @extend_schema(operation_id="analytics_findings_list", parameters=[STATE, KIND],
                   responses={200: OpenApiTypes.OBJECT, 400: None})
    def get(self, request):
        state = request.query_params.get("state", "").strip() or "open"
        kind = request.query_params.get("kind", "").strip()
        if state not in STATES:
            return _invalid(request, "state", f"state: {state[:40]!r} is not one of {', '.join(STATES)}")
        if kind and kind not in Finding.Kind.values:
            return _invalid(request, "kind", f"kind: {kind[:40]!r} is not one of {', '.join(Finding.Kind.values)}")
        query = Finding.objects.select_related("node")
        if state != "all":
            query = query.filter(state=state)
        if kind:
            query = query.filter(kind=kind)
        return Response({"state": state, "kind": kind, "count": query.count(),
                         "findings": [findings.as_dict(f) for f in query[:MAX_LIST]]})


class FindingAPIView(FindingsView):
    """One finding with its evidence (and, for a job, its suggested settings)."""

    @extend_schema(operation_id="analytics_findings_retrieve", parameters=[ID],
                   responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request, pk):
        finding = get_object_or_404(Finding.objects.select_related("node"), pk=pk)
        data = findings.as_dict(finding)
        data["plans"] = [{"id": plan.pk, "state": plan.state} for plan in finding.lending_plans.order_by("pk")] \
            if hasattr(finding, "lending_plans") else []
        if finding.job:
            try:
                data["profile"] = profiling.suggest(finding.job, finding.window_start, finding.window_end)
            except profiling.ProfileError:
                data["profile"] = None
        return Response(data)


class FindingAcceptAPIView(FindingsView):
    """Accept an open finding; a pool-idle finding proposes its lending plan (its id is returned)."""

    @extend_schema(operation_id="analytics_findings_accept", parameters=[ID], request=ACCEPT_BODY,
                   responses={200: OpenApiTypes.OBJECT, 400: None, 404: None})
    def post(self, request, pk):
        finding = get_object_or_404(Finding, pk=pk)
        note = request.data.get("note", "") if hasattr(request.data, "get") else ""
        if not isinstance(note, str):
            return _invalid(request, "note", "note: must be text")
        try:
            return Response(findings.accept(finding, request.user, note=note))
        except findings.FindingError as exc:
            return error_response(400, "invalid", str(exc), request)


class FindingDismissAPIView(FindingsView):
    """Dismiss an open finding; `reason` is required."""

    @extend_schema(operation_id="analytics_findings_dismiss", parameters=[ID], request=DISMISS_BODY,
                   responses={200: OpenApiTypes.OBJECT, 400: None, 404: None})
    def post(self, request, pk):
        finding = get_object_or_404(Finding, pk=pk)
        reason = request.data.get("reason", "") if hasattr(request.data, "get") else ""
        if not isinstance(reason, str) or not reason.strip():
            return _invalid(request, "reason", "reason: say why the finding is dismissed")
        try:
            return Response(findings.dismiss(finding, request.user, reason=reason))
        except findings.FindingError as exc:
            return error_response(400, "invalid", str(exc), request)


def _time(request, name: str, default: datetime):
    """services.parse_time of a query parameter (ValueError naming it), `default` when it is blank."""
    try:
        value = services.parse_time(request.query_params.get(name, ""), name)
    except services.AnalyticsError as exc:
        raise ValueError(str(exc)) from None
    return default if value is None else value


class ProfileAPIView(FindingsView):
    """A job's or service's suggested settings (data-loader workers, batch size, MIG slice or time-slicing
    replicas, TP/PP layout) from what it measured in the window (the last 24 hours by default). A window
    with no measurement of the job (an empty one included) is a 404 naming it."""

    @extend_schema(operation_id="analytics_profiles_retrieve",
                   parameters=[OpenApiParameter("job", str, OpenApiParameter.PATH, pattern=r"^[A-Za-z0-9._:-]{1,100}$"),
                               OpenApiParameter("since", OpenApiTypes.DATETIME),
                               OpenApiParameter("until", OpenApiTypes.DATETIME)],
                   responses={200: OpenApiTypes.OBJECT, 400: None, 404: None})
    def get(self, request, job):
        now = datetime.now(UTC)
        try:
            until = _time(request, "until", now)
            since = _time(request, "since", until - PROFILE_WINDOW)
        except ValueError as exc:
            field = str(exc).split(":", 1)[0]
            return _invalid(request, field, str(exc))
        try:
            return Response(profiling.suggest(job, since, until))
        except profiling.ProfileError as exc:
            return error_response(404, "not_found", str(exc), request)
