"""Portal pages of the model lifecycle under /models/: the model list with search, a model (versions,
aliases, stages), a version (its lineage drawn, artifacts and their verification, history, evaluations,
requests), the approvals inbox, the deployments with their live state, and the model card.

Each page reads the models with a fixed number of queries (however many versions a model has); each form
posts to one service function (services, integrity, deployments), which checks the rules, writes the
history and records the audit event. A refusal is one message on the page it came from, with the service's
status (400 for bad input, 404, 409 for what the state forbids: a four-eyes refusal, a changed file)."""

from datetime import UTC, datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Exists, Max, OuterRef, Prefetch, Q, Subquery, Sum
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from appliance.analytics.services import job_span
from appliance.core.permissions import ROLE_REFUSED, CapabilityMixin
from appliance.core.roles import can
from appliance.telemetry.queries import job_bounds

from . import lineage
from .errors import LifecycleError, NotFound
from .forms import (
    AliasDeleteForm,
    AliasForm,
    DecisionForm,
    DeployForm,
    EvaluationForm,
    ModelSearchForm,
    PromotionRequestForm,
    RejectForm,
    RollbackForm,
    StateAtForm,
    StopForm,
    TransitionForm,
)
from .models import (
    Alias,
    Artifact,
    Deployment,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    Stage,
    Verification,
)

MODELS_PER_PAGE = 50
VERSIONS_PER_PAGE = 50
ARTIFACTS_SHOWN = 200
DEPLOYMENTS_PER_PAGE = 50
TIMELINE_SHOWN = 200
# Deployments in these states are asked for their live state (the others are over).
LIVE_STATES = (Deployment.State.PENDING, Deployment.State.ROLLING_OUT, Deployment.State.HEALTHY,
               Deployment.State.FAILED)
CARD_FORMATS = ("html", "md", "json")


# --- reading -----------------------------------------------------------------------------------------

def _production_number():
    return Subquery(Alias.objects.filter(model=OuterRef("pk"), name="production").values("version__number")[:1])


def _attach_health(models: list) -> None:
    """What the model list says of each model on the page: versions whose files changed or went missing
    since registration (their deployment is blocked), services serving it, and services whose newest
    rollout failed. Two queries for the page, whatever the size of the registry (correlated subqueries in
    the list's own query cost ten times its time at 10,000 versions)."""
    by_pk = {model.pk: model for model in models}
    for model in models:
        model.changed_versions, model.serving, model.failing = 0, 0, 0
    if not by_pk:
        return
    for row in (ModelVersion.objects.filter(model__in=by_pk, verification__in=(Verification.TAMPERED,
                                                                             Verification.MISSING))
                .order_by().values("model").annotate(count=Count("pk"))):
        by_pk[row["model"]].changed_versions = row["count"]
    newer = Deployment.objects.filter(appliance=OuterRef("appliance"), name=OuterRef("name"),
                                      created__gt=OuterRef("created"))
    for row in (Deployment.objects.filter(version__model__in=by_pk, state=Deployment.State.FAILED)
                .exclude(Exists(newer)).order_by().values("version__model").annotate(count=Count("pk"))):
        by_pk[row["version__model"]].failing = row["count"]   # services whose newest rollout failed
    for row in (Deployment.objects.filter(version__model__in=by_pk, state=Deployment.State.HEALTHY)
                .order_by().values("version__model").annotate(count=Count("pk"))):
        by_pk[row["version__model"]].serving = row["count"]


def _aliases_prefetch():
    return Prefetch("aliases", queryset=Alias.objects.select_related("version").order_by("name"))


def _model_or_404(name: str) -> RegisteredModel:
    return get_object_or_404(RegisteredModel.objects.select_related("owner"), name=name)


def _version_or_404(name: str, number: int) -> ModelVersion:
    return get_object_or_404(
        ModelVersion.objects.select_related("model", "model__owner", "registered_by", "parent", "parent__model"),
        model__name=name, number=number)


def _first_error(form) -> str:
    """One message naming the field: "alias: lower-case letters, ..."."""
    for name, errors in form.errors.items():
        text = str(errors[0])
        if name == "__all__" or text.startswith((f"{name}:", f"{name},")):
            return text
        return f"{name}: {text}"
    return _("The form is not valid.")


def _transitions():
    from . import services

    return services.TRANSITIONS, services.NEEDS_APPROVAL


