"""Two nodes of a site sharing an IPoIB address: one error, at the second node's address, naming the
first node's place too; nothing is imported."""

import pytest

from appliance.inventory.models import Appliance
from appliance.inventory.services import validate_site
from appliance.inventory.sitedef import SiteValidationError

pytestmark = pytest.mark.django_db


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    found = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    return found[occurrence - 1]


def test_two_nodes_sharing_an_ipoib_address_is_one_error_naming_both(demo_text):
    # The demo gives gpu01 10.10.2.1 and gpu02 10.10.2.2 on ib0; gpu02 now takes gpu01's.
    assert demo_text.count("ipoib: {ib0: 10.10.2.2}") == 1
    text = demo_text.replace("ipoib: {ib0: 10.10.2.2}", "ipoib: {ib0: 10.10.2.1}")
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "site.yml")
    errors = caught.value.errors
    assert [(e.line, e.path) for e in errors] == [(line_of(text, "ipoib: {ib0: 10.10.2.1}", 2), "nodes[1].ipoib.ib0")]
    assert errors[0].message == f"duplicate address 10.10.2.1 (also nodes[0], line {line_of(text, 'name: gpu01')})"
    assert str(errors[0]).startswith(f"site.yml:{line_of(text, 'ipoib: {ib0: 10.10.2.1}', 2)}: nodes[1].ipoib.ib0: ")
    assert not Appliance.objects.exists()


def test_the_same_address_on_two_ipoib_networks_of_one_node_is_also_refused(demo_text):
    text = demo_text.replace(
        '  - {name: ib0, kind: ipoib, cidr: 10.10.0.0/16, pkey: "0x7fff", mtu: 4092}',
        '  - {name: ib0, kind: ipoib, cidr: 10.10.0.0/16, pkey: "0x7fff", mtu: 4092}\n'
        '  - {name: ib1, kind: ipoib, cidr: 10.10.0.0/16, pkey: "0x8001", mtu: 4092}').replace(
        "ipoib: {ib0: 10.10.2.1}", "ipoib: {ib0: 10.10.2.1, ib1: 10.10.2.1}")
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "site.yml")
    messages = [(e.path, e.message) for e in caught.value.errors]
    assert ("nodes[0].ipoib.ib1", f"duplicate address 10.10.2.1 (also nodes[0], line {line_of(text, 'name: gpu01')})") \
        in messages
