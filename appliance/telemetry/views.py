"""Portal pages of the telemetry: the fleet, a node, a GPU, jobs, a job, alerts.

The pages are frames: their charts are drawn in the browser (static/telemetry/telemetry.js, uPlot served
by the appliance itself) from the telemetry API, so a page answers in a few queries whatever the size of
the fleet and the API is the one source of every number. Tables that are read, not drawn (jobs, alerts)
are rendered here from the same query functions the API answers with.
"""

import re
from datetime import datetime

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can
from appliance.inventory.models import Node

from . import jobinfo, queries
from .api import ACKNOWLEDGE_CAPABILITY
from .models import HardwareEvent

RANGE_LABELS = {"1h": gettext_lazy("1 hour"), "6h": gettext_lazy("6 hours"), "24h": gettext_lazy("24 hours"),
                "7d": gettext_lazy("7 days"), "30d": gettext_lazy("30 days")}


class RangeMixin(CapabilityMixin):
    capability = "telemetry.view"
    default_range = queries.DEFAULT_RANGE

    def get(self, request, *args, **kwargs):
        try:
            self.range = queries.range_of(request.GET.get("range", "").strip() or self.default_range)
        except queries.UnknownRange as exc:
            return render(request, "400.html", {"message": str(exc)}, status=400)
        return super().get(request, *args, **kwargs)

    def ranges(self):
        return [{"name": name, "label": RANGE_LABELS[name], "current": name == self.range.name}
                for name in queries.RANGES]

    def get_context_data(self, **kwargs):
        return super().get_context_data(range=self.range, ranges=self.ranges(), **kwargs)


class TelemetryView(RangeMixin, TemplateView):
    template_name = "telemetry/index.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["api_url"] = f"{reverse('telemetry-api-overview')}?range={self.range.name}"
        context["open_alerts"] = HardwareEvent.objects.filter(kind__in=queries.ALERT_KINDS,
                                                              acknowledged_at__isnull=True).count()
        return context


class NodeTelemetryView(RangeMixin, TemplateView):
    template_name = "telemetry/node.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        node = get_object_or_404(Node, name=self.kwargs["name"])
        context.update(node=node, gpus=list(node.gpus.order_by("index").values_list("index", flat=True)),
                       api_url=f"{reverse('telemetry-api-node', args=[node.name])}?range={self.range.name}")
        return context


class GpuTelemetryView(RangeMixin, TemplateView):
    template_name = "telemetry/gpu.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        node = get_object_or_404(Node, name=self.kwargs["name"])
        gpu = node.gpus.filter(index=self.kwargs["gpu"]).first()
        context.update(node=node, gpu_index=self.kwargs["gpu"], gpu=gpu,
                       api_url=(f"{reverse('telemetry-api-gpu', args=[node.name, self.kwargs['gpu']])}"
                                f"?range={self.range.name}"))
        return context


class JobListView(RangeMixin, TemplateView):
    template_name = "telemetry/jobs.html"
    default_range = "24h"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        jobs = sorted(queries.jobs(self.range.name), key=job_order)
        scheduler = jobinfo.ask(jobinfo.SCHEDULER, [job["job"] for job in jobs],
                                sorted({name for job in jobs for name in job["nodes"]}), self.request.user)
        for job in jobs:
            job["slurm"] = scheduler["jobs"].get(job["job"])
            job["slurm_job"] = job["job"][:1].isdigit()
        context.update(jobs=jobs, slurm_error=scheduler["error"])
        return context


def job_order(job: dict) -> tuple:
    """Slurm jobs first, the newest (highest id) first, ids compared as numbers (11 before 9, an array's 7_10
    before 7_9); then the inference services by name."""
    numbers = [int(part) for part in re.split(r"[_+]", job["job"]) if part.isdigit()]
    if job["job"][:1].isdigit() and numbers:
        return (0, [-number for number in numbers], "")
    return (1, [], job["job"])


class JobView(CapabilityMixin, TemplateView):
    capability = "telemetry.view"
    template_name = "telemetry/job.html"

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        if response.context_data["job"] is None:
            response.status_code = 404  # the page still says why: no rollup names the job yet
        return response

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        try:
            job = queries.job(self.kwargs["job"])
        except queries.UnknownJob:
            job = None
        else:
            job.update(first_at=datetime.fromisoformat(job["first"]), end_at=datetime.fromisoformat(job["end"]),
                       energy_kwh=job["energy_j"] / 3.6e6, minutes=job["duration_s"] // 60)
            for gpu in job["gpus"]:
                gpu["fb_used_gib"] = None if gpu["fb_used_mib"] is None else gpu["fb_used_mib"] / 1024
            context["related"] = jobinfo.about(self.kwargs["job"], job["nodes"], job["first_at"], self.request.user)
        context["job"] = job
        context.update(job_id=self.kwargs["job"], api_url=reverse("telemetry-api-job", args=[self.kwargs["job"]]))
        return context


class AlertListView(CapabilityMixin, TemplateView):
    capability = "telemetry.view"
    template_name = "telemetry/alerts.html"

    def get(self, request, *args, **kwargs):
        self.state = request.GET.get("state", "").strip() or "open"
        if self.state not in queries.ALERT_STATES:
            message = f"state: {self.state!r} is not one of {', '.join(queries.ALERT_STATES)}"
            return render(request, "400.html", {"message": message}, status=400)
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(alerts=queries.alerts(self.state), state=self.state,
                       can_acknowledge=can(self.request.user, ACKNOWLEDGE_CAPABILITY))
        return context


class AcknowledgeView(CapabilityMixin, View):
    """POST only: acknowledge one alert, back to the alerts."""

    capability = ACKNOWLEDGE_CAPABILITY
    write_capability = ACKNOWLEDGE_CAPABILITY
    http_method_names = ["post"]

    def post(self, request, pk):
        from . import services  # the service owns the change and its audit record

        event = get_object_or_404(HardwareEvent.objects.select_related("node"), pk=pk, kind__in=queries.ALERT_KINDS)
        if not services.acknowledge(event, request.user):
            event.refresh_from_db()
            messages.info(request, _("This alert was already acknowledged by %(who)s.") % {
                "who": event.acknowledged_by or "-"})
        else:
            messages.success(request, _("Alert acknowledged: %(node)s, %(message)s") % {
                "node": event.node.name, "message": event.message or event.get_kind_display()})
        return redirect(f"{reverse('telemetry:alerts')}?state={request.POST.get('state', 'open')}"
                        if request.POST.get("state") in queries.ALERT_STATES else reverse("telemetry:alerts"))