def _query_without_page(request) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


class ModelListView(CapabilityMixin, View):
    """/models/: every registered model with its production version and aliases; search by name (or
    description), tag (key or key=value) and a stage one of its versions holds."""

    capability = "models.view"
    template = "lifecycle/models.html"

    def get(self, request):
        form = ModelSearchForm(request.GET or None)
        models = RegisteredModel.objects.select_related("owner").annotate(
            version_count=Count("versions", distinct=True), latest_number=Max("versions__number"),
            production_number=_production_number()).prefetch_related(_aliases_prefetch())
        status = 200
        if form.is_bound and form.is_valid():
            models = self._filtered(models, form.cleaned_data)
        elif form.is_bound:
            status = 400
        page = Paginator(models.order_by("name"), MODELS_PER_PAGE).get_page(request.GET.get("page", 1))
        _attach_health(list(page.object_list))
        context = {"form": form, "models": page.object_list, "page": page,
                   "page_query": _query_without_page(request), "can_change": can(request.user, "models.change"),
                   "pending_requests": PromotionRequest.objects.filter(state=PromotionRequest.State.PENDING).count()
                   if can(request.user, "models.approve") else None}
        return render(request, self.template, context, status=status)

    @staticmethod
    def _filtered(models, data):
        if data.get("q"):
            models = models.filter(Q(name__icontains=data["q"]) | Q(description__icontains=data["q"]))
        if data.get("tag"):
            key, sep, value = data["tag"].partition("=")
            # On the model's tags or any of its versions' (a key is matched exactly, as MLflow's search does).
            if sep:
                models = models.filter(Q(**{f"tags__{key}": value})
                                       | Exists(ModelVersion.objects.filter(model=OuterRef("pk"),
                                                                            **{f"tags__{key}": value})))
            else:
                models = models.filter(Q(tags__has_key=key) | Exists(ModelVersion.objects.filter(
                    model=OuterRef("pk"), tags__has_key=key)))
        if data.get("stage"):
            models = models.filter(Exists(ModelVersion.objects.filter(model=OuterRef("pk"), stage=data["stage"])))
        return models


def _model_context(request, name: str) -> dict:
    model = _model_or_404(name)
    versions = (ModelVersion.objects.filter(model=model).select_related("registered_by")
                .annotate(evaluation_count=Count("evaluations", distinct=True),
                          pending_requests=Count("requests", filter=Q(requests__state="pending"), distinct=True))
                .order_by("-number"))
    page = Paginator(versions, VERSIONS_PER_PAGE).get_page(request.GET.get("page", 1))
    aliases = list(model.aliases.select_related("version").order_by("name"))
    by_version: dict[int, list[str]] = {}
    for alias in aliases:
        by_version.setdefault(alias.version_id, []).append(alias.name)
    for version in page.object_list:
        version.alias_names = by_version.get(version.pk, [])
    stage_counts = dict(ModelVersion.objects.filter(model=model).values_list("stage").annotate(n=Count("id"))
                        .values_list("stage", "n"))
    return {"model": model, "versions": page.object_list, "page": page, "page_query": _query_without_page(request),
            "aliases": aliases, "stages": [(stage, stage_counts.get(stage.value, 0)) for stage in Stage],
            "alias_form": AliasForm(), "can_change": can(request.user, "models.change"),
            **_state_at(request, model)}


def _state_at(request, model) -> dict:
    """The history question "what held which stage and alias then?" for ?at= (services.state_at)."""
    from . import services

    form = StateAtForm(request.GET if "at" in request.GET else None)
    if not form.is_bound or not form.is_valid() or not form.cleaned_data.get("at"):
        return {"at_form": form, "state_at": None}
    at = form.cleaned_data["at"]
    state = services.state_at(model, at)
    aliases_by_number: dict[int, list[str]] = {}
    for alias, number in state["aliases"].items():
        aliases_by_number.setdefault(number, []).append(alias)
    rows = [{"number": number, "stage": stage, "stage_label": _stage_label(stage),
             "aliases": aliases_by_number.get(number, [])} for number, stage in sorted(state["stages"].items())]
    return {"at_form": form, "state_at": {"at": at, "rows": rows}}


