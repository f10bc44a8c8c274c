"""The commands the fabric, GPUDirect, storage and acceptance stages use, and the faults they must catch."""

import json
from pathlib import Path

import pytest

from appliance.simulation import services


@pytest.fixture
def gpu_stack(prepared, run_tool):
    run_tool("apt-get", "install", "-y", "nvidia-driver-550-server", "nvidia-fabricmanager-550",
             "datacenter-gpu-manager", "nccl-tests", "nvidia-gds-12-4", "infiniband-diags", "perftest")
    run_tool("modprobe", "-r", "nouveau")
    for module in ("nvidia", "nvidia-peermem", "nvidia-fs"):
        run_tool("modprobe", module)
    return prepared


def test_topology_names_each_gpus_rail(gpu_stack, run_tool):
    lines = run_tool("nvidia-smi", "topo", "-m").stdout.splitlines()
    header = lines[0].split("\t")
    gpu3 = next(line for line in lines if line.startswith("GPU3\t")).split("\t")
    assert gpu3[header.index("GPU0")] == "NV18"
    assert gpu3[header.index("NIC3")] == "PIX"
    assert gpu3[header.index("NIC5")] == "SYS"
    assert "  NIC3: mlx5_3" in lines


def test_all_reduce_needs_fabric_manager_and_reports_bandwidth(gpu_stack, run_tool):
    without = run_tool("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", check=False)
    assert without.returncode == 1 and "fabricmanager" in without.stderr
    run_tool("systemctl", "enable", "--now", "nvidia-fabricmanager")
    out = run_tool("all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8").stdout
    last = [line for line in out.splitlines() if line.strip() and not line.startswith("#")][-1].split()
    assert last[0] == str(8 * 2**30) and float(last[7]) > 460
    services.inject_fault(gpu_stack, "bandwidth_low", test="all_reduce_perf", value=310)
    out = run_tool("all_reduce_perf", "-b", "8G", "-e", "8G", "-f", "2", "-g", "8").stdout
    assert "# Avg bus bandwidth    : 310.0000" in out


def test_dcgm_diag_reports_persistence_and_missing_gpu(gpu_stack, run_tool):
    assert run_tool("dcgmi", "diag", "-r", "1", check=False).returncode == 255  # no host engine yet
    run_tool("systemctl", "enable", "--now", "nvidia-dcgm")
    failing = run_tool("dcgmi", "diag", "-r", "1", "-j", check=False)
    assert failing.returncode == 1
    deployment = json.loads(failing.stdout)["DCGM GPU Diagnostic"]["test_categories"][0]
    assert deployment["category"] == "Deployment"
    assert deployment["tests"][4] == {"name": "Persistence Mode", "results": [{
        "gpu_ids": "0,1,2,3,4,5,6,7", "status": "Fail",
        "warnings": [{"warning": f"GPU {n}: persistence mode is disabled", "error_id": 0} for n in range(8)]}]}
    run_tool("nvidia-smi", "-pm", "1")
    assert run_tool("dcgmi", "diag", "-r", "1").returncode == 0
    assert run_tool("dcgmi", "discovery", "-l").stdout.startswith("8 GPUs found.")
    services.inject_fault(gpu_stack, "gpu_missing", index=2)
    assert run_tool("dcgmi", "discovery", "-l").stdout.startswith("7 GPUs found.")
    assert "7 GPUs found, 8 expected" in run_tool("dcgmi", "diag", "-r", "1", check=False).stdout


def test_gdscheck_enforces_acs_iommu_and_cufile(gpu_stack, run_tool):
    root = Path(gpu_stack.sysroot)
    out = run_tool("gdscheck", "-p", check=False)
    assert out.returncode == 1 and "/etc/cufile.json not found" in out.stdout and "ACS is enabled" in out.stdout
    (root / "etc/cufile.json").write_text('// NVIDIA cuFile\n{"properties": {"rdma_dev_addr_list": ["10.1.0.11"]}}\n')
    run_tool("setpci", "-d", "*:*:0604", "ECAP_ACS+0x6.w=0000")
    (root / "etc/default/grub.d/iommu.cfg").write_text('GRUB_CMDLINE_LINUX="intel_iommu=on"\n')
    run_tool("update-grub")
    out = run_tool("gdscheck", "-p", check=False)
    assert out.returncode == 1 and " IOMMU: enabled" in out.stdout
    (root / "etc/default/grub.d/iommu.cfg").write_text('GRUB_CMDLINE_LINUX="intel_iommu=on iommu=pt"\n')
    run_tool("update-grub")
    out = run_tool("gdscheck", "-p")
    assert "Platform verification succeeded" in out.stdout and " --Mellanox PeerDirect : Enabled" in out.stdout


