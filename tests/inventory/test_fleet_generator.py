"""The fleet generator (tests/fleet.py) writes a site the real import accepts, and its fast bulk path builds
exactly the inventory that import builds, so the fleet-scale tests measure what an operator would have."""

import pytest

from tests.fleet import bulk_fleet, fleet_site, import_fleet, inventory_dump

pytestmark = pytest.mark.django_db


def test_generated_site_imports_with_labels_switches_and_pools():
    result = import_fleet(5)
    # 3 platforms, the appliance, 3 networks, 10 switches (2 spines, 8 leaves), 5 GPU servers of 26 rows
    # (node, BMC, 8 GPUs, 8 HCAs, 8 ports), 2 storage servers of 6 (node, BMC, 2 HCAs, 2 ports), the
    # management node (node, BMC, an HCA, a port), a filesystem, 2 pools and 5 memberships.
    assert result.counts() == {"create": 3 + 1 + 3 + 10 + 130 + 12 + 4 + 1 + 2 + 5, "update": 0, "delete": 0}
    dump = inventory_dump("fleet")
    assert [n["labels"] for n in dump["nodes"][:5]] == [
        {"rack": "r001", "slot": 1, "su": "su001"}, {"rack": "r001", "slot": 2, "su": "su001"},
        {"rack": "r001", "slot": 3, "su": "su001"}, {"rack": "r001", "slot": 4, "su": "su001"},
        {"rack": "r002", "slot": 1, "su": "su001"}]
    assert [(s["name"], s["tier"]) for s in dump["switches"][:3]] == [
        ("ib-spine001", "spine"), ("ib-spine002", "spine"), ("ib-su001-rail0", "leaf")]
    assert len(dump["switches"]) == 10
    assert [(m["node__name"], m["pool__name"]) for m in dump["memberships"]] == [
        ("gpu0001", "training"), ("gpu0002", "training"), ("gpu0003", "training"), ("gpu0004", "inference"),
        ("gpu0005", "inference")]


def test_bulk_fleet_is_the_imported_fleet():
    import_fleet(6, name="imported")
    imported = inventory_dump("imported")
    from appliance.inventory.models import Appliance, Credential

    Appliance.objects.filter(name="imported").delete()
    Credential.objects.filter(name="fleet-bmc").delete()
    bulk_fleet(6, name="imported")
    assert inventory_dump("imported") == imported


def test_fleet_size_is_bounded():
    with pytest.raises(ValueError, match="1 to 60,000"):
        fleet_site(0)
