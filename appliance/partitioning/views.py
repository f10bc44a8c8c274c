"""Portal pages of partitioning: the GPUs drawn as their 8 memory slices (now, and planned beside it), the
plans with their history, the plan editor (requests as form rows or YAML, preview without saving, save),
a plan with Apply and the rollback, and the sizing advisor. Each page is a thin wrapper around the functions
of api.py (which wrap layout, planner, services and sizing), so the portal and the API refuse alike."""

import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import TemplateView

from appliance.core.permissions import ROLE_REFUSED, CapabilityMixin
from appliance.core.roles import can
from appliance.inventory.models import Appliance

from . import api, profiles
from .forms import AdvisorForm, PlanTextForm, RequestFormSet, YamlRequestsError, requests_from_yaml
from .models import Plan

SLICES = profiles.MEMORY_SLICES
NODES_PER_PAGE = 32


# --- drawing ---------------------------------------------------------------------------------------

def _placements_by_gpu(placed: list[dict]) -> dict[str, list[dict]]:
    by_gpu: dict[str, list[dict]] = {}
    for item in placed or []:
        by_gpu.setdefault(item.get("gpu"), []).append(item)
    return by_gpu


def _service_names(items: list[dict]) -> list[str]:
    return [f"{item['request']}#{item['replica']}" for item in items]


def gpu_drawing(gpu: dict, placed: list[dict] | None = None) -> dict:
    """One GPU as blocks on its 8 memory slices: {"kind": mig | time_slicing | whole, "label", "blocks":
    [{kind, start, span, label, services, slices}]}. A MIG instance takes its profile's memory slices at its
    start; a slice no instance holds is "free". `placed`: the plan's placements on this GPU (services)."""
    placed = placed or []
    table = profiles.MODELS.get(gpu.get("model") or "")
    if gpu.get("mig") is not None:
        blocks, used = [], set()
        for instance in sorted(gpu["mig"], key=lambda i: int(i.get("start", 0))):
            start = int(instance.get("start", 0))
            try:
                span = table.profile(instance["profile"]).memory_slices if table else 1
            except KeyError:
                span = 1
            span = max(1, min(span, SLICES - start))
            used.update(range(start, start + span))
            services = [p for p in placed if p.get("kind") == "mig" and p.get("profile") == instance["profile"]
                        and p.get("start") == start]
            # "1g.10gb" may break after "1g" on a one-slice block (a narrow column on a phone).
            compute, dot, rest = str(instance["profile"]).partition(".")
            blocks.append({"kind": "mig", "start": start, "span": span, "label": instance["profile"],
                           "label_parts": (compute + dot, rest) if dot else (compute, ""),
                           "services": _service_names(services),
                           "slices": f"{start}" if span == 1 else f"{start}–{start + span - 1}"})
        blocks.extend({"kind": "free", "start": index, "span": 1, "label": _("free"), "services": [],
                       "slices": f"{index}"} for index in range(SLICES) if index not in used)
        blocks.sort(key=lambda block: block["start"])
        return {"kind": "mig", "label": _("MIG"), "blocks": blocks}
    if gpu.get("time_slicing"):
        replicas = int(gpu["time_slicing"].get("replicas") or 0)
        label = _("time-sliced × %(replicas)s") % {"replicas": replicas}
        services = [p for p in placed if p.get("kind") == "time_slicing"]
        return {"kind": "time_slicing", "label": label, "blocks": [
            {"kind": "time_slicing", "start": 0, "span": SLICES, "label": label,
             "services": _service_names(services), "slices": f"0–{SLICES - 1}"}]}
    services = [p for p in placed if p.get("kind") == "whole"]
    return {"kind": "whole", "label": _("whole GPU"), "blocks": [
        {"kind": "whole", "start": 0, "span": SLICES, "label": _("whole GPU"), "services": _service_names(services),
         "slices": f"0–{SLICES - 1}"}]}