class ModelDetailView(CapabilityMixin, View):
    """/models/<name>/: the versions (newest first), the aliases and how many versions hold each stage."""

    capability = "models.view"
    template = "lifecycle/model.html"

    def get(self, request, name):
        context = _model_context(request, name)
        return render(request, self.template, context, status=400 if context["at_form"].errors else 200)


def _version_context(request, name: str, number: int, **forms) -> dict:
    from . import services

    version = _version_or_404(name, number)
    model = version.model
    artifacts = list(Artifact.objects.filter(version=version).order_by("path")[:ARTIFACTS_SHOWN])
    totals = Artifact.objects.filter(version=version).values("version").annotate(n=Count("id"), size=Sum("size"))
    totals = next(iter(totals), {"n": 0, "size": 0})
    evaluations = list(version.evaluations.select_related("created_by").order_by("created"))
    requests = list(version.requests.select_related("requested_by", "decided_by")
                    .prefetch_related("evidence").order_by("-created"))
    deployments = list(version.deployments.select_related("appliance").order_by("-created"))
    aliases = [alias.name for alias in Alias.objects.filter(version=version).order_by("name")]
    transitions, needs_approval = _transitions()
    allowed = sorted(transitions.get(version.stage, ()), key=lambda s: list(Stage.values).index(s))
    direct = [(stage, Stage(stage).label) for stage in allowed if stage not in needs_approval]
    approvable = [stage for stage in allowed if stage in needs_approval]
    timeline = [_timeline_entry(entry) for entry in services.timeline(model, version)[-TIMELINE_SHOWN:]]
    can_change = can(request.user, "models.change")
    transition_form = forms.get("transition_form") or TransitionForm()
    transition_form.fields["stage"].choices = direct
    request_form = forms.get("request_form") or PromotionRequestForm(evaluations=evaluations)
    return {
        "model": model, "version": version, "artifacts": artifacts, "artifact_count": totals["n"],
        "artifact_bytes": totals["size"] or 0, "evaluations": evaluations, "requests": requests,
        "deployments": deployments, "aliases": aliases, "timeline": timeline,
        "graph": lineage.graph(version, evaluations, deployments), "architecture": _architecture(version.architecture),
        "training": version.training or {}, "efficiency": lineage.percent((version.training or {}).get("efficiency")),
        "can_change": can_change, "can_verify_full": can(request.user, "models.deploy"),
        "transition_form": transition_form if (can_change and direct) else None,
        "request_form": request_form if (can_change and approvable) else None,
        "evaluation_form": (forms.get("evaluation_form") or EvaluationForm()) if can_change else None,
        "pending_request": any(r.state == PromotionRequest.State.PENDING for r in requests),
        "card_formats": list(CARD_FORMATS),
        "job_pages": _job_pages(request.user, version.training_job),
    }


def _job_pages(user, job: str) -> dict:
    """The training job's telemetry and efficiency pages, each where it has something to show and the
    user may read it (lineage, both ways: those pages link back here)."""
    if not job:
        return {}
    pages = {}
    if can(user, "telemetry.view") and job_bounds(job) is not None:
        pages["telemetry"] = reverse("telemetry:job", args=[job])
    if can(user, "analytics.view") and job_span(job) is not None:
        pages["efficiency"] = reverse("analytics:job", args=[job])
    return pages


def _architecture(shape: dict) -> list[tuple[str, str]]:
    """What the model's own files say, as (label, value) pairs: the figures the sizing advisor uses."""
    if not isinstance(shape, dict) or not shape:
        return []
    pairs = []
    params = shape.get("params")
    if isinstance(params, int):
        pairs.append((_("parameters"), f"{params / 1e9:.2f} B" if params >= 10**8 else f"{params:,}"))
    for key, label in (("architecture", _("architecture")), ("layers", _("layers")),
                       ("hidden_size", _("hidden size")), ("attention_heads", _("attention heads")),
                       ("kv_heads", _("key/value heads")), ("head_dim", _("head dimension")),
                       ("dtype", _("weights")), ("vocab_size", _("vocabulary")), ("experts", _("experts"))):
        if shape.get(key) not in (None, ""):
            pairs.append((label, str(shape[key])))
    return pairs


def _stage_label(stage) -> str:
    return Stage(stage).label if stage in Stage.values else str(stage)


