"""A credential's endpoint names a host of at most 253 characters (the longest DNS name), so the
normalized endpoint (scheme, host, port) always fits the 300 characters the API documents."""

import pytest

from appliance.inventory.endpoints import endpoint_of


def test_the_longest_dns_name_is_an_endpoint_within_300_characters():
    endpoint = endpoint_of("a" * 253)
    assert endpoint == "https://" + "a" * 253 + ":443"
    assert len(endpoint_of("http://" + "a" * 253 + ":65535")) <= 300


def test_a_longer_host_is_refused():
    with pytest.raises(ValueError, match="a host name has at most 253 characters"):
        endpoint_of("0" * 292)
