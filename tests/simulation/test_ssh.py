"""The simulated nodes are reached as real ones: one OpenSSH server per node on its own loopback address,
the appliance's key, host keys checked against the simulation's known_hosts, `become` through sudo to an
unprivileged account, and the node's own Python (never the controller's)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from appliance.provisioning import executor, playbook_vars
from appliance.provisioning import services as provisioning
from appliance.provisioning.states import RunState
from appliance.simulation import services, sshd

pytestmark = pytest.mark.slow

LOGIN = "appliance-sim" if os.geteuid() == 0 else None
PROBE = """
- name: Probe
  hosts: all
  gather_facts: false
  tasks:
    - name: Who runs the modules
      ansible.builtin.command: id -un
      register: who
      changed_when: false
    - name: Which Python runs them
      ansible.builtin.command: "{{ ansible_python_interpreter }} -c 'import sys; print(sys.executable)'"
      register: python
      changed_when: false
    - name: Show them
      ansible.builtin.debug:
        msg: "who={{ who.stdout }} python={{ python.stdout }}"
    - name: A stray write to the host's /etc
      ansible.builtin.copy:
        content: "probe\\n"
        dest: /etc/appliance-probe
      register: stray
      ignore_errors: true
    - name: Show the refusal
      ansible.builtin.debug:
        msg: "stray={{ stray.msg | default('written') }}"
"""


@pytest.fixture
def running(make_appliance):
    appliance, nodes = make_appliance(nodes=(("ssh-gpu01", "hgx-h100-8gpu"), ("ssh-gpu02", "hgx-h100-8gpu")))
    services.prepare_appliance(appliance)
    pids = services.start_ssh(appliance)
    yield appliance, nodes, pids
    services.stop(appliance)


def sshd_processes() -> dict[str, int]:
    """{config file: pid} of every running sshd started with -f."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().decode().replace("\0", " ").split()
        except OSError:
            continue
        # sshd's listener shows as "sshd: /usr/sbin/sshd -D -f CONFIG ... [listener] ...".
        if title[:2] == ["sshd:", "/usr/sbin/sshd"] and "-f" in title and "[listener]" in title:
            found[title[title.index("-f") + 1]] = int(entry.name)
    return found


def run_playbook(nodes, text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """ansible-playbook on the nodes with the engine's inventory and environment (Mitogen included)."""
    directory = tmp_path / "run"
    (directory / "tmp" / "local").mkdir(parents=True)
    inventory = {"all": {"hosts": {node.name: playbook_vars.host_vars(node)[0] for node in nodes}}}
    (directory / "hosts.json").write_text(json.dumps(inventory))
    (directory / "probe.yml").write_text(text)
    strategy, plugins, _ = executor.strategy()
    environment = {**os.environ, **executor._environment(directory, strategy, plugins)}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(directory / "hosts.json"),
                           str(directory / "probe.yml")], cwd=settings.PLAYBOOKS_DIR, env=environment,
                          capture_output=True, text=True, timeout=300)


