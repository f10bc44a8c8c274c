"""A simulated node never reaches outside its sysroot, whatever path it is given.

The traversal the review used: a mount point of `/mnt/../../../../keys` joined to a node's sysroot
(`<state>/simulation/nodes/<node>`) names the state directory's keys/ folder, and creating it as a
mount point changed that folder from 0700 to 0755. The site parser refuses such a mount point (see
tests/inventory/test_site_values.py); here the parser is bypassed and the path goes straight to the
simulation's path helper, to the simulated tools and to the playbooks' sysroot join.
"""

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from appliance.simulation import state as node_state

TRAVERSAL = "/mnt/../../../../keys"


@pytest.fixture
def keys_folder(sim_settings):
    """The state directory's keys/ folder as the settings make it (0700), next to the nodes' sysroots."""
    keys = sim_settings.STATE_DIR / "keys"
    keys.mkdir(mode=0o700, exist_ok=True)
    keys.chmod(0o700)
    return keys


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_path_helper_refuses_dot_dot_and_symbolic_links_out_of_the_sysroot(prepared, keys_folder):
    sysroot = Path(prepared.sysroot)
    assert (sysroot / TRAVERSAL.lstrip("/")).resolve() == keys_folder.resolve()  # the traversal is real
    with pytest.raises(node_state.OutsideSysroot, match=r"^/mnt/../../../../keys: resolves to .*keys, outside the "
                                                        r"node's sysroot .*: refused$"):
        node_state.node_path(sysroot, TRAVERSAL)
    (sysroot / "mnt").mkdir(exist_ok=True)
    (sysroot / "mnt" / "scratch").symlink_to(keys_folder)
    with pytest.raises(node_state.OutsideSysroot, match="outside the node's sysroot"):
        node_state.node_path(sysroot, "/mnt/scratch/created-by-the-stage")
    with pytest.raises(node_state.OutsideSysroot, match="not an absolute path of the node"):
        node_state.node_path(sysroot, "mnt/datasets")
    assert node_state.node_path(sysroot, "/mnt/datasets") == sysroot / "mnt" / "datasets"
    assert mode(keys_folder) == 0o700


def test_simulated_tools_refuse_a_path_outside_the_sysroot(prepared, run_tool, keys_folder):
    result = run_tool("mount", "-t", "tmpfs", "tmpfs", TRAVERSAL, check=False)
    assert (result.returncode, result.stderr.strip().split(": resolves")[0]) == (2, f"mount: {TRAVERSAL}")
    assert all(m["target"] != TRAVERSAL for m in node_state.load(prepared.sysroot)["mounts"])
    result = run_tool("grub-mkconfig", "-o", "/boot/../../../../keys/grub.cfg", check=False)
    assert result.returncode == 2 and "outside the node's sysroot" in result.stderr
    result = run_tool("systemctl", "start", "../../../../../keys/x.service", check=False)
    assert result.returncode != 0 and "outside the node's sysroot" in result.stderr
    assert sorted(p.name for p in keys_folder.iterdir()) == [] and mode(keys_folder) == 0o700


def load_filter():
    path = Path(settings.COLLECTION_DIR) / "plugins" / "filter" / "node_path.py"
    spec = importlib.util.spec_from_file_location("node_path_filter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.node_path


def test_the_playbooks_sysroot_join_refuses_a_path_outside_the_sysroot(prepared, keys_folder):
    from ansible.errors import AnsibleFilterError

    node_path = load_filter()
    sysroot = prepared.sysroot
    with pytest.raises(AnsibleFilterError, match=r"not normalized"):
        node_path(TRAVERSAL, sysroot)
    with pytest.raises(AnsibleFilterError, match=r"not normalized"):
        node_path(TRAVERSAL, "")  # a real node: no sysroot, the path is still refused
    with pytest.raises(AnsibleFilterError, match=r"control character"):
        node_path("/mnt/x\n", sysroot)
    (Path(sysroot) / "mnt").mkdir(exist_ok=True)
    (Path(sysroot) / "mnt" / "scratch").symlink_to(keys_folder)
    with pytest.raises(AnsibleFilterError, match=r"outside the node's sysroot"):
        node_path("/mnt/scratch", sysroot)
    assert node_path("/etc/modprobe.d/lnet.conf", sysroot) == str(Path(sysroot).resolve() / "etc/modprobe.d/lnet.conf")
    assert node_path("/etc/modprobe.d/lnet.conf", "") == "/etc/modprobe.d/lnet.conf"


PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Create the mount points (as the storage_client role does)
      ansible.builtin.file:
        path: "{{ item | appliance.hgx.node_path(sysroot) }}"
        state: directory
        mode: "0755"
      loop: "{{ mount_points }}"
"""


def test_a_playbook_creating_a_traversing_mount_point_fails_and_leaves_keys_alone(prepared, keys_folder, tmp_path):
    """ansible-playbook for real, with the suite's ansible.cfg: the task fails on the traversal and the
    keys folder keeps its mode (before, it became 0755)."""
    playbook = tmp_path / "mkdirs.yml"
    playbook.write_text(PLAY)
    environment = {**os.environ, "ANSIBLE_CONFIG": str(Path(settings.PLAYBOOKS_DIR) / "ansible.cfg"),
                   "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    extra = f'{{"sysroot": "{prepared.sysroot}", "mount_points": ["/mnt/scratch", "{TRAVERSAL}"]}}'
    result = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), str(playbook), "-e", extra],
                            capture_output=True, text=True, env=environment, timeout=300, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"node_path: '{TRAVERSAL}' is not normalized" in result.stdout
    assert (Path(prepared.sysroot) / "mnt" / "scratch").is_dir()  # the good one was made, in the sysroot
    assert mode(keys_folder) == 0o700
