# The Redfish transport of the appliance's modules, on OpenStack's sushy: a Redfish session when the BMC
# offers a SessionService, basic auth otherwise (sushy's SessionOrBasicAuth); ETag/If-Match on PATCH;
# 202 answers followed through their task monitor; retries of transient and server-side failures;
# TLS verified against the BMC credential's CA file.
#
# The client follows links the BMC publishes (never builds resource paths, since BMCs disagree on them:
# /Bios, /BIOS, ...), and turns every transport or HTTP failure into one message that names the node and
# the BMC URL. Validation of BIOS values is the project's own (appliance_bios_registry), not sushy's.

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from urllib.parse import urlsplit

try:
    import sushy
    from sushy import auth as sushy_auth
    from sushy import exceptions as sushy_exceptions
except ImportError:  # reported by the module through missing_requirements()
    sushy = None

SERVICE_ROOT = "/redfish/v1/"
# A BMC's own words for how a system may be reset, in the order the stage prefers them: an orderly
# restart first; ForceRestart where that is all the BMC offers.
RESTART_TYPES = ("GracefulRestart", "ForceRestart", "PowerCycle")

if sushy is not None:
    # sushy logs its retries and fallbacks; inside a module they would go to stderr as noise.
    logging.getLogger("sushy").addHandler(logging.NullHandler())
    logging.getLogger("sushy").propagate = False


class RedfishError(Exception):
    """A Redfish exchange failed; the message names the node and the BMC URL."""


def missing_requirements():
    return [] if sushy is not None else ["sushy"]


def odata_id(resource, key, where):
    """The @odata.id of link `key` in `resource`, or a KeyError naming what is missing."""
    link = resource.get(key) if isinstance(resource, dict) else None
    target = link.get("@odata.id") if isinstance(link, dict) else None
    if not target:
        raise KeyError(f"{where} has no {key} link")
    return target


def _extended_message(payload):
    # Redfish errors carry their explanation in error.@Message.ExtendedInfo[].Message (or error.message).
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if not isinstance(error, dict):
        return ""
    messages = [info.get("Message", "") for info in error.get("@Message.ExtendedInfo", []) if isinstance(info, dict)]
    return "; ".join(m for m in messages if m) or error.get("message", "")


def _reason(exc):
    # requests nests the useful part (connection refused, certificate verify failed) deep in its chain
    # of wrapped exceptions, and sushy wraps it once more; keep that part only.
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


