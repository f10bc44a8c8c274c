"""The demo appliance's portal as a service: gunicorn serving the portal (appliance.wsgi) on the port this
state directory allocated for it, which is also the port its nodes' collectors send their telemetry to.

A production controller runs the portal, its worker and its beat as systemd units (`appliance install
--production`); the simulated appliance runs the same WSGI application under the simulation's own
supervision, so that after a bootstrap the demo is alive with no second command: the collectors' points
arrive, and with no broker configured the serving process is also the worker and the beat
(appliance.core.serving: attribution every minute, folds, findings, the watchdog, audit checkpoints).
One gunicorn worker process with threads: the embedded beat runs in exactly one process.
SIMULATION_DIR/portal.{pid,log}; `simulation status` shows it, `simulation stop` stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings

from appliance import audit

from . import ports, processes

ADDRESS = "127.0.0.1"
START_TIMEOUT = 60
THREADS = 8
# What makes a pid this module's portal: gunicorn serving this state directory's application.
MARKER = b"appliance.wsgi:application"


class PortalServerError(Exception):
    pass


def _directory() -> Path:
    return Path(settings.SIMULATION_DIR)


def _pid_path() -> Path:
    return _directory() / "portal.pid"


def log_path() -> Path:
    return _directory() / "portal.log"


def port() -> int:
    try:
        return ports.portal_port(settings.SIMULATION_DIR)
    except ports.PortError as exc:
        raise PortalServerError(f"the demo portal's port: {exc}") from None


def url() -> str:
    return f"http://{ADDRESS}:{port()}"


def _command(number: int) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "appliance.wsgi:application", "--bind", f"{ADDRESS}:{number}",
            "--workers", "1", "--threads", str(THREADS), "--timeout", "120", "--graceful-timeout", "20",
            "--access-logfile", "-", "--no-control-socket", "--name", f"appliance-portal {settings.STATE_DIR}"]


def running_pid() -> int | None:
    try:
        pid = int(_pid_path().read_text().strip())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    # pids are reused: only the gunicorn this module started for this state directory counts.
    state = f"APPLIANCE_STATE_DIR={settings.STATE_DIR}".encode()
    return pid if MARKER in cmdline and state in environ else None


def _answers(number: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ADDRESS}:{number}/health/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start() -> int:
    """Start the portal unless it runs; wait until it answers. Returns gunicorn's (the master's) pid."""
    existing = running_pid()
    if existing:
        return existing
    number = port()
    if ports.server_listening(number):
        raise PortalServerError(f"port {number} of the demo portal is in use by another process (a development "
                                "server left running? the collectors send to this port)")
    _directory().mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "APPLIANCE_STATE_DIR": str(settings.STATE_DIR)}
    with open(log_path(), "ab") as log:
        process = subprocess.Popen(_command(number), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=_directory(), env=environment, start_new_session=True)
    _pid_path().write_text(f"{process.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(number):
        if process.poll() is not None or time.monotonic() > deadline:
            processes.terminate(process.pid, grace=30)
            _pid_path().unlink(missing_ok=True)
            tail = "\n".join(log_path().read_text(errors="replace").splitlines()[-15:])
            raise PortalServerError(f"the demo portal did not answer on {ADDRESS}:{number} "
                                    f"(log {log_path()}):\n{tail}")
        time.sleep(0.2)
    audit.record("simulation.portal.start", target_type="portal", target_name=url(),
                 details={"pid": process.pid, "port": number, "threads": THREADS})
    return process.pid


def stop() -> int | None:
    """Stop the portal if it runs (gunicorn ends its worker gracefully); returns the pid that was stopped."""
    pid = running_pid()
    if pid:
        processes.terminate(pid, grace=30)
        audit.record("simulation.portal.stop", target_type="portal", details={"pid": pid})
    _pid_path().unlink(missing_ok=True)
    return pid


def status() -> dict:
    pid = running_pid()
    allocated = ports.allocated(settings.SIMULATION_DIR, ports.PORTAL).get(ports.PORTAL)
    return {"pid": pid, "running": pid is not None, "port": allocated,
            "url": f"http://{ADDRESS}:{allocated}" if allocated else "",
            "answering": bool(pid and allocated and _answers(allocated))}
