"""The simulated nodes' SSH servers: one real OpenSSH server (Debian's /usr/sbin/sshd) per simulated node,
so the playbooks reach a simulated node exactly as a real one: over SSH, with the appliance's key, host
keys checked, and `become` for what needs privileges.

Layout (SIMULATION_DIR/ssh):
  <node>/sshd_config, ssh_host_ed25519_key(.pub)   the node's server: its own host key (root only)
  <node>/authorized_keys                           the appliance's public key (read by the login account)
  <node>/sshd.pid, sshd.log, address               the running server, its log, its loopback address
  known_hosts                                      every node's host key at its address and port: what
                                                   the playbooks check against (StrictHostKeyChecking=yes)
The appliance's own key pair: STATE_DIR/keys/ssh/id_ed25519 (private, 0600) and id_ed25519.pub.

Each node listens on its own loopback address 127.77.<k>.<n> (k from the state directory, n per node)
and a port this state directory allocated (ports.py, section "ssh"), so two simulated appliances on one
machine never collide.

The login account is unprivileged. When the suite runs as root, the simulation uses one service account
of its own, `appliance-sim` (a system user without password or home, created once by the first
`simulation prepare`, removed by `manage.py simulation remove`), and a sudoers drop-in that lets that
account `sudo` to itself only: `become` goes through sudo as on a real node, and leads to the account,
never to root. A module that writes to an absolute host path (/etc/...) is refused by the permissions.
When the suite runs as an ordinary user, that user logs in, and `become` is sudo to that same user: it
needs a sudoers rule `<user> ALL=(<user>) NOPASSWD: ALL` (sudo refuses otherwise), checked with one
clear message before anything runs.

What the account may reach: the sysroots (owned by it), the simulated commands and NVML library
(SIMULATION_DIR/bin, lib, tools: read and execute), and traversal of the state directory and the
simulation directory (group appliance-sim, mode 0710: no listing, nothing else: keys, database and
secrets stay unreadable).
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from appliance.core import host, resources

from . import ports

SSHD = host.program("sshd").path
SSH_KEYGEN = host.program("ssh-keygen").path
SUDO = host.program("sudo").path
VISUDO = host.program("visudo").path
USERADD = host.program("useradd").path
USERDEL = host.program("userdel").path
NODE_PYTHON = host.program("python3").path  # a simulated node's system Python: the host's, never the controller's venv
SERVICE_ACCOUNT = "appliance-sim"
SUDOERS_DIR = Path("/etc/sudoers.d")
ADDRESS_PREFIX = "127.77"
START_TIMEOUT = 20.0
PORT_KIND = "ssh"


class SSHError(Exception):
    """The simulated nodes' SSH servers cannot be set up or started; the message names the place."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    service: bool  # the simulation's own service account (the suite runs as root)


# -- the login account ---------------------------------------------------------------------------

def service_account() -> str:
    """The service account's name: settings.SIMULATION_ACCOUNT, `appliance-sim` unless set."""
    return getattr(settings, "SIMULATION_ACCOUNT", SERVICE_ACCOUNT)


def sudoers_path() -> Path:
    return SUDOERS_DIR / service_account()


