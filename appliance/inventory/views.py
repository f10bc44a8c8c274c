"""Portal pages of the inventory: node list and detail, state transitions, site import by upload,
and the Administrators' credentials."""

import hashlib

from django import forms
from django.contrib import messages
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import DetailView, ListView, TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can

from . import credentials
from .choices import ComponentKind, HealthStatus
from .filtersets import NodeFilterSet
from .models import BMC, GPU, Credential, HealthCheck, Node, Pool, PoolMembership
from .states import (
    BY_HAND,
    OVERRIDE_CAPABILITY,
    InvalidTransition,
    NodeState,
    person_transitions,
)


class NodeListView(CapabilityMixin, ListView):
    capability = "inventory.view"
    template_name = "inventory/node_list.html"
    context_object_name = "nodes"
    paginate_by = 100

    def get_queryset(self):
        # Counts as subqueries, not joins grouped by node: a page of 100 then computes them for its 100 rows
        # only, whatever the size of the fleet.
        queryset = Node.objects.select_related("appliance", "platform", "pool_membership__pool").annotate(
            gpu_count=_count_of(GPU.objects.filter(node=OuterRef("pk"))),
            failing_checks=_count_of(HealthCheck.objects.filter(node=OuterRef("pk"), status=HealthStatus.FAILING)),
        ).order_by("name")
        self.filterset = NodeFilterSet(self.request.GET, queryset=queryset)
        return self.filterset.qs

    def get_template_names(self):
        # htmx asks for the table alone when a filter changes.
        if getattr(self.request, "htmx", False) and not self.request.htmx.boosted:
            return ["inventory/_node_table.html"]
        return [self.template_name]

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(
            filterset=self.filterset,
            selected={key: self.request.GET.get(key, "") for key in ("role", "state", "pool")},
            roles=Node.Role.choices,
            states=NodeState.choices,
            pools=Pool.objects.values_list("name", flat=True).order_by("name").distinct(),
        )
        return context


def _count_of(rows):
    return Coalesce(Subquery(rows.order_by().values("node").annotate(n=Count("id")).values("n"),
                             output_field=IntegerField()), Value(0))


class NodeDetailView(CapabilityMixin, DetailView):
    capability = "inventory.view"
    template_name = "inventory/node_detail.html"
    context_object_name = "node"
    slug_field = slug_url_kwarg = "name"
    queryset = Node.objects.select_related("appliance", "platform", "pool_membership__pool")

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        node = self.object
        try:
            pool = node.pool_membership.pool
        except PoolMembership.DoesNotExist:
            pool = None
        try:
            bmc = node.bmc
        except BMC.DoesNotExist:
            bmc = None
        checks = _health_by_component(node)
        node_rows = sorted(checks.get((ComponentKind.NODE, ""), []), key=lambda row: (row.status != "failing", row.name))
        gpus = list(node.gpus.all())
        for gpu in gpus:
            gpu.health = _ComponentHealth(checks.get((ComponentKind.GPU, str(gpu.index)), []))
        ports = [port for hca in node.hcas.prefetch_related("ports__closest_gpu") for port in hca.ports.all()]
        for port in ports:
            port.health = _ComponentHealth(checks.get((ComponentKind.HCA_PORT, f"{port.hca.device}/{port.port}"), []))
        known = {(ComponentKind.GPU, str(g.index)) for g in gpus} | {
            (ComponentKind.HCA_PORT, f"{p.hca.device}/{p.port}") for p in ports}
        user = self.request.user
        may_change, may_override = can(user, "inventory.change"), can(user, OVERRIDE_CAPABILITY)
        current = NodeState(node.state)
        by_hand = {target for target, sources in BY_HAND.items() if current in sources}
        context.update(
            gpus=gpus,
            ports=ports,
            mounts=[_ComponentHealth(rows) for key, rows in checks.items() if key[0] == ComponentKind.MOUNT],
            # Failing and unknown node-wide checks first, in full; the passed ones folded.
            node_checks=[row for row in node_rows if row.status != HealthStatus.OK],
            node_checks_ok=[row for row in node_rows if row.status == HealthStatus.OK],
            # Rows of parts the inventory no longer lists (a GPU pruned by an import, a port renamed).
            other_checks=[row for key, rows in checks.items() if key[0] in (ComponentKind.GPU, ComponentKind.HCA_PORT)
                          and key not in known for row in rows],
            health=_summary(checks),
            bmc=bmc,
            pool=pool,
            transitions=[s for s in person_transitions(current) if s not in by_hand] if may_change else [],
            by_hand_transitions=[NodeState(s) for s in sorted(by_hand)] if may_override else [],
        )
        return context


