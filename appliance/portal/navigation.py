"""The portal's navigation: data, filtered by the same capabilities that guard the views."""

from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from appliance.core.roles import can


@dataclass(frozen=True)
class NavEntry:
    label: str  # lazily translated: the reader's language at render time
    url_name: str
    capability: str
    section: str = ""


NAVIGATION: list[NavEntry] = [
    NavEntry(_("Overview"), "portal:overview", "portal.view"),
    NavEntry(_("Telemetry"), "telemetry:index", "telemetry.view", "telemetry"),
    NavEntry(_("Efficiency"), "analytics:efficiency", "analytics.view", "analytics"),
    NavEntry(_("Recommendations"), "analytics:recommendations", "analytics.view", "analytics"),
    NavEntry(_("Lending"), "lending:plans", "analytics.view", "lending"),
    NavEntry(_("Partitioning"), "partitioning:layout", "partitioning.view", "partitioning"),
    NavEntry(_("Models"), "lifecycle:models", "models.view", "lifecycle"),
    NavEntry(_("Nodes"), "inventory:node-list", "inventory.view", "inventory"),
    NavEntry(_("Fabric"), "portal:fabric", "inventory.view", "inventory"),
    NavEntry(_("Storage"), "portal:storage", "inventory.view", "inventory"),
    NavEntry(_("Pools"), "portal:pools", "inventory.view", "inventory"),
    NavEntry(_("Site import"), "inventory:site-import", "inventory.change", "inventory"),
    NavEntry(_("Credentials"), "inventory:credential-list", "credentials.manage", "inventory"),
    NavEntry(pgettext_lazy("navigation: the provisioning pages", "Provisioning"), "provisioning:index", "provisioning.view", "provisioning"),
    NavEntry(_("Acceptance"), "provisioning:acceptance", "provisioning.view", "provisioning"),
    NavEntry(_("Users"), "accounts:user-list", "accounts.view", "accounts"),
    NavEntry(_("Audit log"), "audit:log", "audit.view", "audit"),
    NavEntry(_("Event catalogue"), "audit:catalogue", "audit.view", "audit"),
]


def entries_for(user) -> list[dict]:
    return [{"label": e.label, "url": reverse(e.url_name), "section": e.section, "url_name": e.url_name}
            for e in NAVIGATION if can(user, e.capability)]
