"""Every portal page, as every role and as an anonymous visitor."""

import pytest

from appliance.core.roles import Role
from tests.access import AccessMatrix, Endpoint

pytestmark = pytest.mark.django_db

PAGES = [
    Endpoint("/", "portal.view"),
    Endpoint("/inventory/nodes/", "inventory.view"),
    Endpoint("/inventory/nodes/?role=gpu&state=new", "inventory.view"),
    Endpoint("/inventory/nodes/{node_name}/", "inventory.view"),
    Endpoint("/inventory/nodes/{node_name}/transition/", "inventory.change", "post",
             {"state": "maintenance", "reason": "fan"}),
    Endpoint("/inventory/site/import/", "inventory.change"),
    Endpoint("/inventory/site/import/", "inventory.change", "post", {}),
    Endpoint("/inventory/credentials/", "credentials.manage"),
    Endpoint("/inventory/credentials/", "credentials.manage", "post",
             {"name": "new-bmc", "username": "root", "secret": "New-bmc-secret-1", "endpoints": "https://10.9.9.9"},
             success=(302,)),
    Endpoint("/inventory/credentials/sample-bmc/", "credentials.manage", "post",
             {"username": "root", "endpoints": "https://127.0.0.1:8001\nhttps://127.0.0.1:8002"}, success=(302,)),
    Endpoint("/accounts/users/", "accounts.view"),
    Endpoint("/accounts/users/new/", "accounts.manage"),
    Endpoint("/accounts/users/new/", "accounts.manage", "post",
             {"username": "new-viewer", "role": "viewer", "password1": "long-enough-passphrase-71",
              "password2": "long-enough-passphrase-71"}, success=(302,)),
    Endpoint("/accounts/users/{target_user}/", "accounts.manage", "post", {"role": "operator"}, success=(302,)),
    Endpoint("/accounts/tokens/", "accounts.self"),
    Endpoint("/accounts/tokens/", "accounts.self", "post", {"name": "laptop"}, success=(200,)),
    Endpoint("/accounts/password/", "accounts.self"),
    Endpoint("/accounts/password/", "accounts.self", "post",
             {"old_password": "correct-horse-battery-9", "new_password1": "another-long-passphrase-58",
              "new_password2": "another-long-passphrase-58"}, success=(302,)),
]


class TestPortalAccess(AccessMatrix):
    endpoints = PAGES

    @pytest.fixture
    def url_values(self, inventory, make_user):
        return {**inventory.ids(), "target_user": make_user(Role.VIEWER, "target-user").pk}


def test_every_navigation_entry_opens_for_the_roles_it_is_offered_to(client_for):
    for role in Role.values:
        client = client_for(role)
        entries = client.get("/").context["nav_entries"]
        assert entries, role
        for entry in entries:
            assert client.get(entry["url"]).status_code == 200, (role, entry["url"])
