"""The collector in its deployed form (`--config collector.json`, the telemetry contract) over a simulated
node: its rollups, events and report go through influxdb-client into the appliance's real ingest endpoint
(served by Django's live server) and become the rows the portal reads; a bad configuration stops it with
one message naming the file and the key."""

import json
import logging
import time
from pathlib import Path

import pytest
from django.utils import timezone

from appliance.inventory.models import Appliance, Node
from appliance.simulation import nvml
from appliance.simulation import state as node_state
from appliance.telemetry import agent as agent_module
from appliance.telemetry.agent import ConfigError, from_config
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.models import GpuRollup, HardwareEvent, NodeCollector, NodeRollup
from appliance.telemetry.tokens import collector_token
from tests.telemetry.rows import hgx_gpus, place
from tests.telemetry.simnode import make_node

TOKEN_PATH = "/etc/appliance/collector.token"


def write_config(sysroot: Path, url: str, token: str | None, **changes) -> Path:
    config = {"hostname": "gpu01", "interval_s": 0.2, "buffer_dir": "/var/lib/appliance/collector",
              "buffer_max_mib": 16,
              "appliance": {"url": url, "token_file": TOKEN_PATH, "ca_file": ""},
              "influxdb": {"url": "", "org": "appliance", "bucket": "telemetry", "token_file": ""},
              "metrics": {"address": "127.0.0.1", "port": 0}} | changes
    etc = sysroot / "etc/appliance"
    etc.mkdir(parents=True, exist_ok=True)
    if token is not None:
        (etc / "collector.token").write_text(token + "\n")
    path = etc / "collector.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def simulated(tmp_path, monkeypatch):
    sysroot = tmp_path / "gpu01"
    make_node(sysroot)  # jobs: 41 on GPUs 0 and 1, the chat-7b service on GPU 7
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
    return sysroot


@pytest.fixture
def registered(transactional_db, simulated):
    appliance = Appliance.objects.create(name="demo", simulated=True)
    node = Node.objects.create(appliance=appliance, name="gpu01", role=Node.Role.GPU, management_address="10.0.0.11",
                               sysroot=str(simulated))
    # The ingest takes GPU lines for the GPUs the inventory lists, and job ids where a scheduler puts them.
    hgx_gpus(node)
    place(node, "41", "chat-7b")
    return node, collector_token(node)


def held(sysroot: Path) -> dict:
    buffer = Buffer(sysroot / "var/lib/appliance/collector/appliance.sqlite")
    try:
        return buffer.depth()
    finally:
        buffer.close()


def run(config: Path, sysroot: Path, sweeps: int, between=None):
    agent = from_config(config, str(sysroot), str(nvml.library_path())).start()
    try:
        for index in range(sweeps):
            agent.sweep_once()
            if between:
                between(index)
            time.sleep(0.05)
    finally:
        agent.stop()
    return agent


def test_the_deployed_collector_fills_the_appliances_rows_through_its_ingest(registered, simulated, live_server, caplog):
    node, token = registered
    config = write_config(simulated, f"{live_server.url}/telemetry/ingest", token)

    def xid_on_gpu_3(index):
        if index == 1:
            with node_state.update(simulated) as current:
                current["gpus"][3].setdefault("xid_errors", []).append({"xid": 79, "text": "GPU has fallen off the bus."})

    with caplog.at_level(logging.DEBUG):
        agent = run(config, simulated, 4, xid_on_gpu_3)

    # the stop sent the minute begun (4 sweeps, unless the minute turned during the test)
    rows = list(GpuRollup.objects.filter(node=node, step=60, instance=-1).order_by("start", "gpu"))
    assert sorted({row.gpu for row in rows}) == list(range(8))
    assert sum(row.samples for row in rows if row.gpu == 0) == 4
    jobs = {row.gpu: row.job for row in rows}
    assert (jobs[0], jobs[1], jobs[3], jobs[7]) == ("41", "41", "", "chat-7b")
    first = rows[0]
    assert first.util is not None and first.fb_total_mib == 81559 and first.energy_j > 0
    assert sum(row.samples for row in NodeRollup.objects.filter(node=node)) == 4
    node_row = NodeRollup.objects.filter(node=node).latest("start")
    assert node_row.gpus == 8 and set(node_row.mounts) == {"/mnt/scratch"}
    assert node_row.mounts["/mnt/scratch"]["fstype"] == "lustre"
    event = HardwareEvent.objects.get(node=node)
    assert (event.kind, event.gpu, event.acknowledged_at) == ("xid", 3, None)
    assert event.message == "Xid 79 on GPU 3: GPU has fallen off the bus."
    assert sum(row.xid_count for row in rows if row.gpu == 3) == 1
    collector = NodeCollector.objects.get(node=node)
    assert (collector.sweeps, collector.sweep_errors, collector.version) == (4, 0, agent_module.VERSION)
    assert collector.last_seen is not None and collector.last_seen <= timezone.now()
    # everything was delivered; the token was never logged
    assert agent.rollup_forwarder.sent_points > 0
    assert held(simulated)["rows"] == 0
    assert token not in caplog.text


