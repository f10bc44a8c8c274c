"""The management command, and the promise that a simulated node never touches the host."""

import hashlib
import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from appliance.audit.models import AuditRecord
from appliance.simulation import state as node_state


def run_command(*args) -> str:
    out = StringIO()
    call_command("simulation", *args, stdout=out)
    return out.getvalue()


def test_prepare_fault_and_status(make_appliance):
    appliance, (node,) = make_appliance()
    output = run_command("prepare")
    assert "1 created (gpu01)" in output
    assert "0 created" in run_command("prepare", "--appliance", appliance.name)
    assert "injected port_rate device=mlx5_2 rate_gbps=200" in run_command(
        "fault", "inject", "gpu01", "port_rate", "device=mlx5_2", "rate_gbps=200")
    assert "port_rate device=mlx5_2 rate_gbps=200" in run_command("status")
    with pytest.raises(CommandError, match="takes device"):
        run_command("fault", "inject", "gpu01", "port_down", "port=1")
    with pytest.raises(CommandError, match="no HCA mlx5_9"):
        run_command("fault", "inject", "gpu01", "port_down", "device=mlx5_9")
    assert "cleared 1 fault(s)" in run_command("fault", "clear", "gpu01")
    assert node_state.load(node.sysroot)["faults"] == []
    events = list(AuditRecord.objects.filter(event__startswith="simulation.").values_list("event", "channel"))
    assert ("simulation.fault.inject", "cli") in events and ("simulation.fault.clear", "cli") in events
    assert ("simulation.appliance.prepare", "cli") in events


HOST_PATHS = ("/etc", "/boot", "/var/lib/dpkg", "/etc/systemd/system", "/lib/modules")


def host_snapshot() -> dict:
    """What a stage on a real machine would change: files under /etc, /boot, the package database,
    the loaded modules, the mounts, a sysctl and the kernel command line."""
    snapshot = {}
    for root in HOST_PATHS:
        for directory, _, files in os.walk(root):
            for name in files:
                path = Path(directory, name)
                try:
                    stat = path.lstat()
                except OSError:
                    continue
                snapshot[str(path)] = (stat.st_mtime_ns, stat.st_size)
    for virtual in ("/proc/modules", "/proc/mounts", "/proc/cmdline", "/proc/sys/vm/swappiness"):
        if Path(virtual).exists():  # containers may hide some of these
            snapshot[virtual] = hashlib.sha256(Path(virtual).read_bytes()).hexdigest()
    return snapshot


@pytest.mark.slow
def test_simulated_commands_never_touch_the_host(prepared, run_tool):
    before = host_snapshot()
    root = Path(prepared.sysroot)
    (root / "etc/default/grub.d/iommu.cfg").write_text('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n')
    (root / "etc/sysctl.d/99-test.conf").write_text("vm.swappiness = 1\n")
    (root / "etc/systemd/system/acs-off.service").write_text(
        "[Service]\nType=oneshot\nExecStart=/usr/bin/setpci -d *:*:0604 ECAP_ACS+0x6.w=0000\n")
    (root / "mnt/data").mkdir()
    for argv in (
        ("apt-get", "install", "-y", "nvidia-driver-550-server", "chrony", "nfs-common", "rdma-core", "linux-tools-generic"),
        ("modprobe", "-r", "nouveau"), ("modprobe", "nvidia"), ("modprobe", "rpcrdma"),
        ("systemctl", "enable", "--now", "nvidia-persistenced"), ("systemctl", "enable", "--now", "acs-off"),
        ("update-grub",), ("sysctl", "--system"), ("sysctl", "-w", "net.core.rmem_max=268435456"),
        ("mount", "-t", "nfs", "-o", "proto=rdma,port=20049", "10.0.0.5:/export", "/mnt/data"),
        ("nvidia-smi", "-pm", "1"), ("cpupower", "frequency-set", "-g", "performance"),
        ("umount", "/mnt/data"), ("reboot",),
    ):
        run_tool(*argv)
    state = node_state.load(prepared.sysroot)
    assert state["services"]["acs-off.service"]["active"]
    assert all(bridge["acs_ctrl"] == "0000" for bridge in state["pcie_bridges"])
    assert state["sysctls"]["vm.swappiness"] == "1"
    after = host_snapshot()
    changed = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
    assert changed == []