def _timeline_entry(entry: dict) -> dict:
    """One event of services.timeline as a line of the history: {at, kind, kind_label, text, by}."""
    kind = entry.get("kind")
    if kind == "stage":
        text = _("entered %(stage)s") % {"stage": _stage_label(entry.get("stage"))}
        if entry.get("request"):
            text += " " + _("(request #%(pk)s approved)") % {"pk": entry["request"]}
        if entry.get("ended"):
            text += " " + _("until %(at)s") % {"at": entry["ended"].strftime("%Y-%m-%d %H:%M:%S")}
        if entry.get("reason"):
            text += ": " + entry["reason"]
        label = _("stage")
    elif kind == "alias":
        text = _("alias %(alias)s pointed here") % {"alias": entry.get("alias")}
        if entry.get("ended"):
            text += " " + _("until %(at)s (%(by)s)") % {"at": entry["ended"].strftime("%Y-%m-%d %H:%M:%S"),
                                                        "by": entry.get("ended_by") or "-"}
        label = _("alias")
    elif kind == "request":
        text = _("request #%(pk)s for %(stage)s: %(state)s") % {
            "pk": entry.get("request"), "stage": _stage_label(entry.get("stage")),
            "state": PromotionRequest.State(entry["state"]).label if entry.get("state") in
            PromotionRequest.State.values else entry.get("state")}
        if entry.get("decided_by"):
            text += " " + _("(decided by %(by)s)") % {"by": entry["decided_by"]}
        label = _("request")
    elif kind == "evaluation":
        verdict = {True: _("passed"), False: _("failed")}.get(entry.get("passed"), _("not judged"))
        text = _("evaluation %(name)s: %(verdict)s") % {"name": entry.get("name"), "verdict": verdict}
        label = _("evaluation")
    elif kind == "deployment":
        state = entry.get("state")
        text = _("deployed as %(name)s: %(state)s") % {
            "name": entry.get("name"),
            "state": Deployment.State(state).label if state in Deployment.State.values else state}
        label = _("deployment")
    else:
        text, label = str(entry), str(kind)
    return {"at": entry.get("at"), "kind": kind, "kind_label": label, "text": text, "by": entry.get("by") or ""}


class VersionDetailView(CapabilityMixin, View):
    """/models/<name>/versions/<n>/: lineage (drawn), artifacts, history, evaluations, requests, card."""

    capability = "models.view"
    template = "lifecycle/version.html"

    def get(self, request, name, number):
        return render(request, self.template, _version_context(request, name, number))


def _version_url(version) -> str:
    return reverse("lifecycle:version", args=[version.model.name, version.number])


class _VersionAction(CapabilityMixin, View):
    """A form on a version's page: POST only; the service's refusal is shown on that page."""

    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["post"]

    def refuse(self, request, name, number, status, message, **forms):
        messages.error(request, message)
        return render(request, VersionDetailView.template, _version_context(request, name, number, **forms),
                      status=status)


class VerifyView(_VersionAction):
    """Verify a version's files now: quick (size, mtime, inode, signature) for anyone who may read the
    model (an auditor checking before a review); full (every file re-hashed) for those who deploy."""

    write_capability = "models.view"

    def post(self, request, name, number):
        from . import integrity

        version = _version_or_404(name, number)
        full = request.POST.get("full") == "1"
        if full and not can(request.user, "models.deploy"):
            raise PermissionDenied(ROLE_REFUSED)
        try:
            result = integrity.verify(version, full=full, user=request.user)
        except LifecycleError as refused:
            return self.refuse(request, name, number, refused.status, str(refused))
        if result.ok:
            messages.success(request, _("Verified: every file matches its hash and the signature holds (%(kind)s, "
                                        "%(seconds).2f s).") % {"kind": _("full") if result.full else _("quick"),
                                                               "seconds": result.seconds})
        else:
            messages.error(request, _("Not intact: %(detail)s") % {"detail": result.detail})
        return redirect(_version_url(version) + "#artifacts")


class TransitionView(_VersionAction):
    def post(self, request, name, number):
        from . import services

        version = _version_or_404(name, number)
        form = TransitionForm(request.POST)
        transitions, needs_approval = _transitions()
        form.fields["stage"].choices = [(s, s) for s in transitions.get(version.stage, ()) if s not in needs_approval]
        if not form.is_valid():
            return self.refuse(request, name, number, 400, _first_error(form), transition_form=form)
        try:
            services.transition(version, form.cleaned_data["stage"], user=request.user,
                                reason=form.cleaned_data["reason"])
        except LifecycleError as refused:
            return self.refuse(request, name, number, refused.status, str(refused))
        messages.success(request, _("Version %(number)s is now %(stage)s.")
                         % {"number": version.number, "stage": Stage(form.cleaned_data["stage"]).label})
        return redirect(_version_url(version))


