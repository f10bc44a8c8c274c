"""Credentials: the BMC logins, InfluxDB tokens and collector ingest endpoints Administrators keep, and the
one place a secret is handed to a run.

A credential is created, changed, rebound and deleted only by an Administrator (the API checks the
`credentials.manage` capability; the management command is the Administrator's shell, like every
other command). Each change is a `inventory.credential.*` audit record, the secret redacted.

`login_for_run` is the gate: a BMC's user name and password are handed out only for a BMC whose URL
is one of the endpoints its credential is bound to, over https with TLS verified unless the appliance
is simulated. It does not trust the inventory: a BMC row changed behind the site import is refused too.
`influxdb_token_for_run` and `check_ingest_url` are the same gate for the telemetry URLs of a site: the
InfluxDB token goes only to an endpoint its credential is bound to, and the nodes' own ingest tokens only
to the appliance's installed portal or an endpoint an `ingest` credential is bound to.
"""

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from django.conf import settings
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _

from appliance.core import context, resources
from appliance.core.roles import can

from .endpoints import endpoint_of
from .models import BMC, Appliance, Credential
from .sitedef import NAME, NAME_WHAT

MAX_SECRET_LENGTH = 1024


class CredentialError(ValueError):
    """A request about a credential that cannot be done; `field` names the offending input. The message
    is in the reader's language (the API's and the command line's are English)."""

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.field = field


class CredentialRefused(RuntimeError):
    """A credential may not be handed to a run (unbound endpoint, TLS off on a real appliance...)."""


Kind = Credential.Kind
KIND_CHOICES = tuple(Kind.values)


def may_manage(user=None) -> bool:
    """Whether the actor may manage credentials and change BMC bindings: a user with
    `credentials.manage`, or, with no user, the appliance's own command line (its shell is the
    Administrator's: every management command acts without a role, the keys are its files)."""
    if user is not None:
        return can(user, "credentials.manage")
    return context.current().channel in ("cli", "system")


# --------------------------------------------------------------------------------------------------
# Checked inputs


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise CredentialError(f"{name!r} is not {NAME_WHAT}", "name")
    return name


def check_secret(secret: str) -> str:
    if not isinstance(secret, str) or not secret:
        raise CredentialError(_("the secret is empty"), "secret")
    if len(secret) > MAX_SECRET_LENGTH:
        raise CredentialError(_("the secret is longer than %(max)d characters") % {"max": MAX_SECRET_LENGTH}, "secret")
    if any(ord(c) < 32 or ord(c) == 127 for c in secret):
        raise CredentialError(_("the secret holds a control character (a line break?)"), "secret")
    return secret


def check_username(username: str) -> str:
    if not isinstance(username, str) or not username.strip():
        raise CredentialError(_("the user name is empty"), "username")
    username = username.strip()
    if len(username) > 100 or any(ord(c) < 32 or ord(c) == 127 or c == ":" for c in username):
        raise CredentialError(_("%(username)r is not a user name (at most 100 characters, no ':' or control "
                                "characters)") % {"username": username}, "username")
    return username


def check_kind(kind: str) -> str:
    if kind not in KIND_CHOICES:
        raise CredentialError(_("%(kind)r is not a credential kind (one of %(kinds)s)") % {
            "kind": kind, "kinds": ", ".join(KIND_CHOICES)}, "kind")
    return kind


def check_username_of_kind(kind: str, username: str) -> str:
    """A BMC login has a user name; a token or an ingest credential none."""
    if kind == Kind.BMC:
        return check_username(username)
    if username:
        raise CredentialError(_("a credential of kind %(kind)s has no user name") % {"kind": kind}, "username")
    return ""


def check_secret_of_kind(kind: str, secret: str) -> str:
    """A BMC login and an InfluxDB token have a secret; an ingest credential none (the appliance issues each
    node its own token)."""
    if kind != Kind.INGEST:
        return check_secret(secret)
    if secret:
        raise CredentialError(_("an ingest credential holds no secret: the appliance issues each node its own "
                                "token"), "secret")
    return ""


def check_endpoint(value: str) -> str:
    try:
        return endpoint_of(value)
    except ValueError as exc:
        raise CredentialError(str(exc), "endpoints") from None


def check_ca_file(path: str) -> str:
    """An absolute path to a PEM file holding at least one certificate (given by an Administrator)."""
    if not path:
        return ""
    candidate = Path(path)
    if not candidate.is_absolute():
        raise CredentialError(_("%(path)r is not an absolute path") % {"path": path}, "ca_file")
    try:
        x509.load_pem_x509_certificates(candidate.read_bytes())
    except OSError as exc:
        raise CredentialError(f"{path}: {exc.strerror}", "ca_file") from None
    except ValueError:
        raise CredentialError(_("%(path)s holds no PEM certificate") % {"path": path}, "ca_file") from None
    return str(candidate)


