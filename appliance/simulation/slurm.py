"""The training pool's real Slurm on the simulated appliance: Debian's `slurmctld` and one `slurmd -N <node>`
per GPU node of the training pool, all on this machine.

Nothing here writes a Slurm configuration of its own. The files are the very ones the workloads stage
generated (the slurm role writes slurm.conf, gres.conf and cgroup.conf into /etc/slurm of the management
node and of every Slurm node, under their sysroots); the simulation copies the controller's and changes
only what one machine with no munge, no cgroup delegation and no node addresses of its own requires
(FIELD-NOTES "A real Slurm cluster on one machine"):

- `AuthType=auth/none`, `CredType=cred/none`: munged is not run here;
- `SlurmUser` is the account running the simulation (root, as the tests run);
- `ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`, `JobAcctGatherType=jobacct_gather/none`:
  no cgroup tree is delegated to the simulation, so cgroup.conf is carried but not enforced;
- `MpiDefault=none` (no PMIx library) and no `HealthCheckProgram` (NHC runs on real nodes only);
- `SlurmdParameters=config_overrides`: the nodes keep the CPUs and memory the platform declares, which
  this machine does not have;
- private ports from ports.py (`SlurmctldPort`, one `Port=` per node: every slurmd runs on this machine),
  `NodeAddr=127.0.0.1`, and the pid, log, state and spool files under SIMULATION_DIR/slurm/.

Each daemon runs in its own mount and UTS namespaces (`unshare -m -u`, hence root): its host name is the
node's (slurmctld accepts only the host SlurmctldHost names; a job on gpu02 prints gpu02), and each
slurmd sees a /dev holding the device files its gres.conf names (`mknod` character devices of NVIDIA's
major 195, with null, zero, random and urandom beside them) and a /run of its own, both bind-mounted in
that namespace only: the host's /dev and /run never change. The spool lives in that /run
(`SlurmdSpoolDir=/run/slurmd`): slurmstepd makes Unix sockets there, whose names may not exceed 108
bytes, which a spool deep in a state directory would.

Layout (SIMULATION_DIR/slurm):
  etc/{slurm.conf,gres.conf,cgroup.conf}   the stage's files, adapted as above
  dev/<node>/                              the node's device files
  state/                                   StateSaveLocation
  run/<node>/                              the node's /run (its spool: run/<node>/slurmd)
  slurmctld.pid  slurmd.<node>.pid         pid files
  log/slurmctld.log  log/slurmd.<node>.log daemons' logs
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from django.conf import settings

from appliance import audit
from appliance.core import host, resources

from . import ports
from . import state as sim_state

SLURMCTLD = host.program("slurmctld").path
SLURMD = host.program("slurmd").path
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
PORT_KIND = "slurm"
# How long the daemons may take to answer: about 3 s here, past 30 s on a machine loaded as CI finds it (both
# test passes, their bootstraps and browsers at once on 2 cores), where a shorter wait failed a start that was fine.
START_TIMEOUT = 90.0
NVIDIA_MAJOR = 195
NVIDIA_CAPS_MAJOR = 508  # /dev/nvidia-caps: a dynamic major on real machines; any works for Slurm's checks
# Character devices every process expects in /dev (major, minor as the kernel's).
BASIC_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
# The keys the simulation replaces; every other line of the stage's slurm.conf is kept as written.
REPLACED_KEYS = {
    "SlurmctldHost", "AuthType", "CredType", "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir",
    "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile", "ProctrackType", "TaskPlugin",
    "JobAcctGatherType", "PrologFlags", "MpiDefault", "HealthCheckProgram", "HealthCheckInterval",
    "HealthCheckNodeState", "SlurmctldPort", "SlurmdPort", "SlurmdParameters",
}
_NODE_WORD = re.compile(r"^(NodeAddr|NodeHostname|Port)=")


class SlurmError(Exception):
    """The simulated Slurm cannot be configured or started; the message says why and what to do."""


class SlurmUnavailable(SlurmError):
    """Slurm cannot run yet or here (the workloads stage has not run, not root, not installed): the rest of
    the simulated appliance runs without it."""


def slurm_dir() -> Path:
    return Path(settings.SIMULATION_DIR) / "slurm"


def conf_path() -> Path:
    return slurm_dir() / "etc" / "slurm.conf"


def environment() -> dict[str, str]:
    """What a Slurm client (sbatch, squeue, ...) needs to talk to this state directory's cluster."""
    return {"SLURM_CONF": str(conf_path())}