class RedfishClient:
    """One BMC, reached through sushy. `auth_mode` says what the BMC accepted: "session" or "basic"."""

    def __init__(self, base_url, username, password, node, verify_tls=True, ca_file=None, timeout=30,
                 retries=3, retry_delay=2):
        self.node = node
        self.display_url = base_url
        self.username = username
        if sushy is None:
            raise RedfishError(f"{node}: the Python package 'sushy' is needed to reach BMC {base_url}")
        parts = urlsplit(base_url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RedfishError(f"{node}: BMC URL {base_url!r} is not an http(s) URL")
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self.timeout = timeout
        self.verify = False if not verify_tls else (ca_file or True)
        self.auth = sushy_auth.SessionOrBasicAuth(username=username, password=password)
        self.root = None
        with self._translated("GET", SERVICE_ROOT):
            # Reads the service root (open to anyone, as the standard says), then opens a session or
            # falls back to basic auth when the BMC has no SessionService.
            self.root = sushy.Sushy(self.base_url, auth=self.auth, verify=self.verify, read_timeout=timeout,
                                    connect_timeout=min(timeout, 10), server_side_retries=retries,
                                    server_side_retries_delay=retry_delay)
        self.connector = self.root._conn

    @property
    def auth_mode(self):
        return "session" if self.auth.get_session_key() else "basic"

    def close(self):
        if self.root is not None:
            # Ends the Redfish session, if one was opened (a BMC has few session slots).
            self.root._auth = None
            try:
                self.auth.close()
            except Exception:  # noqa: BLE001 - a session that cannot be closed expires on the BMC
                pass
            self.connector.close()
            self.root = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fail(self, text):
        raise RedfishError(f"{self.node}: BMC {self.display_url}: {text}")

    @contextlib.contextmanager
    def _translated(self, method, path):
        """sushy's exceptions become one RedfishError naming the node, the BMC and what failed."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # verify_tls: false is an explicit operator choice
                yield
        except sushy_exceptions.SushyError as exc:
            self._raise_for(method, path, exc)

    def _raise_for(self, method, path, exc):
        if isinstance(exc, sushy_exceptions.ConnectionError):
            text = str(exc)
            if "SSLError" in text or "CERTIFICATE_VERIFY_FAILED" in text or "[SSL" in text:
                self._fail(f"TLS verification failed ({_reason(exc)}); check the CA file of the BMC's credential "
                           "or bmc.verify_tls")
            if "timed out" in text.lower():
                self._fail(f"is unreachable (no answer within {self.timeout} s to {method} {path})")
            self._fail(f"is unreachable ({_reason(exc)})")
        if isinstance(exc, sushy_exceptions.HTTPError):
            status = exc.status_code
            if status == 401:
                self._fail(f"rejected the credentials of user {self.username!r} (HTTP 401 on {method} {path}): "
                           "check the BMC password")
            if status == 403:
                self._fail(f"user {self.username!r} may not {method} {path} (HTTP 403)")
            detail = exc.detail or ""
            self._fail(f"{method} {path} answered HTTP {status}" + (f": {detail}" if detail else ""))
        self._fail(f"{method} {path} failed ({exc})")

    def _json(self, response, method, path):
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            if method == "GET":
                self._fail(f"GET {path} did not answer a JSON object")
            return None

    def get_with_etag(self, path):
        """(resource, its ETag or None): the ETag header, or the resource's @odata.etag."""
        with self._translated("GET", path):
            response = self.connector.get(path, timeout=self.timeout)
        payload = self._json(response, "GET", path)
        if not isinstance(payload, dict):
            self._fail(f"GET {path} did not answer a JSON object")
        return payload, response.headers.get("ETag") or payload.get("@odata.etag")

    def get(self, path):
        return self.get_with_etag(path)[0]

    def patch(self, path, body, etag=None):
        """PATCH with If-Match when `etag` is known; a 202 is followed through its task monitor."""
        with self._translated("PATCH", path):
            response = self.connector.patch(path, data=body, etag=etag, blocking=True, timeout=self.timeout)
        return self._json(response, "PATCH", path)

    def post(self, path, body):
        with self._translated("POST", path):
            response = self.connector.post(path, data=body, blocking=True, timeout=self.timeout)
        return self._json(response, "POST", path)

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

    def restart_type(self, system):
        """The reset the BMC allows that boots the system (again): On for a system that is off, else a
        restart, preferring a graceful one."""
        preferred = ("On", "ForceOn") if system.get("PowerState") == "Off" else RESTART_TYPES
        action = (system.get("Actions") or {}).get("#ComputerSystem.Reset")
        where = system.get("@odata.id", "the system")
        if not isinstance(action, dict) or not action.get("target"):
            self._fail(f"{where} offers no ComputerSystem.Reset action: the server cannot be restarted over Redfish")
        allowed = action.get("ResetType@Redfish.AllowableValues")
        if allowed is None and action.get("@Redfish.ActionInfo"):
            info = self.get(action["@Redfish.ActionInfo"])
            for parameter in info.get("Parameters", []):
                if isinstance(parameter, dict) and parameter.get("Name") == "ResetType":
                    allowed = parameter.get("AllowableValues")
        if allowed is None:
            return action["target"], preferred[0]  # the BMC lists nothing: the standard's first choice
        for reset_type in preferred:
            if reset_type in allowed:
                return action["target"], reset_type
        self._fail(f"{where} allows none of {', '.join(preferred)} (its reset types: "
                   f"{', '.join(map(str, allowed)) or 'none'})")

    def reset(self, system, reset_type=None):
        """Restart the system with `reset_type`, or the best restart its BMC allows; returns the type used."""
        target, best = self.restart_type(system)
        reset_type = reset_type or best
        self.post(target, {"ResetType": reset_type})
        return reset_type

    def wait_for(self, describe, check, timeout, interval=2.0):
        """Poll `check()` (a value, or None while not there) until it answers or `timeout` seconds pass.
        Failures to reach the BMC while it restarts count as 'not yet'."""
        deadline = time.monotonic() + timeout
        last_error = None
        while True:
            try:
                value = check()
                last_error = None
            except RedfishError as exc:
                value, last_error = None, exc
            if value is not None:
                return value
            if time.monotonic() >= deadline:
                reason = f" (last error: {last_error})" if last_error else ""
                self._fail(f"{describe} within {timeout} s{reason}")
            time.sleep(interval)