def _sudoers_text() -> str:
    return (f"# The simulated appliance's login account (manage.py simulation): it may become itself only.\n"
            f"{service_account()} ALL=({service_account()}) NOPASSWD: ALL\n")


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def account(create: bool = False) -> Account:
    """The account the simulated nodes' SSH servers let in. As root: the service account (created with
    `create`); otherwise the user running the suite."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, service=False)
    entry = _lookup(service_account())
    if entry is None:
        if not create:
            raise SSHError(f"the simulation's service account {service_account()} does not exist "
                           f"(run `{resources.program()} simulation prepare`)")
        entry = _create_service_account()
    _ensure_sudoers()
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, service=True)


def _run(command: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SSHError(f"{what}: {command[0]} is not installed (Debian packages openssh-server, openssh-client, "
                       "sudo)") from None
    if result.returncode != 0:
        raise SSHError(f"{what}: {' '.join(command)} exited {result.returncode}: "
                       f"{(result.stderr or result.stdout).strip()}")
    return result


def _create_service_account() -> pwd.struct_passwd:
    # A system user with a shell (sshd runs commands through it) and the password '*': no password
    # login, but not a locked account ('!'), which sshd without PAM refuses even with a key.
    _run([USERADD, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
          "--shell", "/bin/sh", "--password", "*", "--comment", "appliance simulation (manage.py simulation)",
          service_account()], f"creating the simulation's service account {service_account()}")
    from appliance import audit

    audit.record("simulation.account.create", details={"account": service_account(), "sudoers": str(sudoers_path())})
    return pwd.getpwnam(service_account())


def _ensure_sudoers() -> None:
    path = sudoers_path()
    text = _sudoers_text()
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return
    if not SUDOERS_DIR.is_dir():
        raise SSHError(f"{SUDOERS_DIR}: missing: the simulation needs sudo (Debian package sudo) for `become`")
    temporary = SUDOERS_DIR / f".{service_account()}.new"
    temporary.write_text(text)
    os.chmod(temporary, 0o440)
    try:
        _run([VISUDO, "-c", "-q", "-f", str(temporary)], f"checking {path}")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remove_account() -> bool:
    """Remove the service account and its sudoers drop-in (root only). True if something was removed."""
    if os.geteuid() != 0:
        return False
    removed = False
    if sudoers_path().exists():
        sudoers_path().unlink()
        removed = True
    if _lookup(service_account()) is not None:
        running = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit() and _owned_by(entry)]
        if running:
            raise SSHError(f"the service account {service_account()} still runs processes ({', '.join(running[:5])}): "
                           f"stop every simulated appliance first ({resources.program()} simulation stop)")
        _run([USERDEL, service_account()], f"removing the service account {service_account()}")
        removed = True
    if removed:
        from appliance import audit

        audit.record("simulation.account.remove", details={"account": service_account()})
    return removed


def _owned_by(proc: Path) -> bool:
    entry = _lookup(service_account())
    try:
        return entry is not None and proc.stat().st_uid == entry.pw_uid
    except OSError:
        return False


def check_become(login: Account) -> None:
    """As an ordinary user, `become` is sudo to that same user: sudo must allow it without a password."""
    if login.service:
        return
    result = subprocess.run([SUDO, "-n", "-u", login.name, "true"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise SSHError(f"the simulated nodes log in as {login.name} and `become` {login.name} with sudo, which "
                       f"refused ({result.stderr.strip() or 'exit ' + str(result.returncode)}): add the sudoers "
                       f"rule '{login.name} ALL=({login.name}) NOPASSWD: ALL', or run the simulation as root "
                       f"(it then uses its own service account {service_account()})")


# -- places ---------------------------------------------------------------------------------------

def ssh_dir() -> Path:
    return Path(settings.SIMULATION_DIR) / "ssh"


def node_dir(name: str) -> Path:
    return ssh_dir() / name


def known_hosts_path() -> Path:
    return ssh_dir() / "known_hosts"


def client_key_path() -> Path:
    return Path(settings.KEYS_DIR) / "ssh" / "id_ed25519"


def ensure_client_key() -> Path:
    """The appliance's SSH key pair (ed25519), made once: the private key readable by this OS user only."""
    key = client_key_path()
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(key.parent, 0o700)
    if not key.exists():
        _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "appliance", "-f", str(key)],
             f"generating the appliance's SSH key {key}")
        from appliance import audit

        audit.record("simulation.ssh.key", details={"path": str(key), "type": "ed25519"})
    os.chmod(key, 0o600)
    return key


def _state_octet() -> int:
    digest = hashlib.sha256(str(Path(settings.SIMULATION_DIR).resolve()).encode()).digest()
    return 1 + digest[0] % 254


def address_of(name: str) -> str:
    """The node's loopback address, given once (127.77.<k>.<n>) and kept in <node>/address."""
    path = node_dir(name) / "address"
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    raise SSHError(f"{name}: no SSH address yet (run `{resources.program()} simulation prepare`)")


