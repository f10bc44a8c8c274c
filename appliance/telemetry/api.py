"""REST API of the telemetry: what the portal's charts are drawn from, for any client.

Read-only views over appliance.telemetry.queries (rollups and events, never raw points), open to every
role that may view the inventory (telemetry.view), and one change: acknowledging an alert, which those
who may change the inventory do (Administrator, Operator), recorded in the audit log.
"""

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response
from appliance.core.renderers import LargeJSONRenderer
from appliance.inventory.models import Appliance, Node

from . import queries
from .models import HardwareEvent

ACKNOWLEDGE_CAPABILITY = "inventory.change"

RANGE = OpenApiParameter("range", str, enum=list(queries.RANGES), default=queries.DEFAULT_RANGE,
                         description="the time span: up to 24h per-minute rows, 7d and 30d per-hour rows")
APPLIANCE = OpenApiParameter("appliance", str, description="only this appliance's nodes (by name)")
STATE = OpenApiParameter("state", str, enum=list(queries.ALERT_STATES), default="open",
                         description="open: not acknowledged yet; all: acknowledged ones too")
NODE_NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, pattern=f"^{queries.NODE_PATTERN}$",
                             description="the node's name")
JOB = OpenApiParameter("job", str, OpenApiParameter.PATH, pattern=f"^{queries.JOB_PATTERN}$",
                       description="a Slurm job id or an inference service's name")


class TelemetryView(APIView):
    capability = "telemetry.view"
    renderer_classes = [LargeJSONRenderer, BrowsableAPIRenderer]

    def range_or_error(self, request):
        """The range asked for, or the 400 that names the parameter and its choices."""
        try:
            return queries.range_of(request.query_params.get("range", "").strip() or None), None
        except queries.UnknownRange as exc:
            return None, error_response(400, "invalid", str(exc), request, fields={"range": [str(exc)]})


class OverviewAPIView(TelemetryView):
    """The fleet: every GPU's newest minute (utilization, memory, power), a nodes x time heatmap of GPU
    utilization, fabric and filesystem throughput over the range."""

    @extend_schema(parameters=[RANGE, APPLIANCE], responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request):
        rng, error = self.range_or_error(request)
        if error:
            return error
        appliance = None
        name = request.query_params.get("appliance", "").strip()
        if name:
            appliance = Appliance.objects.filter(name=name).first()
            if appliance is None:
                return error_response(404, "not_found", f"appliance: no appliance is named {name!r}", request)
        return Response(queries.overview(appliance, rng.name))


class LiveAPIView(TelemetryView):
    """The fleet's live GPU use in a few numbers (the Overview's panel)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        return Response(queries.live_summary())


class NodeSeriesAPIView(TelemetryView):
    """One node over the range: its GPUs together and each, fabric, filesystems per mount, disks, CPU."""

    @extend_schema(parameters=[NODE_NAME, RANGE], responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request, name):
        rng, error = self.range_or_error(request)
        if error:
            return error
        return Response(queries.node_series(get_object_or_404(Node, name=name), rng.name))


class GpuSeriesAPIView(TelemetryView):
    """One GPU over the range: every rollup field, and its MIG instances."""

    @extend_schema(parameters=[NODE_NAME, OpenApiParameter("gpu", int, OpenApiParameter.PATH, description="NVML index"),
                               RANGE], responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request, name, gpu):
        rng, error = self.range_or_error(request)
        if error:
            return error
        node = get_object_or_404(Node, name=name)
        data = queries.gpu_series(node, gpu, rng.name)
        if data["inventory"] is None and not data["series"]["t"]:
            return error_response(404, "not_found", f"gpu: {name} has no GPU {gpu}", request)
        return Response(data)


class JobListAPIView(TelemetryView):
    """Jobs (Slurm job ids, inference services) that held a GPU in the range, newest first: each minute a job
    held any seconds of counts (a minute that changed hands for each holder's seconds: gpu_hours)."""

    @extend_schema(operation_id="telemetry_jobs_list", parameters=[RANGE], responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        rng, error = self.range_or_error(request)
        if error:
            return error
        return Response({"range": rng.name, "jobs": queries.jobs(rng.name)})


class JobAPIView(TelemetryView):
    """A job: its GPUs, their use over the job's span, the fabric and filesystem I/O of its nodes; every
    minute it held any seconds of, its figures over the seconds it held (held_s, gpu_hours)."""

    @extend_schema(parameters=[JOB], responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request, job):
        try:
            return Response(queries.job(job))
        except queries.UnknownJob as exc:
            return error_response(404, "not_found", str(exc), request)


class AlertListAPIView(TelemetryView):
    """Hardware alerts (XID, uncorrectable ECC, link down, throttling), newest first."""

    @extend_schema(parameters=[STATE], responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        state = request.query_params.get("state", "").strip() or "open"
        if state not in queries.ALERT_STATES:
            message = f"state: {state!r} is not one of {', '.join(queries.ALERT_STATES)}"
            return error_response(400, "invalid", message, request, fields={"state": [message]})
        return Response(queries.alerts(state))


class AcknowledgeAPIView(TelemetryView):
    """Acknowledge an alert: it leaves the open alerts; who and when are kept (and audited)."""

    write_capability = ACKNOWLEDGE_CAPABILITY

    @extend_schema(request=None, parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)],
                   responses={200: OpenApiTypes.OBJECT, 404: None, 409: None})
    def post(self, request, pk):
        from . import services  # the service owns the change and its audit record

        event = get_object_or_404(HardwareEvent, pk=pk, kind__in=queries.ALERT_KINDS)
        if not services.acknowledge(event, request.user):
            event.refresh_from_db()
            message = (f"alert {pk} was already acknowledged by {event.acknowledged_by or '-'} "
                       f"at {event.acknowledged_at.isoformat()}")
            return error_response(409, "already_acknowledged", message, request)
        return Response({"id": event.pk, "acknowledged_at": event.acknowledged_at.isoformat(),
                         "acknowledged_by": event.acknowledged_by})
