"""The telemetry URLs of a site are where every node sends a token: `telemetry.ingest_url` receives each
node's own ingest token, `telemetry.influxdb.url` the site's InfluxDB token. Like a BMC URL, each must be
an endpoint an Administrator allowed (an `ingest` credential bound to it; the InfluxDB token credential
bound to it), whoever imports the site.

The attack these tests replay: an Operator (`inventory.change`) imports a site whose ingest URL or InfluxDB
URL is a listener of theirs, and collects every node's token at the next monitoring run. (The run side,
the secret on the nodes: tests/telemetry/test_influxdb_token.py.)
"""

import io
import sys

import pytest
from django.core.management import CommandError, call_command

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory import credentials
from appliance.inventory.models import Appliance, Credential
from appliance.inventory.services import import_site

pytestmark = pytest.mark.django_db

LISTENER = "https://collect.attacker.example:8443"
INFLUX = "https://influx.site.example:8086"
INFLUX_TOKEN = "Influx-Site-T0ken-4711"

INGEST_REFUSED = (f"{LISTENER} is not an ingest endpoint an Administrator allowed: the nodes' tokens are not sent "
                  f"there (an Administrator allows it: manage.py credential create NAME --kind ingest --endpoint "
                  f"{LISTENER}, or manage.py credential bind NAME {LISTENER})")
INFLUX_UNBOUND = (f"credential influx-token is not bound to {LISTENER}: its token is not sent there (an "
                  f"Administrator binds it: manage.py credential bind influx-token {LISTENER})")


def with_telemetry(demo_text: str, section: str) -> str:
    return demo_text.rstrip("\n") + "\n" + section


def ingest_site(demo_text: str, url: str) -> str:
    return with_telemetry(demo_text, f"telemetry:\n  ingest_url: {url}/telemetry/ingest\n")


def influx_site(demo_text: str, url: str, credential: str | None = "influx-token") -> str:
    token = f", token_credential: {credential}" if credential else ""
    return with_telemetry(demo_text, f"telemetry:\n  influxdb: {{url: \"{url}\"{token}}}\n")


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), start=1)
                if needle in line and not line.lstrip().startswith("#"))


def api_import(client, text: str):
    return client.post("/api/v1/inventory/site/import/?filename=demo.yml", text, content_type="application/yaml")


def api_errors(response) -> list[tuple[int, str, str]]:
    assert response.status_code == 400, response.content
    return [(e["line"], e["path"], e["message"]) for e in response.json()["error"]["errors"]]


@pytest.fixture
def imported(demo_text, site_env):
    """The demo appliance as imported, and the site's InfluxDB token an Administrator keeps for INFLUX."""
    import_site(demo_text, "demo.yml")
    credentials.create("influx-token", kind="influxdb", secret=INFLUX_TOKEN, endpoints=[INFLUX])
    return Appliance.objects.get(name="demo")


def telemetry_of(appliance) -> dict:
    appliance.refresh_from_db()
    return appliance.settings.get("telemetry", {})


# --- an Operator's import -----------------------------------------------------------------------------


def test_an_operator_cannot_send_the_nodes_ingest_tokens_to_a_host_of_theirs(demo_text, imported, client_for):
    attack = ingest_site(demo_text, LISTENER)

    response = api_import(client_for(Role.OPERATOR), attack)

    assert api_errors(response) == [(line_of(attack, "ingest_url"), "telemetry.ingest_url", INGEST_REFUSED)]
    assert telemetry_of(imported) == {}


def test_an_operator_cannot_send_the_influxdb_token_to_a_host_of_theirs(demo_text, imported, client_for):
    attack = influx_site(demo_text, LISTENER)

    response = api_import(client_for(Role.OPERATOR), attack)

    assert api_errors(response) == [(line_of(attack, "influxdb"), "telemetry.influxdb.url", INFLUX_UNBOUND)]
    assert telemetry_of(imported) == {}


def test_an_influxdb_url_needs_a_token_credential_of_that_kind(demo_text, imported, client_for):
    operator = client_for(Role.OPERATOR)
    without = influx_site(demo_text, LISTENER, credential=None)
    assert api_errors(api_import(operator, without)) == [(
        line_of(without, "influxdb"), "telemetry.influxdb.url",
        f"{LISTENER}: the collectors write to an InfluxDB only with a token an Administrator bound to its "
        "endpoint: name that credential in token_credential (manage.py credential create NAME --kind influxdb "
        "--endpoint URL)")]
    # A BMC login bound to the listener is no InfluxDB token: its password is not sent as one.
    credentials.bind("demo-bmc", [LISTENER])
    bmc = influx_site(demo_text, LISTENER, credential="demo-bmc")
    assert api_errors(api_import(operator, bmc)) == [(
        line_of(bmc, "influxdb"), "telemetry.influxdb.token_credential",
        "'demo-bmc' is not an InfluxDB token credential (an Administrator creates it: manage.py credential "
        "create demo-bmc --kind influxdb --endpoint URL)")]
    assert telemetry_of(imported) == {}