# ---- the stage's files ---------------------------------------------------------------------------------

def _key(line: str) -> str:
    return line.split("=", 1)[0].strip() if "=" in line and not line.lstrip().startswith("#") else ""


def controller_name(slurm_conf: str) -> str:
    for line in slurm_conf.splitlines():
        if _key(line) == "SlurmctldHost":
            return line.split("=", 1)[1].split("(", 1)[0].strip()
    raise SlurmError("slurm.conf names no SlurmctldHost")


def node_names(slurm_conf: str) -> list[str]:
    """The nodes of the stage's slurm.conf, in its order."""
    names = []
    for line in slurm_conf.splitlines():
        if _key(line) == "NodeName":
            name = line.split()[0].split("=", 1)[1]
            if name != "DEFAULT":
                names.append(name)
    return names


def generated_files(appliance) -> tuple[str, dict[str, str]]:
    """(controller, {file name: text}): the files the workloads stage wrote into the management node's
    /etc/slurm. Every Slurm node must hold the same slurm.conf and gres.conf (the stage writes them all)."""
    controllers = [node for node in appliance.nodes.filter(role="management").order_by("name") if node.sysroot]
    if not controllers:
        raise SlurmUnavailable(f"appliance {appliance.name}: no simulated management node runs the Slurm controller")
    paths = [Path(node.sysroot) / "etc" / "slurm" / "slurm.conf" for node in controllers]
    found = [(node, path) for node, path in zip(controllers, paths, strict=True) if path.is_file()]
    if not found:
        raise SlurmUnavailable(f"appliance {appliance.name}: the workloads stage has not run yet ({paths[0]} does not "
                         f"exist): run it first ({resources.program()} bootstrap, or a run of the workloads stage)")
    node, path = found[0]
    files = {}
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        try:
            files[name] = (path.parent / name).read_text()
        except FileNotFoundError:
            raise SlurmError(f"{path.parent / name}: missing beside slurm.conf: run the workloads stage again") from None
    controller = controller_name(files["slurm.conf"])
    if controller != node.name:
        raise SlurmError(f"{path}: SlurmctldHost is {controller}, not the management node {node.name}")
    members = {member.name: member for member in appliance.nodes.all()}
    for name in node_names(files["slurm.conf"]):
        member = members.get(name)
        if member is None or not member.sysroot:
            raise SlurmError(f"{path}: node {name} is not a simulated node of appliance {appliance.name}")
        for file_name in ("slurm.conf", "gres.conf"):
            copy = Path(member.sysroot) / "etc" / "slurm" / file_name
            if not copy.is_file() or copy.read_text() != files[file_name]:
                raise SlurmError(f"{copy}: {'missing' if not copy.is_file() else 'differs from ' + str(path.parent / file_name)}"
                                 ": run the workloads stage again")
    return controller, files


