"""The production install, run for real into a temporary prefix: the portal, worker and beat started
exactly as their systemd units say (no systemd here: as subprocesses with the unit's environment file),
the portal answering over TLS with the certificate the install made, the worker running work from the
database queue (also work queued while it was dead), and the login throttle counted across processes
in the database cache."""

import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.core.management import CommandError, call_command

from appliance.celery import app as celery_app
from appliance.core import queue

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

UNITS = ("appliance-portal.service", "appliance-worker.service", "appliance-beat.service")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def unit_settings(path: Path) -> dict[str, str]:
    """The [Service] keys of a unit file, with systemd's %% turned back into %."""
    values = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value.replace("%%", "%")
    return values


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


class Service:
    """A unit's ExecStart run as a subprocess with its EnvironmentFile and WorkingDirectory."""

    def __init__(self, unit: Path, logs: Path, extra_env: dict | None = None):
        self.settings = unit_settings(unit)
        self.argv = shlex.split(self.settings["ExecStart"])
        self.env = {"PATH": os.environ["PATH"], **read_env_file(Path(self.settings["EnvironmentFile"])),
                    **(extra_env or {})}
        self.log_path = logs / f"{unit.stem}.log"
        self.process = None

    def start(self):
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(self.argv, env=self.env, cwd=self.settings["WorkingDirectory"],
                                        stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def text(self) -> str:
        return self.log_path.read_text()


def wait_for(condition, what: str, timeout: float = 60, service: Service | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if service is not None and service.process.poll() is not None:
            pytest.fail(f"{what}: {service.argv[2]} exited with {service.process.returncode}:\n{service.text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"{what}: not within {timeout} s" + (f"\n{service.text()[-3000:]}" if service else ""))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("production")
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "APPLIANCE_ENV")}
    env["APPLIANCE_STATE_DIR"] = str(root / "state")
    manage = Path(__file__).resolve().parents[2] / "manage.py"
    command = [sys.executable, str(manage), "install", "--production", "--prefix", str(root / "root"),
               "--bind", f"127.0.0.1:{port}", "--host", "appliance.example", "--user", "root", "--workers", "1"]
    result = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    again = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    return {"root": root, "port": port, "env": env, "manage": manage, "first": result.stdout,
            "second": again.stdout, "units": root / "root/etc/systemd/system",
            "config": root / "root/etc/appliance", "logs": root}


def test_install_writes_units_env_file_and_certificate_once(installed):
    config, units = installed["config"], installed["units"]
    assert sorted(p.name for p in units.iterdir()) == sorted(UNITS)
    assert (config / "appliance.env").stat().st_mode & 0o777 == 0o600
    assert (config / "tls/key.pem").stat().st_mode & 0o777 == 0o600
    env = read_env_file(config / "appliance.env")
    assert env["APPLIANCE_ENV"] == "production"
    assert env["DJANGO_ALLOWED_HOSTS"] == "appliance.example,127.0.0.1"
    state = installed["root"] / "state"
    assert env["CELERY_BROKER_URL"] == f"sqla+sqlite:///{state}/appliance.sqlite3"
    assert len(env["DJANGO_SECRET_KEY"]) >= 50
    # The nodes' collectors post to this portal over its TLS, trusting its certificate.
    port = installed["port"]
    assert env["APPLIANCE_TELEMETRY_INGEST_URL"] == f"https://appliance.example:{port}/telemetry/ingest"
    assert env["APPLIANCE_TELEMETRY_INGEST_CA_FILE"] == f"{config}/tls/cert.pem"
    portal = unit_settings(units / "appliance-portal.service")
    assert portal["User"] == "root" and portal["EnvironmentFile"] == str(config / "appliance.env")
    assert f"--certfile {config}/tls/cert.pem --keyfile {config}/tls/key.pem" in portal["ExecStart"]
    assert "--no-control-socket" in portal["ExecStart"].split()  # systemd drives it, no socket of gunicorn's
    assert "Installed: 6 file(s) written" in installed["first"]
    # Idempotent: the second run writes nothing and keeps the certificate.
    assert "Installed: 0 file(s) written" in installed["second"]
    assert (state / "static/admin/css/base.css").exists()  # collectstatic ran
    # `check --deploy` passes with the environment file; the install left one audit record per run.
    audit = subprocess.run([sys.executable, "-m", "django", "shell", "-c",
                            "from django.core.management import call_command;"
                            "call_command('check', deploy=True, fail_level='WARNING');"
                            "from appliance.audit.models import AuditRecord;"
                            "print(AuditRecord.objects.filter(event='appliance.install').count())"],
                           env={"PATH": os.environ["PATH"], **env}, cwd=state, capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stdout.strip().splitlines()[-1] == "2", audit.stdout + audit.stderr


@pytest.mark.django_db
def test_dry_run_writes_nothing_and_bad_bind_is_named(tmp_path):
    out = io.StringIO()
    call_command("install", "--production", "--dry-run", "--prefix", str(tmp_path / "p"), "--user", "root",
                 "--address", "10.0.0.5", stdout=out)
    assert f"--- {tmp_path}/p/etc/systemd/system/appliance-portal.service (0644)" in out.getvalue()
    assert "DJANGO_SECRET_KEY=********" in out.getvalue()
    # The default bind's port at the address the nodes reach the portal by, and the certificate to trust.
    assert "\nAPPLIANCE_TELEMETRY_INGEST_URL=https://10.0.0.5:8443/telemetry/ingest\n" in out.getvalue()
    assert f"\nAPPLIANCE_TELEMETRY_INGEST_CA_FILE={tmp_path}/p/etc/appliance/tls/cert.pem\n" in out.getvalue()
    assert not (tmp_path / "p").exists()
    with pytest.raises(CommandError, match=r"^--bind example.com:99999: expected address:port"):
        call_command("install", "--production", "--prefix", str(tmp_path / "p"), "--user", "root",
                     "--bind", "example.com:99999")
    with pytest.raises(CommandError, match=r"^--production: required"):
        call_command("install", "--prefix", str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_portal_worker_and_beat_run_as_their_units_say(installed):
    units, logs, port = installed["units"], installed["logs"], installed["port"]
    cert = str(installed["config"] / "tls/cert.pem")
    portal = Service(units / "appliance-portal.service", logs).start()
    worker = Service(units / "appliance-worker.service", logs).start()
    # The beat's watchdog entry comes every max(5, timeout / 2) seconds: 5 here, so the test sees one.
    beat = Service(units / "appliance-beat.service", logs, {"PROVISIONING_HEARTBEAT_TIMEOUT": "10"})
    services = [portal, worker]
    try:
        base = f"https://127.0.0.1:{port}"

        def health_ok():
            try:
                return requests.get(f"{base}/health/", verify=cert, timeout=10).status_code == 200
            except requests.exceptions.SSLError:
                raise
            except (requests.ConnectionError, requests.Timeout):  # gunicorn's workers still starting
                return False

        wait_for(health_ok, "the portal's /health/ over TLS", timeout=120, service=portal)
        with pytest.raises(requests.exceptions.SSLError):  # the certificate is the one the install made
            requests.get(f"{base}/health/", timeout=5)
        session = requests.Session()  # verify= on each call: the session's is overridden by REQUESTS_CA_BUNDLE
        login = session.get(f"{base}/accounts/login/", verify=cert, timeout=10)
        assert login.status_code == 200
        assert login.headers["Strict-Transport-Security"].startswith("max-age=31536000")
        stylesheet = re.search(r'href="(/static/[^"]+\.css)"', login.text).group(1)
        static = session.get(base + stylesheet, verify=cert, timeout=10)
        assert static.status_code == 200 and static.headers["Content-Type"].startswith("text/css")
        assert "Secure" in login.headers["Set-Cookie"]

        # The login throttle (10 a minute per address) is one count for every process: 6 attempts through
        # gunicorn, 4 from another process, and the 11th is refused.
        token = session.cookies["csrftoken"]
        for number in range(6):
            attempt = session.post(f"{base}/accounts/login/", verify=cert, timeout=10,
                                   data={"username": f"nobody{number}", "password": "wrong",
                                         "csrfmiddlewaretoken": token},
                                   headers={"Referer": f"{base}/accounts/login/"})
            assert attempt.status_code == 200, attempt.text[:500]
        other = subprocess.run(
            [sys.executable, "-m", "django", "shell", "-c",
             "from django.test import Client\nc = Client()\nprint('statuses:', *[c.post('/accounts/login/', "
             "{'username': f'someone{n}', 'password': 'wrong'}, secure=True, HTTP_HOST='127.0.0.1')"
             ".status_code for n in range(5)])"],
            env=portal.env, cwd=portal.settings["WorkingDirectory"], capture_output=True, text=True, timeout=120)
        statuses = [line.split()[1:] for line in other.stdout.splitlines() if line.startswith("statuses:")]
        assert statuses == [["200", "200", "200", "200", "429"]], other.stdout + other.stderr

        def call(task: str) -> str:
            """Queue `task` in the database queue the environment file names, as `celery call` would."""
            with queue.connection(worker.env["CELERY_BROKER_URL"]) as broker:
                return celery_app.send_task(task, connection=broker).id

        first = call("core.queue_cleanup")
        wait_for(lambda: f"Task core.queue_cleanup[{first}] succeeded" in worker.text(), "the worker runs a task",
                 service=worker)
        # A worker killed outright: what is queued meanwhile waits in the database for the next one.
        worker.stop(signal.SIGKILL)
        queued = call("core.queue_cleanup")
        time.sleep(1)
        assert queued not in worker.text()
        worker = Service(units / "appliance-worker.service", logs).start()
        services.append(worker)
        wait_for(lambda: f"Task core.queue_cleanup[{queued}] succeeded" in worker.text(),
                 "the restarted worker runs the task queued while it was dead", service=worker)

        services.append(beat.start())
        wait_for(lambda: "Task provisioning.watchdog[" in worker.text(), "the beat's watchdog entry reaches the worker",
                 timeout=30, service=beat)
    finally:
        for service in reversed(services):
            service.stop()
