"""Credentials: the site definition names them, Administrators manage them, and an Operator's site
can neither read a file through them nor send one to an endpoint of its choosing.

The attack these tests replay: an Operator imports a site whose gpu01 BMC is a listener of theirs with
`password: {file: <state>/keys/admin-password}`, runs the firmware stage, and receives the
Administrator's password as HTTP Basic auth. Or changes only gpu01's BMC URL and receives the real BMC
password. (The run side, with a real listener, is tests/provisioning/test_credential_gate.py.)
"""

import io
import json
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory import credentials
from appliance.inventory.models import BMC, Credential, Node
from appliance.inventory.services import import_site, validate_site
from appliance.inventory.sitedef import SiteValidationError

from .conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db

LISTENER = "http://127.0.0.1:47011"
GPU01_BMC = 'bmc: {url: "https://127.0.0.1:18441"}'
PASSWORD_MESSAGE = ("a site definition holds no password and names no file or variable to read one from: an "
                    "Administrator creates a credential (manage.py credential create NAME) bound to this BMC's URL, "
                    "and the site names it (credential: NAME)")


def errors_of(text: str, filename: str = "demo.yml") -> list[tuple[int, str, str]]:
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, filename)
    return [(e.line, e.path, e.message) for e in caught.value.errors]


def import_errors(text: str, **options) -> list[tuple[str, str]]:
    with pytest.raises(SiteValidationError) as caught:
        import_site(text, "demo.yml", **options)
    return [(e.path, e.message) for e in caught.value.errors]


def api_import(client, text: str):
    return client.post("/api/v1/inventory/site/import/?filename=demo.yml", text, content_type="application/yaml")


# --- the site definition holds no secret and points at none ---------------------------------------


def test_the_attack_site_is_refused_and_names_no_file(demo_text, site_env, client_for):
    admin_password = site_env.STATE_DIR / "keys" / "admin-password"
    admin_password.parent.mkdir(parents=True)
    admin_password.write_text("Admin-pw-that-must-stay-home\n")
    attack = demo_text.replace(
        GPU01_BMC, f'bmc: {{url: "{LISTENER}", password: {{file: "{admin_password}"}}}}')
    import_site(demo_text, "demo.yml")

    response = api_import(client_for(Role.OPERATOR), attack)

    assert response.status_code == 400, response.content
    errors = {(e["path"], e["message"]) for e in response.json()["error"]["errors"]}
    assert errors == {("nodes[0].bmc.password", PASSWORD_MESSAGE)}
    assert BMC.objects.get(node__name="gpu01").url == "https://127.0.0.1:18441"
    assert "Admin-pw-that-must-stay-home" not in response.content.decode()


@pytest.mark.parametrize("reference", [
    "{file: /etc/passwd}", "{file: /nonexistent}", '{file: "${APPLIANCE_STATE_DIR}/keys/admin-password"}',
    "{env: HOME}", "{env: SURELY_UNSET_VARIABLE_4711}", "hunter2", "{file: /etc/passwd, env: HOME}",
])
def test_every_password_reference_gets_the_same_error(demo_text, site_env, reference):
    text = demo_text.replace(GPU01_BMC, f'bmc: {{url: "https://127.0.0.1:18441", password: {reference}}}')
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if "password:" in row and "18441" in row)
    # Identical for an existing and a missing file, a set and an unset variable: nothing is looked up.
    assert errors_of(text) == [(line, "nodes[0].bmc.password", PASSWORD_MESSAGE)]


def test_unbound_url_is_refused_even_to_an_administrator(demo_text, site_env):
    text = demo_text.replace(GPU01_BMC, f'bmc: {{url: "{LISTENER}"}}')
    assert import_errors(text) == [
        ("nodes[0].bmc.url", "credential demo-bmc is not bound to http://127.0.0.1:47011 (an Administrator binds "
                             "it: manage.py credential bind demo-bmc http://127.0.0.1:47011)")]
    assert not Node.objects.exists()


def test_a_real_site_needs_https_and_verified_tls(site_env):
    text = """\
appliance: {name: lab}
nodes:
  - name: n1
    role: storage
    platform: storage-server
    management_address: 10.0.0.1
    bmc: {url: "http://10.0.0.2", credential: lab-bmc}
  - name: n2
    role: storage
    platform: storage-server
    management_address: 10.0.0.3
    bmc: {url: "https://10.0.0.4", credential: lab-bmc, verify_tls: false}
"""
    assert errors_of(text, "lab.yml") == [
        (7, "nodes[0].bmc.url", "'http://10.0.0.2': a BMC is reached over https on a real appliance (http only with "
                                "simulation: true)"),
        (12, "nodes[1].bmc.verify_tls", "TLS verification of a BMC is turned off only on a simulated appliance "
                                        "(simulation: true)"),
    ]


