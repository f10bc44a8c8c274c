"""The address a request really comes from.

`X-Forwarded-For` is a header anyone can send. It is believed only when the peer that sent the
request (REMOTE_ADDR) is one of APPLIANCE_TRUSTED_PROXIES, and then only as far as the chain of
trusted proxies goes: walking the header from the right, the first address that is not a trusted
proxy is the client. Everything keyed on a client (throttles, the login limit, the audit record's
source address, the lockout log) asks `client_address`.
"""

import ipaddress
from functools import lru_cache

from django.conf import settings


@lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


def parse_trusted_proxies(values) -> tuple[str, ...]:
    """Validate the setting early: a typo must stop the process, not silently trust nobody (or everybody)."""
    proxies = []
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ValueError(f"APPLIANCE_TRUSTED_PROXIES: {value!r} is not an IP address or network") from exc
        proxies.append(value)
    return tuple(proxies)


def _is_trusted(address: str, networks) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request) -> str:
    peer = request.META.get("REMOTE_ADDR", "") or ""
    networks = _networks(tuple(getattr(settings, "TRUSTED_PROXIES", ())))
    if not networks or not _is_trusted(peer, networks):
        return peer
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    for address in reversed(forwarded):
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return peer  # a garbled chain: the last hop we can vouch for is the proxy itself
        if not _is_trusted(address, networks):
            return address
    return forwarded[0] if forwarded else peer