class RequestCreateView(_VersionAction):
    """Ask for production: a second person approves in the inbox."""

    def post(self, request, name, number):
        from . import services

        version = _version_or_404(name, number)
        form = PromotionRequestForm(request.POST, evaluations=version.evaluations.all())
        if not form.is_valid():
            return self.refuse(request, name, number, 400, _first_error(form), request_form=form)
        try:
            promotion = services.request_transition(
                version, form.cleaned_data["stage"], user=request.user, reason=form.cleaned_data["reason"],
                evidence=[int(pk) for pk in form.cleaned_data["evidence"]])
        except LifecycleError as refused:
            return self.refuse(request, name, number, refused.status, str(refused), request_form=form)
        messages.success(request, _("Request #%(pk)s sent: another person with the right to approve must approve "
                                    "it in the approvals inbox.") % {"pk": promotion.pk})
        return redirect(_version_url(version) + "#requests")


class EvaluationCreateView(_VersionAction):
    def post(self, request, name, number):
        from . import services

        version = _version_or_404(name, number)
        form = EvaluationForm(request.POST)
        if not form.is_valid():
            return self.refuse(request, name, number, 400, _first_error(form), evaluation_form=form)
        passed = {"true": True, "false": False}.get(request.POST.get("passed", ""))
        try:
            evaluation = services.add_evaluation(version, user=request.user, name=form.cleaned_data["name"],
                                                 metrics=form.cleaned_data["metrics"], passed=passed,
                                                 notes=form.cleaned_data["notes"])
        except LifecycleError as refused:
            return self.refuse(request, name, number, refused.status, str(refused), evaluation_form=form)
        messages.success(request, _("Evaluation %(name)s attached.") % {"name": evaluation.name})
        return redirect(_version_url(version) + "#evaluations")


class CardView(CapabilityMixin, View):
    """The model card of a version as a download: html (a standalone printable page, its style under this
    response's CSP nonce), md or json. cards.export records lifecycle.card.export."""

    capability = "models.view"

    def get(self, request, name, number, fmt):
        from appliance.core.csp import NONCE_ATTRIBUTE

        from . import cards

        if fmt not in CARD_FORMATS:
            raise Http404(_("no such card format"))
        version = _version_or_404(name, number)
        text, content_type, filename = cards.export(version, fmt, user=request.user,
                                                    style_nonce=getattr(request, NONCE_ATTRIBUTE, ""))
        response = HttpResponse(text, content_type=content_type)
        response["Content-Disposition"] = f'{"inline" if fmt == "html" else "attachment"}; filename="{filename}"'
        return response


# --- the model's aliases ------------------------------------------------------------------------------

class _ModelAction(CapabilityMixin, View):
    capability = "models.view"
    write_capability = "models.change"
    http_method_names = ["post"]

    def refuse(self, request, name, status, message):
        messages.error(request, message)
        return render(request, ModelDetailView.template, _model_context(request, name), status=status)


class AliasSetView(_ModelAction):
    def post(self, request, name):
        from . import services

        model = _model_or_404(name)
        form = AliasForm(request.POST)
        if not form.is_valid():
            return self.refuse(request, name, 400, _first_error(form))
        try:
            version = services.get_version(model.name, form.cleaned_data["version"])
            services.set_alias(model, form.cleaned_data["alias"], version, user=request.user)
        except NotFound:
            return self.refuse(request, name, 400, _("version: %(model)s has no version %(number)s")
                               % {"model": model.name, "number": form.cleaned_data["version"]})
        except LifecycleError as refused:
            return self.refuse(request, name, refused.status, str(refused))
        messages.success(request, _("Alias %(alias)s now points at version %(number)s.")
                         % {"alias": form.cleaned_data["alias"], "number": version.number})
        return redirect(reverse("lifecycle:model", args=[model.name]))


