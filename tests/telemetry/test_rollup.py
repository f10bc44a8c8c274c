"""The collector's per-minute rollups (rollup.py) from sweeps written out by hand: every expected value
below was computed by hand from the sweeps, not by the code under test."""

import json
import re

from appliance.telemetry.collector import Series, Sweep
from appliance.telemetry.rollup import Rollup, mount_resolver

S = 10**9
MINUTE = 1_800_000_000 * S  # a minute boundary (1_800_000_000 is a multiple of 60)
GPU0 = (("gpu", "0"), ("UUID", "GPU-0000"), ("device", "nvidia0"), ("modelName", "NVIDIA H100 80GB HBM3"),
        ("Hostname", "gpu01"), ("pci_bus_id", "00000000:18:00.0"))
MOUNTS = "/dev/mapper/vg0-root / ext4 rw 0 0\n10.10.1.1@o2ib:/scratch /mnt/scratch lustre rw,flock 0 0\n"


def gpu(job: str, util, fb, power, temp, clock, reasons, energy_mj, nvlink, dbe=0, **extra) -> Series:
    fields = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": fb, "DCGM_FI_DEV_FB_TOTAL": 81559,
              "DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_DEV_GPU_TEMP": temp, "DCGM_FI_DEV_SM_CLOCK": clock,
              "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy_mj,
              "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": nvlink, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe,
              "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 1000, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 2000} | extra
    return Series("gpu", GPU0 + (("hpc_job", job),), fields)


def port(device: str, tx: int, rx: int, wait: int, symbol: int, active: bool) -> Series:
    return Series("ib", (("Hostname", "gpu01"), ("device", device), ("port", "1")), {
        "node_infiniband_port_data_transmitted_bytes_total": tx, "node_infiniband_port_data_received_bytes_total": rx,
        "node_infiniband_port_transmit_wait_total": wait, "node_infiniband_symbol_error_total": symbol,
        "node_infiniband_state_id": 1.0 if active else 0.0, "node_infiniband_rate_bytes_per_second": 50e9})


def lustre(read: int, written: int) -> Series:
    return Series("fs", (("Hostname", "gpu01"), ("fstype", "lustre"), ("mount", "scratch-0b9a1ab6fff0e268")),
                  {"appliance_filesystem_read_bytes_total": read, "appliance_filesystem_written_bytes_total": written})


def host(user: float, idle: float, iowait: float) -> Series:
    return Series("host", (("Hostname", "gpu01"),), {"node_cpu_seconds_total:user": user,
                                                      "node_cpu_seconds_total:idle": idle,
                                                      "node_cpu_seconds_total:iowait": iowait})


def parse(line: str) -> tuple[str, dict, dict, int]:
    """A rollup line of numeric fields and its `holders` text: (measurement, tags, fields, time)."""
    head, fields, stamp = line.split(" ")
    measurement, *tags = head.split(",")
    holders = re.search(r',holders="([^"]*)"$', fields)
    if holders:
        fields = fields[:holders.start()]
    values = {name: float(value) for name, value in (field.split("=", 1) for field in fields.split(","))}
    return (measurement, dict(tag.split("=", 1) for tag in tags),
            values | ({"holders": holders.group(1)} if holders else {}), int(stamp))


def three_sweeps() -> list[Sweep]:
    return [
        Sweep(MINUTE + 0 * S, [gpu("41", 10, 100, 100.0, 40, 1000, 0x1, 1_000_000, 1000),
                               port("mlx5_0", 0, 0, 0, 0, True), port("mlx5_1", 0, 0, 0, 0, False),
                               lustre(0, 0), host(100, 800, 100)]),
        # 20 s later: 20 J, 2000 NVLink bytes; ports sent 4000 and 1000 bytes; 2 symbol errors on mlx5_0
        Sweep(MINUTE + 20 * S, [gpu("41", 20, 200, 200.0, 50, 1500, 0x4, 1_020_000, 3000),
                                port("mlx5_0", 4000, 8000, 20, 2, True), port("mlx5_1", 1000, 0, 0, 0, False),
                                lustre(2000, 400), host(130, 850, 120)]),
        # the NVLink counter went back (the driver reloaded): it counts 500 from zero
        Sweep(MINUTE + 40 * S, [gpu("chat-7b", 60, 300, 300.0, 60, 2000, 0x41, 1_040_000, 500),
                                port("mlx5_0", 8000, 16000, 60, 2, True), port("mlx5_1", 2000, 0, 0, 0, False),
                                lustre(6000, 400), host(160, 900, 140)]),
    ]


