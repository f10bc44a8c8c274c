"""slurm.conf, gres.conf and cgroup.conf from the inventory, checked by Slurm's own parser (slurmd -G)."""

import os
import shutil
import subprocess
from dataclasses import replace

import pytest

from appliance.partitioning.renderers.site import RenderError
from appliance.partitioning.renderers.slurm import (
    MigInstance,
    device_files,
    render_cgroup_conf,
    render_gres_conf,
    render_nhc_conf,
    render_slurm_conf,
)
from tests.partitioning.demo_site import demo_site, platform


def test_slurm_conf_declares_the_training_nodes_with_their_gpus():
    text = render_slurm_conf(demo_site())
    lines = text.splitlines()
    assert "SlurmctldHost=mgmt01(10.0.0.10)" in lines
    for key in ("GresTypes=gpu", "SelectType=select/cons_tres", "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup,task/affinity", "AuthType=auth/munge"):
        assert key in lines
    assert ("NodeName=gpu01 NodeAddr=10.0.0.11 CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
            "RealMemory=1992294 Gres=gpu:h100:8 State=UNKNOWN") in lines
    assert not any(line.startswith("NodeName=gpu03") for line in lines)  # inference nodes are Kubernetes'
    assert ("PartitionName=training Nodes=gpu01,gpu02 OverSubscribe=EXCLUSIVE Default=YES MaxTime=INFINITE State=UP"
            in lines)
    assert render_slurm_conf(demo_site()) == text  # deterministic: a rerun writes the same bytes


def test_node_resources_come_from_facts_then_platform():
    site = demo_site("hgx-h200-8gpu")
    lines = render_slurm_conf(site).splitlines()
    assert ("NodeName=gpu01 NodeAddr=10.0.0.11 CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
            "RealMemory=1992294 Gres=gpu:h200:8 State=UNKNOWN") in lines
    nodes = tuple(replace(n, facts={"cpus": 192, "memory_mib": 1000000}) if n.name == "gpu02" else n for n in site.nodes)
    lines = render_slurm_conf(replace(site, nodes=nodes)).splitlines()
    assert "NodeName=gpu02 NodeAddr=10.0.0.12 CPUs=192 RealMemory=1000000 Gres=gpu:h200:8 State=UNKNOWN" in lines


def test_gres_conf_names_explicit_device_files():
    text = render_gres_conf(demo_site())
    assert "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in text.splitlines()
    assert "AutoDetect" not in text
    assert render_cgroup_conf().splitlines()[1:4] == ["ConstrainCores=yes", "ConstrainDevices=yes", "ConstrainRAMSpace=yes"]


# What the gpudirect stage records on an HGX H100 node of the simulation (tests/simulation/test_stack_tools.py
# checks that chain): GPUs 0-3 on socket 0, 4-7 on socket 1.
H100_GPU_CORES = {"0": "0-55", "1": "0-55", "2": "0-55", "3": "0-55",
                  "4": "56-111", "5": "56-111", "6": "56-111", "7": "56-111"}


def with_measured_cores(site, cores=H100_GPU_CORES):
    nodes = tuple(replace(n, facts={**n.facts, "gpu_cores": dict(cores)}) if n.gpu_count else n for n in site.nodes)
    return replace(site, nodes=nodes)


def test_gres_conf_carries_the_cores_of_each_gpu():
    lines = render_gres_conf(with_measured_cores(demo_site())).splitlines()
    assert lines[2:] == [
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55",
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111",
        "NodeName=gpu02 Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55",
        "NodeName=gpu02 Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111",
    ]
    instances = {"gpu01": [MigInstance(4, "3g.40gb", 1, 0)]}
    mig = render_gres_conf(with_measured_cores(demo_site()), {"gpu01": {"h100": 7, "3g.40gb": 1}}, instances)
    assert ("NodeName=gpu01 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia4,/dev/nvidia-caps/nvidia-cap552,"
            "/dev/nvidia-caps/nvidia-cap553 Cores=56-111") in mig.splitlines()
    assert "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[5-7] Cores=56-111" in mig.splitlines()
    # Before the gpudirect stage measured them: no Cores=, and the file says why.
    plain = render_gres_conf(demo_site()).splitlines()
    assert "# gpu01: no Cores= yet (the gpudirect stage measures the GPUs' CPU affinity)" in plain
    with pytest.raises(RenderError, match=r"node gpu01: facts.gpu_cores: GPU 4: core 112 is beyond the node's 112 cores"):
        render_gres_conf(with_measured_cores(demo_site(), {**H100_GPU_CORES, "4": "56-112"}))
    with pytest.raises(RenderError, match=r"node gpu01: facts.gpu_cores: GPU '8' is not one of the node's 8 GPUs"):
        render_gres_conf(with_measured_cores(demo_site(), {**H100_GPU_CORES, "8": "0"}))


def test_mig_plan_changes_gres_and_names_mig_device_files():
    instances = {"gpu01": [MigInstance(0, "3g.40gb", 1, 0), MigInstance(0, "3g.40gb", 2, 0)]}
    plan = {"gpu01": {"h100": 7, "3g.40gb": 2}}
    conf = render_slurm_conf(demo_site(), plan)
    assert "Gres=gpu:3g.40gb:2,gpu:h100:7" in conf
    gres = render_gres_conf(demo_site(), plan, instances).splitlines()
    assert "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[1-7]" in gres
    # /proc/driver/nvidia-caps/mig-minors: gpu0/gi1/access is 12, its ci0 13
    assert ("NodeName=gpu01 Name=gpu Type=3g.40gb "
            "MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13") in gres
    with pytest.raises(RenderError, match="gpu01.*MIG instances are not known"):
        render_gres_conf(demo_site(), plan, None)
    with pytest.raises(RenderError, match="gpu01: 6 whole h100"):
        render_gres_conf(demo_site(), {"gpu01": {"h100": 6, "3g.40gb": 2}}, instances)


