# A small Redfish client for the appliance's modules: follows links the BMC publishes (never builds
# resource paths, since BMCs disagree on them: /Bios, /BIOS, ...), and turns every transport or HTTP
# failure into one message that names the node and the BMC URL.
#
# Pure Python (standard library + requests) so that it runs in any module and in unit tests.

from __future__ import annotations

import warnings
from urllib.parse import urljoin, urlsplit

try:
    import requests
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import SSLError, Timeout
except ImportError:  # reported by the module through missing_requirements()
    requests = None

SERVICE_ROOT = "/redfish/v1/"


class RedfishError(Exception):
    """A Redfish exchange failed; the message names the node and the BMC URL."""


def missing_requirements():
    return [] if requests is not None else ["requests"]


def _extended_message(payload):
    # Redfish errors carry their explanation in error.@Message.ExtendedInfo[].Message.
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if not isinstance(error, dict):
        return ""
    messages = [info.get("Message", "") for info in error.get("@Message.ExtendedInfo", []) if isinstance(info, dict)]
    return "; ".join(m for m in messages if m) or error.get("message", "")


def odata_id(resource, key, where):
    """The @odata.id of link `key` in `resource`, or a RedfishError naming what is missing."""
    link = resource.get(key) if isinstance(resource, dict) else None
    target = link.get("@odata.id") if isinstance(link, dict) else None
    if not target:
        raise KeyError(f"{where} has no {key} link")
    return target


class RedfishClient:
    def __init__(self, base_url, username, password, node, verify_tls=True, ca_file=None, timeout=30):
        if requests is None:
            raise RedfishError(f"{node}: the Python package 'requests' is needed to reach BMC {base_url}")
        parts = urlsplit(base_url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RedfishError(f"{node}: BMC URL {base_url!r} is not an http(s) URL")
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self.display_url = base_url
        self.node = node
        self.timeout = timeout
        self.session = requests.Session()
        self.session.auth = (username, password)
        self.session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
        # Given with every request: requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment
        # override a Session's own `verify`, which would check the BMC against the wrong CA.
        self.verify = False if not verify_tls else (ca_file or True)

    def close(self):
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fail(self, text):
        raise RedfishError(f"{self.node}: BMC {self.display_url}: {text}")

    def _request(self, method, path, body=None):
        url = urljoin(self.base_url, path)
        try:
            with warnings.catch_warnings():
                # verify_tls: false is an explicit operator choice; the warning would repeat on every call.
                warnings.simplefilter("ignore")
                response = self.session.request(method, url, json=body, timeout=self.timeout, verify=self.verify)
        except SSLError as exc:
            self._fail(f"TLS verification failed ({_reason(exc)}); check the CA file of the BMC's credential or bmc.verify_tls")
        except Timeout:
            self._fail(f"is unreachable (no answer within {self.timeout} s to {method} {path})")
        except RequestsConnectionError as exc:
            self._fail(f"is unreachable ({_reason(exc)})")
        except OSError as exc:  # a CA file that cannot be read, for example
            self._fail(f"request failed ({exc})")
        if response.status_code == 401:
            self._fail(f"rejected the credentials of user {self.session.auth[0]!r} (HTTP 401 on {method} {path}): "
                       "check the BMC password")
        if response.status_code == 403:
            self._fail(f"user {self.session.auth[0]!r} may not {method} {path} (HTTP 403)")
        payload = None
        if response.content:
            try:
                payload = response.json()
            except ValueError:
                payload = None
        if response.status_code >= 400:
            detail = _extended_message(payload) or response.reason or ""
            self._fail(f"{method} {path} answered HTTP {response.status_code}" + (f": {detail}" if detail else ""))
        if method == "GET" and not isinstance(payload, dict):
            self._fail(f"GET {path} did not answer a JSON object")
        return payload

    def get(self, path):
        return self._request("GET", path)

    def patch(self, path, body):
        return self._request("PATCH", path, body)

    def link(self, resource, key, where):
        try:
            return odata_id(resource, key, where)
        except KeyError as exc:
            self._fail(str(exc))

    def system(self, system_id=None):
        """The ComputerSystem to manage: the one named `system_id`, or the only one the BMC has."""
        root = self.get(SERVICE_ROOT)
        systems_path = self.link(root, "Systems", SERVICE_ROOT)
        collection = self.get(systems_path)
        members = [m.get("@odata.id") for m in collection.get("Members", []) if isinstance(m, dict)]
        members = [m for m in members if m]
        if not members:
            self._fail(f"{systems_path} lists no systems")
        if system_id:
            matching = [m for m in members if m.rstrip("/").rsplit("/", 1)[-1] == system_id]
            if not matching:
                self._fail(f"has no system {system_id!r} (it has {', '.join(members)})")
            return self.get(matching[0])
        if len(members) > 1:
            self._fail(f"has {len(members)} systems ({', '.join(sorted(members))}): set bmc.system_id")
        return self.get(members[0])


def _reason(exc):
    # requests nests the useful part (connection refused, certificate verify failed) deep in its chain
    # of wrapped exceptions; keep that part only.
    text = str(exc)
    for marker, keep in (("certificate verify failed: ", True), ("Failed to establish a new connection: ", False),
                         ("Failed to resolve ", True), ("[SSL: ", True),
                         ("Read timed out", True)):
        if marker in text:
            tail = text.split(marker, 1)[1]
            for stop in (" (_ssl.c", "'))", "\"))", "))"):
                tail = tail.split(stop, 1)[0]
            return ((marker if keep else "") + tail).replace("'", "").strip(' ")')
    return text