# --- who may change a node's BMC binding ------------------------------------------------------------


def test_an_operator_may_not_point_an_existing_node_at_another_endpoint(demo_text, site_env, client_for):
    import_site(demo_text, "demo.yml")
    # Even an endpoint the credential is bound to: moving a node's BMC is an Administrator's decision.
    credentials.bind("demo-bmc", ["https://127.0.0.1:18449"])
    moved = demo_text.replace("https://127.0.0.1:18441", "https://127.0.0.1:18449")

    response = api_import(client_for(Role.OPERATOR), moved)

    assert response.status_code == 400, response.content
    assert [(e["path"], e["message"]) for e in response.json()["error"]["errors"]] == [
        ("nodes[0].bmc.url", "changing the BMC address of gpu01 needs an Administrator "
                             "(https://127.0.0.1:18441 -> https://127.0.0.1:18449)")]
    assert BMC.objects.get(node__name="gpu01").url == "https://127.0.0.1:18441"

    response = api_import(client_for(Role.ADMINISTRATOR), moved)
    assert response.status_code == 200, response.content
    assert BMC.objects.get(node__name="gpu01").url == "https://127.0.0.1:18449"


def test_an_operator_may_not_change_a_credential_or_turn_tls_off(demo_text, site_env, client_for):
    import_site(demo_text, "demo.yml")
    credentials.bind("lab-bmc", ["https://127.0.0.1:18442"])
    changed = (demo_text.replace('bmc: {url: "https://127.0.0.1:18442"}',
                                 'bmc: {url: "https://127.0.0.1:18442", credential: lab-bmc}')
               .replace('bmc: {url: "https://127.0.0.1:18443"}',
                        'bmc: {url: "https://127.0.0.1:18443", verify_tls: false}'))

    assert api_import(client_for(Role.OPERATOR), changed).json()["error"]["errors"] == [
        {"file": "demo.yml", "line": changed.splitlines().index('    bmc: {url: "https://127.0.0.1:18442", '
                                                               'credential: lab-bmc}') + 1,
         "path": "nodes[1].bmc.credential",
         "message": "changing the BMC credential of gpu02 needs an Administrator (demo-bmc -> lab-bmc)"},
        {"file": "demo.yml", "line": changed.splitlines().index('    bmc: {url: "https://127.0.0.1:18443", '
                                                               'verify_tls: false}') + 1,
         "path": "nodes[2].bmc.verify_tls",
         "message": "turning off TLS verification of the BMC of gpu03 needs an Administrator"},
    ]
    # The portal's preview refuses it the same way (the check runs in the dry run too).
    from django.core.files.uploadedfile import SimpleUploadedFile

    page = client_for(Role.OPERATOR).post("/inventory/site/import/",
                                          {"file": SimpleUploadedFile("demo.yml", changed.encode())})
    assert "changing the BMC credential of gpu02 needs an Administrator" in page.content.decode()
    assert BMC.objects.get(node__name="gpu02").credential.name == "demo-bmc"


def test_an_operator_may_not_turn_an_appliance_real_or_simulated(demo_text, site_env, client_for):
    import_site(demo_text, "demo.yml")
    response = api_import(client_for(Role.OPERATOR), demo_text.replace("simulation: true", "simulation: false"))
    assert response.status_code == 400
    assert [(e["path"], e["message"]) for e in response.json()["error"]["errors"]] == [
        ("simulation", "changing whether appliance demo is simulated needs an Administrator")]


def test_an_operator_may_add_a_node_whose_bmc_is_bound_already(demo_text, site_env, client_for):
    gpu04 = demo_text[demo_text.index("  - name: gpu04"):demo_text.index("  - name: stor01")]
    import_site(demo_text.replace(gpu04, "").replace("nodes: [gpu04]", "nodes: [gpu03]")
                .replace("nodes: [gpu01, gpu02, gpu03]", "nodes: [gpu01, gpu02]"), "demo.yml")

    response = api_import(client_for(Role.OPERATOR), demo_text)

    assert response.status_code == 200, response.content
    assert BMC.objects.get(node__name="gpu04").url == "https://127.0.0.1:18444"


def test_the_command_line_is_the_administrators_channel(demo_text, site_env):
    """`manage.py site import` acts without a role, like every management command: whoever runs it
    holds the appliance's keys. It may rebind a node (to an endpoint the credential is bound to)."""
    import_site(demo_text, "demo.yml")
    credentials.bind("demo-bmc", ["https://127.0.0.1:18449"])
    out = io.StringIO()
    site = site_env.STATE_DIR / "moved.yml"
    site.write_text(demo_text.replace("https://127.0.0.1:18441", "https://127.0.0.1:18449"))
    call_command("site", "import", str(site), stdout=out)
    assert "update bmc gpu01: url https://127.0.0.1:18441 -> https://127.0.0.1:18449" in out.getvalue()


