"""The node collector against a simulated H100 node (the simulated NVML through pynvml, unchanged; the
node's /sys and /proc files), its /metrics endpoint, its disk buffer and its sink into a real
VictoriaMetrics that is stopped and restarted while the collector runs."""

import threading
import time
import urllib.request
from io import StringIO

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.simulation import gpu_ops, nvml
from appliance.simulation import state as node_state
from appliance.telemetry.agent import Agent
from appliance.telemetry.buffer import Buffer, rollup
from appliance.telemetry.collector import Collector
from appliance.telemetry.sinks import InfluxSink
from tests.telemetry.simnode import make_node
from tests.telemetry.vmserver import VictoriaMetrics


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    sysroot = tmp_path_factory.mktemp("telemetry") / "gpu01"
    make_node(sysroot)
    with node_state.update(sysroot) as current:  # GPU 6 in MIG mode with one 3g.40gb instance
        gpu_ops.set_mig_mode(current, 6, True)
        instance = gpu_ops.create_gpu_instance(current, 6, gpu_ops.profile(current["gpus"][6], name="3g.40gb")["id"])
        gpu_ops.create_compute_instance(current, 6, instance)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
        yield {"sysroot": sysroot, "library": str(nvml.library_path())}


def by_gpu(sweep):
    return {dict(series.labels)["gpu"]: series for series in sweep.series
            if series.measurement == "gpu" and "GPU_I_ID" not in dict(series.labels)}