def test_the_command_refuses_the_same_site(demo_text, imported, tmp_path):
    """`manage.py site import` is the Administrator's channel, and an unallowed URL is refused there too:
    the allow-list is changed with `manage.py credential`, on purpose, not by importing a file."""
    site = tmp_path / "attack.yml"
    site.write_text(ingest_site(demo_text, LISTENER))

    errors = io.StringIO()
    with pytest.raises(CommandError, match="attack.yml: 1 error, nothing written$"):
        call_command("site", "import", str(site), stdout=io.StringIO(), stderr=errors)

    assert errors.getvalue() == (
        f"{site}:{line_of(site.read_text(), 'ingest_url')}: telemetry.ingest_url: {INGEST_REFUSED}\n")
    assert telemetry_of(imported) == {}


def test_an_operator_cannot_allow_an_endpoint_themselves(imported, client_for):
    operator = client_for(Role.OPERATOR)
    created = operator.post("/api/v1/inventory/credentials/", {"name": "mine", "kind": "ingest",
                                                                "endpoints": [LISTENER]}, content_type="application/json")
    bound = operator.patch("/api/v1/inventory/credentials/influx-token/", {"endpoints": [INFLUX, LISTENER]},
                           content_type="application/json")

    assert (created.status_code, bound.status_code) == (403, 403)
    assert list(Credential.objects.filter(kind__in=["ingest", "influxdb"]).values_list("name", "endpoints")) == [
        ("influx-token", ["https://influx.site.example:8086"])]


# --- an Administrator allows ----------------------------------------------------------------------------


def test_once_an_administrator_allows_them_an_operator_imports_the_urls(demo_text, imported, client_for):
    admin = client_for(Role.ADMINISTRATOR)
    created = admin.post("/api/v1/inventory/credentials/", {"name": "site-ingest", "kind": "ingest",
                                                             "endpoints": ["collect.attacker.example:8443"]},
                         content_type="application/json")
    assert created.status_code == 201, created.content
    assert {key: created.json()[key] for key in ("kind", "username", "secret_set", "endpoints")} == {
        "kind": "ingest", "username": "", "secret_set": False, "endpoints": [LISTENER]}
    call_command("credential", "bind", "influx-token", LISTENER, stdout=io.StringIO())
    site = with_telemetry(demo_text, f"telemetry:\n  ingest_url: {LISTENER}/telemetry/ingest\n"
                                     f"  influxdb: {{url: \"{LISTENER}/\", bucket: raw, token_credential: influx-token}}\n")

    response = api_import(client_for(Role.OPERATOR), site)

    assert response.status_code == 200, response.content
    assert telemetry_of(imported) == {
        "ingest_url": f"{LISTENER}/telemetry/ingest",
        "influxdb": {"url": LISTENER, "bucket": "raw", "token_credential": "influx-token"}}


