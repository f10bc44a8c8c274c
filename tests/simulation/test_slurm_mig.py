"""The simulated Slurm's MIG device files: a slurmd's /dev holds /dev/nvidia-caps/nvidia-cap<N> for the GPU and
compute instances its node has (numbered as renderers.slurm.MigInstance.files and the driver's mig-minors),
so Debian's `slurmd -G`, in the same private /dev the simulation gives each slurmd, accepts a gres.conf
the renderer wrote for those instances, and refuses it once an instance is gone."""

import os
import shutil
import stat
import subprocess

import pytest

from appliance.partitioning.renderers.site import site_view
from appliance.partitioning.renderers.slurm import MigInstance, render_gres_conf, render_slurm_conf
from appliance.simulation import gpu_ops, slurm
from appliance.simulation import state as node_state
from tests.simulation.slurm_fixtures import demo_appliance, write_stage_files  # noqa: F401 (fixture)

# Debian's slurmd runs here, in a mount namespace: not the fast tier (tests/run --fast).
pytestmark = pytest.mark.slow


def _require_slurmd():
    # A missing prerequisite fails the test: a skip would pass CI without Slurm ever reading the files.
    if not os.path.exists(slurm.SLURMD) or os.geteuid() != 0:
        pytest.fail("slurmd -G in a private /dev needs Debian's slurmd and root (tests/run installs it)")


def slurmd_gres(tmp_path, node: str, slurm_conf: str, gres_conf: str) -> subprocess.CompletedProcess:
    """`slurmd -G` for `node` with the node's simulated /dev bind-mounted on /dev, as slurm._launch does."""
    (tmp_path / "slurm.conf").write_text(slurm_conf)
    (tmp_path / "gres.conf").write_text(gres_conf)
    (tmp_path / "cgroup.conf").write_text("ConstrainDevices=yes\n")
    dev = slurm.slurm_dir() / "dev" / node
    script = f"mount --bind {dev} /dev && exec {slurm.SLURMD} -G -f {tmp_path / 'slurm.conf'} -N {node}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)


def caps(node: str) -> list[str]:
    directory = slurm.slurm_dir() / "dev" / node / "nvidia-caps"
    return sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []


def test_slurmd_sees_the_mig_devices_of_the_instances_that_exist(demo_appliance, tmp_path):  # noqa: F811
    _require_slurmd()
    write_stage_files(demo_appliance)
    node = demo_appliance.nodes.get(name="gpu01")
    slurm.configure(demo_appliance)
    assert caps("gpu01") == []  # no instance yet: no MIG device file

    # GPU 0 of gpu01: 2g.20gb at 0, 1g.10gb at 2 and 3, 3g.40gb at 4, a compute instance over each.
    with node_state.update(node.sysroot) as state:
        gpu_ops.set_mig_mode(state, 0, True)
        for profile_id, start in ((14, 0), (19, 2), (19, 3), (9, 4)):
            gpu_ops.create_compute_instance(state, 0, gpu_ops.create_gpu_instance(state, 0, profile_id, start))
    files = slurm.sync_mig_devices(node)
    # mig-minors: GPU 0's instance g has access minor 3 + 9 g, its compute instance 0 the next one.
    assert files == [f"/dev/nvidia-caps/nvidia-cap{minor}" for minor in (12, 13, 21, 22, 30, 31, 39, 40)]
    assert caps("gpu01") == ["nvidia-cap12", "nvidia-cap13", "nvidia-cap21", "nvidia-cap22", "nvidia-cap30",
                             "nvidia-cap31", "nvidia-cap39", "nvidia-cap40"]
    cap21 = os.stat(slurm.slurm_dir() / "dev" / "gpu01" / "nvidia-caps" / "nvidia-cap21")
    assert (os.major(cap21.st_rdev), os.minor(cap21.st_rdev)) == (slurm.NVIDIA_CAPS_MAJOR, 21)

    site = site_view(demo_appliance)
    instances = {"gpu01": [MigInstance(0, "2g.20gb", 1), MigInstance(0, "1g.10gb", 2), MigInstance(0, "1g.10gb", 3),
                           MigInstance(0, "3g.40gb", 4)]}
    plan = {"gpu01": {"h100": 7, "2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1}}
    slurm_conf, gres_conf = render_slurm_conf(site, plan), render_gres_conf(site, plan, instances)
    assert ("NodeName=gpu01 Name=gpu Type=1g.10gb "
            "MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22") in gres_conf
    done = slurmd_gres(tmp_path, "gpu01", slurm_conf, gres_conf)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Type=h100 Count=7" in output
    assert output.count("Type=1g.10gb Count=1") == 2
    assert "Type=2g.20gb Count=1" in output and "Type=3g.40gb Count=1" in output

    # The 1g.10gb at slice 3 is destroyed: its files go, and the same gres.conf no longer passes.
    with node_state.update(node.sysroot) as state:
        gpu_ops.destroy_compute_instance(state, 0, 3, 0)
        gpu_ops.destroy_gpu_instance(state, 0, 3)
    assert slurm.sync_mig_devices(node) == [f"/dev/nvidia-caps/nvidia-cap{minor}" for minor in (12, 13, 21, 22, 39, 40)]
    assert "nvidia-cap30" not in caps("gpu01") and "nvidia-cap31" not in caps("gpu01")
    refused = slurmd_gres(tmp_path, "gpu01", slurm_conf, gres_conf)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "nvidia-cap30" in refused.stdout + refused.stderr

    # configure() (at every start) makes the same files from the node's state, and no others.
    shutil.rmtree(slurm.slurm_dir() / "dev" / "gpu01" / "nvidia-caps")
    (slurm.slurm_dir() / "dev" / "gpu02" / "nvidia-caps").mkdir()
    os.mknod(slurm.slurm_dir() / "dev" / "gpu02" / "nvidia-caps" / "nvidia-cap12", 0o600 | stat.S_IFCHR,
             os.makedev(slurm.NVIDIA_CAPS_MAJOR, 12))
    slurm.configure(demo_appliance)
    assert caps("gpu02") == []
    assert caps("gpu01") == ["nvidia-cap12", "nvidia-cap13", "nvidia-cap21", "nvidia-cap22", "nvidia-cap39",
                             "nvidia-cap40"]


def test_sync_before_slurm_is_configured_changes_nothing(demo_appliance):  # noqa: F811
    node = demo_appliance.nodes.get(name="gpu01")
    with node_state.update(node.sysroot) as state:
        gpu_ops.set_mig_mode(state, 0, True)
        gpu_ops.create_gpu_instance(state, 0, 9, 0)
    assert slurm.sync_mig_devices(node) == []
    assert not (slurm.slurm_dir() / "dev" / "gpu01").exists()
