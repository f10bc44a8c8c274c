"""The telemetry collectors of a simulated appliance: one agent process per simulated node, the very package
and node venv the monitoring stage deployed into the node's sysroot (the telemetry contract's node layout),
run here as a real node's systemd unit would run it:

    <sysroot>/opt/appliance/python/bin/python -m appliance_collector.agent \\
        --config <sysroot>/etc/appliance/collector.json --sysroot <sysroot> --nvml-library <simulated NVML>

with PYTHONPATH=<sysroot>/opt/appliance/collector. Nothing of the suite's own Python is used: a collector
that works here works with what the stage put on the node. Before the monitoring stage has run a node has
no collector.json, and its collector is "not deployed yet" (not an error).

Layout (SIMULATION_DIR/collectors): <node>.pid, <node>.log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from django.conf import settings

from appliance import audit

from . import nvml

CONFIG = "etc/appliance/collector.json"
PYTHON = "opt/appliance/python/bin/python"
PACKAGE = "opt/appliance/collector"
MODULE = "appliance_collector.agent"
MARKER = "APPLIANCE_SIM_COLLECTOR"  # in each agent's environment: this state directory's, and which node's
START_TIMEOUT = 30.0
STOP_GRACE = 25.0  # the agent waits for each forwarder's write under way and drains its buffer, up to 5 s each


class CollectorsError(Exception):
    """A simulated node's collector cannot start; the message names the node and what to do."""


def collectors_dir() -> Path:
    return Path(settings.SIMULATION_DIR) / "collectors"


def _pid_file(name: str) -> Path:
    return collectors_dir() / f"{name}.pid"


def log_path(name: str) -> Path:
    return collectors_dir() / f"{name}.log"


def _marker(name: str) -> str:
    return f"{MARKER}={_pid_file(name)}"


def _ours(pid: int, name: str) -> bool:
    """Alive (not a zombie) and started by this state directory for this node."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if status.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    return _marker(name).encode() in environ


def running_pid(name: str) -> int | None:
    try:
        pid = int(_pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _ours(pid, name) else None


def _nodes(appliance) -> list:
    return [node for node in appliance.nodes.order_by("name") if node.sysroot]


def deployed_config(node) -> dict | None:
    """The node's collector.json, or None before the monitoring stage wrote it."""
    path = Path(node.sysroot) / CONFIG
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CollectorsError(f"{node.name}: {path}: not a readable collector configuration ({exc}); "
                              "run the monitoring stage again") from None


def _metrics(config: dict) -> tuple[str, int] | None:
    metrics = config.get("metrics") or {}
    if not metrics.get("port"):
        return None
    address = str(metrics.get("address") or "127.0.0.1")
    return ("127.0.0.1" if address == "0.0.0.0" else address), int(metrics["port"])


def _answers(address: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _log_tail(name: str, lines: int = 5) -> str:
    try:
        text = log_path(name).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())