# --------------------------------------------------------------------------------------------------
# Changes (each saved through AuditedModel: one audit record, the secret redacted)


def get(name: str) -> Credential:
    credential = Credential.objects.filter(name=name).first()
    if credential is None:
        raise CredentialError(_("no credential named %(name)r") % {"name": name}, "name")
    return credential


@transaction.atomic
def create(name: str, *, username: str = "", secret: str = "", endpoints: list[str] = (), description: str = "",
           ca_file: str = "", kind: str = Kind.BMC) -> Credential:
    name = check_name(name)
    kind = check_kind(kind)
    if Credential.objects.filter(name=name).exists():
        raise CredentialError(_("a credential named %(name)r exists already") % {"name": name}, "name")
    bound = []
    for value in endpoints:
        endpoint = check_endpoint(value)
        if endpoint not in bound:
            bound.append(endpoint)
    credential = Credential(name=name, kind=kind, username=check_username_of_kind(kind, username),
                            secret=check_secret_of_kind(kind, secret), endpoints=bound,
                            description=description.strip(), ca_file=check_ca_file(ca_file))
    credential.save()
    return credential


@transaction.atomic
def update(name: str, *, username: str | None = None, secret: str | None = None, description: str | None = None,
           ca_file: str | None = None, endpoints: list[str] | None = None) -> Credential:
    """Change the given fields (None: keep); `endpoints` replaces the whole binding."""
    credential = Credential.objects.select_for_update().filter(name=name).first()
    if credential is None:
        raise CredentialError(_("no credential named %(name)r") % {"name": name}, "name")
    if username is not None:
        credential.username = check_username_of_kind(credential.kind, username)
    if secret is not None:
        credential.secret = check_secret_of_kind(credential.kind, secret)
    if description is not None:
        credential.description = description.strip()
    if ca_file is not None:
        credential.ca_file = check_ca_file(ca_file)
    if endpoints is not None:
        bound = []
        for value in endpoints:
            endpoint = check_endpoint(value)
            if endpoint not in bound:
                bound.append(endpoint)
        credential.endpoints = bound
    credential.save()
    return credential


def bind(name: str, endpoints: list[str]) -> Credential:
    credential = get(name)
    added = [check_endpoint(value) for value in endpoints]
    return update(name, endpoints=[*credential.endpoints, *[e for e in added if e not in credential.endpoints]])


def unbind(name: str, endpoints: list[str]) -> Credential:
    credential = get(name)
    removed = {check_endpoint(value) for value in endpoints}
    missing = sorted(removed - set(credential.endpoints))
    if missing:
        raise CredentialError(_("credential %(name)s is not bound to %(endpoints)s") % {
            "name": name, "endpoints": ", ".join(missing)}, "endpoints")
    return update(name, endpoints=[e for e in credential.endpoints if e not in removed])


def named_by_sites(credential: Credential) -> list[str]:
    """The appliances whose site names the credential outside a BMC (telemetry.influxdb.token_credential)."""
    if credential.kind != Kind.INFLUXDB:
        return []
    return sorted(appliance.name for appliance in Appliance.objects.only("name", "settings")
                  if influxdb_settings(appliance).get("token_credential") == credential.name)


@transaction.atomic
def delete(name: str) -> None:
    credential = get(name)
    sites = named_by_sites(credential)
    if sites:
        raise CredentialError(_("credential %(name)s is the InfluxDB token of appliance %(sites)s: change the site "
                                "definition first") % {"name": name, "sites": ", ".join(sites)}, "name")
    try:
        credential.delete()
    except ProtectedError:
        users = sorted(BMC.objects.filter(credential=credential).values_list("node__name", flat=True))
        raise CredentialError(_("credential %(name)s is used by the BMC of %(nodes)s: change the site "
                                "definition first") % {"name": name, "nodes": ", ".join(users)}, "name") from None


# --------------------------------------------------------------------------------------------------
# Handing a secret to a run


@dataclass(frozen=True)
class BMCLogin:
    username: str
    password: str
    ca_file: str