def simulation_conf(slurm_conf: str, *, controller: str, controller_port: int, node_ports: dict[str, int],
                    directory: Path, user: str) -> str:
    """The stage's slurm.conf with what one machine needs changed (module docstring); the rest verbatim."""
    kept = []
    for line in slurm_conf.splitlines():
        key = _key(line)
        if key in REPLACED_KEYS:
            continue
        if key == "NodeName":
            words = line.split()
            name = words[0].split("=", 1)[1]
            if name in node_ports:
                words = [words[0], "NodeHostname=localhost", "NodeAddr=127.0.0.1", f"Port={node_ports[name]}",
                         *[word for word in words[1:] if not _NODE_WORD.match(word)]]
            line = " ".join(words)
        kept.append(line)
    while kept and kept[0].startswith("#"):
        kept.pop(0)
    header = [
        "# The workloads stage's slurm.conf, adapted by the simulation (appliance/simulation/slurm.py):",
        "# one machine, no munge, no cgroup delegation, private ports. Rewritten at every start.",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={controller_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        f"StateSaveLocation={directory / 'state'}",
        "SlurmdSpoolDir=/run/slurmd",
        f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
        f"SlurmdPidFile={directory / 'slurmd.%n.pid'}",
        f"SlurmctldLogFile={directory / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={directory / 'log' / 'slurmd.%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "SlurmdParameters=config_overrides",
    ]
    return "\n".join(header + kept) + "\n"


def gres_device_files(gres_conf: str, node: str) -> list[str]:
    """The device files gres.conf names for `node` (File=/dev/nvidia[0-7], MultipleFiles=a,b,c)."""
    files = []
    for line in gres_conf.splitlines():
        words = dict(word.split("=", 1) for word in line.split() if "=" in word and not line.startswith("#"))
        if words.get("NodeName") != node:
            continue
        for key in ("File", "MultipleFiles"):
            for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", words.get(key, "")):
                match = re.fullmatch(r"(.*)\[([0-9,\-]+)\]", item)
                if not match:
                    files.append(item)
                    continue
                for part in match.group(2).split(","):
                    low, _, high = part.partition("-")
                    files += [f"{match.group(1)}{number}" for number in range(int(low), int(high or low) + 1)]
    return sorted(set(files))


def _make_devices(directory: Path, files: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {name: (major, minor) for name, (major, minor) in BASIC_DEVICES.items()}
    for path in files:
        if not path.startswith("/dev/"):
            raise SlurmError(f"gres.conf: device file {path} is not under /dev")
        relative = path.removeprefix("/dev/")
        digits = re.search(r"(\d+)$", relative)
        if not digits:
            raise SlurmError(f"gres.conf: device file {path} has no device number")
        major = NVIDIA_CAPS_MAJOR if relative.startswith("nvidia-caps/") else NVIDIA_MAJOR
        wanted[relative] = (major, int(digits.group(1)))
    for relative, (major, minor) in wanted.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            existing = target.lstat()
            if stat.S_ISCHR(existing.st_mode) and existing.st_rdev == os.makedev(major, minor):
                continue
            target.unlink()
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(target, 0o666)
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                       ("stderr", "/proc/self/fd/2")):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(link)
    (directory / "shm").mkdir(mode=0o1777, exist_ok=True)


def mig_device_files(node_state_value: dict) -> list[str]:
    """The MIG device files a node has for the GPU and compute instances that exist in its state: per GPU
    instance its access file, per compute instance one more, numbered as /proc/driver/nvidia-caps/mig-minors
    numbers them (renderers.slurm.MigInstance.files, which gres.conf names)."""
    from appliance.partitioning.renderers.slurm import MigInstance

    files = set()
    for gpu in node_state_value.get("gpus", []):
        for instance in gpu.get("mig", {}).get("gpu_instances", []):
            computes = instance.get("compute_instances") or []
            for compute_id in [compute["id"] for compute in computes] or [None]:
                _, access, compute_file = MigInstance(gpu=int(gpu["index"]), profile=instance["profile"],
                                                      gpu_instance=int(instance["id"]),
                                                      compute_instance=compute_id or 0).files
                files.add(access)
                if compute_id is not None:
                    files.add(compute_file)
    return sorted(files)


def _sync_caps(directory: Path, files: list[str]) -> None:
    """/dev/nvidia-caps of one slurmd as the node's instances are: the files of instances that exist are
    made (a character device of NVIDIA_CAPS_MAJOR), those of instances that are gone removed."""
    caps = directory / "nvidia-caps"
    wanted = {path.removeprefix("/dev/nvidia-caps/") for path in files}
    if caps.is_dir():
        for entry in caps.iterdir():
            if entry.name not in wanted:
                entry.unlink()
    _make_devices(directory, files)


def sync_mig_devices(node) -> list[str]:
    """After the MIG instances of a simulated node changed (the partitioning stage calls this): its slurmd's
    /dev/nvidia-caps holds the device files of exactly the instances its state has. The slurmd's /dev is
    a bind mount of SIMULATION_DIR/slurm/dev/<node>, so a running slurmd sees the change at once; before
    Slurm was configured there is nothing to update (configure() makes them at start). Returns the files."""
    directory = slurm_dir() / "dev" / node.name
    if not node.sysroot or not directory.is_dir():
        return []
    files = mig_device_files(sim_state.load(node.sysroot))
    _sync_caps(directory, files)
    return files


def _require_host() -> None:
    try:
        host.require("simulation", root=True)
    except host.HostNotReady as exc:
        raise SlurmUnavailable(str(exc)) from None


def configure(appliance) -> dict:
    """Write SIMULATION_DIR/slurm/etc from the stage's files and every node's device files; returns
    {"controller": name, "nodes": [names], "ports": {...}}."""
    controller, files = generated_files(appliance)
    nodes = node_names(files["slurm.conf"])
    directory = slurm_dir()
    try:
        allocation = ports.allocate(settings.SIMULATION_DIR, ["slurmctld", *nodes], kind=PORT_KIND, refresh=True,
                                    serving=lambda name, port: _running(_pid_file(name)) is not None)
    except ports.PortError as exc:
        raise SlurmError(f"Slurm ports: {exc}") from None
    for sub in ("etc", "state", "log", *(f"run/{name}/slurmd" for name in nodes)):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    text = simulation_conf(files["slurm.conf"], controller=controller, controller_port=allocation["slurmctld"],
                           node_ports={name: allocation[name] for name in nodes}, directory=directory,
                           user=getpass.getuser())
    changed = []
    for name, content in (("slurm.conf", text), ("gres.conf", files["gres.conf"]), ("cgroup.conf", files["cgroup.conf"])):
        target = directory / "etc" / name
        if not target.is_file() or target.read_text() != content:
            changed.append(name)
            target.write_text(content)
    members = {member.name: member for member in appliance.nodes.filter(name__in=nodes)}
    for name in nodes:
        # /dev/nvidia<N> as gres.conf names them; /dev/nvidia-caps only for the MIG instances the node has
        # (a gres.conf naming an instance that does not exist fails as on a real node).
        gpu_files = [path for path in gres_device_files(files["gres.conf"], name)
                     if not path.startswith("/dev/nvidia-caps/")]
        _make_devices(directory / "dev" / name, gpu_files)
        _sync_caps(directory / "dev" / name, mig_device_files(sim_state.load(members[name].sysroot)))
    return {"controller": controller, "nodes": nodes, "ports": allocation, "changed": changed}


# ---- processes -----------------------------------------------------------------------------------------

def _pid_file(name: str) -> Path:
    return slurm_dir() / ("slurmctld.pid" if name == "slurmctld" else f"slurmd.{name}.pid")


def _ours(pid: int) -> bool:
    """The process is alive (not a zombie) and runs with this state directory's slurm.conf."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if status.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    return f"SLURM_CONF={conf_path()}".encode() in environ


def _running(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _ours(pid) else None


def _processes() -> list[int]:
    """Every process of this cluster: daemons, step daemons and job scripts carry its SLURM_CONF."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and _ours(int(entry.name)):
            found.append(int(entry.name))
    return found


def client(*argv: str, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
    """Run a Slurm client command (sinfo, squeue, sbatch, scontrol, scancel) against this cluster."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                            env={**os.environ, **environment()})
    if check and result.returncode != 0:
        raise SlurmError(f"{shlex.join(argv)} exited {result.returncode}: {(result.stderr or result.stdout).strip()}")
    return result


def synthetic_topology(slurm_conf: str, node: str) -> str:
    """hwloc's synthetic topology of `node` as slurm.conf declares it ("Package:2 Core:56 PU:2"), or "".
    slurmd reads the CPUs through hwloc; on this machine they are not the node's, and gres.conf's `Cores=`
    (the GPUs' CPU affinity) would name cores it does not have. HWLOC_SYNTHETIC gives it the node's."""
    for line in slurm_conf.splitlines():
        words = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if _key(line) == "NodeName" and words.get("NodeName") == node:
            if all(key in words for key in ("Sockets", "CoresPerSocket")):
                return (f"Package:{int(words['Sockets'])} Core:{int(words['CoresPerSocket'])} "
                        f"PU:{int(words.get('ThreadsPerCore', 1))}")
    return ""


def _launch(hostname: str, command: list[str], node_dir: str | None = None, extra: dict | None = None) -> None:
    """Start a daemon in its own mount and UTS namespaces (it forks into the background itself); a slurmd
    gets its node's /dev and /run there."""
    binds = ""
    if node_dir:
        for source, target in ((slurm_dir() / "dev" / node_dir, "/dev"), (slurm_dir() / "run" / node_dir, "/run")):
            binds += f"mount --bind {shlex.quote(str(source))} {target} && "
    script = f"{binds}hostname {shlex.quote(hostname)} && exec {shlex.join(command)}"
    result = subprocess.run(["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=30, check=False,
                            env={**os.environ, **environment(), **(extra or {})}, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SlurmError(f"{command[0]} for {hostname} did not start (exit {result.returncode}): "
                         f"{(result.stderr or result.stdout).strip()}")


def _log_tail(name: str) -> str:
    log = slurm_dir() / "log" / ("slurmctld.log" if name == "slurmctld" else f"slurmd.{name}.log")
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if "error" in line or "fatal" in line]
    return "; ".join((errors or lines)[-3:])


def _wait(what: str, ready, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise SlurmError(f"{what} not ready after {START_TIMEOUT:.0f} s (log: {_log_tail(name) or 'empty'})")


def node_states() -> dict[str, str]:
    """{node: Slurm state} as sinfo reports it (idle, allocated, down*, ...)."""
    result = client("sinfo", "--noheader", "--Node", "--format=%N %T", check=False, timeout=10)
    states = {}
    for line in result.stdout.splitlines():
        name, _, node_state = line.partition(" ")
        states[name] = node_state.strip()
    return states


def _controller_up() -> bool:
    return client("scontrol", "ping", check=False, timeout=10).stdout.count("is UP") > 0


def _slurmd_names() -> list[str]:
    """The nodes whose slurmd this simulation started (a pid file each)."""
    return [path.name[len("slurmd."):-len(".pid")] for path in sorted(slurm_dir().glob("slurmd.*.pid"))]


def _slurmd_stopped(appliance, names: list[str]) -> set[str]:
    """The nodes among `names` whose slurmd unit systemd (the simulated systemctl) has stopped: the workloads
    stage stops it on a node that slurm.conf no longer names (a lent training node). A node whose state
    says nothing of the unit runs it (the files were written without the stage)."""
    stopped = set()
    for node in appliance.nodes.filter(name__in=names):
        if node.sysroot and sim_state.exists(node.sysroot):
            entry = (sim_state.load(node.sysroot).get("services") or {}).get("slurmd.service")
            if entry is not None and not entry.get("active"):
                stopped.add(node.name)
    return stopped


def start(appliance) -> dict:
    """Start slurmctld and one slurmd per Slurm node (those not running yet, unless the node's slurmd unit
    was stopped) and wait until every node started has registered; a slurmd of a node that slurm.conf no
    longer names, or whose unit was stopped, is ended (systemd stops it on a real node). Returns
    {"controller": pid, "nodes": {node: pid}, "conf": path}."""
    _require_host()
    layout = configure(appliance)
    idle = _slurmd_stopped(appliance, layout["nodes"])
    gone = [name for name in _slurmd_names() if name not in layout["nodes"] or name in idle]
    ended = {name: pid for name, pid in ((name, _running(_pid_file(name))) for name in gone) if pid}
    for name in gone:
        _pid_file(name).unlink(missing_ok=True)
    _terminate(list(ended.values()))
    if ended:
        audit.record("simulation.slurm.stop", target=appliance, details={"stopped": sorted(ended), "other_processes": 0})
    layout["nodes"] = [name for name in layout["nodes"] if name not in idle]
    started = []
    running = [pid for pid in (_running(_pid_file(name)) for name in ["slurmctld", *layout["nodes"]]) if pid]
    if layout["changed"] and running:
        # The workloads stage changed the files (a partition plan's MIG types in gres.conf and Gres=, a node
        # lent): on a real node the stage's handlers restart slurmctld and slurmd; here the simulation plays
        # systemd, so the daemons started from the old files are restarted (slurmctld keeps its state, a
        # running job's slurmstepd outlives its slurmd).
        _terminate(running)
        audit.record("simulation.slurm.restart", target=appliance, details={"changed": layout["changed"]})
    controller_pid = _running(_pid_file("slurmctld"))
    if controller_pid is None:
        _launch(layout["controller"], [SLURMCTLD])
        _wait("slurmctld", lambda: _running(_pid_file("slurmctld")) and _controller_up(), "slurmctld")
        controller_pid = _running(_pid_file("slurmctld"))
        started.append("slurmctld")
    pids = {}
    for name in layout["nodes"]:
        pid = _running(_pid_file(name))
        if pid is None:
            topology = synthetic_topology(conf_path().read_text(), name)
            _launch(name, [SLURMD, "-N", name], name, {"HWLOC_SYNTHETIC": topology} if topology else None)
            started.append(name)
        pids[name] = pid
    if layout["nodes"]:
        _wait("the Slurm nodes", lambda: all(
            _running(_pid_file(name)) and node_states().get(name, "unknown").rstrip("*~#$@+") not in ("unknown", "down")
            for name in layout["nodes"]), layout["nodes"][-1])
    pids = {name: _running(_pid_file(name)) for name in layout["nodes"]}
    if started:
        audit.record("simulation.slurm.start", target=appliance,
                     details={"started": started, "controller": layout["controller"], "nodes": layout["nodes"],
                              "ports": layout["ports"]})
    return {"controller": controller_pid, "nodes": pids, "conf": conf_path()}


def _terminate(pids: list[int], grace: float = 5.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_ours(pid) for pid in pids):
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    for pid in pids:
        if _ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # SIGKILL is delivered, not awaited: wait (bounded) until none is left, so that the caller's next look
    # does not find a process on its way out (a full run saw one still there after stop returned).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_ours(pid) for pid in pids):
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def stop(appliance) -> dict:
    """Cancel every job, stop the daemons, and end whatever process of this cluster is left (job steps
    outlive slurmd). Returns {"stopped": [names], "leftover": count of other processes ended}."""
    stopped = []
    if _running(_pid_file("slurmctld")) and shutil.which("scancel"):
        client("scancel", "--full", "--quiet", "--user", getpass.getuser(), check=False, timeout=10)
    names = ["slurmctld", *_slurmd_names()]
    daemons = {}
    for name in names:
        pid = _running(_pid_file(name))
        if pid:
            daemons[name] = pid
        _pid_file(name).unlink(missing_ok=True)
    _terminate(list(daemons.values()))
    stopped = sorted(daemons)
    # A job step may still fork while its parents end (a job script starting its next command): look again
    # until nothing of this cluster is left, for a bounded time.
    leftover: list[int] = []
    deadline = time.monotonic() + 15
    while (found := _processes()) and time.monotonic() < deadline:
        leftover += [pid for pid in found if pid not in leftover]
        _terminate(found, grace=2.0)
    if stopped or leftover:
        audit.record("simulation.slurm.stop", target=appliance, details={"stopped": stopped, "other_processes": len(leftover)})
    return {"stopped": stopped, "leftover": len(leftover)}


def status(appliance) -> dict:
    """{"configured": bool, "controller": {...}, "nodes": {node: {"pid", "state"}}}: nothing is started."""
    if not conf_path().is_file():
        return {"configured": False, "controller": None, "nodes": {}}
    text = conf_path().read_text()
    controller_pid = _running(_pid_file("slurmctld"))
    states = node_states() if controller_pid else {}
    return {
        "configured": True,
        "conf": conf_path(),
        "controller": {"name": controller_name(text), "pid": controller_pid},
        "nodes": {name: {"pid": _running(_pid_file(name)), "state": states.get(name, "")} for name in node_names(text)},
    }