def test_a_minute_closes_at_the_first_sweep_past_it_with_means_maxima_rates_and_the_majority_job():
    rollup = Rollup("gpu01", mount_of=mount_resolver(MOUNTS))
    assert [rollup.add(sweep) for sweep in three_sweeps()] == [[], [], []]  # the minute is still open

    lines = rollup.add(Sweep(MINUTE + 61 * S, [gpu("41", 0, 0, 0.0, 30, 0, 0, 1_060_000, 600)]))

    assert [parse(line)[0] for line in lines] == ["gpu_rollup", "node_rollup", "mount_rollup"]
    measurement, tags, fields, stamp = parse(lines[0])
    assert stamp == MINUTE
    # 41 held the GPU from 0 s to 40 s, chat-7b from 40 s to the minute's end
    assert tags == {"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-0000", "hpc_job": "41"}
    assert fields == {
        "step": 60.0, "samples": 3.0,
        "util": 30.0, "util_max": 60.0,                       # (10 + 20 + 60) / 3
        "fb_used_mib": 200.0, "fb_used_max_mib": 300.0, "fb_total_mib": 81559.0,
        "power_w": 200.0, "power_max_w": 300.0,
        "temp_c": 50.0, "temp_max_c": 60.0, "sm_clock_mhz": 1500.0,
        "energy_j": 40.0,                                     # 40 000 mJ over the minute
        "throttle_reasons": 69.0,                             # 0x1 | 0x4 | 0x41
        "throttled_share": 2 / 3,                             # 0x4 (power cap) and 0x40 (HW thermal); 0x1 is idle
        "pcie_tx_bps": 1024000.0, "pcie_rx_bps": 2048000.0,   # NVML's KB/s
        "nvlink_bps": 62.5,                                   # (2000 + 500 after the reset) / 40 s
        "xid_count": 0.0, "ecc_dbe": 0.0,
        "holders": "41:40,chat-7b:20",
    }
    measurement, tags, fields, stamp = parse(lines[1])
    assert (tags, stamp) == ({"Hostname": "gpu01"}, MINUTE)
    assert fields == {
        "step": 60.0, "samples": 3.0, "gpus": 1.0, "gpu_util": 30.0, "gpu_util_max": 30.0,
        "gpu_fb_used_mib": 200.0, "gpu_power_w": 200.0,
        "ib_tx_bps": 250.0,                    # mlx5_0 8000 B / 40 s + mlx5_1 2000 B / 40 s
        "ib_rx_bps": 400.0, "ib_xmit_wait": 1.5,
        "ib_line_bps": 50e9,                   # the active port only
        "ib_errors": 2.0,
        "fs_read_bps": 150.0, "fs_write_bps": 10.0,
        "cpu_busy": 0.3,                       # user 60 s of 60 + idle 100 + iowait 40 = 200 s
        "cpu_iowait": 0.2,
    }
    assert parse(lines[2])[1:] == ({"Hostname": "gpu01", "mount": "/mnt/scratch", "fstype": "lustre"},
                                   {"step": 60.0, "read_bps": 150.0, "write_bps": 10.0}, MINUTE)


def test_the_first_minute_is_partial_and_the_next_credits_the_increase_across_the_boundary():
    rollup = Rollup("gpu01")
    # started 50 s into a minute: two sweeps there
    rollup.add(Sweep(MINUTE + 50 * S, [gpu("", 10, 100, 100.0, 40, 1000, 0, 5_000_000, 0)]))
    rollup.add(Sweep(MINUTE + 55 * S, [gpu("", 30, 100, 100.0, 40, 1000, 0, 5_005_000, 0)]))
    first = rollup.add(Sweep(MINUTE + 60 * S, [gpu("", 50, 100, 100.0, 40, 1000, 0, 5_010_000, 0)]))
    _, tags, fields, stamp = parse(first[0])
    assert (stamp, fields["samples"], fields["util"], fields["energy_j"]) == (MINUTE, 2.0, 20.0, 5.0)
    assert "hpc_job" not in tags  # nobody held it

    second = rollup.close()  # the collector stops: the begun minute goes out as it is
    _, _, fields, stamp = parse(second[0])
    # the 5 J between 55 s and 60 s belong to the minute of the later sweep
    assert (stamp, fields["samples"], fields["util"], fields["energy_j"]) == (MINUTE + 60 * S, 1.0, 50.0, 5.0)
    assert rollup.close() == []


def test_an_increase_over_a_gap_longer_than_a_minute_is_not_credited():
    rollup = Rollup("gpu01")
    rollup.add(Sweep(MINUTE, [gpu("", 10, 100, 100.0, 40, 1000, 0, 1_000_000, 0)]))
    rollup.close()
    # five minutes later (the collector was stopped): 300 kJ would be a false 5 kW minute
    rollup.add(Sweep(MINUTE + 300 * S, [gpu("", 10, 100, 100.0, 40, 1000, 0, 301_000_000, 0)]))
    rollup.add(Sweep(MINUTE + 310 * S, [gpu("", 10, 100, 100.0, 40, 1000, 0, 302_000_000, 0)]))
    _, _, fields, _ = parse(rollup.close()[0])
    assert fields["energy_j"] == 1000.0


