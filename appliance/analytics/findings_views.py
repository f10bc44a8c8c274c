"""Portal pages of the findings: the recommendations inbox, one finding with its evidence, and the
decisions (accept, dismiss with a reason). Thin wrappers around appliance.analytics.findings."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can

from . import findings, profiling
from .models import Finding

VIEW_CAPABILITY = "analytics.view"
CHANGE_CAPABILITY = "analytics.change"
STATES = ("open", "accepted", "dismissed", "resolved", "all")


class RecommendationListView(CapabilityMixin, TemplateView):
    capability = VIEW_CAPABILITY
    template_name = "analytics/recommendations.html"

    def get(self, request, *args, **kwargs):
        self.state = request.GET.get("state", "").strip() or "open"
        self.kind = request.GET.get("kind", "").strip()
        if self.state not in STATES:
            return render(request, "400.html", {"message": _("state: %(state)s is not one of %(states)s") % {
                "state": self.state[:40], "states": ", ".join(STATES)}}, status=400)
        if self.kind and self.kind not in Finding.Kind.values:
            return render(request, "400.html", {"message": _("kind: %(kind)s is not one of %(kinds)s") % {
                "kind": self.kind[:40], "kinds": ", ".join(Finding.Kind.values)}}, status=400)
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        query = Finding.objects.select_related("node")
        if self.state != "all":
            query = query.filter(state=self.state)
        if self.kind:
            query = query.filter(kind=self.kind)
        counts = {state: Finding.objects.filter(state=state).count() for state in STATES[:-1]}
        context.update(findings=list(query[:500]), state=self.state, kind=self.kind, counts=counts,
                       schedule=findings.refresh_schedule(),
                       states=[{"name": s, "count": counts.get(s), "current": s == self.state} for s in STATES],
                       kinds=Finding.Kind.choices, can_decide=can(self.request.user, CHANGE_CAPABILITY))
        return context


class RecommendationView(CapabilityMixin, TemplateView):
    capability = VIEW_CAPABILITY
    template_name = "analytics/recommendation.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        finding = get_object_or_404(Finding.objects.select_related("node"), pk=self.kwargs["pk"])
        profile = None
        if finding.job:
            try:
                profile = profiling.suggest(finding.job, finding.window_start, finding.window_end)
            except profiling.ProfileError:
                profile = None
        evidence = [(name, value) for name, value in sorted((finding.evidence or {}).items())
                    if name != findings.TRANSLATIONS]  # the texts above, not a figure
        plans = list(finding.lending_plans.order_by("-pk")) if hasattr(finding, "lending_plans") else []
        context.update(finding=finding, evidence=evidence, profile=profile, plans=plans,
                       can_decide=can(self.request.user, CHANGE_CAPABILITY) and finding.state == Finding.State.OPEN)
        return context


class DecisionView(CapabilityMixin, View):
    """POST only: accept or dismiss one finding, back to it."""

    capability = CHANGE_CAPABILITY
    write_capability = CHANGE_CAPABILITY
    http_method_names = ["post"]
    decision = "accept"

    def post(self, request, pk):
        finding = get_object_or_404(Finding, pk=pk)
        text = request.POST.get("reason", "")
        try:
            if self.decision == "accept":
                outcome = findings.accept(finding, request.user, note=text)
                if outcome["plan"]:
                    messages.success(request, _("Accepted: lending plan %(plan)s proposed.") % {
                        "plan": outcome["plan"]})
                else:
                    messages.success(request, _("Accepted: %(subject)s.") % {"subject": finding.subject})
            else:
                findings.dismiss(finding, request.user, reason=text)
                messages.success(request, _("Dismissed: %(subject)s.") % {"subject": finding.subject})
        except findings.FindingError as exc:
            return render(request, "400.html", {"message": str(exc)}, status=400)
        return redirect(reverse("analytics:recommendation", args=[finding.pk]))


class RefreshView(CapabilityMixin, View):
    """POST only: run the detectors now over the last day (as `manage.py analytics findings --refresh` does;
    audited as the periodic refresh is, with the person as actor), back to the list with what they found."""

    capability = CHANGE_CAPABILITY
    write_capability = CHANGE_CAPABILITY
    http_method_names = ["post"]

    def post(self, request):
        result = findings.refresh()
        messages.success(request, _("The detectors ran: %(found)s found, %(opened)s opened, %(resolved)s "
                                    "resolved.") % {"found": result["found"], "opened": len(result["opened"]),
                                                    "resolved": len(result["resolved"])})
        return redirect(reverse("analytics:recommendations"))
