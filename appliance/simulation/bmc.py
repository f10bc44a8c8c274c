"""The simulated BMCs: one real sushy-emulator process per simulated node on 127.0.0.1, at the port
of the node's BMC URL, with TLS (a certificate from the simulation's own CA) and HTTP basic auth
(a bcrypt htpasswd with the user "admin" and the password in SIMULATION_DIR/bmc-password).

Files: SIMULATION_DIR/ca/{ca.pem,ca.key}, SIMULATION_DIR/bmc-password (0600), and per node
SIMULATION_DIR/bmc/<node>.{pid,log,htpasswd,crt,key}. The emulator runs as bmc_driver.py (sushy-tools'
application whose systems driver can stage BIOS changes until a reset, as real BMCs do: the node's
bmc.apply_time, "Immediate" or "OnReset"); its configuration is bmc_emulator_config.py; it keeps the BIOS
attributes, the staged ones and the power state in the node's state file.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.conf import settings

from appliance.core import resources
from appliance.core.files import write_private

from . import ports
from . import state as node_state

USERNAME = "admin"
CONFIG = Path(__file__).with_name("bmc_emulator_config.py")
DRIVER = Path(__file__).with_name("bmc_driver.py")
APPLY_TIMES = ("Immediate", "OnReset")
START_TIMEOUT = 15.0


class BMCError(Exception):
    pass


def simulation_dir() -> Path:
    return Path(settings.SIMULATION_DIR)


def ca_path() -> Path:
    return simulation_dir() / "ca" / "ca.pem"


def password_path() -> Path:
    return simulation_dir() / "bmc-password"


def bmc_dir() -> Path:
    return simulation_dir() / "bmc"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def ensure_credentials() -> None:
    """The CA and the BMC password exist (created once; never rotated behind the operator's back)."""
    ca_key_path = ca_path().with_name("ca.key")
    if not (ca_path().exists() and ca_key_path.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Appliance simulation CA")])
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        write_private(ca_key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
        ca_path().write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        os.chmod(ca_path(), 0o644)
    if not password_path().exists():
        write_private(password_path(), (secrets.token_urlsafe(18) + "\n").encode())


def password() -> str:
    ensure_credentials()
    return password_path().read_text().strip()


def _server_certificate(node_name: str) -> tuple[Path, Path]:
    cert_path, key_path = bmc_dir() / f"{node_name}.crt", bmc_dir() / f"{node_name}.key"
    ca_certificate = x509.load_pem_x509_certificate(ca_path().read_bytes())
    if cert_path.exists() and key_path.exists():
        existing = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if existing.issuer == ca_certificate.subject and existing.not_valid_after_utc > _now() + datetime.timedelta(days=1):
            with contextlib.suppress(Exception):
                existing.verify_directly_issued_by(ca_certificate)
                return cert_path, key_path
    ca_key = serialization.load_pem_private_key(ca_path().with_name("ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"bmc-{node_name}")]))
        .issuer_name(ca_certificate.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(days=1))
        .not_valid_after(_now() + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def write_htpasswd(node_name: str, wrong_password: bool = False) -> Path:
    """The emulator reads this file on every request: rewriting it takes effect at once.
    With `wrong_password` (the bmc_wrong_password fault) it holds a password nobody knows."""
    import bcrypt  # the extra `simulation` (appliance/simulation/extra.py): a controller may lack it

    secret = secrets.token_urlsafe(18) if wrong_password else password()
    hashed = bcrypt.hashpw(secret.encode(), bcrypt.gensalt(rounds=4)).decode()
    path = bmc_dir() / f"{node_name}.htpasswd"
    write_private(path, f"{USERNAME}:{hashed}\n".encode())
    return path


def apply_time(node, current: dict) -> str:
    """When the node's BMC applies BIOS changes: the node's own choice in its state file (bmc.apply_time),
    else its platform's (bios.apply_time in firmware/platforms/), else at once."""
    chosen = (current.get("bmc") or {}).get("apply_time")
    if not chosen and node.platform_id:
        chosen = ((node.platform.spec or {}).get("bios") or {}).get("apply_time")
    chosen = chosen or "Immediate"
    if chosen not in APPLY_TIMES:
        raise BMCError(f"{node.name}: BMC apply time {chosen!r} is not one of {', '.join(APPLY_TIMES)}")
    return chosen


def set_apply_time(node, value: str) -> None:
    """Make the node's simulated BMC apply BIOS changes at once or at the next reset (takes effect at
    the emulator's next start)."""
    if value not in APPLY_TIMES:
        raise BMCError(f"{node.name}: BMC apply time {value!r} is not one of {', '.join(APPLY_TIMES)}")
    with node_state.update(node.sysroot) as current:
        current["bmc"]["apply_time"] = value


def port_of(node) -> int:
    parsed = urlparse(node.bmc.url)
    if parsed.hostname not in ("127.0.0.1", "localhost") or parsed.scheme != "https" or not parsed.port:
        raise BMCError(f"{node.name}: a simulated BMC listens on https://127.0.0.1:<port>, not {node.bmc.url}")
    return parsed.port


def _pid_path(node_name: str) -> Path:
    return bmc_dir() / f"{node_name}.pid"


def _own_process(pid: int) -> bool:
    """The pid is alive and is the emulator this module started (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(CONFIG).encode() in cmdline


def running_pid(node_name: str) -> int | None:
    try:
        pid = int(_pid_path(node_name).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _own_process(pid) else None


def _answers(port: int) -> bool:
    context = ssl.create_default_context(cafile=str(ca_path()))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/redfish/v1/", context=context, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _log_tail(node_name: str, lines: int = 15) -> str:
    log = bmc_dir() / f"{node_name}.log"
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _spawn(node) -> tuple[subprocess.Popen, int]:
    if not node.sysroot or not node_state.exists(node.sysroot):
        raise BMCError(f"{node.name}: no simulated node state (run `{resources.program()} simulation prepare` first)")
    current = node_state.load(node.sysroot)
    if node_state.has_fault(current, "bmc_down"):
        raise BMCError(f"{node.name}: the BMC is down (injected fault bmc_down)")
    port = port_of(node)
    # An emulator stopped a moment ago may still hold its socket while it exits (its command line is gone
    # from /proc before its files are closed): give it two seconds before calling the port taken.
    deadline = time.monotonic() + 2
    while ports.server_listening(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    if ports.server_listening(port):
        raise BMCError(f"{node.name}: port {port} of its BMC URL {node.bmc.url} is in use by another process "
                       "(a bootstrap of the demo appliance moves its BMCs to free ports of their own)")
    cert, key = _server_certificate(node.name)
    auth_file = write_htpasswd(node.name, wrong_password=node_state.has_fault(current, "bmc_wrong_password"))
    command = [sys.executable, str(DRIVER), "--config", str(CONFIG)]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SUSHY_")}
    environment.update(APPLIANCE_BMC_SYSROOT=str(node.sysroot), APPLIANCE_BMC_PORT=str(port),
                       APPLIANCE_BMC_APPLY=apply_time(node, current),
                       APPLIANCE_BMC_CERT=str(cert), APPLIANCE_BMC_KEY=str(key), APPLIANCE_BMC_AUTH_FILE=str(auth_file))
    bmc_dir().mkdir(parents=True, exist_ok=True)
    with open(bmc_dir() / f"{node.name}.log", "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=environment, cwd=bmc_dir(), start_new_session=True)
    _pid_path(node.name).write_text(f"{process.pid}\n")
    return process, port


def start_many(nodes) -> dict[str, int]:
    """Start the emulators of `nodes` that are not running, all at once, and wait until each answers.
    Returns {node name: pid}. If one fails, the ones started here are stopped again."""
    ensure_credentials()
    pids, spawned = {}, {}
    try:
        for node in nodes:
            existing = running_pid(node.name)
            if existing:
                pids[node.name] = existing
            else:
                spawned[node.name] = _spawn(node)
        deadline = time.monotonic() + START_TIMEOUT
        waiting = dict(spawned)
        while waiting:
            for name, (process, port) in list(waiting.items()):
                if process.poll() is not None:
                    raise BMCError(f"{name}: the BMC emulator exited with status {process.returncode} on port {port}:\n"
                                   f"{_log_tail(name)}")
                if _answers(port):
                    pids[name] = process.pid
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                name, (_, port) = next(iter(waiting.items()))
                raise BMCError(f"{name}: the BMC emulator did not answer on port {port} within {START_TIMEOUT:.0f} s:\n"
                               f"{_log_tail(name)}")
            if waiting:
                time.sleep(0.05)
    except BaseException:
        for name, (process, _) in spawned.items():
            _terminate(process.pid)
            _pid_path(name).unlink(missing_ok=True)
        raise
    return pids


def start(node) -> int:
    """Start the node's emulator unless it runs; wait until it answers. Returns its pid."""
    return start_many([node])[node.name]


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists() or not _own_process(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def stop(node_name: str) -> int | None:
    """Stop the node's emulator if it runs; returns the pid that was stopped."""
    pid = running_pid(node_name)
    if pid:
        _terminate(pid)
    _pid_path(node_name).unlink(missing_ok=True)
    return pid


def status(node) -> dict:
    pid = running_pid(node.name)
    port = None
    with contextlib.suppress(BMCError, AttributeError):
        port = port_of(node)
    return {"node": node.name, "pid": pid, "running": pid is not None, "port": port,
            "answering": bool(pid and port and _answers(port)), "url": getattr(getattr(node, "bmc", None), "url", "")}