def test_rollups_wait_in_the_buffer_while_the_appliance_refuses_the_token(registered, simulated, live_server):
    node, _ = registered
    config = write_config(simulated, f"{live_server.url}/telemetry/ingest", "not-the-node-token")
    run(config, simulated, 2)
    assert not GpuRollup.objects.exists() and not NodeRollup.objects.exists()
    depth = held(simulated)
    assert depth["rows"] >= 1 and depth["dropped_points"] == 0


@pytest.mark.parametrize(("changes", "token", "message"), [
    ({}, None, "appliance.token_file: /etc/appliance/collector.token: No such file or directory"),
    ({}, "", "appliance.token_file: /etc/appliance/collector.token is empty"),
    ({"hostname": ""}, "t", "hostname: a node name is required"),
    ({"interval_s": 0}, "t", "interval_s 0: must be between 0.1 and 3600 s"),
    ({"interval_s": "fast"}, "t", "interval_s and buffer_max_mib must be numbers"),
])
def test_a_bad_configuration_names_the_file_and_the_key(tmp_path, changes, token, message):
    config = write_config(tmp_path, "http://127.0.0.1:9/telemetry/ingest", token, **changes)
    with pytest.raises(ConfigError) as raised:
        from_config(config, str(tmp_path))
    assert str(raised.value) == f"--config {config}: {message}"


def test_the_command_line_refuses_a_missing_config_without_a_traceback(tmp_path, caplog):
    with caplog.at_level(logging.ERROR):
        assert agent_module.main(["--config", str(tmp_path / "absent.json")]) == 2
    assert f"collector not started: --config {tmp_path / 'absent.json'}: No such file or directory" in caplog.text


def test_a_node_without_a_gpu_driver_still_reports_its_host(transactional_db, tmp_path, live_server, monkeypatch, caplog):
    from appliance.inventory.platforms import load_platform
    from appliance.simulation import hardware

    sysroot = tmp_path / "gpu09"
    # as the factory delivers it: nouveau loaded, no NVIDIA driver yet
    node_state.create(sysroot, hardware.factory_state("gpu09", "training", load_platform("hgx-h100-8gpu").spec, {}))
    monkeypatch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
    appliance = Appliance.objects.create(name="demo", simulated=True)
    node = Node.objects.create(appliance=appliance, name="gpu09", role=Node.Role.GPU, management_address="10.0.0.19",
                               sysroot=str(sysroot))
    config = write_config(sysroot, f"{live_server.url}/telemetry/ingest", collector_token(node), hostname="gpu09")

    with caplog.at_level(logging.WARNING):
        run(config, sysroot, 2)

    assert "no GPU is read on this node: gpu09: NVML: Driver Not Loaded (is the NVIDIA driver loaded?)" in caplog.text
    assert not GpuRollup.objects.exists()
    rows = NodeRollup.objects.filter(node=node)
    assert sum(row.samples for row in rows) == 2 and {row.gpus for row in rows} == {0}
    assert NodeCollector.objects.get(node=node).sweeps == 2
