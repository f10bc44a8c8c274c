"""Portal pages of lending: the plans with their live state, a plan with its steps, the propose form, and the
decisions (approve, reject, roll back, reclaim). Each is a thin wrapper around appliance.lending.services."""

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can
from appliance.inventory.models import Pool

from . import services
from .api import plans
from .models import FINISHED, LendingPlan, LendingPolicy


class ProposeForm(forms.Form):
    nodes = forms.CharField(label=gettext_lazy("Nodes"), max_length=2000,
                            help_text=gettext_lazy("node names, separated by commas"))
    from_pool = forms.ChoiceField(label=gettext_lazy("From pool"))
    to_pool = forms.ChoiceField(label=gettext_lazy("To pool"))
    window_start = forms.DateTimeField(label=gettext_lazy("Window start"),
                                       widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    window_end = forms.DateTimeField(label=gettext_lazy("Window end"),
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=1000, widget=forms.Textarea(attrs={"rows": 3}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = sorted(set(Pool.objects.values_list("name", flat=True)))
        self.fields["from_pool"].choices = [(name, name) for name in names]
        self.fields["to_pool"].choices = [(name, name) for name in names]

    def clean_nodes(self):
        return [name.strip() for name in self.cleaned_data["nodes"].split(",") if name.strip()]


class PlanListView(CapabilityMixin, TemplateView):
    capability = "analytics.view"
    template_name = "lending/plans.html"

    def get_template_names(self):
        return ["lending/_plans_table.html"] if getattr(self.request, "htmx", False) else [self.template_name]

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["plans"] = list(plans()[:200])
        context["live"] = any(plan.state not in FINISHED for plan in context["plans"])
        context["policies"] = LendingPolicy.objects.select_related("pool").order_by("pool__name")
        context["can_propose"] = can(self.request.user, "analytics.change")
        return context


class PlanDetailView(CapabilityMixin, TemplateView):
    capability = "analytics.view"
    template_name = "lending/plan.html"

    def get_template_names(self):
        return ["lending/_plan_live.html"] if getattr(self.request, "htmx", False) else [self.template_name]

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        plan = get_object_or_404(plans(), pk=kwargs["pk"])
        user = self.request.user
        context.update(plan=plan, steps=list(plan.steps.all()), live=plan.state not in FINISHED,
                       can_decide=can(user, "pools.approve"), can_reclaim=can(user, "analytics.change"))
        return context


class ProposeView(CapabilityMixin, View):
    capability = "analytics.change"
    write_capability = "analytics.change"

    def get(self, request):
        initial = {key: request.GET[key][:200] for key in ("nodes", "from_pool", "to_pool", "reason") if key in request.GET}
        return render(request, "lending/propose.html", {"form": ProposeForm(initial=initial)})

    def post(self, request):
        form = ProposeForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                plan = services.propose(nodes=data["nodes"], from_pool=data["from_pool"], to_pool=data["to_pool"],
                                        window_start=data["window_start"], window_end=data["window_end"],
                                        reason=data["reason"], actor=request.user)
            except services.LendingError as exc:
                field = str(exc).partition(":")[0]
                form.add_error(field if field in form.fields else None, str(exc))
            else:
                messages.success(request, _("Lending plan #%(id)s proposed.") % {"id": plan.pk})
                return redirect("lending:plan", pk=plan.pk)
        return render(request, "lending/propose.html", {"form": form}, status=400)


class PlanActionView(CapabilityMixin, View):
    """POST only: one decision on a plan, back to the plan."""

    capability = "pools.approve"
    write_capability = "pools.approve"
    http_method_names = ["post"]
    action = ""

    def post(self, request, pk):
        plan = get_object_or_404(LendingPlan, pk=pk)
        reason = request.POST.get("reason", "")
        try:
            if self.action == "approve":
                services.approve(plan, request.user)
            elif self.action == "reject":
                services.reject(plan, request.user, reason)
            elif self.action == "rollback":
                services.rollback(plan, request.user, reason)
            else:
                services.request_reclaim(plan, request.user)
        except services.LendingDenied as exc:
            messages.error(request, str(exc))
            return redirect(reverse("lending:plan", args=[plan.pk]))
        except services.LendingError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, _("Lending plan #%(id)s: done.") % {"id": plan.pk})
        return redirect(reverse("lending:plan", args=[plan.pk]))


class ReclaimView(PlanActionView):
    capability = "analytics.change"
    write_capability = "analytics.change"
    action = "reclaim"
