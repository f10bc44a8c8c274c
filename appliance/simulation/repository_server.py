"""The simulated management node's package repository server: Python's own `http.server`, run as a
process that serves settings.REPOSITORY_DIR (read-only, directory listings as any plain web server).

On a real appliance the management node's web server serves the same folder (README "Air-gapped
installs"); the simulated nodes reach this one over loopback as real nodes reach theirs over the
management network. Its port is this state directory's own (ports.py, kind "repository"), so two
simulated appliances on one machine never share one. SIMULATION_DIR/repository-server.{pid,log}.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings

from appliance import audit
from appliance.core import resources

from . import ports, processes

ADDRESS = "127.0.0.1"
PORT_NAME = "management"
START_TIMEOUT = 10


class RepositoryServerError(Exception):
    pass


def _directory() -> Path:
    return Path(settings.SIMULATION_DIR)


def _pid_path() -> Path:
    return _directory() / "repository-server.pid"


def _log_path() -> Path:
    return _directory() / "repository-server.log"


def port() -> int:
    try:
        return ports.allocate(settings.SIMULATION_DIR, [PORT_NAME], kind="repository",
                              serving=lambda name, number: running_pid() is not None)[PORT_NAME]
    except ports.PortError as exc:
        raise RepositoryServerError(f"package repository port: {exc}") from None


def url() -> str:
    """The repository's URL as the simulated nodes use it."""
    return f"http://{ADDRESS}:{port()}"


def _command(number: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(number), "--bind", ADDRESS,
            "--directory", str(settings.REPOSITORY_DIR)]


def running_pid() -> int | None:
    try:
        pid = int(_pid_path().read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    # pids are reused: only the server this module started, for this repository, counts.
    return pid if b"http.server" in cmdline and str(settings.REPOSITORY_DIR).encode() in cmdline else None


def _answers(number: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ADDRESS}:{number}/manifest.json", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start() -> int:
    """Start the server unless it runs; wait until it serves the repository's manifest. Returns its pid."""
    existing = running_pid()
    if existing:
        return existing
    if not (Path(settings.REPOSITORY_DIR) / "manifest.json").is_file():
        raise RepositoryServerError(f"no package repository at {settings.REPOSITORY_DIR}: build it first "
                                    f"(`{resources.program()} repository build`)")
    number = port()
    if ports.server_listening(number):
        raise RepositoryServerError(f"port {number} of the package repository is in use by another process")
    _directory().mkdir(parents=True, exist_ok=True)
    with open(_log_path(), "ab") as log:
        process = subprocess.Popen(_command(number), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=_directory(), start_new_session=True)
    _pid_path().write_text(f"{process.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(number):
        if process.poll() is not None or time.monotonic() > deadline:
            processes.terminate(process.pid)
            _pid_path().unlink(missing_ok=True)
            tail = "\n".join(_log_path().read_text(errors="replace").splitlines()[-10:])
            raise RepositoryServerError(f"the package repository server did not answer on {ADDRESS}:{number}:\n{tail}")
        time.sleep(0.05)
    audit.record("simulation.repository.start", target_type="repository", target_name=url(),
                 details={"pid": process.pid, "port": number, "directory": str(settings.REPOSITORY_DIR)})
    return process.pid


def stop() -> int | None:
    """Stop the server if it runs; returns the pid that was stopped."""
    pid = running_pid()
    if pid:
        processes.terminate(pid)
        audit.record("simulation.repository.stop", target_type="repository", details={"pid": pid})
    _pid_path().unlink(missing_ok=True)
    return pid


def status() -> dict:
    pid = running_pid()
    allocated = ports.allocated(settings.SIMULATION_DIR, "repository").get(PORT_NAME)
    return {"pid": pid, "running": pid is not None, "port": allocated,
            "url": f"http://{ADDRESS}:{allocated}" if allocated else "",
            "answering": bool(pid and allocated and _answers(allocated)),
            "directory": str(settings.REPOSITORY_DIR)}
