"""The simulated appliance's service functions: what the bootstrap, the management command and the
tests call. See PROVISIONING-INTERFACES.md, sections 1 and 5, and DESIGN.md "The simulated appliance".
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from ruamel.yaml import YAML

from appliance import audit
from appliance.core import resources

from . import (
    bmc,
    collectors,
    extra,
    hardware,
    nvml,
    packages,
    portal_server,
    ports,
    repository_server,
    slurm,
    sshd,
    workload,
)
from . import state as node_state
from .tools import COMMANDS, kmod

FAULT_KINDS = {
    "gpu_missing": ("index",),
    "port_down": ("device",),
    "port_rate": ("device", "rate_gbps"),
    "module_missing": ("module",),
    "bandwidth_low": ("test", "value"),
    "mount_fails": ("mount_point",),
    "bmc_wrong_password": (),
    "bmc_down": (),
    "task_fails": ("tool",),
}
NUMERIC_PARAMETERS = {"index": int, "rate_gbps": int, "value": float}
PACKAGE_DIR = Path(__file__).resolve().parent

# Files a factory Ubuntu image has that the stages read or extend.
FACTORY_FILES = {
    "etc/default/grub": 'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="Ubuntu"\n'
                        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n',
    "etc/os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'
                      'ID_LIKE=debian\nVERSION_CODENAME=jammy\n',
    "etc/security/limits.conf": "# /etc/security/limits.conf\n",
    "etc/fstab": "/dev/mapper/vg0-root / ext4 errors=remount-ro 0 1\n",
}
FACTORY_DIRECTORIES = ("etc/default/grub.d", "etc/modprobe.d", "etc/modules-load.d", "etc/sysctl.d",
                       "etc/systemd/system", "etc/security/limits.d", "etc/chrony", "mnt", "tmp", "var/log")


class SimulationError(Exception):
    pass


def require_extra() -> None:
    """The packages of the extra `simulation` are installed, or one SimulationError naming it (extra.py)."""
    try:
        extra.require()
    except extra.SimulationExtraMissing as exc:
        raise SimulationError(str(exc)) from None


def bin_dir() -> Path:
    return Path(settings.SIMULATION_DIR) / "bin"


def default_sysroot(node) -> Path:
    return Path(settings.SIMULATION_DIR) / "nodes" / node.name


def ensure_credentials() -> None:
    """The simulation's CA (SIMULATION_DIR/ca/ca.pem) and BMC password (SIMULATION_DIR/bmc-password)."""
    bmc.ensure_credentials()


DEMO_CREDENTIAL = "demo-bmc"


_QUOTED_URL = re.compile(r'"(https?://[^"]+)"')


def _demo_nodes() -> list[dict]:
    return YAML(typ="safe").load(Path(settings.DEMO_SITE).read_text())["nodes"]


def demo_bmc_ports(refresh: bool = False) -> dict[str, int]:
    """{node: port} of the demo's BMC emulators in this state directory, allocated on first use
    (ports.py). With `refresh`, a port another process now holds is replaced by a free one."""
    try:
        return ports.allocate(settings.SIMULATION_DIR, [node["name"] for node in _demo_nodes()], refresh=refresh,
                              serving=lambda name, port: bmc.running_pid(name) is not None)
    except ports.PortError as exc:
        raise SimulationError(f"BMC ports: {exc}") from None


def demo_site_text(refresh: bool = False) -> str:
    """The bundled demo site as this state directory imports it: each node's BMC URL names the port
    allocated to its emulator here, so two simulated appliances on one machine never share one. Only
    the port changes, on its own line: a message naming demo.yml:line still points at the right line."""
    text = Path(settings.DEMO_SITE).read_text()
    allocation = demo_bmc_ports(refresh)
    served = {}
    for node in _demo_nodes():
        written = node["bmc"]["url"]
        if text.count(f'"{written}"') != 1:
            raise SimulationError(f"{settings.DEMO_SITE}: node {node['name']}: its BMC URL {written} must be "
                                  "written once, in double quotes")
        served[written] = f"https://127.0.0.1:{allocation[node['name']]}"
    return _QUOTED_URL.sub(lambda match: f'"{served.get(match.group(1), match.group(1))}"', text)


def demo_bmc_endpoints() -> list[str]:
    """The endpoints of the demo's BMC emulators in this state directory (https://127.0.0.1:<port>)."""
    from appliance.inventory.endpoints import endpoint_of

    allocation = demo_bmc_ports()
    return [endpoint_of(f"https://127.0.0.1:{allocation[node['name']]}") for node in _demo_nodes()]


