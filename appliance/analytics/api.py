"""REST API of analytics: where the GPU-hours went (efficiency), a job's verdicts with their evidence, and the
weekly report. Read-only, open to every role (analytics.view); the recommendations' API is in
findings_api_urls."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response

from . import services

SINCE = OpenApiParameter("since", str, description="start (ISO 8601; a date alone is its midnight UTC); default: "
                                                    "7 days before `until`")
UNTIL = OpenApiParameter("until", str, description="end, excluded (ISO 8601); default: the start of the next hour")
POOL = OpenApiParameter("pool", str, description="only this pool's GPUs (as they were when attributed)")
GROUP = OpenApiParameter("group", str, enum=list(services.GROUPS), default="pool", description="one entry per ...")
JOB_FILTER = OpenApiParameter("job", str, description="only this job or inference service")
JOB = OpenApiParameter("job", str, OpenApiParameter.PATH, description="a Slurm job id or an inference service's name")


class AnalyticsAPIView(APIView):
    capability = "analytics.view"

    def answer(self, request, compute):
        """The figures, or the 400 that names the option."""
        try:
            return Response(compute())
        except services.AnalyticsError as exc:
            field = str(exc).split(":", 1)[0]
            return error_response(400, "invalid", str(exc), request, fields={field: [str(exc)]})


class EfficiencyAPIView(AnalyticsAPIView):
    """GPU-hours allocated vs used, by cause and idle share by cause, memory held vs used, per appliance, pool,
    node, GPU, job (with the skew across its GPUs), user, hour or day."""

    @extend_schema(operation_id="analytics_efficiency", parameters=[SINCE, UNTIL, POOL, GROUP, JOB_FILTER],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        params = request.query_params
        return self.answer(request, lambda: services.efficiency(
            since=params.get("since"), until=params.get("until"), pool=params.get("pool", "").strip() or None,
            group=params.get("group", "").strip() or "pool", job=params.get("job", "").strip() or None))


class JobVerdictsAPIView(AnalyticsAPIView):
    """A job's verdicts per GPU and minute with the evidence each rests on (the rule, each number against its
    threshold), merged into intervals of one cause; by default its last 6 hours in the ledger, at most 24."""

    @extend_schema(operation_id="analytics_job_verdicts", parameters=[JOB, SINCE, UNTIL],
                   responses={200: OpenApiTypes.OBJECT, 404: None})
    def get(self, request, job):
        span = services.job_span(job)
        if span is None:
            return error_response(404, "not_found", f"job: the ledger has no GPU-hour of {job!r}", request)

        def compute():
            since, until = services.job_window(span, request.query_params.get("since"),
                                               request.query_params.get("until"))
            intervals = services.job_intervals(job, since, until)
            for entry in intervals:
                entry.pop("start_at"), entry.pop("end_at")
            return {"job": job, "since": since.isoformat(), "until": until.isoformat(),
                    "span": {"first": span[0].isoformat(), "end": span[1].isoformat()}, "intervals": intervals}

        return self.answer(request, compute)


class ReportAPIView(AnalyticsAPIView):
    """The weekly report (any window): GPU-hours by cause for the appliance, each pool, user and day, the jobs
    that left the most idle, and the attribution's accuracy against ground truth (a benchmark's figure)."""

    @extend_schema(operation_id="analytics_report", parameters=[SINCE, UNTIL, POOL],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        params = request.query_params
        return self.answer(request, lambda: services.report(
            since=params.get("since") or None, until=params.get("until") or None,
            pool=params.get("pool", "").strip() or None))
