"""The site's InfluxDB token: an `influxdb` credential the site names (telemetry.influxdb.token_credential),
handed by the monitoring stage to every node as a secret of the run (/etc/appliance/influxdb.token, 0600,
masked in everything the run keeps), only while the InfluxDB URL is an endpoint the credential is bound to;
the deployed collector reads the file collector.json names and its InfluxSink writes with it.

The server the sink writes to is a real one that checks tokens: the appliance's own ingest endpoint speaks
InfluxDB v2's write API (served by Django's live server) and answers 401 to a token it does not know."""

import json
import os
import stat
from pathlib import Path

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.secrets import MASK
from appliance.inventory import credentials
from appliance.inventory.models import Appliance, Node
from appliance.provisioning import services
from appliance.provisioning.catalogue import Catalogue, Stage
from appliance.provisioning.models import Run, StageRun, TaskEvent
from appliance.provisioning.playbook_vars import SecretUnavailable
from appliance.provisioning.states import StageState
from appliance.telemetry import stage_vars
from appliance.telemetry.agent import from_config
from appliance.telemetry.models import NodeRollup
from appliance.telemetry.sinks import SinkError
from appliance.telemetry.tokens import collector_token
from tests.provisioning.conftest import appliance, platform, state_dir  # noqa: F401 (the engine's nodes)
from tests.telemetry.rows import hgx_gpus

INFLUX = "https://influx.site.example:8086"
TOKEN = "Influx-Site-T0ken-9Qz4"
ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "collector"
T10_00 = 1796119200000000000  # 2026-12-01 10:00:00 UTC
NODE_LINE = "node_rollup,Hostname=gpu01 step=60,samples=60,gpus=8,gpu_util=55.5,cpu_iowait=0.12 " + str(T10_00)

# The collector role's own InfluxDB token tasks, with its defaults, on the engine's bare-folder nodes (the
# rest of the role needs a simulated machine: tests/playbooks/test_monitoring_stage.py); and, carelessly,
# the token printed without no_log: the engine's scrubber must keep it out of everything stored.
PLAYBOOK = f"""
- name: The collector's InfluxDB token only
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the role's defaults
      ansible.builtin.include_vars: {ROLE}/defaults/main.yml

    - name: Create /etc/appliance
      ansible.builtin.file:
        path: "{{{{ sysroot }}}}/etc/appliance"
        state: directory
        mode: "0755"

    - name: The role's tasks
      ansible.builtin.include_tasks: {ROLE}/tasks/influxdb_token.yml

    - name: Print the token
      ansible.builtin.debug:
        msg: "the InfluxDB token of {{{{ inventory_hostname }}}} is {{{{ collector_influxdb_token }}}}"

  handlers:
    - name: Restart the collector
      ansible.builtin.debug:
        msg: restarted
"""


