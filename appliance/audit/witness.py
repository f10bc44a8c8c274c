"""The witness: every signed checkpoint and every key handover, also written outside the database.

A checkpoint signs the log up to its tree size, but it lives in the same database as the records:
whoever can rewrite records with the triggers off can delete the checkpoints that disagree, and the
rest of the log then verifies. So each committed checkpoint is appended, as one canonical JSON line,
to a file in the state directory (settings.AUDIT_WITNESS_FILE, mode 0600, opened O_APPEND: a line
is only ever added) and, when settings.AUDIT_WITNESS_SYSLOG names a destination, sent to syslog,
which can forward it off the machine. `audit verify --database` compares the database with the
witness: a witnessed checkpoint that is missing or different in the database, or that covers more
records than the database holds, is tampering. So is a witnessed key handover the database no longer
holds: with it gone, a copy of the handed-over key would look current again.

Syslog destinations: a Unix socket path (`/dev/log`), or `udp://host:port` / `tcp://host:port`.
"""

import json
import logging
import logging.handlers
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from . import chain

log = logging.getLogger(__name__)
SYSLOG_TAG = "appliance-audit-witness"

_syslog_lock = threading.Lock()
_syslog_handlers: dict[str, logging.Handler] = {}


def path() -> Path:
    return Path(settings.AUDIT_WITNESS_FILE)


def line_of(statement: dict) -> bytes:
    return chain.canonical_json(statement) + b"\n"


def append(statement: dict) -> None:
    """Add one signed checkpoint or key handover to the witness file (and to syslog when configured)."""
    line = line_of(statement)
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        os.write(fd, line)  # one write of a whole line: O_APPEND keeps concurrent writers' lines whole
        os.fsync(fd)
    finally:
        os.close(fd)
    destination = settings.AUDIT_WITNESS_SYSLOG
    if destination:
        _syslog(destination).handle(logging.makeLogRecord(
            {"name": SYSLOG_TAG, "levelno": logging.INFO, "levelname": "INFO",
             "msg": f"{SYSLOG_TAG}: {line.decode('ascii', 'backslashreplace').rstrip()}"}))


def _syslog(destination: str) -> logging.Handler:
    with _syslog_lock:
        handler = _syslog_handlers.get(destination)
        if handler is None:
            handler = logging.handlers.SysLogHandler(**_syslog_address(destination),
                                                     facility=logging.handlers.SysLogHandler.LOG_AUTHPRIV)
            _syslog_handlers[destination] = handler
        return handler


def _syslog_address(destination: str) -> dict:
    for scheme, kind in (("udp://", socket.SOCK_DGRAM), ("tcp://", socket.SOCK_STREAM)):
        if destination.startswith(scheme):
            host, _, port = destination[len(scheme):].rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"AUDIT_WITNESS_SYSLOG: {destination!r} is not {scheme}host:port")
            return {"address": (host.strip("[]"), int(port)), "socktype": kind}
    if destination.startswith("/"):
        return {"address": destination}
    raise ValueError(f"AUDIT_WITNESS_SYSLOG: {destination!r} is neither a socket path nor udp:// or tcp://host:port")


@dataclass
class Entry:
    line: int
    statement: dict

    @property
    def is_handover(self) -> bool:
        return self.statement.get("type") == chain.KEY_ROTATION_TYPE


class WitnessError(ValueError):
    """A line of the witness file is neither a checkpoint nor a key handover statement."""


WITNESSED_TYPES = (chain.CHECKPOINT_TYPE, chain.KEY_ROTATION_TYPE)


def read(source: Path | None = None) -> list[Entry] | None:
    """The witnessed checkpoints and key handovers, in file order; None when there is no witness file."""
    source = Path(source or path())
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return None
    entries = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            statement = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WitnessError(f"{source}:{number}: not JSON ({exc})") from None
        if not isinstance(statement, dict) or statement.get("type") not in WITNESSED_TYPES \
                or type(statement.get("tree_size")) is not int:
            raise WitnessError(f"{source}:{number}: neither a checkpoint nor a key handover statement")
        entries.append(Entry(number, statement))
    return entries