def _health_by_component(node) -> dict[tuple[str, str], list[HealthCheck]]:
    checks: dict[tuple[str, str], list[HealthCheck]] = {}
    for row in HealthCheck.objects.filter(node=node).order_by("component_kind", "component_id", "name"):
        checks.setdefault((row.component_kind, row.component_id), []).append(row)
    return checks


def _summary(checks: dict) -> dict:
    rows = [row for group in checks.values() for row in group]
    return {status: sum(1 for row in rows if row.status == status) for status in HealthStatus.values}


class _ComponentHealth:
    """A part's checks and its verdict: failing if one fails, ok when every check passed, else unknown."""

    def __init__(self, rows: list[HealthCheck]):
        self.rows = rows
        self.failing = [row for row in rows if row.status == HealthStatus.FAILING]
        if self.failing:
            self.status = HealthStatus.FAILING
        elif rows and all(row.status == HealthStatus.OK for row in rows):
            self.status = HealthStatus.OK
        else:
            self.status = HealthStatus.UNKNOWN
        self.label = rows[0].component_label or rows[0].component_id if rows else ""


class NodeTransitionView(CapabilityMixin, View):
    write_capability = "inventory.change"
    http_method_names = ["post"]

    def post(self, request, name):
        node = get_object_or_404(Node, name=name)
        target, reason = request.POST.get("state", ""), request.POST.get("reason", "").strip()[:2000]
        if target not in NodeState.values:
            messages.error(request, _("state: %(state)r is not a node state") % {"state": target})
        else:
            try:
                node.transition(target, reason, by=request.user)
            except InvalidTransition as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, _("%(node)s is now %(state)s.") % {
                    "node": node.name, "state": str(node.state_label).lower()})
        return redirect("inventory:node-detail", name=node.name)


class SiteImportView(CapabilityMixin, TemplateView):
    """Upload a site definition, look at the changes a dry run reports, then confirm the import.

    The uploaded text waits in the session between the two steps, and the confirmation names its
    digest: what is imported is exactly what was previewed.
    """

    capability = write_capability = "inventory.change"
    template_name = "inventory/site_import.html"
    session_key = "inventory_site_import"
    max_bytes = 10 * 1024 * 1024

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        report = context.get("report")
        awaiting_confirmation = context.get("stage") == "preview" and report is not None and report.changes
        context["show_upload"] = not awaiting_confirmation
        return context

    def post(self, request):
        if "confirm" in request.POST:
            return self.confirm(request)
        upload = request.FILES.get("file")
        if upload is None:
            return self.render_to_response(self.get_context_data(upload_error="Choose a site definition file."))
        if upload.size > self.max_bytes:
            return self.render_to_response(self.get_context_data(
                upload_error=f"{upload.name}: larger than {self.max_bytes} bytes."))
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            return self.render_to_response(self.get_context_data(
                upload_error=f"{upload.name}: not UTF-8 text (byte {exc.start})."))
        filename = upload.name.replace("\\", "/").rsplit("/", 1)[-1] or "site.yml"
        outcome = self.run_import(text, filename, dry_run=True, user=request.user)
        if "errors" not in outcome:
            digest = hashlib.sha256(text.encode()).hexdigest()
            request.session[self.session_key] = {"text": text, "filename": filename, "digest": digest}
            outcome["digest"] = digest
        return self.render_to_response(self.get_context_data(stage="preview", filename=filename, **outcome))

    def confirm(self, request):
        pending = request.session.get(self.session_key)
        if not pending or pending.get("digest") != request.POST.get("digest"):
            return self.render_to_response(self.get_context_data(
                upload_error="The previewed file is no longer pending; upload it again."))
        outcome = self.run_import(pending["text"], pending["filename"], dry_run=False, user=request.user)
        if "errors" not in outcome:
            del request.session[self.session_key]
        return self.render_to_response(self.get_context_data(stage="imported", filename=pending["filename"],
                                                             **outcome))

    @staticmethod
    def run_import(text: str, filename: str, dry_run: bool, user) -> dict:
        from .services import import_site
        from .sitedef import SiteValidationError

        try:
            report = import_site(text, filename, dry_run=dry_run, user=user)
        except SiteValidationError as exc:
            return {"errors": exc.errors}
        return {"report": report}


