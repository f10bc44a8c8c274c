"""The monitoring stage's variables: each node's collector.json (contract "Node layout") and its ingest
token, registered with the provisioning catalogue by name (apps.py), since provisioning may not import
this app.

The token is a secret of the run (the secrets provider), never one of these variables: the engine writes
it to the run's private vars file only and masks it everywhere else, as it does the BMC passwords.
The CA an https ingest URL is verified with (settings.TELEMETRY_INGEST_CA_FILE: the portal's own certificate
on a production install) is no secret: its PEM travels in these variables and lands on each node beside
collector.json. The site's InfluxDB token (an `influxdb` credential the site names in
telemetry.influxdb.token_credential) is a secret of the run too, the same for every node, handed out only while
the InfluxDB URL is an endpoint that credential is bound to; the nodes' ingest tokens go only to the installed
portal or to an endpoint an Administrator allowed (appliance.inventory.credentials), checked again at every run
whatever the inventory says.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from appliance.inventory import credentials
from appliance.partitioning.renderers.site import RenderError
from appliance.provisioning.playbook_vars import SecretUnavailable

from . import tokens

# Contract "Node layout": node paths (a simulated node's are under its sysroot).
COLLECTOR_DIR = "/opt/appliance/collector"
PACKAGE_NAME = "appliance_collector"
CONFIG_FILE = "/etc/appliance/collector.json"
TOKEN_FILE = "/etc/appliance/collector.token"
INFLUXDB_TOKEN_FILE = "/etc/appliance/influxdb.token"
CA_FILE = "/etc/appliance/ingest-ca.pem"
BUFFER_DIR = "/var/lib/appliance/collector"
UNIT_NAME = "appliance-collector.service"
# The modules of appliance/telemetry a node runs (the standard library, pynvml and influxdb-client only).
PACKAGE_MODULES = ("__init__", "agent", "collector", "buffer", "sinks", "exposition", "rollup")
INGEST_PATH = "/telemetry/ingest"

DEFAULTS = {"interval_s": 1.0, "metrics_port": 9400, "buffer_max_mib": 256}
INFLUXDB_DEFAULTS = {"url": "", "org": "appliance", "bucket": "telemetry"}
TOKENS_VAR = "appliance_collector_tokens"
INFLUXDB_TOKENS_VAR = "appliance_influxdb_tokens"
# What a dry run renders instead of a token that was never issued (a dry run issues nothing).
NOT_ISSUED = "not-issued-in-a-dry-run"


def telemetry_settings(appliance) -> dict:
    return dict((appliance.settings or {}).get("telemetry") or {})


def default_ingest_url(appliance) -> str:
    """The appliance's ingest endpoint as nodes reach it when the site names none: the installed portal's
    (settings.TELEMETRY_INGEST_URL, which `appliance install --production` writes), else the demo's portal port
    on a simulated appliance; "" otherwise. Nothing is derived from the inventory: a management node's
    address is site data an Operator imports, and the nodes' tokens must only go where an Administrator (or
    the installer) said."""
    if settings.TELEMETRY_INGEST_URL:
        return settings.TELEMETRY_INGEST_URL
    if appliance.simulated:
        from appliance.simulation import ports

        return f"http://127.0.0.1:{ports.portal_port(settings.SIMULATION_DIR)}{INGEST_PATH}"
    return ""


_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")


def ingest_ca(ingest_url: str) -> str:
    """The PEM certificates the collectors trust for an https ingest URL (settings.TELEMETRY_INGEST_CA_FILE),
    "" for http or when none is set (the nodes' system CAs then). Only the certificate blocks are taken: a
    file that also holds a private key must not carry it onto every node."""
    path = settings.TELEMETRY_INGEST_CA_FILE
    if not path or urlsplit(ingest_url).scheme != "https":
        return ""
    where = f"APPLIANCE_TELEMETRY_INGEST_CA_FILE {path}"
    try:
        text = Path(path).read_text(encoding="ascii")
    except OSError as exc:
        raise RenderError(f"{where}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RenderError(f"{where}: not a PEM file") from None
    certificates = _PEM_CERTIFICATE.findall(text)
    if not certificates:
        raise RenderError(f"{where}: no PEM certificate in it")
    return "\n".join(certificate.replace("\r\n", "\n") for certificate in certificates) + "\n"


def cleartext_warning(ingest_url: str) -> str:
    """A warning when the collectors would send their tokens unencrypted over the network (an http URL to
    anything but this host): allowed, since the site chose it, but said."""
    parts = urlsplit(ingest_url)
    if parts.scheme != "http":
        return ""
    host = parts.hostname or ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return ""
    except ValueError:
        if host == "localhost":
            return ""
    return (f"The collectors send their ingest tokens unencrypted to {parts.scheme}://{parts.netloc}: "
            "an https ingest URL protects them")


def metrics_endpoints(appliance, nodes) -> dict[str, tuple[str, int]]:
    """{node: (address, port)} of each collector's /metrics. A simulated node listens on its own loopback
    address and a port of its own (every simulated node shares this machine); a real one on the site's port."""
    configured = telemetry_settings(appliance)
    if not appliance.simulated:
        port = int(configured.get("metrics_port", DEFAULTS["metrics_port"]))
        return {node.name: ("0.0.0.0", port) for node in nodes}  # noqa: S104 (scraped from the network)
    from appliance.simulation import ports, sshd

    allocated = ports.metrics_ports(settings.SIMULATION_DIR, [node.name for node in nodes])
    return {node.name: (sshd.address_of(node.name), allocated[node.name]) for node in nodes}


def collector_config(node, *, ingest_url: str, ca_file: str, metrics: tuple[str, int], configured: dict) -> dict:
    site_influxdb = configured.get("influxdb") or {}
    influxdb = {**INFLUXDB_DEFAULTS, **{k: v for k, v in site_influxdb.items() if k in INFLUXDB_DEFAULTS}}
    token_file = INFLUXDB_TOKEN_FILE if influxdb["url"] and site_influxdb.get("token_credential") else ""
    return {
        "hostname": node.name,
        "interval_s": float(configured.get("interval_s", DEFAULTS["interval_s"])),
        "buffer_dir": BUFFER_DIR,
        "buffer_max_mib": int(configured.get("buffer_max_mib", DEFAULTS["buffer_max_mib"])),
        "appliance": {"url": ingest_url, "token_file": TOKEN_FILE, "ca_file": ca_file},
        "influxdb": {**influxdb, "token_file": token_file},
        "metrics": {"address": metrics[0], "port": metrics[1]},
    }


def monitoring_vars(appliance, nodes) -> dict:
    configured = telemetry_settings(appliance)
    if configured.get("ingest_url"):
        # The site's own URL: its endpoint must still be allowed (an allow-list changed since the import).
        try:
            credentials.check_ingest_url(configured["ingest_url"])
        except credentials.CredentialRefused as exc:
            raise SecretUnavailable(f"appliance {appliance.name}: {exc}") from None
    ingest_url = (configured.get("ingest_url") or default_ingest_url(appliance)).rstrip("/")
    if not ingest_url:
        raise RenderError(f"appliance {appliance.name}: no ingest URL for the collectors: the site sets no "
                          "telemetry.ingest_url and the portal was not installed with APPLIANCE_TELEMETRY_INGEST_URL "
                          "(`appliance install --production` writes it)")
    ca = ingest_ca(ingest_url)
    endpoints = metrics_endpoints(appliance, nodes)
    return {"appliance_collector": {
        # This package's own files, wherever it is installed (a checkout or a wheel): what the nodes run.
        "package_source": str(Path(__file__).resolve().parent),
        "package_modules": list(PACKAGE_MODULES),
        # The collector role writes this to CA_FILE when it is set.
        "ingest_ca": ca,
        "ingest_warning": cleartext_warning(ingest_url),
        "configs": {node.name: collector_config(node, ingest_url=ingest_url, ca_file=CA_FILE if ca else "",
                                                metrics=endpoints[node.name], configured=configured)
                    for node in nodes},
    }}


def monitoring_tokens(run, nodes) -> dict[str, str]:
    """{node: ingest token}; a dry run issues none (it shows the ones already issued, or a placeholder)."""
    if not run.dry_run:
        return {node.name: tokens.collector_token(node) for node in nodes}
    from .models import NodeCollector

    issued = dict(NodeCollector.objects.filter(node__in=nodes).values_list("node__name", "token"))
    return {node.name: issued.get(node.name, NOT_ISSUED) for node in nodes}


# The provisioning catalogue calls providers with (run, nodes).

def monitoring_stage_vars(run, nodes) -> dict:
    return monitoring_vars(run.appliance, nodes)


def influxdb_tokens(appliance, nodes) -> dict[str, str]:
    """{node: the site's InfluxDB token} ({} when the site names no InfluxDB): the same token for every node,
    refused unless the InfluxDB URL is an endpoint its credential is bound to."""
    try:
        token = credentials.influxdb_token_for_run(appliance)
    except credentials.CredentialRefused as exc:
        raise SecretUnavailable(str(exc)) from None
    return {node.name: token for node in nodes} if token else {}


def monitoring_stage_secrets(run, nodes) -> dict[str, dict[str, str]]:
    return {TOKENS_VAR: monitoring_tokens(run, nodes), INFLUXDB_TOKENS_VAR: influxdb_tokens(run.appliance, nodes)}
