"""The monitoring stage on one simulated HGX H100 node, with the real playbook over SSH as the engine runs
it: the collector package, its Python dependencies from the appliance's repository, collector.json, the
token (0600) and the systemd unit; a second run changes nothing; the simulation then runs the deployed
collector, and the acceptance check finds one DCGM_FI_DEV_GPU_UTIL series per GPU on its /metrics.

The tests of this module share one node and run in file order."""

import json
import os
import stat
import subprocess
import urllib.request

import pytest
from django.conf import settings

from appliance.simulation import ports, sshd
from appliance.telemetry.models import NodeCollector

from .conftest import NODE

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ACCEPTANCE_PLAY = """
- name: The collector's acceptance checks only
  hosts: all
  gather_facts: false
  environment: "{{ node_environment | default({}) }}"
  tasks:
    - name: Measure the collector
      appliance.hgx.appliance_acceptance:
        node: "{{ inventory_hostname }}"
        sysroot: "{{ sysroot | default('') }}"
        groups: [collector]
        platform: "{{ platform }}"
      vars:
        ansible_python_interpreter: "{{ appliance_node_python }}"
"""

MODULES = ["__init__.py", "agent.py", "buffer.py", "collector.py", "exposition.py", "rollup.py", "sinks.py"]


@pytest.fixture(scope="module")
def acceptance_playbook(tmp_path_factory):
    path = tmp_path_factory.mktemp("collector-acceptance") / "collector_acceptance.yml"
    path.write_text(ACCEPTANCE_PLAY)
    return str(path)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_stage_deploys_the_collector_its_config_token_and_unit(simulated_appliance):
    sim = simulated_appliance

    run = sim.run("stages/monitoring.yml", extra_vars=sim.stage_vars)

    assert run.returncode == 0, run.output
    package = sim.sysroot / "opt/appliance/collector/appliance_collector"
    assert sorted(p.name for p in package.iterdir() if p.is_file()) == MODULES
    source = settings.BASE_DIR / "appliance" / "telemetry"
    for name in MODULES:
        assert (package / name).read_bytes() == (source / name).read_bytes(), name
    config = json.loads((sim.sysroot / "etc/appliance/collector.json").read_text())
    portal = ports.portal_port(settings.SIMULATION_DIR)
    metrics_port = ports.metrics_ports(settings.SIMULATION_DIR, [NODE])[NODE]
    assert config == {
        "hostname": NODE, "interval_s": 1.0, "buffer_dir": "/var/lib/appliance/collector", "buffer_max_mib": 256,
        "appliance": {"url": f"http://127.0.0.1:{portal}/telemetry/ingest",
                      "token_file": "/etc/appliance/collector.token", "ca_file": ""},
        "influxdb": {"url": "", "org": "appliance", "bucket": "telemetry", "token_file": ""},
        # The node's own loopback address: every simulated node shares this machine.
        "metrics": {"address": sshd.address_of(NODE), "port": metrics_port}}
    assert mode(sim.sysroot / "etc/appliance/collector.json") == 0o644
    token_file = sim.sysroot / "etc/appliance/collector.token"
    token = NodeCollector.objects.get(node=sim.node).token
    assert token_file.read_text() == token + "\n"
    assert mode(token_file) == 0o600
    assert token not in run.output
    assert mode(sim.sysroot / "var/lib/appliance/collector") == 0o750
    unit = (sim.sysroot / "etc/systemd/system/appliance-collector.service").read_text()
    assert ("ExecStart=/opt/appliance/python/bin/python -m appliance_collector.agent "
            "--config /etc/appliance/collector.json\n") in unit
    assert "Environment=PYTHONPATH=/opt/appliance/collector\n" in unit
    assert sim.state()["services"]["appliance-collector.service"] == {"enabled": True, "active": True}
    # What the unit runs imports on the node's venv: the package and its dependencies from the repository.
    probe = subprocess.run([str(sim.sysroot / "opt/appliance/python/bin/python"), "-c",
                            "import appliance_collector.agent, influxdb_client; "
                            "print(appliance_collector.agent.__file__)"],
                           capture_output=True, text=True, env={"PYTHONPATH": str(package.parent),
                                                                "PIP_CONFIG_FILE": "/dev/null"})
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(package / "agent.py")
    served = (sim.workdir / "simulation" / "repository-server.log").read_text()
    assert "GET /python/files/influxdb_client-1.50.0-py3-none-any.whl HTTP" in served


def test_a_second_run_changes_nothing(simulated_appliance):
    sim = simulated_appliance
    token = (sim.sysroot / "etc/appliance/collector.token").read_text()

    run = sim.run("stages/monitoring.yml", extra_vars=sim.stage_vars)

    assert run.returncode == 0, run.output
    assert run.changed() == 0, run.output
    assert (sim.sysroot / "etc/appliance/collector.token").read_text() == token


def test_a_unit_whose_program_is_missing_does_not_start(simulated_appliance):
    sim = simulated_appliance
    unit = sim.sysroot / "etc/systemd/system/appliance-collector.service"
    original = unit.read_text()
    unit.write_text(original.replace("/opt/appliance/python/bin/python", "/opt/appliance/nowhere/bin/python"))
    env = {**os.environ, **sim.host_vars["node_environment"]}
    try:
        subprocess.run(["systemctl", "stop", "appliance-collector"], env=env, check=True, capture_output=True)
        started = subprocess.run(["systemctl", "start", "appliance-collector"], env=env, capture_output=True,
                                 text=True)
    finally:
        unit.write_text(original)
        subprocess.run(["systemctl", "start", "appliance-collector"], env=env, check=True, capture_output=True)

    assert started.returncode != 0
    assert "/opt/appliance/nowhere/bin/python missing" in started.stderr