def _node_and_index(gpu_id: str) -> tuple[str, str]:
    node, _sep, index = gpu_id.rpartition("/")
    return (node or gpu_id), index.removeprefix("gpu")


def _shape(gpu: dict | None) -> tuple:
    """What a GPU's layout is, to compare the layout now with a plan's: MIG instances as (profile, start),
    or time-slicing replicas, or whole."""
    if gpu is None:
        return ()
    if gpu.get("mig") is not None:
        return ("mig", tuple(sorted((str(i.get("profile")), int(i.get("start", 0))) for i in gpu["mig"])))
    if gpu.get("time_slicing"):
        return ("time_slicing", int(gpu["time_slicing"].get("replicas") or 0))
    return ("whole",)


def layout_drawing(now: list[dict], planned: dict | None = None, *, only_concerned: bool = False) -> list[dict]:
    """Nodes with their GPUs, each drawn now and (with a planner result) as planned:
    [{"name", "gpus": [{"id", "index", "model", "pool", "now", "planned", "changed"}]}]. `only_concerned`:
    only the GPUs the plan changes or places a service on (a plan's page on a large appliance)."""
    planned_gpus = {gpu["id"]: gpu for gpu in (planned or {}).get("gpus") or []}
    changed = set(((planned or {}).get("disruption") or {}).get("gpus_changed") or [])
    placements = _placements_by_gpu((planned or {}).get("placed") or [])
    nodes: dict[str, dict] = {}
    for gpu in now:
        if only_concerned and gpu["id"] not in changed and gpu["id"] not in placements:
            continue
        node_name, index = (gpu["node"], gpu["index"]) if "node" in gpu else _node_and_index(gpu["id"])
        node = nodes.setdefault(node_name, {"name": node_name, "gpus": []})
        target = planned_gpus.get(gpu["id"])
        node["gpus"].append({
            "id": gpu["id"], "index": index, "model": gpu.get("model"), "pool": gpu.get("pool"),
            "now": gpu_drawing(gpu), "planned": gpu_drawing(target, placements.get(gpu["id"])) if target else None,
            # Against the layout NVML reports now, not the one the plan was made on: an applied plan changes
            # nothing any more.
            "changed": target is not None and _shape(target) != _shape(gpu)})
    return list(nodes.values())


def _appliance(request) -> Appliance | None:
    name = (request.GET.get("appliance") or request.POST.get("appliance") or "")[:64]
    if name:
        return get_object_or_404(Appliance, name=name)
    return Appliance.objects.order_by("name").first()


def _appliance_context(request) -> dict:
    return {"appliance": _appliance(request),
            "appliances": list(Appliance.objects.order_by("name").values_list("name", flat=True))}


def _may_apply(user) -> bool:
    return can(user, "partitioning.change") and can(user, "provisioning.run")


# --- pages -----------------------------------------------------------------------------------------

class LayoutView(CapabilityMixin, TemplateView):
    """/partitioning/: every GPU of the appliance as its memory slices; ?plan=N draws plan N beside."""

    capability = "partitioning.view"
    template_name = "partitioning/layout.html"

    def get_context_data(self, **kwargs):
        from . import layout

        context = super().get_context_data(**kwargs)
        context.update(_appliance_context(self.request))
        appliance = context["appliance"]
        if appliance is None:
            return context
        plans = list(api.plans_of(appliance)[:50])
        selected = None
        number = self.request.GET.get("plan", "")
        if number:
            if not number.isdigit() or len(number) > 9:
                raise Http404(_("no such plan"))
            selected = get_object_or_404(api.plans_of(appliance), number=int(number))
        nodes = layout_drawing(layout.current_layout(appliance)["gpus"], selected.result if selected else None)
        page = Paginator(nodes, NODES_PER_PAGE).get_page(self.request.GET.get("page", 1))
        query = self.request.GET.copy()
        query.pop("page", None)
        context.update(plans=plans, plan=selected, can_change=can(self.request.user, "partitioning.change"),
                       nodes=page.object_list, page=page, page_query=query.urlencode())
        return context


