"""The simulated commands change a simulated node's state as the real ones change a server."""

import json
from pathlib import Path

from appliance.simulation import services
from appliance.simulation import state as node_state


def test_factory_node_has_nouveau_and_no_nvidia_stack(prepared, run_tool):
    state = node_state.load(prepared.sysroot)
    assert "nouveau" in state["modules"]
    assert not any(name.startswith("nvidia") for name in state["packages"])
    assert len(state["gpus"]) == 8
    assert state["gpus"][0]["uuid"].startswith("GPU-")
    missing = run_tool("nvidia-smi", "-L", check=False)
    assert missing.returncode == 127 and "command not found" in missing.stderr


def test_driver_install_load_and_query(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server", "nvidia-fabricmanager-550")
    blocked = run_tool("modprobe", "nvidia", check=False)
    assert blocked.returncode == 1 and "nouveau" in blocked.stderr
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    assert "nvidia" in run_tool("lsmod").stdout
    query = run_tool("nvidia-smi", "--query-gpu=index,uuid,name,memory.total,persistence_mode,driver_version",
                     "--format=csv,noheader,nounits").stdout.strip().splitlines()
    assert len(query) == 8
    index, uuid, name, memory, persistence, driver = [field.strip() for field in query[0].split(",")]
    state = node_state.load(prepared.sysroot)
    assert (index, uuid, name, memory, persistence, driver) == (
        "0", state["gpus"][0]["uuid"], "NVIDIA H100 80GB HBM3", "81559", "Disabled", "550.90.07")
    run_tool("systemctl", "enable", "--now", "nvidia-persistenced")
    assert run_tool("systemctl", "is-active", "nvidia-persistenced").stdout.strip() == "active"
    assert all(gpu["persistence_mode"] for gpu in node_state.load(prepared.sysroot)["gpus"])
    assert run_tool("dpkg-query", "-W", "-f=${Status} ${Version}", "nvidia-driver-550-server").stdout == \
        "install ok installed 550.90.07"
    unknown = run_tool("apt-get", "install", "-y", "nvidia-drvier-550", check=False)
    assert unknown.returncode == 100 and "Unable to locate package nvidia-drvier-550" in unknown.stderr


def test_mig_through_nvidia_smi(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    run_tool("modprobe", "-r", "nouveau")
    run_tool("modprobe", "nvidia")
    run_tool("nvidia-smi", "-i", "0", "-mig", "1")
    out = run_tool("nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb:0,9:4", "-C").stdout
    assert out.count("Successfully created GPU instance") == 2
    overlap = run_tool("nvidia-smi", "mig", "-i", "0", "-cgi", "1g.10gb:0", check=False)
    assert overlap.returncode != 0 and "overlaps" in overlap.stderr
    listing = run_tool("nvidia-smi", "-L").stdout
    assert listing.count("MIG 3g.40gb") == 2
    mig = node_state.load(prepared.sysroot)["gpus"][0]["mig"]
    assert mig["current"] and [gi["placement_start"] for gi in mig["gpu_instances"]] == [0, 4]


def test_grub_sysctl_setpci_and_reboot(prepared, run_tool):
    root = prepared.sysroot
    open(root + "/etc/default/grub.d/appliance.cfg", "w").write(
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX intel_iommu=on iommu=pt modprobe.blacklist=nouveau"\n')
    run_tool("update-grub")
    assert "iommu=pt" in open(root + "/proc/cmdline").read()
    open(root + "/etc/sysctl.d/90-appliance.conf", "w").write("vm.swappiness = 10\n")
    run_tool("sysctl", "--system")
    assert run_tool("sysctl", "-n", "vm.swappiness").stdout.strip() == "10"
    run_tool("setpci", "-d", "*:*:0604", "ECAP_ACS+0x6.w=0000")
    assert all(bridge["acs_ctrl"] == "0000" for bridge in node_state.load(root)["pcie_bridges"])
    open(root + "/etc/modules-load.d/ib.conf", "w").write("ib_ipoib\n")
    run_tool("reboot")
    state = node_state.load(root)
    assert "nouveau" not in state["modules"] and "ib_ipoib" in state["modules"]


def test_fabric_tools_and_faults(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "infiniband-diags", "perftest")
    ibstat = run_tool("ibstat", "mlx5_3").stdout
    assert "State: Active" in ibstat and "Rate: 400" in ibstat
    services.inject_fault(prepared, "port_down", device="mlx5_3")
    assert "State: Down" in run_tool("ibstat", "mlx5_3").stdout
    assert "1: DOWN" in run_tool("ibstatus", "mlx5_3").stdout
    services.inject_fault(prepared, "port_rate", device="mlx5_1", rate_gbps=200)
    assert "200 Gb/sec (4X HDR)" in run_tool("ibstatus", "mlx5_1").stdout
    down = run_tool("ib_write_bw", "-d", "mlx5_3", "--report_gbits", check=False)
    assert down.returncode == 1 and "Down" in down.stderr
    services.clear_faults(prepared)
    services.inject_fault(prepared, "bandwidth_low", test="ib_write_bw", value=301.5)
    assert "301.50" in run_tool("ib_write_bw", "-d", "mlx5_0", "--report_gbits").stdout
    services.inject_fault(prepared, "task_fails", tool="ibstat")
    assert run_tool("ibstat", check=False).returncode == 1
    services.inject_fault(prepared, "module_missing", module="nvidia_peermem")
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server")
    missing = run_tool("modprobe", "nvidia-peermem", check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert json.loads(json.dumps(services.clear_faults(prepared, "task_fails")))[0]["tool"] == "ibstat"


def test_chrony_replaces_timesyncd(prepared, run_tool):
    assert run_tool("chronyc", "tracking", check=False).returncode == 127
    run_tool("apt-get", "install", "-y", "chrony")
    assert run_tool("systemctl", "is-active", "chrony").stdout.strip() == "active"
    gone = run_tool("systemctl", "is-enabled", "systemd-timesyncd", check=False)
    assert (gone.returncode, gone.stdout.strip()) == (1, "not-found")
    Path(prepared.sysroot, "etc/chrony/chrony.conf").write_text("server 10.0.0.1 iburst\n")
    assert "Leap status     : Normal" in run_tool("chronyc", "tracking").stdout
    run_tool("systemctl", "stop", "chrony")
    stopped = run_tool("chronyc", "tracking", check=False)
    assert stopped.returncode == 1 and "506 Cannot talk to daemon" in stopped.stderr
