"""The one enforcement point of roles, for API views (RolePermission) and portal views (CapabilityMixin).

A view declares what it needs:
    capability = "inventory.view"          # safe methods (GET, HEAD, OPTIONS)
    write_capability = "inventory.change"  # every other method
    action_capabilities = {"import_site": "inventory.change"}  # DRF actions that differ
A view that declares nothing is denied to everyone: forgetting is never an open door.
"""

from django.contrib.auth.mixins import AccessMixin
from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

from .roles import can

# Lazy: the refusal page shows it in the reader's language, the audit record keeps it in English
# (appliance.audit.capture.requests reads it with the default language).
ROLE_REFUSED = _("Your role does not allow this.")


def required_capability(view, method: str, action: str | None = None) -> str | None:
    per_action = getattr(view, "action_capabilities", None) or {}
    if action and action in per_action:
        return per_action[action]
    if method in SAFE_METHODS:
        return getattr(view, "capability", None)
    return getattr(view, "write_capability", None)


class RolePermission(BasePermission):
    message = ROLE_REFUSED

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        capability = required_capability(view, request.method, getattr(view, "action", None))
        return capability is not None and can(request.user, capability)


class CapabilityMixin(AccessMixin):
    """Portal view mixin: anonymous users go to the login page, others need the capability."""

    capability: str | None = None
    write_capability: str | None = None
    raise_exception = False

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        capability = required_capability(self, request.method)
        if capability is None or not can(request.user, capability):
            raise PermissionDenied(ROLE_REFUSED)
        return super().dispatch(request, *args, **kwargs)