def _assign_address(name: str) -> str:
    path = node_dir(name) / "address"
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    used = set()
    for other in ssh_dir().glob("*/address"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            used.add(int(other.read_text().strip().split(".")[3]))
    number = next(n for n in range(1, 255) if n not in used) if len(used) < 254 else None
    if number is None:
        raise SSHError(f"{ssh_dir()}: no loopback address left for {name} (254 simulated nodes at most)")
    address = f"{ADDRESS_PREFIX}.{_state_octet()}.{number}"
    path.write_text(address + "\n")
    return address


def port_of(name: str) -> int:
    allocation = ports.allocated(settings.SIMULATION_DIR, PORT_KIND)
    if name not in allocation:
        raise SSHError(f"{name}: no SSH port yet (run `{resources.program()} simulation prepare`)")
    return allocation[name]


# -- access of the login account ------------------------------------------------------------------

def _traversable_by(path: Path, login: Account) -> bool:
    info = path.stat()
    mode = info.st_mode
    if info.st_uid == login.uid:
        return bool(mode & stat.S_IXUSR)
    groups = {login.gid} | {g.gr_gid for g in grp.getgrall() if login.name in g.gr_mem}
    if info.st_gid in groups:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def grant_access(login: Account, sysroots: list[Path]) -> None:
    """Let the login account reach what a simulated node is: traversal of the state and simulation
    directories (group, 0710), read and execute on the simulated commands and library, and ownership of
    the sysroots. Directories above the state directory are not changed: they must already let it pass."""
    simulation = Path(settings.SIMULATION_DIR).resolve()
    state = Path(settings.STATE_DIR).resolve()
    gated = [simulation] + [parent for parent in simulation.parents if parent == state or state in parent.parents]
    if login.service:
        for directory in gated + [simulation / "nodes", ssh_dir()]:
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, -1, login.gid)
            os.chmod(directory, 0o710)
    for parent in simulation.parents:
        if parent in gated:
            continue
        if not _traversable_by(parent, login):
            raise SSHError(f"{parent}: the simulated nodes' login account {login.name} may not traverse it "
                           f"(mode {stat.S_IMODE(parent.stat().st_mode):o}), so it cannot reach the sysroots under "
                           f"{simulation}: put the state directory under a directory others may traverse "
                           f"(e.g. chmod o+x {parent})")
    for name in ("bin", "lib", "tools"):
        top = simulation / name
        if top.is_dir():
            _open_for_reading(top)
    if login.service:
        for sysroot in sysroots:
            _chown_tree(Path(sysroot), login)


def _open_for_reading(top: Path) -> None:
    for root, _directories, files in os.walk(top):
        os.chmod(root, 0o755)
        for file in files:
            path = Path(root) / file
            mode = stat.S_IMODE(path.lstat().st_mode)
            if not path.is_symlink():
                os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 else 0))


def _chown_tree(top: Path, login: Account) -> None:
    """The sysroot's files to the login account. The live workload rewrites counter files under it meanwhile
    (a temporary file renamed over the old one): a name listed by the walk may be gone when it is reached,
    and is skipped (its replacement is the workload's, read the same way)."""
    os.chown(top, login.uid, login.gid)
    for root, directories, files in os.walk(top):
        for name in directories + files:
            path = Path(root) / name
            try:
                info = path.lstat()
                if info.st_uid != login.uid or info.st_gid != login.gid:
                    os.lchown(path, login.uid, login.gid)
            except FileNotFoundError:
                continue


# -- servers --------------------------------------------------------------------------------------

def _config_text(name: str, login: Account, address: str, port: int) -> str:
    directory = node_dir(name)
    return "\n".join([
        f"# The SSH server of simulated node {name} (appliance.simulation.sshd).",
        f"ListenAddress {address}:{port}",
        f"HostKey {directory / 'ssh_host_ed25519_key'}",
        f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        f"AllowUsers {login.name}",
        "PermitRootLogin no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        # The host key and authorized_keys live in the state directory, not in the account's home.
        "StrictModes no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitUserEnvironment no",
        "PrintMotd no",
        "PrintLastLog no",
        # Ansible opens up to `forks` connections at once.
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "Subsystem sftp internal-sftp",
        "LogLevel INFO",
        "",
    ])