def test_a_sweep_reads_gpus_fabric_filesystem_host_and_jobs_under_dcgm_names(node):
    with Collector("gpu01", node["sysroot"], node["library"]) as collector:
        time.sleep(0.05)
        first = collector.sweep()
        # the node moves on: the workload's next interval, an Xid on GPU 3 and a port that goes down
        with node_state.update(node["sysroot"]) as current:
            current["host"]["cpu_ticks"] = {name: value + {"user": 30, "iowait": 30, "idle": 40}.get(name, 0)
                                            for name, value in current["host"]["cpu_ticks"].items()}
            current["gpus"][3].setdefault("xid_errors", []).append({"xid": 79, "text": "GPU has fallen off the bus."})
            current["hcas"][2]["ports"][0].update(state="Down", state_code=1)
        second = collector.sweep()
        with node_state.update(node["sysroot"]) as current:  # GPU 7 falls off the bus: the other GPUs are read
            current.setdefault("faults", []).append({"kind": "gpu_missing", "index": 7})
            current["hcas"][2]["ports"][0].update(state="Active", state_code=4)
        try:
            third = collector.sweep()
        finally:
            with node_state.update(node["sysroot"]) as current:
                current["faults"] = []
    assert sorted(by_gpu(third)) == [str(index) for index in range(7)]
    assert [(event["kind"], event.get("gpu"), event.get("xid")) for event in third.events] == [
        ("nvml_error", 7, None), ("xid", 7, 79)]
    gpus = by_gpu(first)
    assert sorted(gpus) == [str(index) for index in range(8)]
    assert dict(gpus["0"].labels) == {
        "gpu": "0", "UUID": "GPU-45b01eae-9615-5032-9682-cfe3f0d059cd", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu01", "pci_bus_id": "00000000:18:00.0", "hpc_job": "41"}
    assert [dict(gpus[index].labels)["hpc_job"] for index in "01234567"] == ["41", "41", "", "", "", "", "", "chat-7b"]
    for series in gpus.values():  # input-bound training: GPUs stalled on their input, PCIe busy with the batches
        fields = series.fields
        assert fields["DCGM_FI_DEV_GPU_UTIL"] < 35 and fields["DCGM_FI_PROF_SM_ACTIVE"] < 0.2, fields
        assert fields["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] < 0.15 and 0 < fields["DCGM_FI_PROF_DRAM_ACTIVE"] < 1, fields
        assert 2.8 * 2**30 < fields["DCGM_FI_PROF_PCIE_RX_BYTES"] < 4.8 * 2**30, fields
        assert fields["DCGM_FI_DEV_FB_TOTAL"] == 81559 and 55 * 1024 < fields["DCGM_FI_DEV_FB_USED"] < 80 * 1024
        assert 150 < fields["DCGM_FI_DEV_POWER_USAGE"] < 230 and fields["DCGM_FI_DEV_SM_CLOCK"] == 1980
        assert fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > 1_000_000 and fields["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0
    [mig] = [series for series in first.series if "GPU_I_ID" in dict(series.labels)]
    assert dict(mig.labels) | {"MIG_UUID": ""} == dict(gpus["6"].labels) | {
        "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "MIG_UUID": ""}
    assert mig.fields["DCGM_FI_DEV_FB_TOTAL"] == 40779 and 0 < mig.fields["DCGM_FI_PROF_SM_ACTIVE"] < 0.2
    ib = {dict(series.labels)["device"]: series.fields for series in first.series if series.measurement == "ib"}
    assert sorted(ib) == [f"mlx5_{index}" for index in range(8)]
    assert ib["mlx5_0"]["node_infiniband_port_data_received_bytes_total"] > 10 * 19e9 / 8 * 0.9
    assert ib["mlx5_0"]["node_infiniband_rate_bytes_per_second"] == 50e9 and ib["mlx5_0"]["node_infiniband_state_id"] == 1
    [lustre] = [series for series in first.series if series.measurement == "fs"]
    assert lustre.fields["appliance_filesystem_read_bytes_total"] > 10 * 19e9
    [host] = [series.fields for series in second.series if series.measurement == "host"]
    assert host["host_cpu_iowait_ratio"] == 0.3 and host["host_cpu_busy_ratio"] == 0.3
    assert [(event["kind"], event.get("gpu"), event.get("xid"), event.get("device")) for event in second.events] == [
        ("xid", 3, 79, None), ("link_down", None, None, "mlx5_2")]
    assert first.events == [] and 0 < first.nvml_cpu_s < 0.05


def test_metrics_parse_with_the_prometheus_parser(node):
    agent = Agent(Collector("gpu01", node["sysroot"], node["library"]), Buffer(node["sysroot"].parent / "b.sqlite"),
                  metrics_port=0).start()
    try:
        agent.sweep_once()
        port = agent.server.server_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        agent.stop()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge" and len(util.samples) == 8
    assert util.samples[7].labels == {"gpu": "7", "UUID": util.samples[7].labels["UUID"], "device": "nvidia7",
                                      "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu01",
                                      "pci_bus_id": "00000000:DB:00.0", "hpc_job": "chat-7b"}
    [mig] = [sample for sample in families["DCGM_FI_DEV_FB_TOTAL"].samples if "GPU_I_ID" in sample.labels]
    assert (mig.labels["gpu"], mig.labels["GPU_I_PROFILE"], mig.value) == ("6", "3g.40gb", 40779)
    energy = families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "counter" and energy.samples[0].name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"
    cpu = families["node_cpu_seconds"]
    assert cpu.type == "counter" and {sample.labels["mode"] for sample in cpu.samples} >= {"user", "iowait", "idle"}
    assert len(families["node_infiniband_port_data_received_bytes"].samples) == 8


def test_the_buffer_rolls_its_oldest_points_up_and_keeps_the_order(tmp_path):
    second = 10**9
    rows = [f"gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL={util}.0,DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION={energy}.0 {at * second}\n"
            for at, util, energy in ((60, 10, 100), (70, 20, 300), (125, 90, 700), (130, 30, 900))]
    assert rollup(rows, 60) == (
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=15.0,DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=300.0 60000000000\n"
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=60.0,DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=900.0 120000000000\n", 4)
    buffer = Buffer(tmp_path / "buffer.sqlite", max_bytes=len(rows[0]) * 3 + 10, roll_fraction=0.5)
    for index, row in enumerate(rows):
        buffer.append(row, 2, index)
    assert buffer.depth() | {"bytes": 0} == {"rows": 3, "points": 6, "bytes": 0, "oldest_ns": 0, "rolled_up_rows": 2,
                                             "dropped_rows": 0, "dropped_points": 0}
    sent = buffer.peek(100)
    assert [body.decode() for _, body, _ in sent] == [
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=15.0,DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=300.0 60000000000\n",
        rows[2], rows[3]]
    buffer.ack([row_id for row_id, _, _ in sent])
    assert buffer.depth()["rows"] == 0
    buffer.close()


@pytest.mark.slow
def test_victoria_metrics_stopped_and_restarted_during_collection_loses_no_point(node, tmp_path):
    server = VictoriaMetrics(tmp_path / "vm").start()
    agent = Agent(Collector("gpu01", node["sysroot"], node["library"]), Buffer(tmp_path / "buffer.sqlite"),
                  InfluxSink(server.url)).start()
    agent.forwarder.max_backoff_s = 0.3
    stamps = []
    original = agent.collector.sweep

    def recorded():
        sweep = original()
        stamps.append(sweep.time_ns // 10**6)
        return sweep

    agent.collector.sweep = recorded
    runner = threading.Thread(target=agent.run, args=(0.02,))
    try:
        runner.start()
        time.sleep(0.5)
        server.stop()  # the sink goes away while the collector keeps sweeping
        time.sleep(1.0)
        assert agent.forwarder.last_error and agent.buffer.depth()["rows"] > 10
        server.start()
        time.sleep(0.5)
    finally:
        agent.stopping.set()
        runner.join()
        agent.stop(flush_s=20)
        depth = agent.buffer_depth_at_stop
        # what the server took is searchable after its flush of the last second's rows (up to a few seconds)
        deadline = time.monotonic() + 10
        while True:
            exported = server.export('DCGM_FI_DEV_GPU_UTIL{Hostname="gpu01"}')
            if sum(len(series["timestamps"]) for series in exported) >= 8 * len(stamps) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        server.stop()
    assert depth["rows"] == 0 and depth["rolled_up_rows"] == 0 and len(stamps) > 60
    assert sorted(dict(series["metric"])["gpu"] for series in exported) == [str(index) for index in range(8)]
    for series in exported:
        assert sorted(series["timestamps"]) == sorted(stamps), series["metric"]


@pytest.mark.django_db
def test_manage_telemetry_collect_runs_a_simulated_nodes_collector(node, settings):
    from django.core.management import CommandError, call_command

    from appliance.inventory.models import Appliance, Node

    appliance = Appliance.objects.create(name="demo", simulated=True)
    Node.objects.create(appliance=appliance, name="gpu01", role="training", sysroot=str(node["sysroot"]))
    Node.objects.create(appliance=appliance, name="gpu09", role="training")
    settings.INFLUXDB = {"url": "", "token": "", "org": "appliance", "bucket": "telemetry"}
    out = StringIO()
    call_command("telemetry", "collect", "--node", "gpu01", "--once", stdout=out)
    assert out.getvalue().startswith("gpu01: 1 sweep(s), last at ")
    assert out.getvalue().endswith(", buffered 0 point(s) in 0 row(s), no sink configured (settings.INFLUXDB)\n")
    with pytest.raises(CommandError, match="^--node gpu99: no such node$"):
        call_command("telemetry", "collect", "--node", "gpu99", "--once")
    with pytest.raises(CommandError, match="^--node gpu09: a real node runs its collector itself"):
        call_command("telemetry", "collect", "--node", "gpu09", "--once")
