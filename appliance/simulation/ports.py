"""The loopback ports of one state directory's simulated appliance.

Two simulated appliances on one machine (two state directories) must never ask for the same port, so
no port is written in advance: each state directory allocates its own, once, from the ports free on
127.0.0.1 at that moment, and keeps them in `<simulation dir>/ports.json` ({"bmc": {node: port}}).
A node keeps its port from then on, so its BMC URL in the inventory and the credential bound to it
stay right across restarts.

Ports are drawn at random below the kernel's ephemeral range: a client connection's local port is
taken from that range, and could otherwise hold a stopped emulator's port. Between the allocation and
the moment an emulator binds its port, the allocating process claims the port with an abstract
Unix socket (`@appliance-simulation-port:<port>`: nothing on disk, gone with the process), so that a
second state directory allocating at the same time on the same machine passes it over.

Pure Python without Django, like state.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

FILE_NAME = "ports.json"
LOWEST = 20000
HIGHEST_FALLBACK = 32767
_CLAIM_PREFIX = b"\0appliance-simulation-port:"
_claims: dict[int, socket.socket] = {}
_random = random.SystemRandom()


class PortError(Exception):
    """No free port could be found, or the allocation file is unreadable."""


def path(simulation_dir: str | os.PathLike) -> Path:
    return Path(simulation_dir) / FILE_NAME


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return HIGHEST_FALLBACK + 1
    return low if low > LOWEST + 1000 else HIGHEST_FALLBACK + 1


def listening_possible(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:port now (SO_REUSEADDR, as the emulators set it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def server_listening(port: int) -> bool:
    """Whether a server already listens on 127.0.0.1:port. Not the same as `not listening_possible`: the
    connections of an emulator stopped a moment ago linger (FIN_WAIT) and fail a bare bind, while the
    emulator itself, restarted, binds the port again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _claim(port: int) -> bool:
    """Claim the port for this process (machine-wide, until it exits); True if this process holds it."""
    if port in _claims:
        return True
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(_CLAIM_PREFIX + str(port).encode())
    except OSError:
        claim.close()
        return False
    _claims[port] = claim
    return True


@contextlib.contextmanager
def _locked(simulation_dir: Path):
    simulation_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(simulation_dir / ".ports.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise PortError(f"{file}: not a readable port allocation ({exc}); remove it to allocate again") from None
    if not isinstance(data, dict):
        raise PortError(f"{file}: not a port allocation (expected an object); remove it to allocate again")
    return data


def _write(file: Path, data: dict) -> None:
    fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(temporary, file)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _free_port(taken: set[int]) -> int:
    high = _ephemeral_low()
    candidates = [port for port in range(LOWEST, high) if port not in taken]
    _random.shuffle(candidates)
    for port in candidates[:2000]:
        if listening_possible(port) and _claim(port):
            return port
    raise PortError(f"no free port on 127.0.0.1 between {LOWEST} and {high - 1}")


def free_port() -> int:
    """One free loopback port below the kernel's ephemeral range, claimed for this process: outside the
    range no client connection can take it while its server is stopped and started again."""
    return _free_port(set())


def allocated(simulation_dir: str | os.PathLike, kind: str = "bmc") -> dict[str, int]:
    """The ports already allocated in this state directory (nothing allocated here)."""
    return {name: int(port) for name, port in (_read(path(simulation_dir)).get(kind) or {}).items()}


def allocate(simulation_dir: str | os.PathLike, names: Iterable[str], *, kind: str = "bmc", refresh: bool = False,
             serving: Callable[[str, int], bool] = lambda name, port: False) -> dict[str, int]:
    """{name: port} for `names`: the state directory's ports, allocating (and keeping) one for each name
    that has none. With `refresh`, a kept port that another process now holds (it is neither free nor
    `serving(name, port)`, this state directory's own server) is replaced by a free one."""
    directory = Path(simulation_dir)
    file = path(directory)
    with _locked(directory):
        data = _read(file)
        ports = {name: int(port) for name, port in (data.get(kind) or {}).items()}
        taken = {int(port) for section in data.values() if isinstance(section, dict) for port in section.values()}
        result, changed = {}, False
        for name in names:
            port = ports.get(name)
            if port is not None and refresh and not serving(name, port) and not (
                    listening_possible(port) and _claim(port)):
                port = None
            if port is None:
                port = _free_port(taken)
                taken.add(port)
                ports[name], changed = port, True
            else:
                _claim(port)  # while this process lives; held elsewhere, it is this state directory's own
            result[name] = port
        if changed:
            data[kind] = ports
            _write(file, data)
    return result


# The demo's portal serves the collectors' ingest endpoint too, so its port is fixed per state directory
# before the monitoring stage writes it into every node's collector.json.
PORTAL = "portal"
METRICS = "metrics"


def portal_port(simulation_dir: str | os.PathLike) -> int:
    """The port of this state directory's demo portal (and of the ingest URL its collectors send to)."""
    return allocate(simulation_dir, [PORTAL], kind=PORTAL)[PORTAL]


def metrics_ports(simulation_dir: str | os.PathLike, names: Iterable[str]) -> dict[str, int]:
    """{node: port} of each simulated node's collector /metrics (kept once allocated, like the BMCs')."""
    return allocate(simulation_dir, names, kind=METRICS)