def login_for_run(bmc: BMC) -> BMCLogin:
    """The login of a BMC for a run, refused unless the BMC's endpoint is one its credential is bound to."""
    node = bmc.node
    credential = bmc.credential
    if credential.kind != Kind.BMC:
        raise CredentialRefused(f"credential {credential.name} of the BMC of {node.name} is no BMC login")
    try:
        endpoint = endpoint_of(bmc.url)
    except ValueError:
        raise CredentialRefused(f"the BMC URL of {node.name} ({bmc.url!r}) names no endpoint") from None
    if endpoint not in credential.endpoints:
        raise CredentialRefused(f"credential {credential.name} is not bound to {endpoint}, the BMC of "
                                f"{node.name}: it is not sent there (an Administrator binds it: "
                                f"{resources.program()} credential bind {credential.name} {endpoint})")
    if not node.appliance.simulated:
        if not endpoint.startswith("https://"):
            raise CredentialRefused(f"the BMC of {node.name} is not reached over https: its credential is not sent")
        if not bmc.verify_tls:
            raise CredentialRefused(f"TLS verification of the BMC of {node.name} is off on a real appliance: "
                                    "its credential is not sent")
    if not credential.secret:
        raise CredentialRefused(f"credential {credential.name} has no secret (an Administrator sets it: "
                                f"{resources.program()} credential set-secret {credential.name})")
    return BMCLogin(credential.username, credential.secret, credential.ca_file)


# --------------------------------------------------------------------------------------------------
# The telemetry URLs of a site: where the InfluxDB token and the nodes' ingest tokens may go


def influxdb_settings(appliance) -> dict:
    return dict(((appliance.settings or {}).get("telemetry") or {}).get("influxdb") or {})


def _endpoint_or_none(url: str) -> str | None:
    try:
        return endpoint_of(url)
    except ValueError:
        return None


def ingest_endpoints() -> list[str]:
    """The endpoints the nodes' ingest tokens may be sent to besides the installed portal's: those an
    Administrator bound an `ingest` credential to."""
    allowed = []
    for endpoints in Credential.objects.filter(kind=Kind.INGEST).values_list("endpoints", flat=True):
        allowed.extend(endpoint for endpoint in endpoints if endpoint not in allowed)
    return allowed


def ingest_url_refusal(url: str) -> str:
    """Why the nodes' ingest tokens may not be sent to a site's telemetry.ingest_url ("" when they may):
    it must be the installed portal's endpoint (APPLIANCE_TELEMETRY_INGEST_URL) or one an `ingest`
    credential is bound to."""
    endpoint = _endpoint_or_none(url)
    if endpoint is None:
        return f"{url!r} names no endpoint"
    if settings.TELEMETRY_INGEST_URL and endpoint == _endpoint_or_none(settings.TELEMETRY_INGEST_URL):
        return ""
    if endpoint in ingest_endpoints():
        return ""
    return (f"{endpoint} is not an ingest endpoint an Administrator allowed: the nodes' tokens are not sent there "
            f"(an Administrator allows it: {resources.program()} credential create NAME --kind ingest --endpoint {endpoint}, "
            f"or {resources.program()} credential bind NAME {endpoint})")


def check_ingest_url(url: str) -> None:
    """CredentialRefused unless the nodes' ingest tokens may be sent to the site's ingest URL."""
    refusal = ingest_url_refusal(url)
    if refusal:
        raise CredentialRefused(f"telemetry.ingest_url: {refusal}")


def influxdb_token_refusal(name: str, url: str) -> tuple[str, str]:
    """Why the InfluxDB token credential `name` may not be sent to `url`: (the site's field at fault,
    the reason), or ("", "") when it may."""
    credential = Credential.objects.filter(name=name).only("kind", "endpoints").first()
    if credential is None or credential.kind != Kind.INFLUXDB:
        return "token_credential", (f"{name!r} is not an InfluxDB token credential (an Administrator creates it: "
                                    f"{resources.program()} credential create {name} --kind influxdb --endpoint URL)")
    endpoint = _endpoint_or_none(url)
    if endpoint is None:
        return "url", f"{url!r} names no endpoint"
    if endpoint not in credential.endpoints:
        return "url", (f"credential {name} is not bound to {endpoint}: its token is not sent there (an "
                       f"Administrator binds it: {resources.program()} credential bind {name} {endpoint})")
    return "", ""


def influxdb_token_for_run(appliance) -> str:
    """The token the collectors write the site's InfluxDB with ("" when the site names no InfluxDB),
    refused unless the site's influxdb.url is an endpoint its credential is bound to."""
    influxdb = influxdb_settings(appliance)
    url, name = str(influxdb.get("url") or ""), str(influxdb.get("token_credential") or "")
    if not url:
        return ""
    if not name:
        raise CredentialRefused(f"appliance {appliance.name}: telemetry.influxdb names no token_credential: "
                                f"nothing is sent to {url} until the site names an influxdb credential an "
                                "Administrator bound to it")
    field, refusal = influxdb_token_refusal(name, url)
    if refusal:
        raise CredentialRefused(f"appliance {appliance.name}: telemetry.influxdb.{field}: {refusal}")
    secret = Credential.objects.get(name=name).secret
    if not secret:
        raise CredentialRefused(f"credential {name} has no secret (an Administrator sets it: "
                                f"{resources.program()} credential set-secret {name})")
    return secret