def _host_key(name: str) -> Path:
    key = node_dir(name) / "ssh_host_ed25519_key"
    if not key.exists():
        _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", f"{name} (simulated)", "-f", str(key)],
             f"{name}: generating its SSH host key")
    os.chmod(key, 0o600)
    return key


def _write(path: Path, text: str, mode: int, group: int = -1) -> None:
    if not (path.exists() and path.read_text() == text):
        temporary = path.with_name(f".{path.name}.new")
        temporary.write_text(text)
        os.replace(temporary, path)
    if group != -1:
        os.chown(path, -1, group)
    os.chmod(path, mode)


def prepare(names: list[str], sysroots: list[Path]) -> Account:
    """The login account, the appliance's key, and each node's SSH server configuration, host key and
    address; the known_hosts file of every node prepared in this state directory."""
    login = account(create=True)
    check_become(login)
    client = ensure_client_key()
    public = Path(str(client) + ".pub").read_text()
    ssh_dir().mkdir(parents=True, exist_ok=True)
    try:
        allocation = ports.allocate(settings.SIMULATION_DIR, names, kind=PORT_KIND,
                                    serving=lambda name, port: running_pid(name) is not None)
    except ports.PortError as exc:
        raise SSHError(f"SSH ports: {exc}") from None
    for name in names:
        directory = node_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, -1, login.gid if login.service else -1)
        os.chmod(directory, 0o710 if login.service else 0o700)
        address = _assign_address(name)
        _host_key(name)
        _write(directory / "authorized_keys", public, 0o640, login.gid if login.service else -1)
        _write(directory / "sshd_config", _config_text(name, login, address, allocation[name]), 0o600)
    write_known_hosts()
    grant_access(login, sysroots)
    return login


def write_known_hosts() -> Path:
    lines = []
    allocation = ports.allocated(settings.SIMULATION_DIR, PORT_KIND)
    for name in sorted(allocation):
        public = node_dir(name) / "ssh_host_ed25519_key.pub"
        if not public.exists():
            continue
        key_type, key = public.read_text().split()[:2]
        lines.append(f"[{address_of(name)}]:{allocation[name]} {key_type} {key}\n")
    _write(known_hosts_path(), "".join(lines), 0o644)
    return known_hosts_path()