class AliasDeleteView(_ModelAction):
    def post(self, request, name):
        from . import services

        model = _model_or_404(name)
        form = AliasDeleteForm(request.POST)
        if not form.is_valid():
            return self.refuse(request, name, 400, _first_error(form))
        try:
            services.delete_alias(model, form.cleaned_data["alias"], user=request.user)
        except LifecycleError as refused:
            return self.refuse(request, name, refused.status, str(refused))
        messages.success(request, _("Alias %(alias)s removed.") % {"alias": form.cleaned_data["alias"]})
        return redirect(reverse("lifecycle:model", args=[model.name]))


# --- approvals ------------------------------------------------------------------------------------------

RECENT_DECISIONS = 20


def _approvals_context(request) -> dict:
    now = timezone.now()
    requests = (PromotionRequest.objects.select_related("version", "version__model", "requested_by")
                .prefetch_related("evidence"))
    pending = list(requests.filter(state=PromotionRequest.State.PENDING).order_by("expires_at")[:200])
    for item in pending:
        item.is_expired = item.expires_at <= now
        item.is_own = item.requested_by_id == request.user.pk
    decided = list(requests.select_related("decided_by").exclude(state=PromotionRequest.State.PENDING)
                   .order_by("-updated")[:RECENT_DECISIONS])
    return {"pending": pending, "decided": decided, "can_approve": can(request.user, "models.approve"),
            "can_change": can(request.user, "models.change")}


class ApprovalsView(CapabilityMixin, View):
    """/models/approvals/: the requests waiting for a second person, with their evidence."""

    capability = "models.view"
    template = "lifecycle/approvals.html"

    def get(self, request):
        return render(request, self.template, _approvals_context(request))


class _RequestAction(CapabilityMixin, View):
    capability = "models.view"
    write_capability = "models.approve"
    http_method_names = ["post"]
    form_class = DecisionForm

    def post(self, request, pk):
        promotion = get_object_or_404(PromotionRequest.objects.select_related("version", "version__model"), pk=pk)
        form = self.form_class(request.POST)
        if not form.is_valid():
            return self.refuse(request, 400, _first_error(form))
        try:
            self.act(promotion, request.user, form.cleaned_data.get("reason", ""))
        except LifecycleError as refused:
            return self.refuse(request, refused.status, str(refused))
        messages.success(request, self.done_message(promotion))
        return redirect(reverse("lifecycle:approvals"))

    def refuse(self, request, status, message):
        messages.error(request, message)
        return render(request, ApprovalsView.template, _approvals_context(request), status=status)


class ApproveView(_RequestAction):
    def act(self, promotion, user, reason):
        from . import services

        services.approve(promotion, user=user, reason=reason)

    def done_message(self, promotion):
        return _("Approved: %(model)s version %(number)s is now in %(stage)s.") % {
            "model": promotion.version.model.name, "number": promotion.version.number,
            "stage": Stage(promotion.target_stage).label}


class RejectView(_RequestAction):
    form_class = RejectForm

    def act(self, promotion, user, reason):
        from . import services

        services.reject(promotion, user=user, reason=reason)

    def done_message(self, promotion):
        return _("Request #%(pk)s rejected.") % {"pk": promotion.pk}


class CancelView(_RequestAction):
    """The requester withdraws their own request (the service refuses anyone else's)."""

    write_capability = "models.change"

    def act(self, promotion, user, reason):
        from . import services

        services.cancel(promotion, user=user)

    def done_message(self, promotion):
        return _("Request #%(pk)s withdrawn.") % {"pk": promotion.pk}


# --- deployments ----------------------------------------------------------------------------------------

