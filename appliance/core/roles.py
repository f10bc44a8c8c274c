"""Roles and what each may do: the one table every portal view and API endpoint consults.

A view names a capability; `can(user, capability)` answers. Nothing else in the code base
decides who may do what.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    ADMINISTRATOR = "administrator", _("Administrator")
    OPERATOR = "operator", _("Operator")
    ML_ENGINEER = "ml_engineer", _("ML engineer")
    AUDITOR = "auditor", _("Auditor")
    VIEWER = "viewer", _("Viewer")


_ALL = frozenset(Role)
_A, _O, _M, _U, _V = Role.ADMINISTRATOR, Role.OPERATOR, Role.ML_ENGINEER, Role.AUDITOR, Role.VIEWER

# capability -> roles that hold it. Read capabilities end in ".view".
CAPABILITIES: dict[str, frozenset[Role]] = {
    "portal.view": _ALL,
    "inventory.view": _ALL,
    "inventory.change": frozenset({_A, _O}),
    # Declaring a node Ready without a run that proved it (a recorded reason is required).
    "nodes.override_state": frozenset({_A}),
    "provisioning.view": frozenset({_A, _O, _U, _V}),
    "provisioning.run": frozenset({_A, _O}),
    "partitioning.view": _ALL,
    "partitioning.change": frozenset({_A, _O}),
    "telemetry.view": _ALL,
    # Where the GPU-hours went, findings and lending plans (reading); acting on a finding, proposing a plan.
    "analytics.view": _ALL,
    "analytics.change": frozenset({_A, _O}),
    # Approving (or rolling back) a plan that moves nodes between pools.
    "pools.approve": frozenset({_A}),
    "models.view": _ALL,
    "models.change": frozenset({_A, _M}),
    # Approving a promotion another person asked for (four-eyes: never one's own, nor one asked by the
    # account that created one's own); deploying and rolling back a production version.
    "models.approve": frozenset({_A, _M}),
    "models.deploy": frozenset({_A, _O, _M}),
    "audit.view": frozenset({_A, _U}),
    "audit.export": frozenset({_A, _U}),
    "audit.retention": frozenset({_A}),
    "accounts.view": frozenset({_A, _U}),
    "accounts.manage": frozenset({_A}),
    # One's own account: password and API tokens.
    "accounts.self": _ALL,
    # BMC logins and the endpoints they may be sent to; also needed to change a node's BMC address.
    "credentials.manage": frozenset({_A}),
}


def role_of(user) -> Role | None:
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return None
    role = getattr(user, "role", None)
    return Role(role) if role in Role.values else None


def can(user, capability: str) -> bool:
    if capability not in CAPABILITIES:
        raise KeyError(f"unknown capability {capability!r}")
    role = role_of(user)
    return role is not None and role in CAPABILITIES[capability]


def capabilities_of(user) -> frozenset[str]:
    role = role_of(user)
    if role is None:
        return frozenset()
    return frozenset(cap for cap, roles in CAPABILITIES.items() if role in roles)