class PlanListView(CapabilityMixin, TemplateView):
    capability = "partitioning.view"
    template_name = "partitioning/plans.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(_appliance_context(self.request))
        appliance = context["appliance"]
        if appliance is None:
            return context
        plans = list(api.plans_of(appliance)[:200])
        applied = next((plan for plan in plans if plan.state == Plan.State.APPLIED), None)
        context.update(plans=plans, applied=applied,
                       rollback_to=applied.previous if applied else None,
                       can_change=can(self.request.user, "partitioning.change"),
                       can_apply=_may_apply(self.request.user))
        return context


class PlanDetailView(CapabilityMixin, TemplateView):
    capability = "partitioning.view"
    template_name = "partitioning/plan.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(_appliance_context(self.request))
        appliance = context["appliance"]
        if appliance is None:
            raise Http404(_("no appliance in the inventory"))
        plan = get_object_or_404(api.plans_of(appliance), number=kwargs["number"])
        before = plan.current if isinstance(plan.current, list) else (plan.current or {}).get("gpus", [])
        # The plan's own "before": the layout it was planned on (the layout now is on the layout page).
        context.update(plan=plan, result=plan.result or {}, nodes=layout_drawing(before, plan.result or {}, only_concerned=True),
                       now_label=_("before"),
                       can_change=can(self.request.user, "partitioning.change"),
                       can_apply=_may_apply(self.request.user) and plan.state == Plan.State.DRAFT,
                       can_rollback=_may_apply(self.request.user) and plan.state == Plan.State.APPLIED
                       and plan.previous_id is not None)
        return context


class PlanEditorView(CapabilityMixin, View):
    """/partitioning/plans/new/: requests as rows or YAML; "preview" plans without saving, "save" saves."""

    capability = "partitioning.change"
    write_capability = "partitioning.change"
    template = "partitioning/editor.html"

    def get(self, request):
        context = _appliance_context(request)
        initial = []
        source = request.GET.get("from", "")
        if context["appliance"] is not None and source.isdigit() and len(source) <= 9:
            plan = api.plans_of(context["appliance"]).filter(number=int(source)).first()
            initial = [dict(item) for item in (plan.requests if plan else []) if isinstance(item, dict)]
        context.update(formset=RequestFormSet(prefix="r", initial=initial or None), text_form=PlanTextForm())
        return render(request, self.template, context)

    def post(self, request):
        context = _appliance_context(request)
        appliance = context["appliance"]
        formset = RequestFormSet(request.POST, prefix="r")
        text_form = PlanTextForm(request.POST)
        context.update(formset=formset, text_form=text_form)
        if appliance is None:
            messages.error(request, _("There is no appliance in the inventory to plan for."))
            return render(request, self.template, context, status=400)
        requests = self._requests(formset, text_form)
        if requests is None:
            return render(request, self.template, context, status=400)
        try:
            if request.POST.get("action") == "save":
                plan = api.save_plan(appliance, requests, user=request.user,
                                     description=text_form.cleaned_data.get("description", ""))
                messages.success(request, _("Plan %(number)s saved.") % {"number": plan.number})
                return redirect(reverse("partitioning:plan", args=[plan.number]) + f"?appliance={appliance.name}")
            result, now = api.preview_plan(appliance, requests)
        except api.PlanningRefused as refused:
            context["refusal"] = refused
            return render(request, self.template, context, status=refused.status)
        context.update(result=result, nodes=layout_drawing(now["gpus"], result, only_concerned=True), previewed=True)
        return render(request, self.template, context)

    @staticmethod
    def _requests(formset, text_form) -> list[dict] | None:
        if not text_form.is_valid():
            return None
        text = text_form.cleaned_data.get("requests_yaml", "").strip()
        if text:
            try:
                return requests_from_yaml(text)
            except YamlRequestsError as exc:
                text_form.add_error("requests_yaml", str(exc))
                return None
        if not formset.is_valid():
            return None
        requests = [form.request() for form in formset.forms if form.has_changed() and form.cleaned_data]
        if not requests:
            text_form.add_error(None, _("Give at least one request: a row above, or YAML."))
            return None
        return requests