def _deployments_context(request, **forms) -> dict:
    from . import deployments as pool

    show_all = request.GET.get("show") == "all"
    shown = Deployment.objects.all() if show_all else pool.current()
    page = Paginator(shown.select_related("version", "version__model", "appliance", "created_by")
                     .order_by("-created"), DEPLOYMENTS_PER_PAGE).get_page(request.GET.get("page", 1))
    rows = []
    for deployment in page.object_list:
        live = None
        if deployment.state in LIVE_STATES:
            try:
                live = pool.live_state(deployment)
            except LifecycleError as problem:
                live = {"error": str(problem)}
            if isinstance(live.get("checked_at"), (int, float)):
                live["checked_at"] = datetime.fromtimestamp(live["checked_at"], tz=UTC)
        rows.append({"deployment": deployment, "live": live, "stoppable": deployment.state in LIVE_STATES})
    production = list(ModelVersion.objects.filter(stage=Stage.PRODUCTION).select_related("model")
                      .order_by("model__name", "-number")[:500])
    services_running = sorted({d.name for d in Deployment.objects.filter(
        state__in=[Deployment.State.HEALTHY, Deployment.State.ROLLING_OUT, Deployment.State.FAILED])
        .only("name")})
    can_deploy = can(request.user, "models.deploy")
    return {"rows": rows, "page": page, "page_query": _query_without_page(request), "can_deploy": can_deploy,
            "show_all": show_all, "hidden": 0 if show_all else Deployment.objects.count() - page.paginator.count,
            "deploy_form": forms.get("deploy_form") or DeployForm(versions=production),
            "has_production": bool(production), "services_running": services_running,
            "rollback_form": forms.get("rollback_form") or RollbackForm(), "stop_form": StopForm()}


class DeploymentsView(CapabilityMixin, View):
    """/models/deployments/: every deployment with what the pool reports now; deploy (a production
    version), roll back a service to the previous production version, stop one."""

    capability = "models.view"
    write_capability = "models.deploy"
    template = "lifecycle/deployments.html"

    def get(self, request):
        return render(request, self.template, _deployments_context(request))

    def post(self, request):
        from . import deployments as pool
        from . import services

        production = ModelVersion.objects.filter(stage=Stage.PRODUCTION).select_related("model")
        form = DeployForm(request.POST, versions=production)
        if not form.is_valid():
            return self.refuse(request, 400, _first_error(form), deploy_form=form)
        name, _sep, number = form.cleaned_data["version"].rpartition("/")
        try:
            version = services.get_version(name, int(number))
            deployment = pool.deploy(version, user=request.user, runtime=form.cleaned_data["runtime"],
                                     name=form.cleaned_data["name"] or None, context=form.cleaned_data["context"],
                                     concurrency=form.cleaned_data["concurrency"])
        except LifecycleError as refused:
            return self.refuse(request, refused.status, str(refused), deploy_form=form)
        if deployment.state == Deployment.State.BLOCKED:
            return self.refuse(request, 409, deployment.state_detail or _("The deployment was blocked."),
                               deploy_form=form)
        messages.success(request, _("Deploying %(model)s version %(number)s as %(service)s: %(state)s.") % {
            "model": version.model.name, "number": version.number, "service": deployment.name,
            "state": deployment.get_state_display()})
        return redirect(reverse("lifecycle:deployments"))

    def refuse(self, request, status, message, **forms):
        messages.error(request, message)
        return render(request, self.template, _deployments_context(request, **forms), status=status)


class RollbackView(CapabilityMixin, View):
    capability = "models.view"
    write_capability = "models.deploy"
    http_method_names = ["post"]

    def post(self, request):
        from . import deployments as pool

        form = RollbackForm(request.POST)
        if not form.is_valid():
            return DeploymentsView().refuse(request, 400, _first_error(form), rollback_form=form)
        try:
            deployment = pool.rollback(form.cleaned_data["service"], user=request.user,
                                       reason=form.cleaned_data["reason"])
        except LifecycleError as refused:
            return DeploymentsView().refuse(request, refused.status, str(refused), rollback_form=form)
        messages.success(request, _("%(service)s rolled back to %(model)s version %(number)s: %(state)s.") % {
            "service": deployment.name, "model": deployment.version.model.name,
            "number": deployment.version.number, "state": deployment.get_state_display()})
        return redirect(reverse("lifecycle:deployments"))


class StopView(CapabilityMixin, View):
    capability = "models.view"
    write_capability = "models.deploy"
    http_method_names = ["post"]

    def post(self, request, pk):
        from . import deployments as pool

        deployment = get_object_or_404(Deployment, pk=pk)
        form = StopForm(request.POST)
        if not form.is_valid():
            return DeploymentsView().refuse(request, 400, _first_error(form))
        try:
            pool.stop(deployment, user=request.user, reason=form.cleaned_data["reason"])
        except LifecycleError as refused:
            return DeploymentsView().refuse(request, refused.status, str(refused))
        messages.success(request, _("%(service)s stopped.") % {"service": deployment.name})
        return redirect(reverse("lifecycle:deployments"))