def _launch(node, config: dict) -> int:
    sysroot = Path(node.sysroot)
    python = sysroot / PYTHON
    if not os.access(python, os.X_OK):
        # never the controller's Python instead: the point is to run what the node was given
        raise CollectorsError(f"{node.name}: the node's Python {python} is missing: the node_python role builds it "
                              "(run the os stage, then monitoring)")
    package = sysroot / PACKAGE / "appliance_collector" / "agent.py"
    if not package.is_file():
        raise CollectorsError(f"{node.name}: {package} is missing: run the monitoring stage")
    collectors_dir().mkdir(parents=True, exist_ok=True)
    environment = {
        "PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8",
        "PYTHONPATH": str(sysroot / PACKAGE), "PYTHONDONTWRITEBYTECODE": "1",
        "APPLIANCE_SIM_SYSROOT": str(sysroot), MARKER: str(_pid_file(node.name)),
    }
    command = [str(python), "-m", MODULE, "--config", str(sysroot / CONFIG), "--sysroot", str(sysroot),
               "--nvml-library", str(nvml.library_path())]
    try:
        with open(log_path(node.name), "a") as log:
            process = subprocess.Popen(command, cwd=str(collectors_dir()), env=environment, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise CollectorsError(f"{node.name}: {python} could not be run: {exc.strerror}") from None
    _pid_file(node.name).write_text(f"{process.pid}\n")
    return process.pid


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _exited(pid: int) -> bool:
    """Whether an agent this process started has ended, asked of the kernel (waitpid). Not of the marker in
    /proc/<pid>/environ: an exec closes the pipe Popen waits on before it lays out the new program's
    environment, so for a moment after Popen returns a starting agent's environ reads empty."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped already (subprocess reaps the children of Popen objects it dropped)
        return True
    return done == pid


def _wait_ready(started: dict, configs: dict) -> None:
    """Every started agent answers /metrics (where it serves one) or at least outlives its start."""
    deadline = time.monotonic() + START_TIMEOUT
    waiting = dict(started)
    settle = time.monotonic() + 1.0
    while waiting:
        for name, pid in list(waiting.items()):
            if _exited(pid):
                _pid_file(name).unlink(missing_ok=True)
                raise CollectorsError(f"{name}: the collector exited at start (log {log_path(name)}: "
                                      f"{_log_tail(name) or 'empty'})")
            metrics = _metrics(configs[name])
            if (metrics and _answers(*metrics)) or (not metrics and time.monotonic() >= settle):
                del waiting[name]
        if not waiting:
            return
        if time.monotonic() > deadline:
            name = sorted(waiting)[0]
            raise CollectorsError(f"{name}: the collector did not answer /metrics within {START_TIMEOUT:.0f} s "
                                  f"(log {log_path(name)}: {_log_tail(name) or 'empty'})")
        time.sleep(0.2)


def start(appliance) -> dict[str, int | str]:
    """Start the collector of every simulated node that has one deployed and none running; {node: pid, or
    why it has none}. Waits until each answers."""
    result: dict[str, int | str] = {}
    started, configs = {}, {}
    for node in _nodes(appliance):
        config = deployed_config(node)
        if config is None:
            result[node.name] = "not deployed yet (the monitoring stage deploys it)"
            continue
        pid = running_pid(node.name)
        if pid is None:
            pid = _launch(node, config)
            started[node.name] = pid
        configs[node.name] = config
        result[node.name] = pid
    try:
        _wait_ready(started, configs)
    except CollectorsError:
        stop_processes({name: pid for name, pid in started.items() if _ours(pid, name)})
        raise
    by_name = {node.name: node for node in _nodes(appliance)}
    for name, pid in started.items():
        audit.record("simulation.collector.start", target=by_name[name],
                     details={"pid": pid, "config": str(Path(by_name[name].sysroot) / CONFIG),
                              "log": str(log_path(name))})
    return result


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def stop_processes(pids: dict[str, int]) -> None:
    """SIGTERM them together (each drains its buffers), then SIGKILL what is left after the grace. The
    pids were checked to be this state directory's collectors by the caller; while a process exits its
    environment can no longer be read, so from here on only whether it is alive counts."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids.values()):
        for pid in pids.values():
            _reap(pid)
        time.sleep(0.05)
    for name, pid in pids.items():
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # started by this process: not left a zombie
        reaped_by = time.monotonic() + 2.0
        while Path(f"/proc/{pid}").exists() and time.monotonic() < reaped_by:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:
                break  # another process's child (started by an earlier command): its parent reaps it
            time.sleep(0.02)
        _pid_file(name).unlink(missing_ok=True)


def stop(appliance) -> dict[str, int | None]:
    """Stop the appliance's collectors; {node: the pid stopped, or None}."""
    nodes = _nodes(appliance)
    running = {node.name: running_pid(node.name) for node in nodes}
    stop_processes({name: pid for name, pid in running.items() if pid})
    for node in nodes:
        _pid_file(node.name).unlink(missing_ok=True)
        if running[node.name]:
            audit.record("simulation.collector.stop", target=node, details={"pid": running[node.name]})
    return running


def status(appliance) -> dict[str, dict]:
    """{node: {"deployed", "pid", "metrics" (address:port or ""), "answering", "log"}}: nothing is started."""
    out = {}
    for node in _nodes(appliance):
        try:
            config = deployed_config(node)
        except CollectorsError:
            config = {}
        pid = running_pid(node.name)
        metrics = _metrics(config or {})
        out[node.name] = {"deployed": config is not None, "pid": pid,
                          "metrics": f"{metrics[0]}:{metrics[1]}" if metrics else "",
                          "answering": bool(pid and metrics and _answers(*metrics)), "log": str(log_path(node.name))}
    return out