def test_each_node_runs_its_own_sshd_and_modules_run_unprivileged_with_the_nodes_python(running, tmp_path):
    appliance, nodes, pids = running
    processes = sshd_processes()
    ssh_root = Path(settings.SIMULATION_DIR) / "ssh"
    assert {name: processes.get(str(ssh_root / name / "sshd_config")) for name in ("ssh-gpu01", "ssh-gpu02")} == pids
    addresses = {sshd.address_of(node.name) for node in nodes}
    assert len(addresses) == 2 and all(address.startswith("127.77.") for address in addresses)

    variables = playbook_vars.host_vars(nodes[0])[0]
    login = LOGIN or sshd.account().name
    assert variables["ansible_user"] == login and variables["ansible_become_user"] == login
    assert variables["ansible_become"] is True and variables["ansible_become_method"] == "sudo"
    assert variables["ansible_python_interpreter"] == "/usr/bin/python3"
    assert "StrictHostKeyChecking=yes" in variables["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={ssh_root / 'known_hosts'}" in variables["ansible_ssh_common_args"]
    assert variables["ansible_ssh_private_key_file"] == str(Path(settings.KEYS_DIR) / "ssh" / "id_ed25519")
    assert oct(os.stat(variables["ansible_ssh_private_key_file"]).st_mode & 0o777) == "0o600"
    assert "ANSIBLE_PYTHON_INTERPRETER" not in executor._environment(tmp_path, "linear", None)

    result = run_playbook(nodes, PROBE, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert output.count(f"who={login} python=/usr/bin/python3") == 2, output[-3000:]
    # The stray absolute write is refused by the permissions: the host's /etc is not the node's to change.
    assert output.count("stray=Destination /etc not writable") == 2, output[-3000:]
    assert not Path("/etc/appliance-probe").exists()


def test_a_wrong_host_key_in_known_hosts_fails_the_stage_with_a_host_key_error(running):
    appliance, nodes, _ = running
    ssh_root = Path(settings.SIMULATION_DIR) / "ssh"
    # The known_hosts the simulation writes (again, before the run) says ssh-gpu01 has ssh-gpu02's host key:
    # the key ssh-gpu01's server answers with is not the one known.
    wrong = (ssh_root / "ssh-gpu02" / "ssh_host_ed25519_key.pub").read_text()
    (ssh_root / "ssh-gpu01" / "ssh_host_ed25519_key.pub").write_text(wrong)

    run = provisioning.execute_run(provisioning.create_run(appliance, stages=["os"], nodes=["ssh-gpu01"]).pk)
    assert wrong.split()[1] in (ssh_root / "known_hosts").read_text()
    assert run.state == RunState.FAILED
    host = run.stage_runs.get(stage="os").host_results.get(host="ssh-gpu01")
    assert host.unreachable == 1, (host.message, run.reason)
    assert "mismatching host key" in host.message, host.message


@pytest.mark.skipif(os.geteuid() != 0, reason="the service account exists only when the simulation runs as root")
def test_simulation_remove_deletes_the_service_account_and_hands_the_sysroots_back(make_appliance, settings):
    import pwd

    from django.core.management import call_command

    from appliance.audit.models import AuditRecord

    # An account of this test's own, so that simulations running beside it keep theirs.
    settings.SIMULATION_ACCOUNT = "appliance-simtest"
    appliance, [node] = make_appliance(nodes=(("rm-gpu01", "hgx-h100-8gpu"),))
    services.prepare_appliance(appliance)
    services.start_ssh(appliance)
    account = pwd.getpwnam("appliance-simtest")
    assert Path(node.sysroot).stat().st_uid == account.pw_uid
    assert Path("/etc/sudoers.d/appliance-simtest").read_text().splitlines()[-1] == \
        "appliance-simtest ALL=(appliance-simtest) NOPASSWD: ALL"

    call_command("simulation", "remove")

    with pytest.raises(KeyError):
        pwd.getpwnam("appliance-simtest")
    assert not Path("/etc/sudoers.d/appliance-simtest").exists()
    assert Path(node.sysroot).stat().st_uid == 0
    assert not (Path(settings.SIMULATION_DIR) / "ssh").exists() and sshd.running_pid("rm-gpu01") is None
    assert oct(Path(settings.STATE_DIR).stat().st_mode & 0o777) == "0o700"
    assert set(AuditRecord.objects.filter(event__startswith="simulation.account.")
               .values_list("event", flat=True)) == {"simulation.account.create", "simulation.account.remove"}


def test_handing_a_sysroot_over_skips_a_file_the_live_workload_renames_away_meanwhile(tmp_path, monkeypatch):
    """The workload driver rewrites a node's counters by renaming a temporary file over them while the
    sysroot is handed to the login account: a name the walk listed may be gone when it is reached."""
    sysroot = tmp_path / "gpu03"
    counters = sysroot / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    counters.mkdir(parents=True)
    (counters / "port_rcv_packets").write_text("7\n")
    walk = os.walk

    def walk_with_a_vanished_name(top):
        for root, directories, files in walk(top):
            yield root, directories, files + ([".port_rcv_packets._0c3towy"] if root == str(counters) else [])

    monkeypatch.setattr(sshd.os, "walk", walk_with_a_vanished_name)
    login = sshd.Account(name="me", uid=os.getuid(), gid=os.getgid(), service=True)
    sshd._chown_tree(sysroot, login)   # no FileNotFoundError
    assert (counters / "port_rcv_packets").stat().st_uid == os.getuid()
