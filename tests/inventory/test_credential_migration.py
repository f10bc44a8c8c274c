"""Upgrading: BMCs that held their own passwords (inventory 0002) keep working through credentials."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("inventory", "0002_node_management_address_released_on_retire")]
AFTER = [("inventory", "0004_bmc_login_fields_removed")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    """Later tests of this worker share the database: leave it at the latest migration of every app."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_stored_bmc_passwords_become_credentials_bound_to_their_bmcs():
    old = migrate(BEFORE)
    Appliance, Node, BMC = (old.get_model("inventory", name) for name in ("Appliance", "Node", "BMC"))
    rows = [("lab", "n1", "https://10.0.0.11", "Pw-A", "file:${APPLIANCE_STATE_DIR}/bmc-password", "/etc/ca.pem"),
            ("lab", "n2", "https://10.0.0.12/redfish/v1/", "Pw-A", "file:${APPLIANCE_STATE_DIR}/bmc-password",
             "/etc/ca.pem"),
            ("lab", "n3", "https://10.0.0.13", "Pw-B", "env:N3_BMC_PASSWORD", ""),
            ("edge", "e1", "https://bmc-e1:8443", "Pw-A", "env:E1_BMC_PASSWORD", "")]
    for appliance_name, node_name, url, password, reference, ca_file in rows:
        appliance, _ = Appliance.objects.get_or_create(name=appliance_name)
        node = Node.objects.create(appliance=appliance, name=node_name, role="gpu")
        BMC.objects.create(node=node, url=url, username="root", password=password, password_ref=reference,
                           ca_file=ca_file)

    migrate(AFTER)

    from appliance.inventory.models import BMC as CurrentBMC
    from appliance.inventory.models import Credential

    found = {c.name: (c.username, c.secret, c.endpoints, c.ca_file) for c in Credential.objects.all()}
    assert found == {
        "lab-bmc": ("root", "Pw-A", ["https://10.0.0.11:443", "https://10.0.0.12:443"], "/etc/ca.pem"),
        "lab-bmc-2": ("root", "Pw-B", ["https://10.0.0.13:443"], ""),
        "edge-bmc": ("root", "Pw-A", ["https://bmc-e1:8443"], ""),
    }
    assert dict(CurrentBMC.objects.values_list("node__name", "credential__name")) == {
        "n1": "lab-bmc", "n2": "lab-bmc", "n3": "lab-bmc-2", "e1": "edge-bmc"}
    with connection.cursor() as cursor:
        columns = {c.name for c in connection.introspection.get_table_description(cursor, "inventory_bmc")}
    assert not columns & {"password", "password_ref", "username", "ca_file"}
