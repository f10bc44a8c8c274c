"""Ending a server process the simulation started (the package repository's, the demo portal's): SIGTERM, a
grace period for it to end (reaped if it is a child of this process), then SIGKILL."""

import contextlib
import os
import signal
import time
from pathlib import Path


def terminate(pid: int, grace: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