def test_an_event_goes_out_with_the_sweep_that_saw_it_and_is_counted_in_its_minute():
    rollup = Rollup("gpu01")
    rollup.add(Sweep(MINUTE, [gpu("41", 10, 100, 100.0, 40, 1000, 0, 0, 0)]))
    seen = rollup.add(Sweep(MINUTE + 5 * S, [gpu("41", 10, 100, 100.0, 40, 1000, 0, 0, 0, dbe=2)], events=[
        {"kind": "xid", "gpu": 0, "xid": 79, "text": "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
         "Hostname": "gpu01", "time_ns": MINUTE + 5 * S},
        {"kind": "xid", "gpu": 0, "xid": 48, "text": "NVRM: Xid (PCI:0000:18:00): 48, DBE", "Hostname": "gpu01",
         "time_ns": MINUTE + 5 * S},
        {"kind": "link_down", "device": "mlx5_2", "port": 1, "state": "DOWN", "Hostname": "gpu01",
         "time_ns": MINUTE + 5 * S}]))
    assert seen == [
        'event,Hostname=gpu01,kind=xid,gpu=0 message="Xid 79 on GPU 0: GPU has fallen off the bus.",detail="{\\"text\\": \\"NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\\", '
        f'\\"xid\\": 79}}" {MINUTE + 5 * S}',
        # the second Xid of the same sweep one nanosecond later: the appliance keys an event by its time
        'event,Hostname=gpu01,kind=xid,gpu=0 message="Xid 48 on GPU 0: DBE",'
        f'detail="{{\\"text\\": \\"NVRM: Xid (PCI:0000:18:00): 48, DBE\\", \\"xid\\": 48}}" {MINUTE + 5 * S + 1}',
        'event,Hostname=gpu01,kind=link_down,device=mlx5_2/1 message="InfiniBand port mlx5_2/1 went DOWN",'
        f'detail="{{\\"port\\": 1, \\"state\\": \\"DOWN\\"}}" {MINUTE + 5 * S}',
    ]
    _, _, fields, _ = parse(rollup.close()[0])
    assert (fields["xid_count"], fields["ecc_dbe"]) == (2.0, 2.0)


def test_a_mig_instance_has_its_own_row_and_the_node_counts_whole_gpus_only():
    rollup = Rollup("gpu01")
    instance = Series("gpu", GPU0 + (("GPU_I_ID", "2"), ("GPU_I_PROFILE", "3g.40gb"), ("MIG_UUID", "MIG-2222"),
                                     ("hpc_job", "chat-7b")),
                      {"DCGM_FI_DEV_FB_USED": 1000, "DCGM_FI_DEV_FB_TOTAL": 40000, "DCGM_FI_PROF_SM_ACTIVE": 0.5})
    rollup.add(Sweep(MINUTE, [gpu("", 10, 100, 100.0, 40, 1000, 0, 0, 0), instance]))
    lines = rollup.close()
    assert [parse(line)[1] for line in lines[:2]] == [
        {"Hostname": "gpu01", "gpu": "0", "UUID": "GPU-0000"},
        {"Hostname": "gpu01", "gpu": "0", "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb", "UUID": "MIG-2222",
         "hpc_job": "chat-7b"}]
    assert parse(lines[1])[2] == {"step": 60.0, "samples": 1.0, "sm_active": 0.5, "fb_used_mib": 1000.0,
                                  "fb_used_max_mib": 1000.0, "fb_total_mib": 40000.0}
    assert parse(lines[2])[2]["gpus"] == 1.0


def test_the_collector_report_is_one_line_with_its_strings_quoted():
    from appliance.telemetry.rollup import collector_line

    text = collector_line("gpu01", MINUTE, interval_s=1.0, sweeps=60, sweep_errors=1, buffer_rows=2, buffer_points=30,
                          dropped_points=0, last_sweep_ns=MINUTE - S, sink_error='http://influx:8086: "refused"\nretry',
                          version="1")
    assert text == ('collector,Hostname=gpu01 interval_s=1.0,sweeps=60.0,sweep_errors=1.0,buffer_rows=2.0,'
                    'buffer_points=30.0,dropped_points=0.0,last_sweep_ns=1.799999999e+18,'
                    'sink_error="http://influx:8086: \\"refused\\" retry",version="1" 1800000000000000000')
    assert json.loads('"' + text.split('sink_error="', 1)[1].split('",version', 1)[0] + '"') == \
        'http://influx:8086: "refused" retry'


def test_a_throttling_gpu_raises_one_event_in_ten_minutes_however_often_its_power_cap_flaps():
    rollup = Rollup("gpu01")

    def throttled(at_s: int, index: str = "0") -> list[str]:
        lines = rollup.add(Sweep(MINUTE + at_s * S, [], events=[
            {"kind": "throttling", "gpu": int(index), "reasons": ["sw_power_cap"], "time_ns": MINUTE + at_s * S}]))
        return [line.split(" ")[0] for line in lines if line.startswith("event,")]

    assert throttled(0) == ["event,Hostname=gpu01,kind=throttling,gpu=0"]
    assert throttled(5) == []
    assert throttled(30, "1") == ["event,Hostname=gpu01,kind=throttling,gpu=1"]  # another GPU has its own
    assert throttled(599) == []
    assert throttled(600) == ["event,Hostname=gpu01,kind=throttling,gpu=0"]
