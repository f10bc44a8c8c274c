"""REST API of provisioning: runs (list, detail with live progress, start, cancel), stage runs, task
events (paged) and the acceptance report. Starting a run returns at once (202): the run executes in a
worker. A run's progress is the portal's (appliance.provisioning.progress): the two cannot disagree."""

import json

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance import audit
from appliance.core.api import error_response, refusal_status
from appliance.inventory.models import Appliance

from . import acceptance, progress, services
from .filtersets import TaskEventFilterSet
from .models import AcceptanceCheck, AcceptanceReport, HostResult, Run, StageRun, TaskEvent


class HostResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = HostResult
        fields = ["host", "ok", "changed", "failed", "unreachable", "skipped", "failed_task", "message"]


class DurationMixin(serializers.Serializer):
    duration_seconds = serializers.SerializerMethodField(
        help_text="from start to end, or to now while it runs; null before it starts")

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_duration_seconds(self, obj) -> int | None:
        elapsed = progress.duration(obj.started, obj.ended)
        return None if elapsed is None else max(int(elapsed.total_seconds()), 0)


class StageRunSerializer(DurationMixin, serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="provisioning-stagerun-detail")
    host_results = HostResultSerializer(many=True, read_only=True)
    message = serializers.CharField(source="reason", read_only=True, help_text="the same as reason (older name)")

    class Meta:
        model = StageRun
        fields = ["id", "url", "run", "stage", "order", "state", "reason", "message", "hosts", "started", "ended",
                  "duration_seconds", "strategy", "ok_count", "changed_count", "failed_count", "unreachable_count",
                  "skipped_count", "failed_host", "failed_task", "events_emitted", "events_stored", "carried_from",
                  "host_results"]


class BriefStageRunSerializer(DurationMixin, serializers.ModelSerializer):
    message = serializers.CharField(source="reason", read_only=True, help_text="the same as reason (older name)")

    class Meta:
        model = StageRun
        fields = ["id", "stage", "order", "state", "reason", "message", "started", "ended", "duration_seconds",
                  "changed_count", "failed_count"]


class RunSerializer(DurationMixin, serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="provisioning-run-detail")
    appliance = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="who started it; null for a run started from the command line or by the system")
    stage_runs = BriefStageRunSerializer(many=True, read_only=True)
    message = serializers.CharField(source="reason", read_only=True, help_text="the same as reason (older name)")

    class Meta:
        model = Run
        fields = ["id", "url", "appliance", "kind", "stages", "node_names", "dry_run", "force", "state", "reason",
                  "message", "requested_by", "resumes", "created", "started", "ended", "duration_seconds",
                  "heartbeat_at", "cancel_requested", "cancel_requested_by", "failed_stage", "failed_host",
                  "failed_task", "ok_count", "changed_count", "failed_count", "unreachable_count", "skipped_count",
                  "stage_runs"]


class RunProgressSerializer(serializers.Serializer):
    """How far the run has got, as the run page shows it (appliance.provisioning.progress)."""

    percent = serializers.IntegerField(help_text="stages done plus the fraction of the running one, 0-100")
    stages_done = serializers.IntegerField()
    stages_total = serializers.IntegerField()
    current_stage = serializers.CharField(allow_null=True)
    current_task = serializers.CharField(allow_blank=True)
    tasks_started = serializers.IntegerField(allow_null=True, help_text="tasks the running stage has started")
    tasks_expected = serializers.IntegerField(
        allow_null=True, help_text="tasks the previous successful run of the stage started; null when unknown")
    elapsed_seconds = serializers.IntegerField(allow_null=True)
    remaining_seconds = serializers.IntegerField(
        allow_null=True, help_text="by the previous successful runs of the stages left; null when one is unknown")
    heartbeat_age_seconds = serializers.IntegerField(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField(),
                                   help_text="ok, changed, failed, unreachable, skipped; live while a stage runs")
    stages = serializers.ListField(child=serializers.DictField(), help_text="per stage: state, duration, "
                                   "counts per host (live while it runs), task N of M, remaining seconds")


