"""/metrics of a collector over a simulated H100 node (GPU 6 in MIG mode with one 3g.40gb instance), read
over HTTP as Prometheus scrapes it and parsed with prometheus_client's own parser: dcgm-exporter's names,
labels and types (its counters keep their DCGM names, no `_total` added), node_exporter's for the rest."""

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.simulation import gpu_ops, nvml
from appliance.simulation import state as node_state
from appliance.telemetry.agent import Agent
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.collector import Collector
from tests.telemetry.simnode import make_node

GPU0 = {"gpu": "0", "UUID": "GPU-45b01eae-9615-5032-9682-cfe3f0d059cd", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu01", "pci_bus_id": "00000000:18:00.0", "hpc_job": "41"}
SERVICE = 'chat "7b" \\ v2'  # a name with a quote and a backslash: the label must come back intact


@pytest.fixture(scope="module")
def scrape(tmp_path_factory):
    sysroot = tmp_path_factory.mktemp("exposition") / "gpu01"
    make_node(sysroot)
    with node_state.update(sysroot) as current:
        gpu_ops.set_mig_mode(current, 6, True)
        instance = gpu_ops.create_gpu_instance(current, 6, gpu_ops.profile(current["gpus"][6], name="3g.40gb")["id"])
        gpu_ops.create_compute_instance(current, 6, instance)
        current["gpu_owners"]["7"] = {"kind": "inference", "service": SERVICE}  # the job map the node writes
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
        agent = Agent(Collector("gpu01", sysroot, str(nvml.library_path())),
                      Buffer(sysroot.parent / "buffer.sqlite"), metrics_port=0).start()
        try:
            agent.sweep_once()
            with node_state.update(sysroot) as current:  # the host's CPU moves on: 30% busy, 30% iowait
                current["host"]["cpu_ticks"] = {name: value + {"user": 30, "iowait": 30, "idle": 40}.get(name, 0)
                                                for name, value in current["host"]["cpu_ticks"].items()}
            agent.sweep_once()  # the second has the CPU ratios (a difference of two reads)
            url = f"http://127.0.0.1:{agent.server.server_port}"
            with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
                content_type, text = answer.headers["Content-Type"], answer.read().decode()
            with pytest.raises(urllib.error.HTTPError) as other:
                urllib.request.urlopen(url + "/", timeout=10)
        finally:
            agent.stop()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    yield {"text": text, "families": families, "content_type": content_type, "other_status": other.value.code}


def samples(scrape, name):
    return scrape["families"][name].samples


def test_gpu_metrics_carry_dcgm_exporters_labels(scrape):
    util = samples(scrape, "DCGM_FI_DEV_GPU_UTIL")
    assert scrape["families"]["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    assert [sample.labels["gpu"] for sample in util] == ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert util[0].labels == GPU0
    assert util[2].labels == {"gpu": "2", "UUID": util[2].labels["UUID"], "device": "nvidia2",
                              "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu01",
                              "pci_bus_id": "00000000:3A:00.0"}  # no job: no hpc_job label, as dcgm-exporter
    assert util[7].labels["hpc_job"] == SERVICE and util[7].labels["pci_bus_id"] == "00000000:DB:00.0"
    clocks = {sample.labels["gpu"]: sample.value for sample in samples(scrape, "DCGM_FI_DEV_SM_CLOCK")}
    assert clocks == {str(index): 1980.0 for index in range(8)}


def test_a_mig_instance_is_labelled_with_its_gpu_instance_and_profile(scrape):
    totals = samples(scrape, "DCGM_FI_DEV_FB_TOTAL")
    assert [(sample.labels["gpu"], sample.labels.get("GPU_I_ID"), sample.labels.get("GPU_I_PROFILE"), sample.value)
            for sample in totals] == [(str(index), None, None, 81559.0) for index in range(7)] + [
        ("6", "1", "3g.40gb", 40779.0), ("7", None, None, 81559.0)]
    [mig] = [sample for sample in samples(scrape, "DCGM_FI_PROF_SM_ACTIVE") if "GPU_I_ID" in sample.labels]
    assert {name: mig.labels[name] for name in ("gpu", "UUID", "Hostname", "GPU_I_ID", "GPU_I_PROFILE")} == {
        "gpu": "6", "UUID": "GPU-2d996e70-d7bb-5a5a-868b-fde73c174dce", "Hostname": "gpu01", "GPU_I_ID": "1",
        "GPU_I_PROFILE": "3g.40gb"}


def test_counters_and_gauges_are_typed_as_dcgm_exporter_and_node_exporter_type_them(scrape):
    text = scrape["text"]
    for counter in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "node_infiniband_port_data_received_bytes_total",
                    "node_infiniband_port_transmit_wait_total", "node_cpu_seconds_total",
                    "appliance_filesystem_read_bytes_total", "node_disk_written_bytes_total"):
        assert f"\n# TYPE {counter} counter\n{counter}{{" in text, counter
    for gauge in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                  "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_RX_BYTES",
                  "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "node_infiniband_rate_bytes_per_second", "host_cpu_iowait_ratio"):
        assert f"\n# TYPE {gauge} gauge\n{gauge}{{" in text, gauge
    # dcgm-exporter's counters keep their names (the parser itself calls the samples *_total)
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"," in text and "CONSUMPTION_total" not in text
    assert "_TOTAL_total" not in text
    energy = scrape["families"]["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "counter" and len(energy.samples) == 8 and energy.samples[0].value > 1_000_000


def test_node_exporter_style_fabric_filesystem_and_cpu(scrape):
    cpu = {sample.labels["mode"]: sample for sample in samples(scrape, "node_cpu_seconds")}
    assert sorted(cpu) == ["idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"]
    assert cpu["iowait"].labels == {"Hostname": "gpu01", "mode": "iowait"}
    assert [sample.value for sample in samples(scrape, "host_cpu_iowait_ratio")] == [0.3]
    assert [sample.value for sample in samples(scrape, "host_cpu_busy_ratio")] == [0.3]
    rate = {sample.labels["device"]: (sample.labels["port"], sample.value)
            for sample in samples(scrape, "node_infiniband_rate_bytes_per_second")}
    assert rate == {f"mlx5_{index}": ("1", 50e9) for index in range(8)}
    [lustre] = samples(scrape, "appliance_filesystem_read_bytes")
    assert lustre.labels == {"Hostname": "gpu01", "fstype": "lustre", "mount": lustre.labels["mount"]}
    # Filesystem bytes under the appliance's own names: node_exporter has no such node_filesystem_* metric.
    assert "node_filesystem_" not in scrape["text"]
    assert ("\n# HELP appliance_filesystem_read_bytes_total Bytes read through a parallel filesystem mount "
            "(Lustre llite stats; NFS mountstats, normal and direct).\n"
            "# TYPE appliance_filesystem_read_bytes_total counter\n") in scrape["text"]


def test_served_as_prometheus_expects_and_nothing_else(scrape):
    assert scrape["content_type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert scrape["other_status"] == 404