def test_nhc_checks_gpus_ports_and_mounts():
    text = render_nhc_conf(demo_site())
    assert "gpu01 || check_hw_ib 400 mlx5_7:1" in text
    assert "* || check_fs_mount_rw -f /mnt/lustre" in text
    assert "gpu02 || check_cmd_output -t 30 -m '/^8$/' nvidia-smi --query-gpu=count --format=csv,noheader -i 0" in text


# ---- Slurm's own parser -------------------------------------------------------------------------------

SLURMD = shutil.which("slurmd") or "/usr/sbin/slurmd"


def _parser_available():
    if not os.path.exists(SLURMD):
        return "slurmd (Debian package slurmd) is not installed"
    if os.geteuid() != 0:
        return "slurmd -G needs the /dev/nvidia* files of gres.conf: mknod and a private /dev need root"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"unshare -m is not permitted here: {probe.stderr.strip()}"
    return ""


def slurmd_gres(tmp_path, node, files, slurm_conf, gres_conf, hwloc=None):
    """Run `slurmd -G` for `node` inside a mount namespace whose /dev holds the device files gres.conf names;
    `hwloc` (e.g. "Package:2 Core:56 PU:2") gives slurmd the node's CPU topology instead of this machine's,
    which it needs to check Cores= (HWLOC_SYNTHETIC: hwloc builds that topology instead of reading the host)."""
    dev = tmp_path / "dev"
    for path in files:
        relative = path.removeprefix("/dev/")
        target = dev / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        major = 195 if "nvidia-caps" not in relative else 508
        minor = int("".join(ch for ch in relative.rsplit("/", 1)[-1] if ch.isdigit()))
        os.mknod(target, 0o600 | 0o020000, os.makedev(major, minor))
    (tmp_path / "slurm.conf").write_text(slurm_conf)
    (tmp_path / "gres.conf").write_text(gres_conf)
    (tmp_path / "cgroup.conf").write_text(render_cgroup_conf())
    script = f"mount --bind {dev} /dev && exec {SLURMD} -G -f {tmp_path / 'slurm.conf'} -N {node}"
    environment = {**os.environ, **({"HWLOC_SYNTHETIC": hwloc} if hwloc else {})}
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                          check=False, env=environment)


@pytest.fixture
def slurm_parser():
    # A missing prerequisite fails the test: a skip would pass CI without Slurm ever reading the files.
    reason = _parser_available()
    if reason:
        pytest.fail(f"Slurm's own parser cannot run: {reason} (tests/run installs slurmd; run the suite as root)")


def test_slurm_parser_accepts_the_generated_files(tmp_path, slurm_parser):
    site = demo_site()
    done = slurmd_gres(tmp_path, "gpu01", device_files(site, "gpu01"), render_slurm_conf(site), render_gres_conf(site))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Gres Name=gpu Type=h100 Count=8" in output


def test_slurm_parser_accepts_a_mig_layout(tmp_path, slurm_parser):
    site = demo_site()
    instances = {"gpu02": [MigInstance(3, "1g.10gb", gi, 0) for gi in (7, 8, 9)] + [MigInstance(3, "4g.40gb", 1, 0)]}
    plan = {"gpu02": {"h100": 7, "1g.10gb": 3, "4g.40gb": 1}}
    done = slurmd_gres(tmp_path, "gpu02", device_files(site, "gpu02", instances), render_slurm_conf(site, plan),
                       render_gres_conf(site, plan, instances))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Type=h100 Count=7" in output
    assert output.count("Type=1g.10gb Count=1") == 3
    assert "Type=4g.40gb Count=1" in output


def test_slurm_parser_reads_the_cores_of_each_gpu(tmp_path, slurm_parser):
    """gres.conf Cores= in Slurm's abstract core ids, checked by slurmd against an HGX H100 node's topology
    (2 sockets x 56 cores x 2 threads): without them `slurmd -G` printed `(null)`."""
    site = with_measured_cores(demo_site())
    gres = render_gres_conf(site)
    done = slurmd_gres(tmp_path, "gpu01", device_files(site, "gpu01"), render_slurm_conf(site), gres,
                       hwloc="Package:2 Core:56 PU:2")
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "error" not in output, output
    assert "File=/dev/nvidia[0-3] Cores=0-55 CoreCnt=224" in output
    assert "File=/dev/nvidia[4-7] Cores=56-111 CoreCnt=224" in output
    # A core the node does not have: Slurm's own refusal.
    done = slurmd_gres(tmp_path / "beyond", "gpu01", device_files(site, "gpu01"), render_slurm_conf(site),
                       gres.replace("Cores=56-111", "Cores=56-112"), hwloc="Package:2 Core:56 PU:2")
    assert "error: Invalid GRES data for gpu, Cores=56-112" in done.stdout + done.stderr


def test_slurm_parser_rejects_a_wrong_key(tmp_path, slurm_parser):
    site = demo_site()
    broken = render_gres_conf(site).replace("Name=gpu Type=h100", "Name=gpu Kind=h100", 1)
    done = slurmd_gres(tmp_path, "gpu01", device_files(site, "gpu01"), render_slurm_conf(site), broken)
    assert done.returncode != 0
    assert "Kind" in done.stdout + done.stderr


def test_platform_files_carry_the_h200_gate():
    assert platform("hgx-h200-8gpu")["acceptance"]["nccl_all_reduce_busbw_gbs"]["min"] == 480
    assert platform("hgx-h200-8gpu")["gpu"]["mig_model"] == "h200"  # its MIG profiles: appliance/partitioning/profiles.py