def ensure_demo_credential():
    """The credential the demo site names, as an Administrator's first run makes it: user `admin` with
    the simulation's BMC password, verified with the simulation's CA, bound to the demo's emulators.
    Run again, it keeps endpoints an Administrator added and changes only what differs (recorded)."""
    from appliance.inventory import credentials
    from appliance.inventory.models import Credential

    bmc.ensure_credentials()
    wanted = {"username": bmc.USERNAME, "secret": bmc.password(), "ca_file": str(bmc.ca_path())}
    existing = Credential.objects.filter(name=DEMO_CREDENTIAL).first()
    if existing is None:
        return credentials.create(DEMO_CREDENTIAL, endpoints=demo_bmc_endpoints(),
                                  description="the simulated demo appliance's BMC emulators", **wanted)
    endpoints = existing.endpoints + [e for e in demo_bmc_endpoints() if e not in existing.endpoints]
    return credentials.update(DEMO_CREDENTIAL, endpoints=endpoints, **wanted)


def _registry(spec: dict, node) -> dict:
    registry_name = (spec.get("bios") or {}).get("registry")
    if not registry_name:
        return {}
    path = Path(settings.FIRMWARE_DIR) / "registries" / registry_name
    try:
        # YAML 1.2 (ruamel's default): `Off` stays the string the registry means, not a boolean.
        return YAML(typ="safe").load(path.read_text()) or {}
    except OSError as exc:
        raise SimulationError(f"{node.name}: platform {spec.get('id')}: BIOS registry {path}: {exc.strerror}") from None


def factory_bios(spec: dict, node) -> dict:
    attributes = _registry(spec, node).get("attributes") or {}
    factory = {}
    for name, attribute in attributes.items():
        if "factory" in attribute:
            value = attribute["factory"]
            factory[name] = str(value) if not isinstance(value, bool) else ("Enabled" if value else "Disabled")
    return factory


def tools_dir() -> Path:
    return Path(settings.SIMULATION_DIR) / "tools"


def _install_tools() -> Path:
    """The simulated commands as the node runs them: a copy of the simulation's pure-Python modules in
    SIMULATION_DIR/tools (compiled), run by the node's system Python. The node's login account reads
    them there; the suite itself may live where that account cannot (a venv in a private home)."""
    target = tools_dir() / "appliance" / "simulation"
    sources = sorted(PACKAGE_DIR.glob("*.py")) + sorted((PACKAGE_DIR / "tools").glob("*.py"))
    changed = False
    for source in sources:
        destination = target / source.relative_to(PACKAGE_DIR)
        data = source.read_bytes()
        if destination.exists() and destination.read_bytes() == data:
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, destination)
        changed = True
    if changed:
        subprocess.run([sshd.NODE_PYTHON, "-m", "compileall", "-q", str(tools_dir())], check=False,
                       capture_output=True)
    return target / "tools" / "runner.py"


def _write_wrappers() -> None:
    """One small shell script per simulated command, exec'ing the simulation's runner with the node's
    system Python: the same directory serves every simulated node (APPLIANCE_SIM_SYSROOT picks the node)."""
    directory = bin_dir()
    directory.mkdir(parents=True, exist_ok=True)
    runner = _install_tools()
    for command in COMMANDS:
        text = (f"#!/bin/sh\n# Simulated {command} (appliance.simulation.tools); the node is $APPLIANCE_SIM_SYSROOT.\n"
                f"exec {shlex.quote(sshd.NODE_PYTHON)} -I {shlex.quote(str(runner))} {shlex.quote(command)} \"$@\"\n")
        target = directory / command
        if target.exists() and target.read_text() == text:
            continue
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{command}.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)


def _prepare_sysroot(sysroot: Path, node) -> None:
    for directory in FACTORY_DIRECTORIES:
        (sysroot / directory).mkdir(parents=True, exist_ok=True)
    for relative, text in FACTORY_FILES.items():
        path = sysroot / relative
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    hostname = sysroot / "etc" / "hostname"
    if not hostname.exists():
        hostname.write_text(node.name + "\n")