def with_influxdb(appliance_row, credential="influx-token", url=INFLUX):
    appliance_row.settings = {**appliance_row.settings,
                              "telemetry": {"influxdb": {"url": url, "token_credential": credential}}}
    appliance_row.save()


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.slow
def test_a_run_writes_the_token_0600_on_every_node_and_stores_it_nowhere(state_dir, appliance, tmp_path,  # noqa: F811
                                                                         settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"
    credentials.create("influx-token", kind="influxdb", secret=TOKEN, endpoints=[INFLUX])
    with_influxdb(appliance)
    playbook = tmp_path / "influxdb_token.yml"
    playbook.write_text(PLAYBOOK)
    catalogue = Catalogue([Stage("monitoring", str(playbook), "writes the InfluxDB token",
                                 vars_provider="telemetry.monitoring_stage_vars",
                                 secrets_provider="telemetry.monitoring_stage_secrets")])

    run = services.execute_run(services.create_run(appliance, kind=Run.Kind.STAGES, stages=["monitoring"],
                                                   catalogue=catalogue).pk, catalogue=catalogue)

    stage_run = StageRun.objects.get(run=run)
    assert stage_run.state == StageState.SUCCEEDED, stage_run.message
    for node in appliance.nodes.all():
        token_file = Path(node.sysroot) / "etc/appliance/influxdb.token"
        assert token_file.read_text() == TOKEN + "\n"
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    stored = files_under(Path(state_dir) / "runs" / str(run.pk))
    assert stored, "the run kept no files"
    assert not [name for name, data in stored.items() if TOKEN.encode() in data]
    masked = json.loads(next(data for name, data in stored.items() if name.endswith("secrets.masked.json")))
    assert masked["appliance_influxdb_tokens"] == {"gpu01": MASK, "gpu02": MASK, "mgmt01": MASK}
    events = [event.stdout + json.dumps(event.data) for event in TaskEvent.objects.filter(stage_run=stage_run)]
    assert any(f"the InfluxDB token of gpu01 is {MASK}" in text for text in events)
    assert not [text for text in events if TOKEN in text]
    assert TOKEN not in json.dumps(list(AuditRecord.objects.values("details", "reason", "target_name")))

    # The credential unbound from the URL since (by an Administrator): the next run is refused before
    # anything is sent, naming why.
    credentials.unbind("influx-token", [INFLUX])
    again = services.execute_run(services.create_run(appliance, kind=Run.Kind.STAGES, stages=["monitoring"],
                                                     catalogue=catalogue).pk, catalogue=catalogue)
    refused = StageRun.objects.get(run=again)
    assert refused.state == StageState.FAILED
    assert (f"appliance lab: telemetry.influxdb.url: credential influx-token is not bound to {INFLUX}: its token "
            "is not sent there") in refused.message
    assert not TaskEvent.objects.filter(stage_run=refused).exists()


# --- what the stage renders, and when it refuses (no run needed) ------------------------------------------


@pytest.fixture
def site(db, settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"
    settings.TELEMETRY_INGEST_CA_FILE = ""
    appliance_row = Appliance.objects.create(name="site1")
    Node.objects.create(appliance=appliance_row, name="mgmt01", role="management", management_address="10.0.0.5")
    node = Node.objects.create(appliance=appliance_row, name="gpu01", role="gpu", management_address="10.0.0.11")
    credentials.create("influx-token", kind="influxdb", secret=TOKEN, endpoints=[INFLUX])
    return appliance_row, node


def test_collector_json_names_the_token_file_only_when_the_site_names_a_token(site):
    appliance_row, node = site
    configs = stage_vars.monitoring_vars(appliance_row, [node])["appliance_collector"]["configs"]
    assert configs["gpu01"]["influxdb"] == {"url": "", "org": "appliance", "bucket": "telemetry", "token_file": ""}
    assert stage_vars.influxdb_tokens(appliance_row, [node]) == {}

    with_influxdb(appliance_row)
    configs = stage_vars.monitoring_vars(appliance_row, [node])["appliance_collector"]["configs"]

    assert configs["gpu01"]["influxdb"] == {"url": INFLUX, "org": "appliance", "bucket": "telemetry",
                                            "token_file": "/etc/appliance/influxdb.token"}
    assert stage_vars.influxdb_tokens(appliance_row, [node]) == {"gpu01": TOKEN}
    assert TOKEN not in json.dumps(stage_vars.monitoring_vars(appliance_row, [node]))


@pytest.mark.parametrize("credential, url, message", [
    ("influx-token", "https://collect.attacker.example", "appliance site1: telemetry.influxdb.url: credential "
     "influx-token is not bound to https://collect.attacker.example:443: its token is not sent there"),
    ("demo-bmc", INFLUX, "appliance site1: telemetry.influxdb.token_credential: 'demo-bmc' is not an InfluxDB token "
     "credential"),
    ("", INFLUX, "appliance site1: telemetry.influxdb names no token_credential"),
])
def test_settings_changed_behind_the_import_are_refused_at_the_run(site, credential, url, message):
    """The inventory is not trusted: a row changed straight in the database gets the run refused."""
    appliance_row, node = site
    credentials.create("demo-bmc", username="root", secret="Bmc-Pw-1", endpoints=[INFLUX])
    with_influxdb(appliance_row, credential, url)

    with pytest.raises(SecretUnavailable) as refused:
        stage_vars.influxdb_tokens(appliance_row, [node])

    assert str(refused.value).startswith(message)
    assert "Bmc-Pw-1" not in str(refused.value) and TOKEN not in str(refused.value)


def test_an_ingest_url_no_longer_allowed_is_refused_at_the_run(site):
    appliance_row, node = site
    credentials.create("site-ingest", kind="ingest", endpoints=["https://ingest.site.example:8443"])
    appliance_row.settings = {"telemetry": {"ingest_url": "https://ingest.site.example:8443/telemetry/ingest"}}
    appliance_row.save()
    assert stage_vars.monitoring_vars(appliance_row, [node])["appliance_collector"]["configs"]["gpu01"][
        "appliance"]["url"] == "https://ingest.site.example:8443/telemetry/ingest"

    credentials.unbind("site-ingest", ["https://ingest.site.example:8443"])

    with pytest.raises(SecretUnavailable, match=r"^appliance site1: telemetry.ingest_url: https://ingest.site.example"
                                                r":8443 is not an ingest endpoint an Administrator allowed"):
        stage_vars.monitoring_vars(appliance_row, [node])


# --- the collector writes with the token ----------------------------------------------------------------


def write_config(sysroot: Path, url: str, token: str) -> Path:
    etc = sysroot / "etc/appliance"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "influxdb.token").write_text(token + "\n")
    path = etc / "collector.json"
    path.write_text(json.dumps({
        "hostname": "gpu01", "interval_s": 1.0, "buffer_dir": "/var/lib/appliance/collector", "buffer_max_mib": 16,
        "appliance": {"url": "", "token_file": "", "ca_file": ""},
        "influxdb": {"url": url, "org": "appliance", "bucket": "rollups", "token_file": "/etc/appliance/influxdb.token"},
        "metrics": {"address": "127.0.0.1", "port": 0}}))
    return path


def write_with(config: Path, sysroot: Path, body: str) -> None:
    agent = from_config(config, str(sysroot))
    try:
        agent.sink.write(body)
    finally:
        agent.sink.close()
        agent.buffer.close()
        agent.rollup_buffer.close()


@pytest.mark.django_db(transaction=True)
def test_the_collectors_influx_sink_writes_with_the_token_file(tmp_path, live_server):
    appliance_row = Appliance.objects.create(name="demo", simulated=True)
    node = Node.objects.create(appliance=appliance_row, name="gpu01", role=Node.Role.GPU,
                               management_address="10.0.0.11")
    hgx_gpus(node)
    # The ingest endpoint takes a node's own token: the one a server that checks tokens knows here.
    known = collector_token(node)
    sysroot = tmp_path / "gpu01"
    url = f"{live_server.url}/telemetry/ingest"

    write_with(write_config(sysroot, url, known), sysroot, NODE_LINE + "\n")
    assert list(NodeRollup.objects.values_list("node__name", "gpu_util")) == [("gpu01", 55.5)]

    with pytest.raises(SinkError, match=r": \(401\)"):
        write_with(write_config(sysroot, url, "not-" + known), sysroot, NODE_LINE.replace("55.5", "12.5") + "\n")
    assert list(NodeRollup.objects.values_list("node__name", "gpu_util")) == [("gpu01", 55.5)]