def test_the_running_collector_answers_with_one_gpu_util_series_per_gpu(simulated_appliance, acceptance_playbook):
    from appliance.simulation import services

    sim = simulated_appliance
    # NVML answers once the driver is loaded: what the os and gpu stages, earlier in a bootstrap, do.
    for stage in ("stages/os.yml", "stages/gpu.yml"):
        earlier = sim.run(stage)
        assert earlier.returncode == 0, earlier.output
    started = services.start_collectors(sim.node.appliance)
    assert isinstance(started[NODE], int), started

    run = sim.run(acceptance_playbook)

    assert run.returncode == 0, run.output
    checks = {c["check"]: c for c in run.facts[NODE]["appliance_acceptance"]}
    assert checks["collector.metrics"]["passed"], checks
    series = checks["collector.gpu_util_series"]
    assert (series["expected"], series["measured"], series["passed"]) == (8, 8, True)
    assert series["message"] == "DCGM_FI_DEV_GPU_UTIL for GPU(s) 0, 1, 2, 3, 4, 5, 6, 7"


def test_acceptance_fails_naming_the_collector_that_does_not_answer(simulated_appliance, acceptance_playbook):
    from appliance.simulation import services

    sim = simulated_appliance
    services.stop_collectors(sim.node.appliance)
    config = json.loads((sim.sysroot / "etc/appliance/collector.json").read_text())
    address, port = config["metrics"]["address"], config["metrics"]["port"]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=2)

    run = sim.run(acceptance_playbook)

    checks = {c["check"]: c for c in run.facts[NODE]["appliance_acceptance"]}
    assert not checks["collector.metrics"]["passed"]
    assert f"http://{address}:{port}/metrics" in checks["collector.metrics"]["message"]
    assert (checks["collector.gpu_util_series"]["measured"], checks["collector.gpu_util_series"]["passed"]) == (
        None, False)


def test_an_https_ingest_url_gets_its_ca_on_the_node_and_an_http_one_a_warning(simulated_appliance, settings,
                                                                                tmp_path):
    from appliance.core.management.commands.install import self_signed_certificate
    from appliance.telemetry import stage_vars as monitoring

    sim = simulated_appliance
    appliance = sim.node.appliance
    cert, key = self_signed_certificate(["appliance.example"], ["127.0.0.1"])
    (tmp_path / "cert.pem").write_bytes(cert + key)
    # What `appliance install --production` writes into the services' environment.
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"
    settings.TELEMETRY_INGEST_CA_FILE = str(tmp_path / "cert.pem")
    tls_vars = {**sim.stage_vars, **monitoring.monitoring_vars(appliance, [sim.node])}
    ca = sim.sysroot / "etc/appliance/ingest-ca.pem"
    collector_json = sim.sysroot / "etc/appliance/collector.json"
    token = NodeCollector.objects.get(node=sim.node).token

    run = sim.run("stages/monitoring.yml", extra_vars=tls_vars)

    assert run.returncode == 0, run.output
    assert ca.read_bytes() == cert
    assert mode(ca) == 0o644
    assert json.loads(collector_json.read_text())["appliance"] == {
        "url": "https://appliance.example:8443/telemetry/ingest", "token_file": "/etc/appliance/collector.token",
        "ca_file": "/etc/appliance/ingest-ca.pem"}
    assert "ingest tokens unencrypted to" not in run.output
    again = sim.run("stages/monitoring.yml", extra_vars=tls_vars)
    assert again.returncode == 0, again.output
    assert again.changed() == 0, again.output

    # The site's own http URL to another host: allowed (an Administrator bound it), said, and the token still
    # printed nowhere.
    from appliance.inventory import credentials

    credentials.create("site-ingest", kind="ingest", endpoints=["http://10.0.0.5:8000"])
    site_settings = appliance.settings
    appliance.settings = {**site_settings, "telemetry": {"ingest_url": "http://10.0.0.5:8000/telemetry/ingest"}}
    try:
        http_vars = {**sim.stage_vars, **monitoring.monitoring_vars(appliance, [sim.node])}
    finally:
        appliance.settings = site_settings
    run = sim.run("stages/monitoring.yml", extra_vars=http_vars)

    assert run.returncode == 0, run.output
    assert not ca.exists()
    assert json.loads(collector_json.read_text())["appliance"] == {
        "url": "http://10.0.0.5:8000/telemetry/ingest", "token_file": "/etc/appliance/collector.token",
        "ca_file": ""}
    assert ("The collectors send their ingest tokens unencrypted to http://10.0.0.5:8000: an https ingest URL "
            "protects them") in run.output
    assert token not in run.output

    # Back to what the module started with (the demo portal on this host).
    back = sim.run("stages/monitoring.yml", extra_vars=sim.stage_vars)
    assert back.returncode == 0, back.output
    assert "ingest tokens unencrypted to" not in back.output