def prepare_node(node) -> bool:
    """Sysroot and state of one node from its platform profile; returns True if the state was created.
    An existing state is never reset."""
    if node.platform is None:
        raise SimulationError(f"{node.name}: no platform: a simulated node takes its hardware from its platform")
    if not node.sysroot:
        node.sysroot = str(default_sysroot(node))
        node.save(update_fields=["sysroot", "updated"])
    sysroot = Path(node.sysroot)
    spec = node.platform.spec or {}
    try:
        initial = hardware.factory_state(node.name, node.role, spec, factory_bios(spec, node))
    except (KeyError, ValueError, TypeError) as exc:
        raise SimulationError(f"{node.name}: platform {node.platform.slug}: {exc}") from None
    _prepare_sysroot(sysroot, node)
    created = node_state.create(sysroot, initial)
    if not created:
        node_state.refresh_derived(sysroot)
    return created


@transaction.atomic
def prepare_appliance(appliance) -> dict:
    """Sysroots, state files, simulated commands and the NVML library for every node of a simulated
    appliance. Idempotent: a node's existing state is kept."""
    if not appliance.simulated:
        raise SimulationError(f"appliance {appliance.name} is not simulated: its nodes are real servers")
    require_extra()
    ensure_credentials()
    _write_wrappers()
    library = nvml.library_path()
    created = []
    nodes = list(appliance.nodes.select_related("platform").order_by("name"))
    for node in nodes:
        if prepare_node(node):
            created.append(node.name)
    try:
        login = sshd.prepare([node.name for node in nodes], [Path(node.sysroot) for node in nodes])
    except sshd.SSHError as exc:
        raise SimulationError(str(exc)) from None
    audit.record("simulation.appliance.prepare", target=appliance,
                 details={"created": created, "nodes": len(nodes), "library": str(library), "account": login.name,
                          "known_hosts": str(sshd.known_hosts_path())})
    return {"created": created, "library": library, "bin": bin_dir(), "account": login.name,
            "known_hosts": sshd.known_hosts_path()}


def node_environment(node) -> dict:
    """Environment of any process acting on the node: {} on a real node."""
    if not node.sysroot:
        return {}
    return {
        "PATH": f"{bin_dir()}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "APPLIANCE_SIM_SYSROOT": str(node.sysroot),
        "APPLIANCE_SIM_NVML": str(nvml.library_path()),
    }


def _bmc_nodes(appliance):
    if not appliance.simulated:
        raise SimulationError(f"appliance {appliance.name} is not simulated: its BMCs are real")
    return [node for node in appliance.nodes.select_related("bmc").order_by("name") if hasattr(node, "bmc")]


def start_bmcs(appliance) -> dict:
    """Start every BMC emulator of the appliance that is not running, in parallel (a node with the
    bmc_down fault stays down). Returns {node: pid, or None for a node that is down}."""
    nodes = _bmc_nodes(appliance)
    require_extra()
    down = {node.name for node in nodes if node.sysroot and node_state.exists(node.sysroot)
            and node_state.has_fault(node_state.load(node.sysroot), "bmc_down")}
    already = {node.name: bmc.running_pid(node.name) for node in nodes}
    try:
        pids = bmc.start_many([node for node in nodes if node.name not in down])
    except bmc.BMCError as exc:
        raise SimulationError(str(exc)) from None
    for node in nodes:
        if node.name in pids and not already[node.name]:
            audit.record("simulation.bmc.start", target=node, details={"pid": pids[node.name], "port": bmc.port_of(node)})
    return {node.name: pids.get(node.name) for node in nodes}


ensure_bmcs = start_bmcs


def stop_bmcs(appliance) -> dict:
    stopped = {}
    for node in _bmc_nodes(appliance):
        pid = bmc.stop(node.name)
        stopped[node.name] = pid
        if pid:
            audit.record("simulation.bmc.stop", target=node, details={"pid": pid})
    return stopped


def bmc_status(appliance) -> dict:
    return {node.name: bmc.status(node) for node in _bmc_nodes(appliance)}


def _simulated_nodes(appliance) -> list:
    if not appliance.simulated:
        raise SimulationError(f"appliance {appliance.name} is not simulated: its nodes are real servers")
    return list(appliance.nodes.order_by("name"))


def start_ssh(appliance) -> dict:
    """Start the SSH server of every node of the appliance that has none running (one sshd per node,
    on the node's own loopback address). Returns {node: pid}."""
    nodes = _simulated_nodes(appliance)
    already = {node.name: sshd.running_pid(node.name) for node in nodes}
    try:
        pids = sshd.start_many([node.name for node in nodes])
    except sshd.SSHError as exc:
        raise SimulationError(str(exc)) from None
    for node in nodes:
        if not already[node.name]:
            audit.record("simulation.ssh.start", target=node, details={
                "pid": pids[node.name], "address": sshd.address_of(node.name), "port": sshd.port_of(node.name)})
    return pids


