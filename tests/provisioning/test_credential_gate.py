"""The credential gate at the run: a BMC's login goes only to an endpoint its credential is bound to.

A real HTTP listener stands in for the endpoint an attacker controls; a stage whose playbook sends
each host's BMC login as HTTP Basic auth (as the firmware stage's Redfish calls do) runs through the
engine. Pointing a BMC row at the listener behind the site import's back must get the stage refused
before Ansible starts, and no request at all may reach the listener. The control proves the listener
would see the login if the gate let it through.
"""

import base64
import datetime
import http.server
import ipaddress
import ssl
import threading

import pytest

from appliance.inventory import credentials
from appliance.inventory.models import BMC
from appliance.provisioning import services
from appliance.provisioning.catalogue import Catalogue, Stage
from appliance.provisioning.models import Run
from appliance.provisioning.states import RunState, StageState
from tests.provisioning.catalogue import PLAYBOOKS

from .conftest import BMC_PASSWORD

pytestmark = pytest.mark.slow

CATALOGUE = Catalogue([Stage("bmc-call", str(PLAYBOOKS / "bmc_call.yml"), "send each BMC its login")])


def self_signed_certificate(directory) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "listener")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "listener.crt", directory / "listener.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


class Listener:
    """An HTTP(S) server on loopback that keeps the Authorization header of every request it gets."""

    def __init__(self, tls_directory=None):
        seen = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                seen.append((self.path, self.headers.get("Authorization")))
                body = b'{"RedfishVersion": "1.6.0"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls_directory is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self_signed_certificate(tls_directory))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    with Listener() as running:
        yield running


@pytest.fixture
def tls_listener(tmp_path):
    with Listener(tmp_path) as running:
        yield running


@pytest.fixture
def gpu01_only(appliance, settings):
    settings.PLAYBOOKS_DIR = PLAYBOOKS
    BMC.objects.exclude(node__name="gpu01").delete()
    return appliance


def run_stage(appliance):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["bmc-call"], catalogue=CATALOGUE)
    return services.execute_run(run.pk, catalogue=CATALOGUE)


def test_a_bmc_moved_to_an_unbound_endpoint_is_never_sent_its_login(state_dir, gpu01_only, listener):
    # The row changed behind the import's back (a database edit): the gate does not trust it.
    BMC.objects.filter(node__name="gpu01").update(url=listener.url)

    run = run_stage(gpu01_only)

    assert run.state == RunState.FAILED
    stage_run = run.stage_runs.get()
    assert stage_run.state == StageState.FAILED
    assert (f"gpu01: BMC credential refused: credential lab-bmc is not bound to {listener.url}, the BMC of gpu01: "
            "it is not sent there") in stage_run.message
    assert listener.requests == []
    assert BMC_PASSWORD not in run.message + stage_run.message


def test_an_unbound_https_endpoint_is_refused_as_well(state_dir, gpu01_only, tls_listener):
    BMC.objects.filter(node__name="gpu01").update(url=tls_listener.url)
    run = run_stage(gpu01_only)
    assert run.state == RunState.FAILED
    assert f"credential lab-bmc is not bound to {tls_listener.url}" in run.stage_runs.get().message
    assert tls_listener.requests == []


def test_control_a_bound_endpoint_receives_the_login(state_dir, gpu01_only, tls_listener):
    BMC.objects.filter(node__name="gpu01").update(url=tls_listener.url)
    credentials.bind("lab-bmc", [tls_listener.url])

    run = run_stage(gpu01_only)

    assert run.state == RunState.SUCCEEDED, run.message
    expected = "Basic " + base64.b64encode(f"admin:{BMC_PASSWORD}".encode()).decode()
    assert tls_listener.requests == [("/redfish/v1/", expected)]