# --- the credential API: Administrators only, the secret write-only -------------------------------


def test_operators_and_others_can_neither_read_nor_create_credentials(site_env, client_for):
    for role in (Role.OPERATOR, Role.ML_ENGINEER, Role.AUDITOR, Role.VIEWER):
        client = client_for(role)
        assert client.get("/api/v1/inventory/credentials/").status_code == 403
        assert client.get("/api/v1/inventory/credentials/demo-bmc/").status_code == 403
        response = client.post("/api/v1/inventory/credentials/", {
            "name": "mine", "username": "root", "secret": "x" * 12, "endpoints": [LISTENER]},
            content_type="application/json")
        assert response.status_code == 403
        assert client.post("/api/v1/inventory/credentials/demo-bmc/", {}, content_type="application/json").status_code in (
            403, 405)
    assert not Credential.objects.filter(name="mine").exists()


def test_an_administrator_manages_credentials_and_never_reads_a_secret(site_env, client_for, make_user):
    admin = client_for(Role.ADMINISTRATOR)
    records = AuditRecord.objects.count()
    response = admin.post("/api/v1/inventory/credentials/", {
        "name": "rack2-bmc", "username": "root", "secret": "Rack2-Bmc-Secret-81", "description": "rack 2",
        "endpoints": ["https://BMC-21.example.org", "10.2.0.22:8443"]}, content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["endpoints"] == ["https://bmc-21.example.org:443", "https://10.2.0.22:8443"]
    assert (body["name"], body["username"], body["secret_set"], body["used_by"]) == ("rack2-bmc", "root", True, [])
    assert "secret" not in body

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM inventory_credential WHERE name = 'rack2-bmc'")
        stored = cursor.fetchone()[0]
    assert stored.startswith("enc:v1:") and "Rack2-Bmc-Secret-81" not in stored

    response = admin.patch("/api/v1/inventory/credentials/rack2-bmc/", {"secret": "Rack2-Bmc-Secret-82",
                           "endpoints": ["https://bmc-21.example.org"]}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert Credential.objects.get(name="rack2-bmc").secret == "Rack2-Bmc-Secret-82"

    pages = [admin.get("/api/v1/inventory/credentials/").content, admin.get("/api/v1/inventory/credentials/rack2-bmc/").content]
    events = list(AuditRecord.objects.filter(sequence__gt=records, event__startswith="inventory.credential."))
    assert [e.event for e in events] == ["inventory.credential.create", "inventory.credential.update"]
    assert events[0].actor_username and events[0].details["after"]["secret"] == "[redacted]"
    assert events[1].details["changes"] == {
        "secret": "[redacted]",
        "endpoints": [["https://bmc-21.example.org:443", "https://10.2.0.22:8443"], ["https://bmc-21.example.org:443"]]}
    everything = b"".join(pages).decode() + json.dumps([e.details for e in AuditRecord.objects.all()])
    assert "Rack2-Bmc-Secret-8" not in everything and DEMO_PASSWORD not in everything

    assert admin.delete("/api/v1/inventory/credentials/rack2-bmc/").status_code == 204
    assert AuditRecord.objects.filter(event="inventory.credential.delete", target_name="rack2-bmc").exists()


def test_the_api_refuses_bad_credentials_with_the_field_named(site_env, client_for, demo_text):
    admin = client_for(Role.ADMINISTRATOR)
    bad = {"name": "Bad Name", "username": "root", "secret": "s" * 12}
    response = admin.post("/api/v1/inventory/credentials/", bad, content_type="application/json")
    assert response.status_code == 400 and "name" in response.json()["error"]["fields"]
    for field, value in (("endpoints", ["ftp://10.0.0.9"]), ("secret", "two\nlines"), ("username", "a:b")):
        response = admin.post("/api/v1/inventory/credentials/", {**bad, "name": "ok-name", field: value},
                              content_type="application/json")
        assert response.status_code == 400 and list(response.json()["error"]["fields"]) == [field], response.content
    assert not Credential.objects.filter(name="ok-name").exists()
    # A credential in use stays: the site names it.
    import_site(demo_text, "demo.yml")
    response = admin.delete("/api/v1/inventory/credentials/demo-bmc/")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == (
        "credential demo-bmc is used by the BMC of gpu01, gpu02, gpu03, gpu04, mgmt01, stor01, stor02: "
        "change the site definition first")


# --- the management command -------------------------------------------------------------------------


def credential_command(*args, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    call_command("credential", *args, stdout=out)
    return out.getvalue()


def test_the_command_creates_binds_lists_and_deletes_without_showing_a_secret(site_env, monkeypatch, tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("Cli-Bmc-Secret-33\nsecond line ignored\n")
    records = AuditRecord.objects.count()
    out = credential_command("create", "cli-bmc", "--username", "root", "--secret-file", str(secret_file),
                             "--endpoint", "https://10.3.0.1", "--description", "rack 3")
    assert out.strip() == "credential cli-bmc created (user root; bound to https://10.3.0.1:443)"
    assert Credential.objects.get(name="cli-bmc").secret == "Cli-Bmc-Secret-33"

    out = credential_command("set-secret", "cli-bmc", "--secret-file", "-", stdin="Cli-Bmc-Secret-34\n",
                             monkeypatch=monkeypatch)
    assert out.strip() == "credential cli-bmc: secret replaced"
    assert Credential.objects.get(name="cli-bmc").secret == "Cli-Bmc-Secret-34"

    assert credential_command("bind", "cli-bmc", "10.3.0.2:8443").strip() == (
        "credential cli-bmc is bound to https://10.3.0.1:443, https://10.3.0.2:8443")
    assert credential_command("unbind", "cli-bmc", "https://10.3.0.1:443").strip() == (
        "credential cli-bmc is bound to https://10.3.0.2:8443")
    listing = credential_command("list")
    assert "cli-bmc  bmc  user root  secret set" in listing and "endpoints: https://10.3.0.2:8443" in listing

    assert credential_command("delete", "cli-bmc").strip() == "credential cli-bmc deleted"
    events = AuditRecord.objects.filter(sequence__gt=records)
    assert list(events.filter(event__startswith="inventory.credential.").values_list("event", flat=True)) == [
        "inventory.credential.create", "inventory.credential.update", "inventory.credential.update",
        "inventory.credential.update", "inventory.credential.delete"]
    assert all(e.channel == "cli" for e in events)
    everything = listing + json.dumps([e.details for e in events])
    assert "Cli-Bmc-Secret-3" not in everything


def test_the_command_refuses_with_one_clear_message(site_env, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal: no prompt possible
    with pytest.raises(CommandError, match="no terminal to prompt for the secret: give --secret-file FILE"):
        credential_command("create", "x-bmc", "--username", "root")
    with pytest.raises(CommandError, match=r"^'x-bmc\\n' is not a name \(lower-case letters, digits and '-', at most 63 "
                                           r"characters\)$"):
        credential_command("create", "x-bmc\n", "--username", "root", "--secret-file", "-",  # `$` would match
                           stdin="X-Bmc-Secret-42\n", monkeypatch=monkeypatch)  # before the newline
    with pytest.raises(CommandError, match="^no credential named 'nobody'$"):
        credential_command("bind", "nobody", "https://10.0.0.1")
    with pytest.raises(CommandError, match="^credential lab-bmc is not bound to https://10.7.7.7:443$"):
        credential_command("unbind", "lab-bmc", "https://10.7.7.7")
    with pytest.raises(CommandError, match="a BMC is reached over https"):
        credential_command("bind", "lab-bmc", "ftp://10.0.0.1")
    assert Credential.objects.get(name="lab-bmc").endpoints == [
        "https://10.0.0.1:443", "https://10.0.0.2:443", "https://10.0.0.4:443", "https://bmc-n1:443"]


# --- the gate at the run ------------------------------------------------------------------------------


def test_a_login_is_handed_out_only_for_a_bound_endpoint(demo_text, site_env):
    import_site(demo_text, "demo.yml")
    bmc = BMC.objects.select_related("node__appliance", "credential").get(node__name="gpu01")
    login = credentials.login_for_run(bmc)
    assert (login.username, login.password, login.ca_file) == (
        "admin", DEMO_PASSWORD, str(site_env.SIMULATION_DIR / "ca" / "ca.pem"))

    bmc.url = LISTENER  # changed behind the import's back
    with pytest.raises(credentials.CredentialRefused, match="credential demo-bmc is not bound to "
                                                            "http://127.0.0.1:47011, the BMC of gpu01"):
        credentials.login_for_run(bmc)

    # Bound, but on a real appliance: http, or https without verification, is refused too.
    credentials.bind("demo-bmc", [LISTENER])
    bmc.credential.refresh_from_db()
    bmc.node.appliance.simulated = False
    with pytest.raises(credentials.CredentialRefused, match="the BMC of gpu01 is not reached over https"):
        credentials.login_for_run(bmc)
    bmc.url, bmc.verify_tls = "https://127.0.0.1:18441", False
    with pytest.raises(credentials.CredentialRefused, match="TLS verification of the BMC of gpu01 is off"):
        credentials.login_for_run(bmc)