def stop_ssh(appliance) -> dict:
    stopped = {}
    for node in _simulated_nodes(appliance):
        pid = sshd.stop(node.name)
        stopped[node.name] = pid
        if pid:
            audit.record("simulation.ssh.stop", target=node, details={"pid": pid})
    return stopped


def ssh_status(appliance) -> dict:
    return {node.name: sshd.status(node.name) for node in _simulated_nodes(appliance)}


def start(appliance) -> dict:
    """Everything a prepared simulated appliance runs: its BMC emulators, its nodes' SSH servers and,
    once the workloads stage has written its files, the training pool's Slurm, and once the monitoring
    stage has deployed them, the nodes' telemetry collectors."""
    started = {"bmc": start_bmcs(appliance), "ssh": start_ssh(appliance), "repository": start_repository()}
    try:
        started["slurm"] = start_slurm(appliance)
    except SimulationError as exc:
        # Files the workloads stage left inconsistent (a run that wrote slurm.conf on some nodes only) must
        # not keep a run from starting the stage that rewrites them; after it, the stage starts Slurm again
        # and fails on it.
        started["slurm"] = str(exc)
    try:
        started["collectors"] = start_collectors(appliance)
    except SimulationError as exc:
        # A collector that cannot start must not keep the bootstrap from running the stages that mend it;
        # the monitoring stage starts them again and fails on it.
        started["collectors"] = str(exc)
    return started


def stop(appliance) -> dict:
    # The collectors first (they drain what they hold), the workload (it cancels its Slurm jobs), then
    # Slurm, then what the nodes are reached by.
    # The demo portal after the collectors (they send what they hold to it) and before what serves the nodes.
    stopped = {"collectors": stop_collectors(appliance), "workload": workload.stop(appliance),
               "slurm": slurm.stop(appliance), "portal": portal_server.stop()}
    return stopped | {"ssh": stop_ssh(appliance), "bmc": stop_bmcs(appliance), "repository": repository_server.stop()}


def start_portal() -> int:
    """The demo's portal, worker and beat (portal_server.py): started at the end of a bootstrap of the
    simulated appliance and by `simulation start`, never by a run's own start (a run's stages are not
    served while they provision). Returns its pid."""
    try:
        return portal_server.start()
    except portal_server.PortalServerError as exc:
        raise SimulationError(str(exc)) from None


def start_collectors(appliance) -> dict[str, int | str]:
    """The nodes' telemetry collectors (collectors.py): {node: pid, or "not deployed yet ..." before the
    monitoring stage}."""
    _simulated_nodes(appliance)  # a real appliance's collectors are its nodes' own services
    try:
        return collectors.start(appliance)
    except collectors.CollectorsError as exc:
        raise SimulationError(str(exc)) from None


def stop_collectors(appliance) -> dict[str, int | None]:
    _simulated_nodes(appliance)
    return collectors.stop(appliance)


def collector_status(appliance) -> dict[str, dict]:
    _simulated_nodes(appliance)
    return collectors.status(appliance)


def start_repository() -> int:
    """The simulated management node's package repository server (repository_server.py)."""
    try:
        return repository_server.start()
    except repository_server.RepositoryServerError as exc:
        raise SimulationError(str(exc)) from None


def start_slurm(appliance) -> dict | str:
    """The training pool's Slurm (slurm.py): its daemons' pids, or why it cannot run yet or here (before
    the workloads stage has written its files, say), which does not fail the simulation's start."""
    try:
        return slurm.start(appliance)
    except slurm.SlurmUnavailable as exc:
        return str(exc)
    except slurm.SlurmError as exc:
        raise SimulationError(str(exc)) from None


def remove(appliances) -> dict:
    """Stop every simulated appliance of this state directory, delete the nodes' SSH servers' files and,
    as root, the simulation's service account and its sudoers drop-in (nothing else outside the state
    directory was ever made). The sysroots and the inventory stay."""
    for appliance in appliances:
        stop(appliance)
        sshd.release([Path(node.sysroot) for node in appliance.nodes.all() if node.sysroot])
    sshd.remove_files()
    sshd.close_access()
    try:
        account_removed = sshd.remove_account()
    except sshd.SSHError as exc:
        raise SimulationError(str(exc)) from None
    return {"account": sshd.service_account() if account_removed else None}