def test_the_installed_portals_own_endpoint_needs_no_credential(demo_text, imported, settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"

    import_site(ingest_site(demo_text, "https://APPLIANCE.example:8443"), "demo.yml")

    assert telemetry_of(imported) == {"ingest_url": "https://APPLIANCE.example:8443/telemetry/ingest"}


# --- the new kinds --------------------------------------------------------------------------------------


def credential_command(*args, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    call_command("credential", *args, stdout=out)
    return out.getvalue()


def test_the_command_keeps_an_influxdb_token_and_an_ingest_allow_list(demo_text, site_env, monkeypatch):
    records = AuditRecord.objects.count()

    out = credential_command("create", "raw-influx", "--kind", "influxdb", "--endpoint", INFLUX, "--secret-file", "-",
                             stdin=INFLUX_TOKEN + "\n", monkeypatch=monkeypatch)
    assert out.strip() == f"credential raw-influx created (influxdb; bound to {INFLUX})"
    out = credential_command("create", "site-ingest", "--kind", "ingest", "--endpoint", "https://10.0.0.5:8443")
    assert out.strip() == "credential site-ingest created (ingest; bound to https://10.0.0.5:8443)"
    assert Credential.objects.get(name="raw-influx").secret == INFLUX_TOKEN
    import_site(influx_site(demo_text, INFLUX, "raw-influx"), "demo.yml")
    listing = credential_command("list")
    assert "raw-influx  influxdb  secret set\n" in listing
    assert "site-ingest  ingest  no secret (the nodes' own tokens)\n" in listing
    assert "used by:   telemetry of demo\n" in listing

    with pytest.raises(CommandError, match="^credential raw-influx is the InfluxDB token of appliance demo: change "
                                           "the site definition first$"):
        credential_command("delete", "raw-influx")
    with pytest.raises(CommandError, match="^credential site-ingest is an ingest credential: it holds no secret$"):
        credential_command("set-secret", "site-ingest", "--secret-file", "-", stdin="x\n", monkeypatch=monkeypatch)
    with pytest.raises(CommandError, match="^a credential of kind influxdb has no user name$"):
        credential_command("create", "other", "--kind", "influxdb", "--username", "root", "--secret-file", "-",
                           stdin="t\n", monkeypatch=monkeypatch)
    with pytest.raises(CommandError, match="^the secret is empty$"):
        credential_command("create", "other", "--kind", "influxdb", "--secret-file", "-", stdin="\n",
                           monkeypatch=monkeypatch)
    with pytest.raises(CommandError, match="^a BMC login needs --username$"):
        credential_command("create", "other", "--secret-file", "-", stdin="t\n", monkeypatch=monkeypatch)
    # The token is recorded as the BMC passwords are: redacted.
    created = AuditRecord.objects.get(sequence__gt=records, event="inventory.credential.create",
                                      target_name="raw-influx")
    assert INFLUX_TOKEN not in str(created.details) and "[redacted]" in str(created.details)


def test_a_token_credential_of_another_kind_is_refused_by_the_api(site_env, client_for):
    admin = client_for(Role.ADMINISTRATOR)
    post = lambda data: admin.post("/api/v1/inventory/credentials/", data, content_type="application/json")  # noqa: E731

    assert post({"name": "t1", "kind": "influxdb", "endpoints": [INFLUX]}).json()["error"]["fields"] == {
        "secret": ["this field is required"]}
    assert post({"name": "t2", "kind": "ingest", "secret": "s"}).json()["error"]["fields"] == {
        "secret": ["an ingest credential holds no secret: the appliance issues each node its own token"]}
    assert post({"name": "t3", "kind": "token"}).status_code == 400
    made = post({"name": "t4", "kind": "influxdb", "secret": INFLUX_TOKEN, "endpoints": [INFLUX]})
    assert made.status_code == 201 and INFLUX_TOKEN not in made.content.decode()
    changed = admin.patch("/api/v1/inventory/credentials/t4/", {"kind": "bmc"}, content_type="application/json")
    assert changed.json()["error"]["fields"] == {"kind": ["a credential keeps its kind: create another one"]}


def test_the_portal_page_creates_and_changes_the_new_kinds(site_env, client_for):
    admin = client_for(Role.ADMINISTRATOR)
    new = {"name": "raw-influx", "kind": "influxdb", "username": "", "secret": INFLUX_TOKEN, "endpoints": INFLUX,
           "description": "", "ca_file": ""}
    assert admin.post("/inventory/credentials/", new).status_code == 302
    assert admin.post("/inventory/credentials/", {**new, "name": "site-ingest", "kind": "ingest", "secret": "",
                                                  "endpoints": "https://10.0.0.5:8443"}).status_code == 302
    # A change of the token keeps its kind and endpoints as posted; an ingest credential takes no secret.
    assert admin.post("/inventory/credentials/raw-influx/", {**new, "secret": "Influx-New-T0ken"}).status_code == 302
    assert list(Credential.objects.filter(kind__in=["influxdb", "ingest"]).order_by("name").values_list(
        "name", "kind", "username", "secret", "endpoints")) == [
        ("raw-influx", "influxdb", "", "Influx-New-T0ken", [INFLUX]),
        ("site-ingest", "ingest", "", "", ["https://10.0.0.5:8443"])]

    html = admin.get("/inventory/credentials/").content.decode()
    assert "InfluxDB API token" in html and "<td>none (the nodes' own)</td>" in html
    assert "Influx-New-T0ken" not in html and INFLUX_TOKEN not in html
    refused = admin.post("/inventory/credentials/", {**new, "name": "t5", "kind": "ingest"})
    assert refused.status_code == 400
    assert "an ingest credential holds no secret" in refused.content.decode()
