"""Rate limits key on the real client address: X-Forwarded-For counts only from trusted proxies; the portal
login shares the token endpoint's per-address limit."""

import pytest
from django.test import Client, RequestFactory, override_settings

from appliance.audit.models import AuditRecord
from appliance.core.addresses import client_address, parse_trusted_proxies
from tests.access import assert_error_body

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/accounts/token/"


def token_attempt(client: Client, i: int, **headers):
    return client.post(TOKEN_URL, {"username": f"nobody-{i}", "password": "x"}, content_type="application/json",
                       headers=headers)


def login_attempt(client: Client, i: int, **headers):
    return client.post("/accounts/login/", {"username": f"nobody-{i}", "password": "wrong-password-x"},
                       headers=headers)


def test_x_forwarded_for_from_an_untrusted_peer_does_not_buy_new_attempts(db):
    client = Client(REMOTE_ADDR="198.51.100.7")
    statuses = [token_attempt(client, i, **{"X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(10)]
    assert statuses == [401] * 10
    error = assert_error_body(token_attempt(client, 99, **{"X-Forwarded-For": "203.0.113.250"}), 429)
    assert error["code"] == "throttled"
    # Nor does it change who the audit log says was there.
    failure = AuditRecord.objects.filter(event="auth.login.failure").latest("sequence")
    assert failure.source_address == "198.51.100.7"


@override_settings(TRUSTED_PROXIES=("10.0.0.0/24",))
def test_behind_a_trusted_proxy_each_client_has_its_own_budget(db):
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    for i in range(10):
        assert token_attempt(proxy, i, **{"X-Forwarded-For": "203.0.113.1"}).status_code == 401
    assert token_attempt(proxy, 10, **{"X-Forwarded-For": "203.0.113.1"}).status_code == 429
    # A client spoofing the header in front of the proxy is still keyed on what the proxy saw.
    assert token_attempt(proxy, 11, **{"X-Forwarded-For": "203.0.113.1, 203.0.113.2"}).status_code == 401
    assert token_attempt(proxy, 12, **{"X-Forwarded-For": "198.51.100.99, 203.0.113.1"}).status_code == 429
    failure = AuditRecord.objects.filter(event="auth.login.failure").latest("sequence")
    assert failure.source_address == "203.0.113.2"


def test_the_portal_login_is_limited_per_address(db):
    client = Client(REMOTE_ADDR="198.51.100.8")
    assert [login_attempt(client, i).status_code for i in range(10)] == [200] * 10
    refused = login_attempt(client, 10)
    assert refused.status_code == 429 and b"Too many login attempts from your address" in refused.content
    assert int(refused["Retry-After"]) > 0
    assert login_attempt(Client(REMOTE_ADDR="198.51.100.9"), 11).status_code == 200  # another address
    assert client.get("/accounts/login/").status_code == 200  # only attempts count


def test_attempts_refused_by_the_limit_are_counted_not_recorded_one_by_one(db):
    client = Client(REMOTE_ADDR="198.51.100.11")
    for i in range(10):
        login_attempt(client, i)
    last = AuditRecord.objects.order_by("-sequence").values_list("sequence", flat=True).first()
    for i in range(30):
        assert login_attempt(client, 100 + i).status_code == 429
        assert token_attempt(client, 200 + i).status_code == 429
    # At most the per-minute count of a minute that ended meanwhile (access.anonymous.denied).
    written = AuditRecord.objects.filter(sequence__gt=last).exclude(event="access.anonymous.denied")
    assert list(written.values_list("event", flat=True)) == []


def test_the_login_page_and_the_token_endpoint_share_one_budget(db):
    client = Client(REMOTE_ADDR="198.51.100.10")
    for i in range(5):
        assert login_attempt(client, i).status_code == 200
        assert token_attempt(client, i).status_code == 401
    assert login_attempt(client, 10).status_code == 429
    assert token_attempt(client, 11).status_code == 429


@pytest.mark.parametrize(("trusted", "peer", "forwarded", "expected"), [
    ((), "198.51.100.1", "203.0.113.5", "198.51.100.1"),
    (("10.0.0.1",), "198.51.100.1", "203.0.113.5", "198.51.100.1"),
    (("10.0.0.1",), "10.0.0.1", "203.0.113.5", "203.0.113.5"),
    (("10.0.0.1",), "10.0.0.1", "", "10.0.0.1"),
    (("10.0.0.0/8",), "10.0.0.1", "203.0.113.9, 203.0.113.5, 10.1.2.3", "203.0.113.5"),
    (("10.0.0.0/8",), "10.0.0.1", "10.9.9.9, 10.1.2.3", "10.9.9.9"),
    (("10.0.0.1",), "10.0.0.1", "not-an-address", "10.0.0.1"),
    (("2001:db8::/32",), "2001:db8::1", "2001:db8:1::5, 2a00::7", "2a00::7"),
])
def test_client_address(settings, trusted, peer, forwarded, expected):
    settings.TRUSTED_PROXIES = trusted
    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


def test_a_bad_trusted_proxy_setting_stops_the_process():
    with pytest.raises(ValueError, match="APPLIANCE_TRUSTED_PROXIES: 'proxy.example' is not an IP address"):
        parse_trusted_proxies(["10.0.0.1", "proxy.example"])
