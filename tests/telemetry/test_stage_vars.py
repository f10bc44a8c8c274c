"""Where the monitoring stage sends the collectors and which CA they trust: the site's telemetry.ingest_url,
else the installed portal's (APPLIANCE_TELEMETRY_INGEST_URL), else the demo portal on a simulated appliance,
and nothing derived from the inventory; the CA file's certificates (never a key beside them)
travel to the nodes for an https URL only. (The role writing them: tests/playbooks/test_monitoring_stage.py.)"""

import pytest
from django.conf import settings as django_settings

from appliance.core.management.commands.install import self_signed_certificate
from appliance.inventory import credentials
from appliance.inventory.models import Appliance, Node
from appliance.partitioning.renderers.site import RenderError
from appliance.simulation import ports
from appliance.telemetry import stage_vars

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def unset(settings):
    # Whatever the developer's shell exported, these tests start from an appliance that was not installed.
    settings.TELEMETRY_INGEST_URL = ""
    settings.TELEMETRY_INGEST_CA_FILE = ""


def make(simulated=False, telemetry=None, management="10.0.0.5"):
    appliance = Appliance.objects.create(name="site1", simulated=simulated,
                                         settings={"telemetry": telemetry} if telemetry else {})
    if management is not None:
        Node.objects.create(appliance=appliance, name="mgmt02", role="management", management_address="10.0.0.9")
        Node.objects.create(appliance=appliance, name="mgmt01", role="management", management_address=management)
    node = Node.objects.create(appliance=appliance, name="gpu01", role="gpu", management_address="10.0.0.11")
    return appliance, node


def rendered(appliance, node) -> dict:
    return stage_vars.monitoring_vars(appliance, [node])["appliance_collector"]


def appliance_section(appliance, node) -> dict:
    return rendered(appliance, node)["configs"]["gpu01"]["appliance"]


def test_a_real_appliance_without_an_installed_portal_url_sends_nowhere_derived_from_the_inventory():
    """A management node's address is site data an Operator imports: an attacker's address there must not
    become where every node sends its token. Without the installed portal's URL or an allowed site URL, the
    stage is refused."""
    appliance, node = make(management="203.0.113.66")
    with pytest.raises(RenderError, match=r"^appliance site1: no ingest URL for the collectors: the site sets no "
                                          r"telemetry.ingest_url and the portal was not installed with "
                                          r"APPLIANCE_TELEMETRY_INGEST_URL"):
        rendered(appliance, node)


def test_the_installed_portals_url_is_the_default(settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:443/telemetry/ingest"
    appliance, node = make()
    assert appliance_section(appliance, node)["url"] == "https://appliance.example:443/telemetry/ingest"
    # ... and comes before the demo portal: a simulated appliance managed by an installed portal sends there too.
    simulated = Appliance.objects.create(name="demo", simulated=True)
    assert stage_vars.default_ingest_url(simulated) == "https://appliance.example:443/telemetry/ingest"


def allow_ingest(endpoint):
    """An Administrator allows the nodes' ingest tokens to go to `endpoint`."""
    credentials.create("site-ingest", kind="ingest", endpoints=[endpoint])


def test_the_sites_url_comes_first(settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:443/telemetry/ingest"
    allow_ingest("https://ingest.site.example")
    appliance, node = make(telemetry={"ingest_url": "https://ingest.site.example/telemetry/ingest/"})
    assert appliance_section(appliance, node)["url"] == "https://ingest.site.example/telemetry/ingest"


def test_a_simulated_appliance_without_an_installed_portal_sends_to_the_demo_portal():
    appliance = Appliance.objects.create(name="demo", simulated=True)
    port = ports.portal_port(django_settings.SIMULATION_DIR)
    assert stage_vars.default_ingest_url(appliance) == f"http://127.0.0.1:{port}/telemetry/ingest"
    # The collectors' own host: nothing to warn about.
    assert stage_vars.cleartext_warning(f"http://127.0.0.1:{port}/telemetry/ingest") == ""
    assert stage_vars.cleartext_warning("http://localhost:8000/telemetry/ingest") == ""


@pytest.fixture
def ca_file(tmp_path, settings):
    cert, key = self_signed_certificate(["appliance.example"], ["127.0.0.1"])
    path = tmp_path / "cert.pem"
    # A file holding the key too (a combined PEM): only the certificate may leave the appliance.
    path.write_bytes(cert + key)
    settings.TELEMETRY_INGEST_CA_FILE = str(path)
    return cert.decode(), key.decode()


def test_the_ca_travels_for_an_https_url_and_collector_json_names_it(ca_file, settings):
    cert, key = ca_file
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"
    appliance, node = make()
    values = rendered(appliance, node)
    assert values["ingest_ca"] == cert
    assert "PRIVATE KEY" not in str(values)
    assert values["configs"]["gpu01"]["appliance"] == {"url": "https://appliance.example:8443/telemetry/ingest",
                                                       "token_file": "/etc/appliance/collector.token",
                                                       "ca_file": "/etc/appliance/ingest-ca.pem"}
    assert values["ingest_warning"] == ""


def test_an_http_url_takes_no_ca_and_is_warned_about_without_a_token(ca_file):
    allow_ingest("http://10.0.0.5:8000")
    appliance, node = make(telemetry={"ingest_url": "http://10.0.0.5:8000/telemetry/ingest"})
    values = rendered(appliance, node)
    assert values["ingest_ca"] == ""
    assert values["configs"]["gpu01"]["appliance"]["ca_file"] == ""
    assert values["ingest_warning"] == ("The collectors send their ingest tokens unencrypted to "
                                        "http://10.0.0.5:8000: an https ingest URL protects them")


def test_a_ca_file_that_cannot_be_read_or_holds_no_certificate_is_named(tmp_path, settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"
    appliance, node = make()
    settings.TELEMETRY_INGEST_CA_FILE = str(tmp_path / "missing.pem")
    with pytest.raises(RenderError, match=rf"^APPLIANCE_TELEMETRY_INGEST_CA_FILE {tmp_path}/missing.pem: "
                                          "No such file or directory$"):
        stage_vars.monitoring_vars(appliance, [node])
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIGHAgEA\n-----END PRIVATE KEY-----\n")
    settings.TELEMETRY_INGEST_CA_FILE = str(tmp_path / "key.pem")
    with pytest.raises(RenderError, match=rf"^APPLIANCE_TELEMETRY_INGEST_CA_FILE {tmp_path}/key.pem: "
                                          "no PEM certificate in it$"):
        stage_vars.monitoring_vars(appliance, [node])