def _fault(kind: str, params: dict, node) -> dict:
    if kind not in FAULT_KINDS:
        raise SimulationError(f"{node.name}: unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    expected = FAULT_KINDS[kind]
    missing = [name for name in expected if name not in params]
    unknown = [name for name in params if name not in expected]
    if missing or unknown:
        raise SimulationError(f"{node.name}: fault {kind} takes {', '.join(expected) or 'no parameters'}"
                              + (f"; missing {', '.join(missing)}" if missing else "")
                              + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    fault = {"kind": kind}
    for name, value in params.items():
        converter = NUMERIC_PARAMETERS.get(name, str)
        try:
            fault[name] = converter(value)
        except (TypeError, ValueError):
            raise SimulationError(f"{node.name}: fault {kind}: {name} must be a number, not {value!r}") from None
    if kind == "module_missing":
        fault["module"] = kmod.normalise(fault["module"])  # modprobe names nvidia-fs and nvidia_fs alike
    if kind == "mount_fails" and not str(fault["mount_point"]).startswith("/"):
        raise SimulationError(f"{node.name}: fault mount_fails: mount_point must be absolute")
    return fault


def _require_state(node) -> Path:
    if not node.sysroot or not node_state.exists(node.sysroot):
        raise SimulationError(f"{node.name}: not a prepared simulated node (run `{resources.program()} simulation prepare`)")
    return Path(node.sysroot)


def _needs_module(module: str, missing: str) -> bool:
    if module == missing:
        return True
    return any(_needs_module(dependency, missing) for dependency in packages.MODULE_DEPENDENCIES.get(module, ()))


def _drop_mount(current: dict, mount_point: str) -> None:
    target = "/" + mount_point.strip("/")
    current["mounts"] = [mount for mount in current["mounts"] if mount["target"] != target]
    unit = target.strip("/").replace("-", "\\x2d").replace("/", "-") + ".mount"
    if unit in current["services"]:
        current["services"][unit]["active"] = False


def inject_fault(node, kind: str, **params) -> dict:
    sysroot = _require_state(node)
    fault = _fault(kind, params, node)
    if kind == "task_fails" and fault["tool"] not in COMMANDS:
        raise SimulationError(f"{node.name}: fault task_fails: {fault['tool']!r} is not a simulated command "
                              f"({', '.join(sorted(COMMANDS))})")
    with transaction.atomic():
        with node_state.update(sysroot) as current:
            if kind == "gpu_missing" and not any(gpu["index"] == fault["index"] for gpu in current["gpus"]):
                raise SimulationError(f"{node.name}: fault gpu_missing: no GPU {fault['index']}")
            if kind in ("port_down", "port_rate") and not any(hca["device"] == fault["device"] for hca in current["hcas"]):
                raise SimulationError(f"{node.name}: fault {kind}: no HCA {fault['device']}")
            if fault not in current["faults"]:
                current["faults"].append(fault)
            if kind == "mount_fails":
                # The filesystem drops (its server went away) and every mount attempt from now on fails.
                _drop_mount(current, fault["mount_point"])
            if kind == "module_missing":
                # As after a reboot into a kernel the module was not built for: it is gone, and so is
                # every module that needs it.
                current["modules"] = [m for m in current["modules"]
                                      if not _needs_module(m, fault["module"])]
        audit.record("simulation.fault.inject", target=node, details=fault)
    if kind == "bmc_wrong_password":
        bmc.write_htpasswd(node.name, wrong_password=True)
    elif kind == "bmc_down":
        bmc.stop(node.name)
    return fault


def clear_faults(node, kind: str | None = None) -> list[dict]:
    sysroot = _require_state(node)
    if kind is not None and kind not in FAULT_KINDS:
        raise SimulationError(f"{node.name}: unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    with transaction.atomic():
        with node_state.update(sysroot) as current:
            removed = [fault for fault in current["faults"] if kind is None or fault["kind"] == kind]
            current["faults"] = [fault for fault in current["faults"] if fault not in removed]
        if removed:
            audit.record("simulation.fault.clear", target=node, details={"cleared": removed})
    kinds = {fault["kind"] for fault in removed}
    if "bmc_wrong_password" in kinds and (bmc.bmc_dir() / f"{node.name}.htpasswd").exists():
        bmc.write_htpasswd(node.name)
    if "bmc_down" in kinds and hasattr(node, "bmc") and node.appliance.simulated:
        try:
            bmc.start(node)
        except bmc.BMCError as exc:
            raise SimulationError(str(exc)) from None
        audit.record("simulation.bmc.start", target=node, details={"port": bmc.port_of(node)})
    return removed


def node_state_of(node) -> dict:
    return node_state.load(_require_state(node))
