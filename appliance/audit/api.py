"""REST API of the audit log: read-only records with the portal's filters, per-record verification,
the event catalogue, and exports. There is no route that changes or deletes a record."""

from django.http import FileResponse
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import pagination, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import StrictPageSize
from appliance.core.filters import INTEGER_MAX, INTEGER_MIN, IntegerFilter

from . import catalogue, presentation
from .downloads import EXPORT_FORMATS, ExportError, export_zip
from .models import AuditRecord
from .queries import TIME_FILTERS, AuditRecordFilter, FilterError, active_filters, record_read, select_records


class ActorSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="actor_id", allow_null=True)
    username = serializers.CharField(source="actor_username")
    roles = serializers.ListField(source="actor_roles", child=serializers.CharField())


class TargetSerializer(serializers.Serializer):
    type = serializers.CharField(source="target_type")
    id = serializers.CharField(source="target_id")
    name = serializers.CharField(source="target_name")


class AuditRecordSerializer(serializers.ModelSerializer):
    """A record in the shape its hash covers (actor and target nested), plus its hash."""

    url = serializers.HyperlinkedIdentityField(view_name="audit-record-detail", lookup_field="sequence")
    actor = ActorSerializer(source="*", read_only=True)
    target = TargetSerializer(source="*", read_only=True)

    class Meta:
        model = AuditRecord
        fields = ["sequence", "url", "uuid", "timestamp", "event", "category", "severity", "actor", "channel",
                  "source_address", "user_agent", "request_id", "action", "target", "outcome", "reason",
                  "details", "prev_hash", "hash"]
        read_only_fields = fields


class RecordCursorPagination(StrictPageSize, pagination.CursorPagination):
    """Newest first, by sequence: constant cost at any depth of a log of millions of records."""

    ordering = "-sequence"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000


class VerificationSerializer(serializers.Serializer):
    sequence = serializers.IntegerField()
    ok = serializers.BooleanField()
    message = serializers.CharField()
    checkpoint = serializers.JSONField(allow_null=True)
    proof = serializers.JSONField(allow_null=True)


class AuditRecordViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log, newest first. Filters: actor, actor_id, event (exact, or a prefix such as
    `auth.*`), action, category, target_type, target_id, target (name contains), outcome, channel,
    request_id, since, until (ISO 8601; a half-open window: since <= timestamp < until). The same
    filters, by the same names, select what an export holds (POST /api/v1/audit/exports/)."""

    capability = "audit.view"
    queryset = AuditRecord.objects.all()
    serializer_class = AuditRecordSerializer
    lookup_field = "sequence"
    lookup_value_regex = r"\d+"
    filterset_class = AuditRecordFilter
    # Only the filter set: free-text search and arbitrary ordering would bypass the indexes.
    filter_backends = [DjangoFilterBackend]
    pagination_class = RecordCursorPagination

    def get_queryset(self):
        return AuditRecord.objects.order_by("-sequence")

    def list(self, request, *args, **kwargs):
        queryset = self.filter_queryset(self.get_queryset())
        record_read("api.records", active_filters(request.query_params))
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request, *args, **kwargs):
        instance = self.get_object()
        record_read("api.record", target=instance)
        return Response(self.get_serializer(instance).data)

    @extend_schema(responses={200: VerificationSerializer}, filters=False)
    @action(detail=True, methods=["get"])
    def verify(self, request, sequence=None):
        """The record's inclusion proof, checked against the latest signed checkpoint that covers it."""
        from .proofs import verify_record

        get_object_or_404(AuditRecord, sequence=sequence)
        result = verify_record(int(sequence))
        return Response({
            "sequence": int(sequence),
            "ok": bool(result.ok),
            "message": str(result.message),
            "checkpoint": presentation.as_mapping(getattr(result, "checkpoint", None)),
            "proof": presentation.as_mapping(getattr(result, "proof", None)),
        })


class EventTypeSerializer(serializers.Serializer):
    name = serializers.CharField()
    category = serializers.CharField()
    severity = serializers.CharField()
    description = serializers.CharField()
    ocsf_class = serializers.IntegerField()
    ocsf_class_name = serializers.CharField()
    ocsf_activity = serializers.IntegerField()
    controls = serializers.DictField(source="controls_by_standard",
                                     child=serializers.ListField(child=serializers.CharField()))


class CatalogueSerializer(serializers.Serializer):
    standards = serializers.ListField(child=serializers.CharField())
    events = EventTypeSerializer(many=True)


class CatalogueView(APIView):
    """The typed event catalogue: every event type with its OCSF class and the controls it evidences."""

    capability = "audit.view"

    @extend_schema(responses={200: CatalogueSerializer})
    def get(self, request):
        rows = presentation.coverage_matrix()["rows"]
        return Response(CatalogueSerializer({"standards": list(catalogue.STANDARDS), "events": rows}).data)


def _export_filter_field(name: str, log_filter):
    """The request field of one log filter: the same name, type and help as on the log page."""
    common = {"required": False, "help_text": f"{log_filter.label} (as the audit log filter `{name}`)"}
    choices = log_filter.extra.get("choices")
    if choices:
        return serializers.ChoiceField(choices=choices, allow_blank=True, **common)
    if isinstance(log_filter, IntegerFilter):
        return serializers.IntegerField(min_value=INTEGER_MIN, max_value=INTEGER_MAX, allow_null=True, **common)
    if name in TIME_FILTERS:
        return serializers.DateTimeField(allow_null=True, **common)
    return serializers.CharField(allow_blank=True, **common)


class ExportSerializer(serializers.Serializer):
    """A format and any of the audit log's filters (the records list's names): the bundle holds
    exactly the records the filter selects, and its manifest states the filter. A filter on time
    alone exports the contiguous range of the chain; any other filter, a selection whose records
    each carry an inclusion proof. `until` is not included."""

    format = serializers.ChoiceField(choices=EXPORT_FORMATS)

    def get_fields(self):
        fields = super().get_fields()
        for name, log_filter in AuditRecordFilter.base_filters.items():
            fields[name] = _export_filter_field(name, log_filter)
        return fields


class ExportFormatSerializer(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()


class ExportFormatsSerializer(serializers.Serializer):
    formats = ExportFormatSerializer(many=True)


class ExportView(APIView):
    """An export bundle (records, manifest, signed checkpoints, public key) as a zip download."""

    capability = "audit.export"
    write_capability = "audit.export"

    @extend_schema(responses={200: ExportFormatsSerializer})
    def get(self, request):
        """The export formats on offer."""
        return Response({"formats": [{"name": name, "label": label} for name, label in EXPORT_FORMATS]})

    @extend_schema(request=ExportSerializer,
                   responses={(200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description="the bundle")})
    def post(self, request):
        serializer = ExportSerializer(data=request.data)
        if hasattr(request.data, "keys"):
            unknown = sorted(str(key) for key in request.data.keys() if key not in serializer.fields)
            if unknown:
                raise serializers.ValidationError({key: [f"not a filter of the audit log (the filters are "
                                                         f"{', '.join(AuditRecordFilter.base_filters)})"]
                                                   for key in unknown})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        params = {name: value.isoformat() if hasattr(value, "isoformat") else str(value)
                  for name, value in data.items() if name != "format" and value not in (None, "")}
        try:
            archive, filename, _manifest = export_zip(data["format"], selection=select_records(params))
        except FilterError as exc:
            raise serializers.ValidationError(exc.errors) from exc
        except ExportError as exc:
            raise serializers.ValidationError({"range": [str(exc)]}) from exc
        return FileResponse(archive, as_attachment=True, filename=filename, content_type="application/zip")
