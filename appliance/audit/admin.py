from django.contrib import admin

from .models import AuditRecord


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
