"""Portal pages of the audit log (Auditors and Administrators). Read-only: nothing here changes
a record, and every read of the log is itself recorded."""

from urllib.parse import urlencode

from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404
from django.views.generic import FormView, TemplateView

from appliance.core.permissions import CapabilityMixin

from . import catalogue, chain, presentation
from .downloads import ExportError, export_zip
from .forms import ExportForm
from .models import AuditRecord
from .queries import (
    COUNT_CAP,
    AuditRecordFilter,
    FilterError,
    active_filters,
    keyset_page,
    record_read,
    select_records,
)

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


def _filter_params(params) -> dict:
    """The audit filters among a request's parameters (the log page's names)."""
    return {name: params.get(name) for name in AuditRecordFilter.base_filters if name in params}


class ExportView(CapabilityMixin, FormView):
    """Export what the log page shows: its filter arrives in the query string (the page's Export
    link carries it), is shown and can be changed here, and is posted with the format."""

    capability = "audit.export"
    write_capability = "audit.export"
    http_method_names = ["get", "post", "head", "options"]
    template_name = "audit/export.html"
    form_class = ExportForm
    filter_errors: dict | None = None

    def get_initial(self):
        initial = super().get_initial()
        if self.request.GET.get("format"):
            initial["format"] = self.request.GET["format"]
        return initial

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        source = self.request.POST if self.request.method == "POST" else self.request.GET
        params = _filter_params(source)
        filterset = AuditRecordFilter(params or None)
        matching = None
        if filterset.is_bound and filterset.is_valid() or not params:
            matching = (filterset.qs if params else AuditRecord.objects.all())[:COUNT_CAP + 1].count()
        for name, messages in (self.filter_errors or {}).items():
            if name in filterset.form.fields and name not in filterset.form.errors:
                filterset.form.add_error(name, messages)
        stated = active_filters(params)
        context.update(filter_form=filterset.form, stated=stated, filter_query=urlencode(stated), matching=matching,
                       matching_capped=matching is not None and matching > COUNT_CAP, count_cap=COUNT_CAP,
                       event_names=sorted(catalogue.CATALOGUE),
                       event_prefixes=sorted({name.split(".", 1)[0] + ".*" for name in catalogue.CATALOGUE}))
        return context

    def form_valid(self, form):
        try:
            selection = select_records(_filter_params(self.request.POST))
            archive, filename, _manifest = export_zip(form.cleaned_data["format"], selection=selection)
        except FilterError as exc:
            self.filter_errors = exc.errors
            return self.form_invalid(form)
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