# --- credentials (Administrators only) ----------------------------------------------------------


class CredentialForm(forms.Form):
    """A credential's fields; the secret is typed (never shown back) and kept when left empty on a change."""

    name = forms.CharField(max_length=63)
    kind = forms.ChoiceField(choices=Credential.Kind.choices, initial=Credential.Kind.BMC, required=False,
                             help_text="a BMC login; the token the collectors write the site's InfluxDB with; or the "
                                       "endpoints the nodes may send their own ingest tokens to (no secret)")
    username = forms.CharField(max_length=100, label="BMC user name", required=False,
                               help_text="a BMC login only")
    secret = forms.CharField(strip=False, required=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}), help_text="leave empty to keep the current secret")
    endpoints = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}),
                                help_text="the BMC endpoints it may be sent to: https://host[:port], one a line")
    ca_file = forms.CharField(max_length=500, required=False, label="CA file",
                              help_text="PEM bundle that verifies the BMCs' certificates (default: the system's)")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def endpoint_list(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["endpoints"].splitlines() if line.strip()]


class CredentialListView(CapabilityMixin, View):
    """Every credential (never a secret) and a form for a new one."""

    capability = write_capability = "credentials.manage"
    template_name = "inventory/credentials.html"

    def render(self, request, form, status=200):
        rows = Credential.objects.order_by("name").prefetch_related("bmcs__node")
        return render(request, self.template_name, {"credentials": rows, "form": form}, status=status)

    def get(self, request):
        return self.render(request, CredentialForm())

    def post(self, request):
        form = CredentialForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                credential = credentials.create(
                    data["name"], kind=data["kind"] or Credential.Kind.BMC, username=data["username"],
                    secret=data["secret"], endpoints=form.endpoint_list(), description=data["description"],
                    ca_file=data["ca_file"])
            except credentials.CredentialError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            else:
                messages.success(request, _("Credential %(name)s created.") % {"name": credential.name})
                return redirect("inventory:credential-list")
        return self.render(request, form, status=400)


class CredentialUpdateView(CapabilityMixin, View):
    """Change a credential (a new secret, its user, CA and endpoints), or delete it."""

    write_capability = "credentials.manage"
    http_method_names = ["post"]

    def post(self, request, name):
        credential = get_object_or_404(Credential, name=name)
        try:
            if "delete" in request.POST:
                credentials.delete(credential.name)
                messages.success(request, _("Credential %(name)s deleted.") % {"name": credential.name})
                return redirect("inventory:credential-list")
            form = CredentialForm({**request.POST.dict(), "name": credential.name})
            if not form.is_valid():
                raise credentials.CredentialError("; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            data = form.cleaned_data
            credentials.update(credential.name, username=data["username"], secret=data["secret"] or None,
                               endpoints=form.endpoint_list(), description=data["description"],
                               ca_file=data["ca_file"])
        except credentials.CredentialError as exc:
            messages.error(request, f"{credential.name}: {exc}")
        else:
            messages.success(request, _("Credential %(name)s changed.") % {"name": credential.name})
        return redirect("inventory:credential-list")
