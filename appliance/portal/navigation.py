"""The portal's navigation: data, filtered by the same capabilities that guard the views."""

from dataclasses import dataclass

from django.urls import reverse

from appliance.core.roles import can


@dataclass(frozen=True)
class NavEntry:
    label: str
    url_name: str
    capability: str
    section: str = ""


NAVIGATION: list[NavEntry] = [
    NavEntry("Overview", "portal:overview", "portal.view"),
    NavEntry("Nodes", "inventory:node-list", "inventory.view", "inventory"),
    NavEntry("Fabric", "portal:fabric", "inventory.view", "inventory"),
    NavEntry("Storage", "portal:storage", "inventory.view", "inventory"),
    NavEntry("Pools", "portal:pools", "inventory.view", "inventory"),
    NavEntry("Site import", "inventory:site-import", "inventory.change", "inventory"),
    NavEntry("Credentials", "inventory:credential-list", "credentials.manage", "inventory"),
    NavEntry("Provisioning", "provisioning:index", "provisioning.view", "provisioning"),
    NavEntry("Acceptance", "provisioning:acceptance", "provisioning.view", "provisioning"),
    NavEntry("Users", "accounts:user-list", "accounts.view", "accounts"),
    NavEntry("Audit log", "audit:log", "audit.view", "audit"),
    NavEntry("Event catalogue", "audit:catalogue", "audit.view", "audit"),
]


def entries_for(user) -> list[dict]:
    return [{"label": e.label, "url": reverse(e.url_name), "section": e.section, "url_name": e.url_name}
            for e in NAVIGATION if can(user, e.capability)]
