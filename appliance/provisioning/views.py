"""Portal pages of provisioning: start a run or a dry run, watch it live (stages x hosts, latest task
events, refreshed by htmx polling), cancel it, browse history, read a stage's output page by page or
download it as text. Every action is a call to appliance.provisioning.services."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.models import Appliance

from . import acceptance, services
from . import catalogue as stage_catalogue
from .models import AcceptanceReport, Run, StageRun, TaskEvent
from .states import StageState

LATEST_EVENTS = 15
EVENTS_PER_PAGE = 200


def host_grid(run: Run) -> tuple[list[StageRun], list[dict]]:
    """Rows of hosts, one cell per stage: the host's state in that stage."""
    stage_runs = list(run.stage_runs.prefetch_related("host_results").order_by("order"))
    hosts = list(run.node_names) or list(run.appliance.nodes.order_by("name").values_list("name", flat=True))
    for stage_run in stage_runs:
        hosts.extend(h for h in stage_run.hosts if h not in hosts)
    rows = []
    for host in sorted(hosts):
        cells = []
        for stage_run in stage_runs:
            result = next((r for r in stage_run.host_results.all() if r.host == host), None)
            cells.append(_cell(stage_run, host, result))
        rows.append({"host": host, "cells": cells})
    return stage_runs, rows


def _cell(stage_run: StageRun, host: str, result) -> dict:
    if stage_run.state == StageState.SKIPPED:
        return {"state": "skipped", "label": "carried over" if stage_run.carried_from_id else "skipped"}
    if host not in stage_run.hosts:
        return {"state": "none", "label": "-" if stage_run.state != StageState.PENDING else "pending"}
    if result is not None:
        if result.failed or result.unreachable:
            return {"state": "failed", "label": "unreachable" if result.unreachable else "failed",
                    "title": f"{result.failed_task}: {result.message}"}
        return {"state": "succeeded", "label": f"ok · {result.changed} changed"}
    if stage_run.state == StageState.RUNNING:
        return {"state": "running", "label": "running"}
    return {"state": stage_run.state, "label": stage_run.state}


class ProvisioningIndexView(CapabilityMixin, TemplateView):
    capability = "provisioning.view"
    write_capability = "provisioning.run"
    template_name = "provisioning/index.html"

    def get_context_data(self, **kwargs):
        # A page load is also a watchdog round: a dead worker's run never shows as running.
        services.watchdog()
        context = super().get_context_data(**kwargs)
        appliances = list(Appliance.objects.prefetch_related("nodes").order_by("name"))
        context.update(
            appliances=appliances,
            stages=stage_catalogue.active().stages,
            runs=Run.objects.select_related("appliance", "requested_by").order_by("-created", "-id")[:50],
            active_runs=Run.objects.filter(state__in=["pending", "running"]).select_related("appliance"),
        )
        return context

    def post(self, request, *args, **kwargs):
        appliance = get_object_or_404(Appliance, pk=request.POST.get("appliance") or 0)
        stages = request.POST.getlist("stages")
        nodes = request.POST.getlist("nodes")
        all_stages = len(stages) in (0, len(stage_catalogue.active()))
        kind = Run.Kind.BOOTSTRAP if all_stages and not nodes else Run.Kind.STAGES
        try:
            run = services.start_run(appliance, kind=kind, stages=stages or None, nodes=nodes or None,
                                     dry_run=request.POST.get("dry_run") == "on",
                                     force=request.POST.get("force") == "on", user=request.user)
        except services.RunRefused as exc:
            for error in exc.errors:
                messages.error(request, error)
            return redirect("provisioning:index")
        messages.success(request, f"{run} started.")
        return redirect("provisioning:run", pk=run.pk)