class ApplyView(CapabilityMixin, View):
    """POST only: apply plan N (a provisioning run), then back to the plan."""

    capability = "partitioning.change"
    write_capability = "partitioning.change"
    http_method_names = ["post"]

    def post(self, request, number):
        from django.core.exceptions import PermissionDenied

        if not can(request.user, "provisioning.run"):
            raise PermissionDenied(ROLE_REFUSED)
        appliance = _appliance(request)
        if appliance is None:
            raise Http404(_("no appliance in the inventory"))
        plan = get_object_or_404(api.plans_of(appliance), number=number)
        try:
            run = api.apply_plan(plan, user=request.user)
        except api.PlanningRefused as refused:
            messages.error(request, str(refused))
        else:
            messages.success(request, _("Plan %(number)s is being applied by run #%(run)s.")
                             % {"number": plan.number, "run": getattr(run, "pk", run)})
        return redirect(reverse("partitioning:plan", args=[plan.number]) + f"?appliance={appliance.name}")


class RollbackView(CapabilityMixin, View):
    """POST only: roll back to the plan applied before the current one."""

    capability = "partitioning.change"
    write_capability = "partitioning.change"
    http_method_names = ["post"]

    def post(self, request):
        from django.core.exceptions import PermissionDenied

        if not can(request.user, "provisioning.run"):
            raise PermissionDenied(ROLE_REFUSED)
        appliance = _appliance(request)
        if appliance is None:
            raise Http404(_("no appliance in the inventory"))
        try:
            plan = api.rollback(appliance, user=request.user)
        except api.PlanningRefused as refused:
            messages.error(request, str(refused))
            return redirect(reverse("partitioning:plans") + f"?appliance={appliance.name}")
        messages.success(request, _("Rolling back: plan %(number)s is being applied.") % {"number": plan.number})
        return redirect(reverse("partitioning:plan", args=[plan.number]) + f"?appliance={appliance.name}")


class AdvisorView(CapabilityMixin, View):
    """/partitioning/advisor/: the sizing advisor as a form (GET: it changes nothing)."""

    capability = "partitioning.view"

    def get(self, request):
        context = {}
        if any(key in request.GET for key in ("params_billion", "layers")):
            form = AdvisorForm(request.GET)
            if form.is_valid():
                values = dict(form.cleaned_data)
                values["params"] = int(values.pop("params_billion") * 1_000_000_000)
                try:
                    context["sizing"] = sizing = api.size(values)
                    from . import sizing as advisor

                    # Decimal units (GB = 10^9 bytes), as the advisor and GPU memory figures are given.
                    context["human"] = {key: advisor.human_bytes(sizing[key]) for key in (
                        "weights_bytes", "kv_bytes", "activation_bytes", "overhead_bytes", "total_bytes")}
                    context["human"]["kv_bytes_per_token"] = advisor.human_bytes(sizing["kv_bytes_per_token"],
                                                                                  binary=True)
                    for key in ("per_gpu_bytes", "usable_bytes"):
                        if sizing.get("placement"):
                            context["human"][key] = advisor.human_bytes(sizing["placement"][key])
                    if sizing.get("fits"):

                        # JSON is YAML: the line pastes into the plan editor's YAML as it is.
                        context["planner_request"] = "- " + json.dumps(advisor.request_for(sizing, "model"))
                except api.PlanningRefused as refused:
                    form.add_error(refused.field if refused.field in form.fields else None, str(refused))
        else:
            form = AdvisorForm()
        context["form"] = form
        return render(request, "partitioning/advisor.html", context, status=400 if form.errors else 200)
