from django.contrib import admin

from .models import AuditRecord
from .queries import record_read


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    """Read-only: the audit log is changed by nobody, through no screen."""

    list_display = ("sequence", "timestamp", "event", "actor_username", "channel", "outcome", "target_name")
    list_filter = ("outcome", "channel", "category")
    search_fields = ("event", "actor_username", "target_name", "request_id")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    # Reading the log here is as much evidence as reading it in the portal or the API.
    def changelist_view(self, request, extra_context=None):
        filters = {k: v for k, v in request.GET.items() if v and k not in ("p", "o")}
        record_read("admin.changelist", filters)
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        record = AuditRecord.objects.filter(pk=object_id).first() if str(object_id).isdigit() else None
        if record is not None and request.method in ("GET", "HEAD"):
            record_read("admin.record", target=record)
        return super().change_view(request, object_id, form_url, extra_context)
