"""One source for the inventory's fixed values: a site that names opensm without a priority gets the
same priority stored, rendered into opensm.conf and shown (15, the highest: the appliance's own subnet
manager wins); node roles come from one list."""

from appliance.inventory.choices import NODE_ROLES
from appliance.inventory.services import validate_site
from appliance.partitioning.renderers import fabric
from appliance.provisioning.catalogue import ALL_ROLES
from tests.partitioning.demo_site import demo_site


def test_an_opensm_without_a_priority_is_stored_and_rendered_with_fifteen(demo_text, site_env):
    text = demo_text.replace("node: mgmt01, priority: 15", "node: mgmt01")
    assert text != demo_text
    site = validate_site(text, "demo.yml")
    assert site.fabric == {"subnet_manager": {"kind": "opensm", "node": "mgmt01", "priority": 15}}

    view = demo_site()
    view.settings["fabric"] = {"subnet_manager": {"kind": "opensm", "node": "mgmt01"}}
    assert fabric.subnet_manager(view)["priority"] == 15
    assert "sm_priority 15" in fabric.render_opensm_conf(view)


def test_node_roles_are_one_list():
    assert NODE_ROLES == ("gpu", "storage", "management", "login")
    assert ALL_ROLES == frozenset(NODE_ROLES)