def _own_process(pid: int, name: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # sshd rewrites its process title ("sshd: /usr/sbin/sshd -D -f CONFIG ... [listener] ..."), one string.
    return cmdline.startswith(b"sshd: " + SSHD.encode()) and f" -f {node_dir(name) / 'sshd_config'} ".encode() in cmdline


def running_pid(name: str) -> int | None:
    try:
        pid = int((node_dir(name) / "sshd.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _own_process(pid, name) else None


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1) as connection:
            connection.settimeout(1)
            return connection.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def start_many(names: list[str]) -> dict[str, int]:
    """Start the SSH servers of the nodes that have none running; wait until each answers. {node: pid}."""
    if not Path(SSHD).exists():
        raise SSHError(f"{SSHD} is not installed (Debian package openssh-server)")
    try:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation directory (runtime)
    except PermissionError:
        raise SSHError("/run/sshd is missing and this OS user may not create it: sshd needs it (as root: "
                       "mkdir -p /run/sshd)") from None
    pids, spawned = {}, {}
    for name in names:
        existing = running_pid(name)
        if existing:
            pids[name] = existing
            continue
        config = node_dir(name) / "sshd_config"
        if not config.exists():
            raise SSHError(f"{name}: no SSH server configuration {config} (run `{resources.program()} simulation prepare`)")
        log = node_dir(name) / "sshd.log"
        process = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        spawned[name] = process
    deadline = time.monotonic() + START_TIMEOUT
    try:
        for name, process in spawned.items():
            address, port = address_of(name), port_of(name)
            # sshd writes its PidFile once it has bound its address: then it is this process that answers.
            while not (_pid_written(name, process.pid) and _answers(address, port)):
                if process.poll() is not None:
                    error = process.stderr.read().decode(errors="replace").strip() if process.stderr else ""
                    raise SSHError(f"{name}: its SSH server exited with status {process.returncode} on "
                                   f"{address}:{port}: {error or _log_tail(name)}")
                if time.monotonic() > deadline:
                    raise SSHError(f"{name}: its SSH server did not answer on {address}:{port} within "
                                   f"{START_TIMEOUT:.0f} s: {_log_tail(name)}")
                time.sleep(0.05)
            pids[name] = process.pid
    except BaseException:
        for process in spawned.values():
            _terminate(process.pid)
        raise
    finally:
        for process in spawned.values():
            if process.stderr:
                process.stderr.close()
    return pids


def _pid_written(name: str, pid: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return int((node_dir(name) / "sshd.pid").read_text().strip()) == pid
    return False


def _log_tail(name: str, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return " | ".join((node_dir(name) / "sshd.log").read_text(errors="replace").strip().splitlines()[-lines:])
    return "(no log)"


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            finished = pid if not Path(f"/proc/{pid}").exists() else 0
        if finished:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def stop(name: str) -> int | None:
    """Stop the node's SSH server (and the sessions it serves). Returns the pid stopped, or None."""
    pid = running_pid(name)
    if pid:
        # The listener's process group: its sessions were started in it (start_new_session).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        _terminate(pid)
    (node_dir(name) / "sshd.pid").unlink(missing_ok=True)
    return pid


def status(name: str) -> dict:
    pid = running_pid(name)
    try:
        address, port = address_of(name), port_of(name)
    except SSHError:
        return {"running": False, "pid": None, "address": None, "port": None, "answering": False}
    return {"running": pid is not None, "pid": pid, "address": address, "port": port,
            "answering": pid is not None and _answers(address, port)}


def release(sysroots: list[Path]) -> None:
    """Hand the sysroots back to the OS user running the suite (before the service account goes away)."""
    if os.geteuid() != 0:
        return
    owner = Account("root", 0, 0, service=False)
    for sysroot in sysroots:
        if Path(sysroot).is_dir():
            _chown_tree(Path(sysroot), owner)


def close_access() -> None:
    """The state and simulation directories private again (0700, the suite's group)."""
    simulation = Path(settings.SIMULATION_DIR).resolve()
    state = Path(settings.STATE_DIR).resolve()
    for directory in [simulation / "nodes", simulation] + [parent for parent in simulation.parents
                                                           if parent == state or state in parent.parents]:
        if directory.is_dir():
            os.chown(directory, -1, os.getegid())
            os.chmod(directory, 0o700)


def remove_files() -> None:
    shutil.rmtree(ssh_dir(), ignore_errors=True)
    with contextlib.suppress(OSError):
        data = json.loads(ports.path(settings.SIMULATION_DIR).read_text())
        if data.pop(PORT_KIND, None) is not None:
            ports.path(settings.SIMULATION_DIR).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


# -- the inventory --------------------------------------------------------------------------------

def connection_vars(node) -> dict:
    """A simulated node's connection in the inventory: its server, the login account and key, host keys
    checked against the simulation's known_hosts, become (sudo) to the login account, and the node's
    system Python."""
    login = account()
    return {
        "ansible_connection": "ssh",
        "ansible_host": address_of(node.name),
        "ansible_port": port_of(node.name),
        "ansible_user": login.name,
        "ansible_ssh_private_key_file": str(client_key_path()),
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={known_hosts_path()} -o StrictHostKeyChecking=yes "
                                    "-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes"),
        "ansible_become": True,
        "ansible_become_method": "sudo",
        "ansible_become_user": login.name,
        "ansible_python_interpreter": NODE_PYTHON,
        # Ansible's temporary files on the node stay inside it.
        "ansible_remote_tmp": str(Path(node.sysroot) / "tmp" / ".ansible"),
    }
