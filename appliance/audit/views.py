"""Portal pages of the audit log (Auditors and Administrators). Read-only: nothing here changes
a record, and every read of the log is itself recorded."""

from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404
from django.views.generic import FormView, TemplateView

from appliance.core.permissions import CapabilityMixin

from . import catalogue, chain, presentation
from .downloads import ExportError, export_zip
from .forms import ExportForm
from .models import AuditRecord
from .queries import AuditRecordFilter, active_filters, keyset_page, record_read

READ_ONLY_METHODS = ["get", "head", "options"]


def _paging_query(params) -> str:
    """The current query string without the paging keys, for the newer/older links."""
    query = params.copy()
    for key in ("before", "after"):
        query.pop(key, None)
    return query.urlencode()


class LogView(CapabilityMixin, TemplateView):
    capability = "audit.view"
    http_method_names = READ_ONLY_METHODS
    template_name = "audit/log.html"
    view_label = "portal.log"

    def base_queryset(self):
        return AuditRecord.objects.all()

    def filter_params(self):
        return self.request.GET

    def read_details(self) -> dict:
        return {}

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        filterset = AuditRecordFilter(self.filter_params(), queryset=self.base_queryset())
        page = None
        if filterset.is_valid():
            record_read(self.view_label, active_filters(self.filter_params()), **self.read_details())
            page = keyset_page(filterset.qs, self.request.GET)
        context.update(
            filterset=filterset, form=filterset.form, page=page, paging_query=_paging_query(self.request.GET),
            event_names=sorted(catalogue.CATALOGUE), event_prefixes=sorted(
                {name.split(".", 1)[0] + ".*" for name in catalogue.CATALOGUE}),
        )
        return context


class TimelineView(LogView):
    template_name = "audit/timeline.html"
    view_label = "portal.timeline"

    def base_queryset(self):
        return AuditRecord.objects.filter(actor_username=self.kwargs["username"])

    def filter_params(self):
        params = self.request.GET.copy()
        params.pop("actor", None)
        return params

    def read_details(self) -> dict:
        return {"username": self.kwargs["username"]}

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["username"] = self.kwargs["username"]
        return context


class RecordView(CapabilityMixin, TemplateView):
    capability = "audit.view"
    http_method_names = READ_ONLY_METHODS
    template_name = "audit/record.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        record = get_object_or_404(AuditRecord, sequence=kwargs["sequence"])
        record_read("portal.record", target=record)
        previous = AuditRecord.objects.filter(sequence__lt=record.sequence).order_by("-sequence").first()
        following = AuditRecord.objects.filter(sequence__gt=record.sequence).order_by("sequence").first()
        if previous is not None:
            previous_link = previous.hash == record.prev_hash
        else:
            previous_link = record.prev_hash == chain.GENESIS_HASH if record.sequence == 1 else None
        context.update(
            record=record,
            event_type=catalogue.CATALOGUE.get(record.event),
            details=presentation.present_details(record.details),
            details_json=presentation.pretty_json(record.details),
            content_matches_hash=chain.record_hash(record.payload()) == record.hash,
            previous=previous, following=following, previous_link=previous_link,
            following_link=None if following is None else following.prev_hash == record.hash,
        )
        return context


class RecordVerifyView(CapabilityMixin, TemplateView):
    """The record's inclusion proof checked against a signed checkpoint (an htmx fragment)."""

    capability = "audit.view"
    http_method_names = READ_ONLY_METHODS
    template_name = "audit/_verify.html"

    def get_context_data(self, **kwargs):
        from .proofs import verify_record

        context = super().get_context_data(**kwargs)
        sequence = kwargs["sequence"]
        if not AuditRecord.objects.filter(sequence=sequence).exists():
            raise Http404(f"no audit record #{sequence}")
        result = verify_record(sequence)
        context.update(sequence=sequence, result=result,
                       checkpoint=presentation.pretty_json(presentation.as_mapping(getattr(result, "checkpoint", None))),
                       proof=presentation.pretty_json(presentation.as_mapping(getattr(result, "proof", None))))
        return context


class ExportView(CapabilityMixin, FormView):
    capability = "audit.export"
    write_capability = "audit.export"
    http_method_names = ["get", "post", "head", "options"]
    template_name = "audit/export.html"
    form_class = ExportForm

    def form_valid(self, form):
        try:
            archive, filename, _manifest = export_zip(
                form.cleaned_data["format"], since=form.cleaned_data["since"], until=form.cleaned_data["until"])
        except ExportError as exc:
            form.add_error(None, str(exc))
            return self.form_invalid(form)
        return FileResponse(archive, as_attachment=True, filename=filename, content_type="application/zip")

    def form_invalid(self, form):
        # A refused export is a failed request in the log, not a successful page view.
        response = super().form_invalid(form)
        response.status_code = 400
        return response


class CatalogueView(CapabilityMixin, TemplateView):
    capability = "audit.view"
    http_method_names = READ_ONLY_METHODS
    template_name = "audit/catalogue.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["matrix"] = presentation.coverage_matrix()
        return context
