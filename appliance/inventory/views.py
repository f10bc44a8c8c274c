"""Portal pages of the inventory: node list and detail, state transitions, site import by upload."""

import hashlib

from django.contrib import messages
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect
from django.views import View
from django.views.generic import DetailView, ListView, TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can

from .filtersets import NodeFilterSet
from .models import BMC, Node, Pool, PoolMembership
from .states import TRANSITIONS, InvalidTransition, NodeState


class NodeListView(CapabilityMixin, ListView):
    capability = "inventory.view"
    template_name = "inventory/node_list.html"
    context_object_name = "nodes"
    paginate_by = 100

    def get_queryset(self):
        queryset = Node.objects.select_related("appliance", "platform", "pool_membership__pool").annotate(
            gpu_count=Count("gpus", distinct=True)).order_by("name")
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
        ports = [port for hca in node.hcas.prefetch_related("ports__closest_gpu") for port in hca.ports.all()]
        context.update(
            gpus=node.gpus.all(),
            ports=ports,
            bmc=bmc,
            pool=pool,
            transitions=[NodeState(s) for s in sorted(TRANSITIONS[NodeState(node.state)])]
            if can(self.request.user, "inventory.change") else [],
        )
        return context


class NodeTransitionView(CapabilityMixin, View):
    write_capability = "inventory.change"
    http_method_names = ["post"]

    def post(self, request, name):
        node = get_object_or_404(Node, name=name)
        target, reason = request.POST.get("state", ""), request.POST.get("reason", "").strip()[:2000]
        if target not in NodeState.values:
            messages.error(request, f"state: {target!r} is not a node state")
        else:
            try:
                node.transition(target, reason)
            except InvalidTransition as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"{node.name} is now {NodeState(target).label.lower()}.")
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