class RunDetailView(CapabilityMixin, TemplateView):
    capability = "provisioning.view"
    template_name = "provisioning/run_detail.html"

    def get_template_names(self):
        # htmx polls for the live part alone.
        if getattr(self.request, "htmx", False):
            return ["provisioning/_run_live.html"]
        return [self.template_name]

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        run = get_object_or_404(Run.objects.select_related("appliance", "requested_by", "resumes"), pk=kwargs["pk"])
        stage_runs, rows = host_grid(run)
        latest = list(TaskEvent.objects.filter(stage_run__run=run).exclude(task="")
                      .select_related("stage_run").order_by("-stage_run__order", "-counter")[:LATEST_EVENTS])
        context.update(run=run, stage_runs=stage_runs, rows=rows, latest_events=latest,
                       report=AcceptanceReport.objects.filter(run=run).prefetch_related("checks").first())
        return context


class RunCancelView(CapabilityMixin, View):
    write_capability = "provisioning.run"

    def post(self, request, pk):
        run = get_object_or_404(Run, pk=pk)
        try:
            services.cancel_run(run, user=request.user)
        except services.RunRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Cancel of {run} requested.")
        return redirect("provisioning:run", pk=pk)


class StageOutputView(CapabilityMixin, TemplateView):
    """A stage's task events, page by page; ?format=text downloads its whole output."""

    capability = "provisioning.view"
    template_name = "provisioning/stage_output.html"

    def get(self, request, *args, **kwargs):
        stage_run = get_object_or_404(StageRun.objects.select_related("run"), pk=kwargs["pk"])
        events = TaskEvent.objects.filter(stage_run=stage_run).order_by("counter")
        if request.GET.get("format") == "text":
            response = HttpResponse(content_type="text/plain; charset=utf-8")
            response["Content-Disposition"] = (
                f'attachment; filename="run-{stage_run.run_id}-{stage_run.order:02d}-{stage_run.stage}.txt"')
            for stdout in events.exclude(stdout="").values_list("stdout", flat=True).iterator(chunk_size=1000):
                response.write(stdout.rstrip("\n") + "\n")
            return response
        host = request.GET.get("host", "")
        if host:
            events = events.filter(host=host)
        if request.GET.get("failed") == "1":
            events = events.filter(failed=True)
        page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
        context = self.get_context_data(stage_run=stage_run, page=page, host=host,
                                        failed_only=request.GET.get("failed") == "1",
                                        download=reverse("provisioning:stage-output", args=[stage_run.pk]) + "?format=text")
        return self.render_to_response(context)


class AcceptanceReportView(CapabilityMixin, TemplateView):
    """Every check of the latest acceptance report per node, filterable by node and result."""

    capability = "provisioning.view"
    template_name = "provisioning/acceptance.html"

    def get(self, request, *args, **kwargs):
        filters = _report_filters(request)
        try:
            report = acceptance.latest_report(**filters)
        except acceptance.ReportRefused as exc:
            messages.error(request, str(exc))
            report = acceptance.latest_report(filters["appliance_name"])
        query = "&".join(f"{k}={v}" for k, v in (("node", report.node_filter), ("result", report.result_filter)) if v)
        return self.render_to_response(self.get_context_data(
            report=report, appliances=Appliance.objects.order_by("name"), results=acceptance.RESULTS,
            export_query=query))


class AcceptanceExportView(CapabilityMixin, View):
    """The report as a standalone printable HTML page or as JSON, as a download; each export is audited."""

    capability = "provisioning.view"

    def get(self, request, form):
        try:
            report = acceptance.latest_report(**_report_filters(request))
            content, content_type, name = acceptance.export(report, form, style_nonce=request.csp_nonce)
        except acceptance.ReportRefused as exc:
            messages.error(request, str(exc))
            return redirect("provisioning:acceptance")
        response = HttpResponse(content, content_type=content_type)
        disposition = "inline" if form == "html" and request.GET.get("download") != "1" else "attachment"
        response["Content-Disposition"] = f'{disposition}; filename="{name}"'
        return response


def _report_filters(request) -> dict:
    return {"appliance_name": request.GET.get("appliance") or None, "node": request.GET.get("node", ""),
            "result": request.GET.get("result", "")}
