"""Every endpoint of the inventory and accounts API, as every role and as an anonymous client."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from appliance.accounts.services import create_user
from appliance.core.roles import Role
from tests.access import AccessMatrix, Endpoint
from tests.api.conftest import fresh_users, make_role_users
from tests.api.sites import site_body
from tests.conftest import PASSWORD

# A role x endpoint matrix over a database: run on PostgreSQL too, the production backend (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

READ = "inventory.view"
INVENTORY_ENDPOINTS = [
    Endpoint("/api/v1/", "portal.view"),
    Endpoint("/api/v1/inventory/", READ),
    Endpoint("/api/v1/inventory/appliances/", READ),
    Endpoint("/api/v1/inventory/appliances/{appliance}/", READ),
    Endpoint("/api/v1/inventory/platforms/", READ),
    Endpoint("/api/v1/inventory/platforms/{platform}/", READ),
    Endpoint("/api/v1/inventory/nodes/", READ),
    Endpoint("/api/v1/inventory/nodes/{node}/", READ),
    Endpoint("/api/v1/inventory/nodes/{node}/transition/", "inventory.change", "post",
             {"state": "maintenance", "reason": "fan replacement"}),
    Endpoint("/api/v1/inventory/gpus/", READ),
    Endpoint("/api/v1/inventory/gpus/{gpu}/", READ),
    Endpoint("/api/v1/inventory/hcas/", READ),
    Endpoint("/api/v1/inventory/hcas/{hca}/", READ),
    Endpoint("/api/v1/inventory/hca-ports/", READ),
    Endpoint("/api/v1/inventory/hca-ports/{port}/", READ),
    Endpoint("/api/v1/inventory/switches/", READ),
    Endpoint("/api/v1/inventory/switches/{switch}/", READ),
    Endpoint("/api/v1/inventory/networks/", READ),
    Endpoint("/api/v1/inventory/networks/{network}/", READ),
    Endpoint("/api/v1/inventory/filesystems/", READ),
    Endpoint("/api/v1/inventory/filesystems/{filesystem}/", READ),
    Endpoint("/api/v1/inventory/pools/", READ),
    Endpoint("/api/v1/inventory/pools/{pool}/", READ),
    Endpoint("/api/v1/inventory/site/validate/", "inventory.change", "post", body=site_body),
    Endpoint("/api/v1/inventory/site/import/?dry_run=true", "inventory.change", "post", body=site_body),
    Endpoint("/api/v1/inventory/credentials/", "credentials.manage"),
    Endpoint("/api/v1/inventory/credentials/sample-bmc/", "credentials.manage"),
    Endpoint("/api/v1/inventory/credentials/", "credentials.manage", "post",
             {"name": "new-bmc", "username": "root", "secret": "New-bmc-secret-1", "endpoints": ["https://10.9.9.9"]},
             success=(201,)),
    Endpoint("/api/v1/inventory/credentials/sample-bmc/", "credentials.manage", "patch", {"description": "rack r01"}),
    Endpoint("/api/v1/inventory/credentials/upload-bmc/", "credentials.manage", "delete", success=(204,)),
]
ACCOUNTS_ENDPOINTS = [
    Endpoint("/api/v1/accounts/", "accounts.view"),
    Endpoint("/api/v1/accounts/users/", "accounts.view"),
    Endpoint("/api/v1/accounts/users/{target_user}/", "accounts.view"),
    Endpoint("/api/v1/accounts/users/", "accounts.manage", "post",
             {"username": "new-operator", "role": "operator", "password": "long-enough-passphrase-71"},
             success=(201,)),
    Endpoint("/api/v1/accounts/users/{target_user}/", "accounts.manage", "patch", {"role": "operator"}),
    Endpoint("/api/v1/accounts/users/{target_user}/", "accounts.manage", "patch", {"is_active": False}),
    Endpoint("/api/v1/accounts/me/", "portal.view"),
    Endpoint("/api/v1/accounts/me/password/", "accounts.self", "post",
             {"old_password": "correct-horse-battery-9", "new_password": "another-long-passphrase-58"},
             success=(204,)),
    Endpoint("/api/v1/accounts/tokens/", "accounts.self"),
    Endpoint("/api/v1/accounts/tokens/", "accounts.self", "post", {"name": "ci"}, success=(201,)),
]
# Open to anonymous callers on purpose, tested in test_accounts_api.py: where a caller gets a token.
OPEN_ROUTES = {"accounts-token"}
# Who may see one token depends on who owns it, not only on the role: tests/accounts/test_tokens.py.
OWNER_SCOPED_ROUTES = {"accounts-token-item-detail", "accounts-token-item-revoke"}


@pytest.fixture(scope="module")
def module_values(shared_rows):
    """The users, the sample inventory with the site's credential, and a user to read and change, written
    once for the module (tests/api/conftest.py): each case's request runs in a savepoint rolled back after it."""
    from appliance.inventory import credentials
    from tests.api.sites import SITE_BMC_ENDPOINTS, SITE_BMC_PASSWORD, SITE_CREDENTIAL
    from tests.sample_inventory import build_sample_inventory

    with shared_rows():
        users = make_role_users()
        inventory = build_sample_inventory()
        credentials.create(SITE_CREDENTIAL, username="admin", secret=SITE_BMC_PASSWORD, endpoints=SITE_BMC_ENDPOINTS)
        target = create_user("target-user", Role.VIEWER, PASSWORD)
        return users, {**inventory.ids(), "target_user": target.pk}


@pytest.fixture
def users(module_values):
    return fresh_users(module_values[0])


class TestInventoryAPIAccess(AccessMatrix):
    endpoints = INVENTORY_ENDPOINTS

    @pytest.fixture
    def url_values(self, module_values):
        return module_values[1]


class TestAccountsAPIAccess(AccessMatrix):
    endpoints = ACCOUNTS_ENDPOINTS

    @pytest.fixture
    def url_values(self, module_values):
        return module_values[1]


def _named_routes(resolver: URLResolver, prefix: str = "") -> set[str]:
    names = set()
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            names |= _named_routes(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and pattern.name and "(?P<format>" not in str(pattern.pattern):
            names.add(pattern.name)
    return names


def test_the_matrix_covers_every_route_of_the_inventory_and_accounts_api(module_values):
    from django.urls import resolve

    values = module_values[1]
    covered = {resolve(e.url.format(**values).split("?")[0]).url_name for e in INVENTORY_ENDPOINTS + ACCOUNTS_ENDPOINTS}
    routes = {name for name in _named_routes(get_resolver())
              if name.startswith(("inventory-", "accounts-"))} | {"api-v1-root"}
    assert routes - covered - OPEN_ROUTES - OWNER_SCOPED_ROUTES == set()