def test_mount_unit_and_mount_fault(prepared, run_tool):
    root = Path(prepared.sysroot)
    run_tool("apt-get", "install", "-y", "lustre-client-utils", "lustre-client-modules-5.15.0-113-generic")
    (root / "mnt/lustre").mkdir()
    (root / "etc/systemd/system/mnt-lustre.mount").write_text(
        "[Mount]\nWhat=10.1.0.2@o2ib:/scratch\nWhere=/mnt/lustre\nType=lustre\nOptions=flock,noatime\n")
    services.inject_fault(prepared, "mount_fails", mount_point="/mnt/lustre")
    failed = run_tool("systemctl", "start", "mnt-lustre.mount", check=False)
    assert failed.returncode == 1 and "Connection timed out" in failed.stderr
    services.clear_faults(prepared, "mount_fails")
    run_tool("systemctl", "start", "mnt-lustre.mount")
    found = json.loads(run_tool("findmnt", "-J", "/mnt/lustre").stdout)["filesystems"][0]
    assert (found["source"], found["fstype"], found["options"]) == ("10.1.0.2@o2ib:/scratch", "lustre", "flock,noatime")
    assert "lustre" in (root / "proc/mounts").read_text()


def test_lustre_tunables_unit_applies_lctl_parameters_after_the_mount(prepared, run_tool):
    root = Path(prepared.sysroot)
    run_tool("apt-get", "install", "-y", "lustre-client-utils", "lustre-client-modules-5.15.0-113-generic")
    (root / "mnt/lustre").mkdir()
    (root / "etc/systemd/system/mnt-lustre.mount").write_text(
        "[Mount]\nWhat=10.1.0.2@o2ib:/scratch\nWhere=/mnt/lustre\nType=lustre\nOptions=flock\n")
    (root / "etc/systemd/system/lustre-tunables-scratch.service").write_text(
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/usr/sbin/lctl set_param osc.*.max_rpcs_in_flight=64 llite.*.max_read_ahead_mb=1024\n")
    early = run_tool("systemctl", "start", "lustre-tunables-scratch.service", check=False)
    assert early.returncode == 1 and "ExecStart" in early.stderr  # no Lustre mounted: no client parameters
    run_tool("systemctl", "start", "mnt-lustre.mount")
    run_tool("systemctl", "start", "lustre-tunables-scratch.service")
    assert run_tool("systemctl", "is-active", "lustre-tunables-scratch.service").stdout.strip() == "active"
    assert run_tool("lctl", "get_param", "osc.*.max_rpcs_in_flight").stdout.strip() == "osc.*.max_rpcs_in_flight=64"
    assert run_tool("lctl", "list_nids", check=False).returncode == 2


def test_systemd_networkd_ships_with_systemd(prepared, run_tool):
    assert run_tool("systemctl", "is-enabled", "systemd-networkd", check=False).stdout.strip() == "disabled"
    run_tool("systemctl", "enable", "--now", "systemd-networkd")
    assert run_tool("systemctl", "is-active", "systemd-networkd").stdout.strip() == "active"


def test_unsupported_requests_fail_clearly(prepared, run_tool):
    result = run_tool("systemctl", "list-timers", check=False)
    assert result.returncode == 2 and "does not implement: list-timers" in result.stderr
    result = run_tool("setpci", "-s", "17:00.0", "COMMAND=0x02", check=False)
    assert result.returncode == 2 and "only the ACS control register" in result.stderr


def test_fio_and_xid_log(gpu_stack, run_tool):
    root = Path(gpu_stack.sysroot)
    run_tool("apt-get", "install", "-y", "fio", "nfs-common")
    run_tool("modprobe", "rpcrdma")
    (root / "mnt/data").mkdir()
    run_tool("mount", "-t", "nfs", "-o", "proto=rdma,port=20049,nconnect=8", "10.1.0.5:/export", "/mnt/data")
    argv = ["fio", "--name=smoke", "--directory=/mnt/data", "--rw=read", "--bs=1M", "--size=64M", "--direct=1",
            "--ioengine=libaio", "--iodepth=16", "--numjobs=1", "--group_reporting", "--output-format=json"]
    job = json.loads(run_tool(*argv).stdout)["jobs"][0]
    assert job["read"]["bw_bytes"] == 11_800_000_000 and not any(root.joinpath("mnt/data").iterdir())
    services.inject_fault(gpu_stack, "bandwidth_low", test="fio", value=900)
    assert json.loads(run_tool(*argv).stdout)["jobs"][0]["read"]["bw_bytes"] == 900_000_000
    assert (root / "dev/kmsg").read_text() == ""
    services.inject_fault(gpu_stack, "gpu_missing", index=1)
    assert "NVRM: Xid (PCI:0000:2A:00.0): 79, " in (root / "dev/kmsg").read_text()


def test_acceptance_reads_dcgm_diag_json(gpu_stack, run_tool, monkeypatch):
    """The acceptance check runs `dcgmi diag -r 1 -j` and reads its JSON: the failing test and each GPU's
    warning reach the record's message."""
    import sys

    import yaml
    from django.conf import settings

    sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))
    import appliance_fabric_acceptance as fabric

    run_tool("systemctl", "enable", "--now", "nvidia-dcgm")
    for name, value in services.node_environment(gpu_stack).items():
        monkeypatch.setenv(name, value)
    platform = yaml.safe_load((Path(settings.FIRMWARE_DIR) / "platforms" / "hgx-h100-8gpu.yaml").read_text())
    ctx = fabric.FabricContext(gpu_stack.name, sysroot=gpu_stack.sysroot, platform=platform, tools=fabric.Tools())
    (record,) = fabric.dcgm_checks(ctx)
    warnings = "; ".join(f"GPU {n}: persistence mode is disabled" for n in range(8))
    assert (record["check"], record["measured"], record["passed"]) == ("dcgm.diag_r1", "8 pass, 1 fail, 0 skip", False)
    assert record["message"] == f"dcgmi diag -r 1 -j: 8 pass, 1 fail, 0 skip (Persistence Mode: Fail ({warnings}))"
    run_tool("nvidia-smi", "-pm", "1")
    (record,) = fabric.dcgm_checks(ctx)
    assert (record["measured"], record["passed"]) == ("9 pass, 0 fail, 0 skip", True)


