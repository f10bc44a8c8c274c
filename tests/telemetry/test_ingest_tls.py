"""The deployed collector (`--config` form) sends its rollups over TLS to the appliance served as the production
install serves it (gunicorn with --certfile/--keyfile, the install's own self-signed certificate), trusting
that certificate through collector.json's appliance.ca_file; without it, the certificate is not trusted and
the rollups stay in the node's buffer."""

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from appliance.core.management.commands.install import self_signed_certificate
from appliance.inventory.models import Appliance, Node
from appliance.simulation import nvml
from appliance.telemetry.agent import from_config
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.models import GpuRollup
from appliance.telemetry.tokens import collector_token
from tests.telemetry.rows import hgx_gpus
from tests.telemetry.simnode import make_node
from tests.telemetry.test_agent_config import write_config

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

CA_PATH = "/etc/appliance/ingest-ca.pem"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def tls_portal(transactional_db, tmp_path):
    """The portal as the appliance-portal unit runs it, over this test's database."""
    cert, key = self_signed_certificate(["localhost"], ["127.0.0.1"])
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    port = free_port()
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "appliance.settings",
           "APPLIANCE_STATE_DIR": str(settings.STATE_DIR), "PYTHONPATH": str(settings.BASE_DIR),
           "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}", "APPLIANCE_EMBEDDED_WORKERS": "0"}
    log = (tmp_path / "gunicorn.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}",
                                "--certfile", str(tmp_path / "cert.pem"), "--keyfile", str(tmp_path / "key.pem"),
                                "--workers", "1", "appliance.wsgi:application"],
                               env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    trusted = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/telemetry/ingest/health", context=trusted,
                                            timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"gunicorn did not serve: {(tmp_path / 'gunicorn.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield {"url": f"https://127.0.0.1:{port}/telemetry/ingest", "cert": cert}
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def sweep(config: Path, sysroot: Path, sweeps: int):
    agent = from_config(config, str(sysroot), str(nvml.library_path())).start()
    try:
        for _ in range(sweeps):
            agent.sweep_once()
            time.sleep(0.05)
    finally:
        agent.stop()
    return agent


def held_rows(sysroot: Path) -> tuple[int, int]:
    """(rows waiting for the appliance, rows it refused for good) in the node's buffer."""
    buffer = Buffer(sysroot / "var/lib/appliance/collector/appliance.sqlite")
    try:
        return buffer.depth()["rows"], buffer.delivery()["parked_rows"]
    finally:
        buffer.close()


def test_the_collector_trusts_the_appliances_certificate_through_ca_file(tls_portal, tmp_path, monkeypatch):
    sysroot = tmp_path / "gpu01"
    make_node(sysroot)
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
    appliance = Appliance.objects.create(name="demo", simulated=True)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU,
                               management_address="10.0.0.11", sysroot=str(sysroot))
    hgx_gpus(node)
    token = collector_token(node)

    # Without the CA: the system's CAs do not know a self-signed certificate, nothing is stored.
    config = write_config(sysroot, tls_portal["url"], token)
    agent = sweep(config, sysroot, 2)
    assert "CERTIFICATE_VERIFY_FAILED" in agent.rollup_forwarder.last_error
    assert not GpuRollup.objects.exists()
    assert held_rows(sysroot)[0] >= 1

    # With it (where the monitoring stage puts it): the held rows and the new ones arrive.
    (sysroot / CA_PATH.lstrip("/")).write_bytes(tls_portal["cert"])
    config = write_config(sysroot, tls_portal["url"], token,
                          appliance={"url": tls_portal["url"], "token_file": "/etc/appliance/collector.token",
                                     "ca_file": CA_PATH})
    agent = sweep(config, sysroot, 2)
    assert agent.rollup_forwarder.last_error == ""
    assert sorted(set(GpuRollup.objects.filter(node=node, instance=-1).values_list("gpu", flat=True))) == list(range(8))
    # (the first run's minute, sent late, and the second's are the same bucket unless the minute turned: a
    # bucket sent again replaces the stored one, so the samples are not summed here)
    assert held_rows(sysroot) == (0, 0)
