"""Portal pages of lending: the plans with their live state, a plan with its steps, the propose form, the
decisions (approve, reject, roll back, reclaim), and each pool's policy form. Each is a thin wrapper around
appliance.lending.services (a policy is a model saved with its audited diff)."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db import transaction
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


WEEKDAYS = [(0, gettext_lazy("Monday")), (1, gettext_lazy("Tuesday")), (2, gettext_lazy("Wednesday")),
            (3, gettext_lazy("Thursday")), (4, gettext_lazy("Friday")), (5, gettext_lazy("Saturday")),
            (6, gettext_lazy("Sunday"))]


class PolicyForm(forms.Form):
    """A pool's lending policy; the same bounds as the API's serializer. Automatic approval is an approval:
    only a role that approves plans (pools.approve) may turn it on or off."""

    may_lend = forms.BooleanField(label=gettext_lazy("Nodes of this pool may be lent"), required=False)
    minimum_nodes = forms.IntegerField(label=gettext_lazy("Number of nodes the pool always keeps"), min_value=0, max_value=100000)
    window_days = forms.TypedMultipleChoiceField(
        label=gettext_lazy("Days a window may start"), choices=WEEKDAYS, coerce=int, required=False,
        widget=forms.CheckboxSelectMultiple, help_text=gettext_lazy("none ticked: every day"))
    window_start_hour = forms.IntegerField(label=gettext_lazy("Window from (hour, local time)"), min_value=0,
                                           max_value=23)
    window_end_hour = forms.IntegerField(label=gettext_lazy("Window until (hour, local time)"), min_value=1,
                                         max_value=24, help_text=gettext_lazy("below the start: the next day"))
    reclaim_minutes = forms.IntegerField(label=gettext_lazy("Reclaim within (minutes)"), min_value=1,
                                         max_value=7 * 24 * 60)
    automatic_approval = forms.BooleanField(label=gettext_lazy("Plans are approved by the policy itself"),
                                            required=False)

    def __init__(self, *args, may_approve: bool, **kwargs):
        super().__init__(*args, **kwargs)
        if not may_approve:
            self.fields["automatic_approval"].disabled = True  # the posted value is ignored: the initial stands
            self.fields["automatic_approval"].help_text = _("an Administrator decides this")


POLICY_FIELDS = ("may_lend", "minimum_nodes", "window_days", "window_start_hour", "window_end_hour",
                 "reclaim_minutes", "automatic_approval")


class PolicyView(CapabilityMixin, View):
    """GET: the form for one pool's policy (a new one with the model's defaults); POST: set it. Saved as a
    LendingPolicy, whose change the audit log records with its before/after diff and actor."""

    capability = "analytics.change"
    write_capability = "analytics.change"

    def _form(self, request, pool, data=None):
        policy = LendingPolicy.objects.filter(pool=pool).first() or LendingPolicy(pool=pool)
        initial = {name: getattr(policy, name) for name in POLICY_FIELDS}
        form = PolicyForm(data, initial=initial, may_approve=can(request.user, "pools.approve"))
        return policy, form

    def _render(self, request, pool, policy, form, status=200):
        return render(request, "lending/policy.html", {"pool": pool, "policy": policy, "form": form,
                                                       "time_zone": settings.TIME_ZONE}, status=status)

    def get(self, request, pool):
        pool = get_object_or_404(Pool, pk=pool)
        policy, form = self._form(request, pool)
        return self._render(request, pool, policy, form)

    def post(self, request, pool):
        pool = get_object_or_404(Pool, pk=pool)
        with transaction.atomic():
            Pool.objects.select_for_update().filter(pk=pool.pk).first()
            policy, form = self._form(request, pool, request.POST)
            if not form.is_valid():
                return self._render(request, pool, policy, form, status=400)
            for name in POLICY_FIELDS:
                value = form.cleaned_data[name]
                setattr(policy, name, sorted(set(value)) if name == "window_days" else value)
            policy.save()
        messages.success(request, _("Lending policy of pool %(pool)s saved.") % {"pool": pool.name})
        return redirect("lending:plans")


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
        context["unset_pools"] = Pool.objects.filter(lending_policy__isnull=True).order_by("name")
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
        steps = list(plan.steps.all())
        for step in steps:
            step.label = STEP_NAMES.get(step.name, step.name)
        can_decide = can(user, "pools.approve")
        # The one four-eyes rule: the proposer never approves their own plan, so the button is not offered.
        own = plan.proposed_by_id is not None and plan.proposed_by_id == user.pk
        context.update(plan=plan, steps=steps, live=plan.state not in FINISHED, can_decide=can_decide,
                       can_approve=can_decide and not own, own_plan=own,
                       can_reclaim=can(user, "analytics.change"))
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


# What each decision did, said once it is done (the plan's state after it).
DONE = {"approve": lambda: _("Lending plan #%(id)s approved: now %(state)s."),
        "reject": lambda: _("Lending plan #%(id)s rejected."),
        "rollback": lambda: _("Lending plan #%(id)s: rollback started, now %(state)s."),
        "reclaim": lambda: _("Lending plan #%(id)s: reclaim asked, its nodes come back; now %(state)s.")}

# The steps' names (PlanStep.name, English in the database and the audit log) as the page shows them.
STEP_NAMES = {"propose": gettext_lazy("propose"), "approve": gettext_lazy("approve"),
              "reject": gettext_lazy("reject"), "activate": gettext_lazy("activate"),
              "drain": gettext_lazy("drain in Slurm"), "requeue": gettext_lazy("requeue running jobs"),
              "move": gettext_lazy("move to the other pool"), "workloads": gettext_lazy("workloads stage"),
              "resume": gettext_lazy("resume in Slurm"), "return": gettext_lazy("return"),
              "reclaim-request": gettext_lazy("reclaim asked"), "reclaim": gettext_lazy("reclaim"),
              "rollback": gettext_lazy("roll back"), "redeploy": gettext_lazy("redeploy services")}


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
            plan.refresh_from_db()
            messages.success(request, DONE[self.action]() % {"id": plan.pk, "state": plan.get_state_display()})
        return redirect(reverse("lending:plan", args=[plan.pk]))


class ReclaimView(PlanActionView):
    capability = "analytics.change"
    write_capability = "analytics.change"
    action = "reclaim"