def test_gpu_cores_from_the_simulated_topology(gpu_stack, run_tool):
    """The CPU Affinity column of `nvidia-smi topo -m` and the node's /proc/cpuinfo give each GPU its cores
    in Slurm's numbering, as appliance.hgx.topo_affinity computes them on the node (2 x 56 cores, 2 threads:
    socket 0 has CPUs 0-55 and 112-167, i.e. cores 0-55)."""
    import sys

    from django.conf import settings

    sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))
    import appliance_fabric_parsers as parsers

    matrix = parsers.parse_topo_matrix(run_tool("nvidia-smi", "topo", "-m").stdout)
    assert matrix["cpu_affinity"] == {0: "0-55,112-167", 1: "0-55,112-167", 2: "0-55,112-167", 3: "0-55,112-167",
                                      4: "56-111,168-223", 5: "56-111,168-223", 6: "56-111,168-223",
                                      7: "56-111,168-223"}
    cpuinfo = parsers.parse_cpuinfo((Path(gpu_stack.sysroot) / "proc" / "cpuinfo").read_text())
    assert len(cpuinfo) == 224 and cpuinfo[0] == (0, 0) and cpuinfo[112] == (0, 0) and cpuinfo[167] == (0, 55)
    assert cpuinfo[56] == (1, 0) and cpuinfo[223] == (1, 55)
    assert parsers.gpu_cores(matrix["cpu_affinity"], cpuinfo) == {
        0: "0-55", 1: "0-55", 2: "0-55", 3: "0-55", 4: "56-111", 5: "56-111", 6: "56-111", 7: "56-111"}


@pytest.mark.slow
def test_topo_affinity_module_records_each_gpus_cores(gpu_stack):
    """The module as the gpudirect stage runs it: its facts hold the rails and the cores gres.conf uses."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    arguments = {"node": gpu_stack.name, "sysroot": gpu_stack.sysroot, "expected": {"0": "mlx5_0", "7": "mlx5_7"}}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", "-o", "-m",
         "appliance.hgx.topo_affinity", "-a", json.dumps(arguments)],
        capture_output=True, text=True, timeout=120, cwd=settings.BASE_DIR,
        env={**os.environ, **services.node_environment(gpu_stack),
             "ANSIBLE_COLLECTIONS_PATH": str(settings.BASE_DIR / "playbooks" / "collections"),
             "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_LOCALHOST_WARNING": "False"})
    assert result.returncode == 0, result.stdout + result.stderr
    facts = json.loads(result.stdout.split("=>", 1)[1])["ansible_facts"]
    assert facts["appliance_gpu_cores"] == {"0": "0-55", "1": "0-55", "2": "0-55", "3": "0-55",
                                            "4": "56-111", "5": "56-111", "6": "56-111", "7": "56-111"}
    assert facts["appliance_gpu_hca_affinity"]["7"] == "mlx5_7"
