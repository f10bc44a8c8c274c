"""The endpoint a BMC URL names: what a credential is bound to.

An endpoint is `scheme://host:port` with the port always written out, so that `https://bmc01`,
`https://BMC01:443/` and `https://bmc01/redfish/v1/` are one endpoint and `http://bmc01` another.
"""

import ipaddress
from urllib.parse import urlsplit

DEFAULT_PORTS = {"https": 443, "http": 80}


def endpoint_of(value: str) -> str:
    """The endpoint of a URL, or of `host[:port]` (https assumed); ValueError when it names none."""
    text = (value or "").strip()
    if any(c.isspace() or ord(c) < 32 for c in text) or not text:
        raise ValueError(f"{value!r} is not a URL or host:port")
    if "://" not in text:
        text = "https://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r} is not a URL or host:port") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"{value!r}: a BMC is reached over https (or http on a simulated appliance)")
    if parts.username or parts.password:
        raise ValueError(f"{value!r}: a URL carries no user name or password")
    host = (parts.hostname or "").lower()
    if not host or port == 0:
        raise ValueError(f"{value!r} is not a URL or host:port")
    if len(host) > 253:  # the longest DNS name; it also keeps the endpoint within its 300 characters
        raise ValueError(f"{value[:40]!r}...: a host name has at most 253 characters")
    try:
        address = ipaddress.ip_address(host)
        host = f"[{address}]" if address.version == 6 else str(address)
    except ValueError:
        pass
    return f"{parts.scheme}://{host}:{port or DEFAULT_PORTS[parts.scheme]}"