class RunDetailSerializer(RunSerializer):
    progress = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "progress"]

    @extend_schema_field(RunProgressSerializer)
    def get_progress(self, run) -> dict:
        return progress.run_progress(run).as_dict()


class ApplianceNameField(serializers.SlugRelatedField):
    """An appliance by name; an empty name is refused, whatever the body's format. (DRF otherwise
    takes an empty form field of an optional field as left out, and the run went to the default.)"""

    default_error_messages = {"blank": "may not be blank: name the appliance, or leave the field out when "
                                       "there is only one"}

    def get_value(self, dictionary):
        if self.field_name in dictionary and dictionary.get(self.field_name) in ("", None):
            return ""
        return super().get_value(dictionary)

    def run_validation(self, data=serializers.empty):
        if data == "" or data is None:
            self.fail("blank")
        return super().run_validation(data)


class RunRequestSerializer(serializers.Serializer):
    appliance = ApplianceNameField(slug_field="name", queryset=Appliance.objects.all(), required=False,
                                   help_text="appliance name; may be left out when there is only one")
    kind = serializers.ChoiceField(choices=Run.Kind.choices, required=False,
                                   help_text="left out: the run service decides (every stage: the resumable "
                                             "bootstrap; some stages: a stages run), as for the portal")
    stages = serializers.ListField(child=serializers.CharField(), required=False, default=list,
                                   help_text="stage names; empty means every stage")
    from_stage = serializers.CharField(required=False, allow_blank=True, default="")
    nodes = serializers.ListField(child=serializers.CharField(), required=False, default=list,
                                  help_text="node names; empty means every node")
    dry_run = serializers.BooleanField(default=False)
    force = serializers.BooleanField(default=False)

    def validate(self, attrs):
        if attrs.get("appliance") is None:
            appliances = list(Appliance.objects.all()[:2])
            if len(appliances) != 1:
                raise serializers.ValidationError({"appliance": "name the appliance (there is not exactly one)"})
            attrs["appliance"] = appliances[0]
        return attrs


class TaskEventSerializer(serializers.ModelSerializer):
    outcome = serializers.SerializerMethodField(help_text="the event in words, as the portal's task lines say it "
                                                          "(ok, changed, failed, skipped, unreachable, ...)")

    class Meta:
        model = TaskEvent
        fields = ["id", "stage_run", "counter", "event", "outcome", "host", "play", "task", "role", "changed",
                  "failed", "stdout", "data", "created"]

    def get_outcome(self, event) -> str:
        return progress.outcome(event)[0]


class AcceptanceCheckSerializer(serializers.ModelSerializer):
    check = serializers.CharField(source="name")

    class Meta:
        model = AcceptanceCheck
        fields = ["host", "check", "expected", "measured", "passed", "source", "message"]


