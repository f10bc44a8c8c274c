"""Django's admin site as an audit channel: every addition, change and deletion made through it is
recorded (admin.action) with what was done to which object, beside the model's own change record.

ModelAdmins of the suite inherit AuditedModelAdmin. Django keeps its own LogEntry rows too, but
they are an ordinary, editable table and deletions of many objects are written in bulk; the audit
record is the evidence.
"""

from django.contrib import admin

from appliance import audit


def record_admin_action(request, obj, action: str, changes=None) -> None:
    """`changes`: Django's change message ([{"changed": {"fields": [...]}}, ...]), which names fields only."""
    audit.record("admin.action", target=obj, actor=request.user,
                 details={"action": action, "model": obj._meta.label_lower,
                          "changes": changes if isinstance(changes, list) else str(changes or "")[:1000]})


class AuditedModelAdmin(admin.ModelAdmin):
    def log_addition(self, request, obj, message):
        record_admin_action(request, obj, "add", message)
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        record_admin_action(request, obj, "change", message)
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            record_admin_action(request, obj, "delete")
        return super().log_deletions(request, queryset)
