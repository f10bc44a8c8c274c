"""Portal pages of provisioning: start a run or a dry run, watch it live (progress, stages x hosts with
running counts, latest task results, refreshed by htmx polling), cancel it after a confirmation, browse
history, read a stage's output page by page or download it as text. Every action is a call to
appliance.provisioning.services; what a page shows of a run's progress comes from
appliance.provisioning.progress, as the API's does."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.models import Appliance

from . import acceptance, progress, services
from . import catalogue as stage_catalogue
from .models import AcceptanceReport, HostResult, Run, StageRun, TaskEvent
from .states import StageState

LATEST_EVENTS = 12
HOSTS_PER_PAGE = 50
CHECKS_SHOWN = 200
EVENTS_PER_PAGE = 200


def host_grid(run: Run, run_progress: progress.RunProgress, page_number=None):
    """A page of rows of hosts, one cell per stage: the host's state in that stage, with its counts (live
    while the stage runs, Ansible's recap once it has ended). Hosts with a failure come first, so the
    first page of a fleet-sized run shows what went wrong."""
    hosts = set(run.node_names) or set(run.appliance.nodes.values_list("name", flat=True))
    for stage in run_progress.stages:
        hosts.update(stage.stage_run.hosts)
    failures = {(r.stage_run_id, r.host): r for r in HostResult.objects.filter(stage_run__run=run)
                .filter(Q(failed__gt=0) | Q(unreachable__gt=0)).only("stage_run_id", "host", "failed_task",
                                                                     "message", "unreachable")}
    troubled = {host for _, host in failures}
    for stage in run_progress.stages:
        if stage.live:
            troubled.update(host for host, counts in stage.hosts.items() if counts.problem)
    ordered = sorted(hosts, key=lambda host: (host not in troubled, host))
    page = Paginator(ordered, HOSTS_PER_PAGE).get_page(page_number)
    rows = []
    for host in page:
        cells = [_cell(stage, host, failures.get((stage.stage_run.pk, host))) for stage in run_progress.stages]
        rows.append({"host": host, "cells": cells})
    return rows, page


# Literal, so that makemessages finds each word.
_IN_STAGE = {
    "carried over": pgettext_lazy("host in a stage", "carried over"),
    "skipped": pgettext_lazy("host in a stage", "skipped"),
    "pending": pgettext_lazy("host in a stage", "pending"),
    "unreachable": pgettext_lazy("host in a stage", "unreachable"),
    "failed": pgettext_lazy("host in a stage", "failed"),
    "running": pgettext_lazy("host in a stage", "running"),
    "ok": pgettext_lazy("host in a stage", "ok"),
}


def _in_stage(word: str) -> str:
    return str(_IN_STAGE[word])


def _cell(stage: progress.StageProgress, host: str, failure) -> dict:
    stage_run = stage.stage_run
    if stage_run.state == StageState.SKIPPED:
        return {"state": "skipped",
                "label": _in_stage("carried over") if stage_run.carried_from_id else _in_stage("skipped")}
    if host not in stage_run.hosts:
        return {"state": "none", "label": "—" if stage_run.state != StageState.PENDING else _in_stage("pending")}
    counts = stage.hosts.get(host)
    if failure is not None:
        return {"state": "failed", "label": _in_stage("unreachable") if failure.unreachable else _in_stage("failed"),
                "title": f"{failure.failed_task}: {failure.message}", "counts": counts}
    if stage.live:
        counts = counts or progress.Counts()
        if counts.problem:  # the stage goes on, but this host has already failed a task
            return {"state": "failed", "counts": counts,
                    "label": _in_stage("unreachable") if counts.unreachable else _in_stage("failed")}
        return {"state": "running", "label": _in_stage("running"), "counts": counts}
    if counts is not None:
        return {"state": "succeeded", "label": _in_stage("ok"), "counts": counts}
    return {"state": stage_run.state, "label": stage_run.get_state_display()}


class ProvisioningIndexView(CapabilityMixin, TemplateView):
    capability = "provisioning.view"
    write_capability = "provisioning.run"
    template_name = "provisioning/index.html"

    def get_context_data(self, **kwargs):
        # The watchdog runs on the beat (and when a run is created), never inside a page load.
        context = super().get_context_data(**kwargs)
        appliances = list(Appliance.objects.prefetch_related("nodes").order_by("name"))
        now = timezone.now()
        runs = list(Run.objects.select_related("appliance", "requested_by").order_by("-created", "-id")[:50])
        for run in runs:
            run.duration_text = progress.format_duration(progress.duration(run.started, run.ended, now))
        context.update(
            appliances=appliances,
            stages=stage_catalogue.active().stages,
            runs=runs,
            # One run at most per appliance is active: a few queries each.
            active_runs=[progress.run_progress(run, now) for run in
                         Run.objects.filter(state__in=["pending", "running"]).select_related("appliance")],
        )
        return context

    def post(self, request, *args, **kwargs):
        appliance = get_object_or_404(Appliance, pk=request.POST.get("appliance") or 0)
        stages = request.POST.getlist("stages")
        nodes = request.POST.getlist("nodes")
        # The run service decides the kind from what was asked, as it does for the API.
        try:
            run = services.start_run(appliance, stages=stages or None, nodes=nodes or None,
                                     dry_run=request.POST.get("dry_run") == "on",
                                     force=request.POST.get("force") == "on", user=request.user)
        except services.RunRefused as exc:
            for error in exc.errors:
                messages.error(request, error)
            return redirect("provisioning:index")
        messages.success(request, _("Run #%(pk)s started.") % {"pk": run.pk})
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
        run_progress = progress.run_progress(run)
        report = AcceptanceReport.objects.filter(run=run).first()
        failed_checks, passed_checks = [], []
        if report is not None:
            # Bounded: a fleet's report has tens of thousands of checks; the report page has them all.
            checks = report.checks.order_by("host", "name")
            failed_checks = list(checks.filter(passed=False)[:CHECKS_SHOWN])
            passed_checks = list(checks.filter(passed=True)[:CHECKS_SHOWN])
        stage_reasons = [s for s in run_progress.stages
                         if s.stage_run.reason and s.stage_run.state != StageState.SUCCEEDED]
        rows, hosts_page = host_grid(run, run_progress, self.request.GET.get("hosts_page"))
        context.update(run=run, progress=run_progress, stage_runs=[s.stage_run for s in run_progress.stages],
                       rows=rows, hosts_page=hosts_page, latest_events=progress.task_lines(run, LATEST_EVENTS),
                       report=report, failed_checks=failed_checks, passed_checks=passed_checks,
                       unchecked_hosts=acceptance.unchecked_hosts(run) if report else [],
                       passed_total=report.checks_total - report.checks_failed if report else 0,
                       # The run's reason is its failed stage's: printed once, at the top.
                       stage_reasons=[s for s in stage_reasons if s.stage_run.reason != run.reason])
        return context


class RunCancelView(CapabilityMixin, TemplateView):
    """GET asks for confirmation (a page of its own: no script needed); only the POST cancels."""

    capability = "provisioning.run"
    write_capability = "provisioning.run"
    template_name = "provisioning/run_cancel.html"

    def get(self, request, pk):
        run = get_object_or_404(Run.objects.select_related("appliance"), pk=pk)
        if run.finished:
            messages.error(request, _("Run #%(pk)s has already ended.") % {"pk": run.pk})
            return redirect("provisioning:run", pk=pk)
        if run.cancel_requested:
            messages.info(request, _("Cancel of run #%(pk)s is already requested.") % {"pk": run.pk})
            return redirect("provisioning:run", pk=pk)
        return self.render_to_response(self.get_context_data(run=run, progress=progress.run_progress(run)))

    def post(self, request, pk):
        run = get_object_or_404(Run, pk=pk)
        try:
            services.cancel_run(run, user=request.user)
        except services.RunRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, _("Cancel of run #%(pk)s requested.") % {"pk": run.pk})
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
        for event in page:
            event.outcome = progress.outcome(event)[0]
        context = self.get_context_data(stage_run=stage_run, page=page, host=host,
                                        duration_text=progress.format_duration(
                                            progress.duration(stage_run.started, stage_run.ended)),
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