class AcceptanceReportSerializer(serializers.ModelSerializer):
    checks = AcceptanceCheckSerializer(many=True, read_only=True)

    class Meta:
        model = AcceptanceReport
        fields = ["run", "passed", "checks_total", "checks_failed", "created", "checks"]


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Provisioning runs. POST starts one (202), POST .../cancel/ asks it to stop."""

    capability = "provisioning.view"
    write_capability = "provisioning.run"
    action_capabilities = {"create": "provisioning.run", "cancel": "provisioning.run"}
    serializer_class = RunSerializer
    filterset_fields = ["state", "kind", "dry_run", "appliance__name"]
    ordering_fields = ["created", "id"]

    def get_queryset(self):
        return Run.objects.select_related("appliance", "requested_by").prefetch_related("stage_runs")

    def get_serializer_class(self):
        # Progress is read per run (a few aggregate queries): on one run, not on every run of a list.
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    @extend_schema(request=RunRequestSerializer, responses={
        202: RunDetailSerializer,
        409: OpenApiResponse(description="a run of the appliance is already pending or running")})
    def create(self, request):
        data = RunRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        options = dict(data.validated_data)
        appliance = options.pop("appliance")
        # The kind goes to the service only when the client named it: otherwise the service decides.
        kind = {"kind": options["kind"]} if "kind" in options else {}
        try:
            run = services.start_run(appliance, **kind, stages=options["stages"] or None,
                                     from_stage=options["from_stage"] or None, nodes=options["nodes"] or None,
                                     dry_run=options["dry_run"], force=options["force"], user=request.user)
        except services.RunRefused as exc:
            status_code = refusal_status(exc)
            return error_response(status_code, "conflict" if status_code == 409 else "refused", str(exc), request,
                                  errors=exc.errors)
        return Response(RunDetailSerializer(run, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={
        200: RunDetailSerializer, 409: OpenApiResponse(description="the run has already ended")})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        try:
            run = services.cancel_run(self.get_object(), user=request.user)
        except services.RunConflict as exc:
            return error_response(409, "finished", str(exc), request)
        return Response(RunDetailSerializer(run, context={"request": request}).data)

    @extend_schema(responses=AcceptanceReportSerializer)
    @action(detail=True, methods=["get"])
    def acceptance(self, request, pk=None):
        run = self.get_object()
        report = get_object_or_404(AcceptanceReport.objects.prefetch_related("checks"), run=run)
        audit.record("provisioning.acceptance.export", target=report, details={"format": "json"})
        return Response(AcceptanceReportSerializer(report).data)


class StageRunViewSet(viewsets.ReadOnlyModelViewSet):
    capability = "provisioning.view"
    serializer_class = StageRunSerializer
    filterset_fields = ["run", "stage", "state"]

    def get_queryset(self):
        return StageRun.objects.prefetch_related("host_results")


class TaskEventViewSet(viewsets.ReadOnlyModelViewSet):
    """Task events in order, paged. Filter by run, stage_run, host, event; `after` = a counter."""

    capability = "provisioning.view"
    serializer_class = TaskEventSerializer
    filterset_class = TaskEventFilterSet
    ordering_fields = ["counter", "id"]

    def get_queryset(self):
        return TaskEvent.objects.order_by("stage_run_id", "counter")


REPORT_FILTERS = [
    OpenApiParameter("appliance", str, description="appliance name (default: the first)"),
    OpenApiParameter("node", str, description="only this node's checks"),
    OpenApiParameter("result", str, enum=list(acceptance.RESULTS), description="only passed or only failed checks"),
]


class AcceptanceReportAPIView(APIView):
    """The latest acceptance report per node: every check with expected, measured, result and source.
    `.../acceptance/` answers JSON; `.../acceptance/html/` the standalone printable page. Each is an
    audited export."""

    capability = "provisioning.view"
    form = "json"

    @extend_schema(parameters=REPORT_FILTERS, responses={200: dict, 404: None})
    def get(self, request):
        return self.report(request)

    def report(self, request):
        try:
            report = acceptance.latest_report(request.query_params.get("appliance") or None,
                                              request.query_params.get("node", ""),
                                              request.query_params.get("result", ""))
            content, content_type, name = acceptance.export(report, self.form, style_nonce=request.csp_nonce)
        except acceptance.ReportNotFound as exc:
            return error_response(404, "not_found", str(exc), request)
        except acceptance.ReportRefused as exc:
            return error_response(400, "invalid", str(exc), request)
        if self.form == "json":
            return Response(json.loads(content))
        response = HttpResponse(content, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class AcceptanceReportHTMLView(AcceptanceReportAPIView):
    """The latest acceptance report as the standalone printable HTML page (a download)."""

    form = "html"

    @extend_schema(parameters=REPORT_FILTERS, responses={(200, "text/html"): OpenApiTypes.STR, 404: None})
    def get(self, request):
        return self.report(request)
