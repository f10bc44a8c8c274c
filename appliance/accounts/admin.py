"""Users and API tokens in Django's admin site, for Administrators, within the same rules as the portal.

- Users: role, active flag and names change here through the same services as the portal (the last
  Administrator stays); accounts are made in the portal or the API (password rules, who made it) and
  never deleted; no one sets another user's password here.
- API tokens: listed without their secret (only a digest is stored), revoked by an action; never
  made here, so nobody mints a token for somebody else.
Every change is recorded (appliance.audit.capture.admin).
"""

from django.contrib import admin, messages
from django.contrib.auth.models import Group
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from appliance.audit.capture.admin import AuditedModelAdmin

from . import services, tokens
from .models import ApiToken, User

# Roles are the suite's one authority (appliance.core.roles); Django's groups and permissions are unused.
admin.site.unregister(Group)


def _portal_login(request, extra_context=None):
    """The admin site takes no passwords of its own: its login page sends to the portal's, which has the
    per-address limit and the per-username lockout."""
    target = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("admin:index")
    return redirect_to_login(target, resolve_url("accounts:login"))


admin.site.login = _portal_login


@admin.register(User)
class UserAdmin(AuditedModelAdmin):
    list_display = ("username", "email", "role", "is_active", "last_login", "date_joined", "created_by")
    list_filter = ("role", "is_active")
    search_fields = ("username", "email")
    fields = ("username", "email", "first_name", "last_name", "role", "is_active", "role_since", "active_since",
              "created_by", "last_login", "date_joined")
    readonly_fields = ("username", "role_since", "active_since", "created_by", "last_login", "date_joined")
    actions = None

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        # Inside the admin's own transaction: a refusal below undoes the names too.
        stored = User.objects.select_for_update().get(pk=obj.pk)
        role, active = obj.role, obj.is_active
        obj.role, obj.is_active = stored.role, stored.is_active
        obj.save()  # names and email
        try:
            if role != stored.role:
                services.set_role(obj, role)
            if active != stored.is_active:
                services.set_active(obj, active, acting_user=request.user)
        except ValueError as exc:
            self.message_user(request, f"{obj.username}: {exc}", messages.ERROR)
            raise _Refused from exc

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _Refused:
            return redirect(request.path)


class _Refused(Exception):
    """A change the account rules refuse: nothing is saved, the admin page shows why."""


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedModelAdmin):
    list_display = ("prefix", "user", "name", "state", "created", "expires", "last_used", "revoked", "revoked_by")
    list_filter = ("revoked",)
    search_fields = ("prefix", "name", "user__username")
    fields = ("user", "name", "prefix", "created", "expires", "last_used", "revoked", "revoked_by")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Revoke the selected tokens"))
    def revoke(self, request, queryset):
        done = 0
        for token in queryset.select_related("user"):
            if token.revoked is None:
                tokens.revoke_token(token, request.user)
                done += 1
        self.message_user(request, ngettext("Revoked %(count)d token.", "Revoked %(count)d tokens.", done) % {"count": done},
                          messages.SUCCESS)
