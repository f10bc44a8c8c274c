"""`appliance install --production`: the appliance as services of this host.

Writes, under --prefix (default /):
- etc/appliance/appliance.env (0600): the production environment of every service (APPLIANCE_ENV=production,
  the secret key, the database, the broker, the state directory, the allowed host names, and the portal's
  telemetry ingest URL and certificate for the nodes' collectors);
- etc/appliance/tls/cert.pem and key.pem: a self-signed certificate for the host's names and addresses,
  made once (replace both files with your own and restart the portal: the install keeps them);
- three systemd units (--unit-dir, default etc/systemd/system): appliance-portal (gunicorn serving TLS
  itself), appliance-worker and appliance-beat (Celery). With no CELERY_BROKER_URL the broker is the
  database queue (appliance.core.queue): no Redis or RabbitMQ needed.
Then, with that environment: migrate, createcachetable, collectstatic, `docs build` (the site served at
/docs/), and `check --deploy`, which must pass.
Running it again rewrites what changed and nothing else; one audit record per install.
"""

import datetime
import grp
import ipaddress
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from string import Template

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from appliance.core import host, queue, resources

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"
UNITS = ("appliance-portal.service", "appliance-worker.service", "appliance-beat.service")
# The steps run with the production environment, in order; the last one must pass.
# The documentation the portal serves at /docs/ is built here, from the installed docs/, air-gapped.
STEPS = (("migrate", "--no-input"), ("createcachetable",), ("collectstatic", "--no-input"), ("docs", "build"),
         ("check", "--deploy", "--fail-level", "WARNING"))
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:@+=%*[]")


def env_line(name: str, value: str) -> str:
    """One line of a systemd EnvironmentFile: the value as is when it is plain, else double-quoted."""
    if value and set(value) <= _SAFE:
        return f"{name}={value}\n"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    if "\n" in value:
        raise CommandError(f"{name}: a value on more than one line cannot go into an environment file")
    return f'{name}="{escaped}"\n'


def parse_env_file(text: str) -> dict[str, str]:
    """Read back what `env_line` writes (the subset of systemd's EnvironmentFile syntax it uses)."""
    values = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, value = line.partition("=")
        if value.startswith('"') and value.endswith('"'):
            value = value[1:-1].replace('\\"', '"').replace("\\$", "$").replace("\\\\", "\\")
        values[name.strip()] = value
    return values


def self_signed_certificate(names: list[str], addresses: list[str], days: int = 825) -> tuple[bytes, bytes]:
    """A self-signed ECDSA P-256 certificate for these DNS names and IP addresses: (cert PEM, key PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (names or addresses)[0]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Appliance management portal")])
    now = datetime.datetime.now(datetime.UTC)
    alt = [x509.DNSName(name) for name in names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


class Command(BaseCommand):
    help = ("Install the appliance as systemd services of this host: the portal (gunicorn over TLS, a "
            "self-signed certificate you may replace), the Celery worker and beat, their environment file; "
            "then migrate, collect static files and pass `check --deploy`.")

    def add_arguments(self, parser):
        parser.add_argument("--production", action="store_true",
                            help="Required: the production install (the only kind there is).")
        parser.add_argument("--prefix", default="/", help="Root of what is written (default /): etc/appliance/ "
                            "and etc/systemd/system/ under it.")
        parser.add_argument("--unit-dir", help="Where the units go (default PREFIX/etc/systemd/system).")
        parser.add_argument("--bind", default="0.0.0.0:8443", help="Address:port the portal listens on "
                            "(default 0.0.0.0:8443; [::]:443 for IPv6).")
        parser.add_argument("--host", action="append", default=[], dest="hosts", metavar="NAME",
                            help="A DNS name the portal is reached by (repeatable; default this host's name).")
        parser.add_argument("--address", action="append", default=[], dest="addresses", metavar="IP",
                            help="An IP address the portal is reached by (repeatable; 127.0.0.1 and a specific "
                            "--bind address are always included).")
        parser.add_argument("--user", help="The service account the units run as (default: appliance when run "
                            "as root, else you). It must exist: useradd --system --home-dir /var/lib/appliance "
                            "appliance.")
        parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes (default 3).")
        parser.add_argument("--dry-run", action="store_true", help="Print what would be written and run; change "
                            "nothing.")

    # ----------------------------------------------------------------------------------------------
    def handle(self, *args, **options):
        if not options["production"]:
            raise CommandError("--production: required (the production install is the only install; "
                               f"developers run `{resources.program()} runserver` instead)")
        try:  # the host's own programs first (appliance/core/host.py): nothing is written without them
            host.require("runtime")
        except host.HostNotReady as exc:
            raise CommandError(str(exc)) from None
        plan = self._plan(options)
        if options["dry_run"]:
            return self._show(plan)
        changed = self._write(plan)
        self._run_steps(plan)
        self._verify_units(plan)
        from appliance import audit

        audit.record("appliance.install", target_type="appliance.host", target_name=socket.gethostname(),
                     details={"units": [str(p) for p in plan["units"]], "env_file": str(plan["env_file"]),
                              "bind": plan["bind"], "user": plan["user"], "hosts": plan["allowed_hosts"],
                              "changed": [str(p) for p in changed],
                              "certificate": "made" if plan["new_certificate"] else "kept"})
        say = self.stdout.write
        say(f"Installed: {len(changed)} file(s) written, the rest unchanged; `check --deploy` passed.")
        say(f"Start the services: systemctl daemon-reload && systemctl enable --now {' '.join(UNITS)}")
        say(f"The portal: https://{plan['url_host']}:{plan['port']}/ (certificate {plan['certfile']}).")
        say(f"The nodes' collectors send to {plan['environment']['APPLIANCE_TELEMETRY_INGEST_URL']} (from the next "
            "monitoring stage).")

    # ----------------------------------------------------------------------------------------------
    def _plan(self, options) -> dict:
        prefix = Path(options["prefix"]).resolve()
        config_dir = prefix / "etc" / "appliance"
        unit_dir = Path(options["unit_dir"]).resolve() if options["unit_dir"] else prefix / "etc/systemd/system"
        bind_host, port = self._bind(options["bind"])
        user = options["user"] or ("appliance" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)
        try:
            account = pwd.getpwnam(user)
        except KeyError:
            raise CommandError(f"--user {user}: no such account on this host (create it first: "
                               f"useradd --system --home-dir {settings.STATE_DIR} {user})") from None
        if options["workers"] < 1:
            raise CommandError(f"--workers {options['workers']}: at least 1")
        hosts = [self._host(name) for name in options["hosts"]] or [socket.getfqdn()]
        addresses = ["127.0.0.1"]
        for address in options["addresses"] + ([bind_host] if bind_host not in ("0.0.0.0", "::") else []):
            try:
                addresses.append(str(ipaddress.ip_address(address.strip("[]"))))
            except ValueError:
                raise CommandError(f"--address {address}: not an IP address") from None
        addresses = list(dict.fromkeys(addresses))
        hosts = list(dict.fromkeys(hosts))
        env_file = config_dir / "appliance.env"
        certfile, keyfile = config_dir / "tls" / "cert.pem", config_dir / "tls" / "key.pem"
        for path in (config_dir, unit_dir, settings.STATE_DIR, Path(sys.executable)):
            if any(ch.isspace() for ch in str(path)):
                raise CommandError(f"{path}: a path with white space cannot go into a unit's command line")
        environment = self._environment(hosts, addresses)
        url_host = hosts[0] if options["hosts"] else addresses[-1] if len(addresses) > 1 else hosts[0]
        # The nodes' collectors post to this portal over its TLS and trust its certificate (the monitoring
        # stage hands the PEM to them); a URL or CA file this shell set wins (a proxy in front, say).
        if "APPLIANCE_TELEMETRY_INGEST_URL" not in environment:
            environment["APPLIANCE_TELEMETRY_INGEST_URL"] = (
                f"https://{f'[{url_host}]' if ':' in url_host else url_host}:{port}/telemetry/ingest")
            environment.setdefault("APPLIANCE_TELEMETRY_INGEST_CA_FILE", str(certfile))
        python = Path(sys.executable)
        values = {
            "user": user, "group": grp.getgrgid(account.pw_gid).gr_name, "env_file": env_file,
            "state_dir": settings.STATE_DIR, "python": python, "bind": f"{bind_host}:{port}"
            if ":" not in bind_host else f"[{bind_host}]:{port}", "certfile": certfile, "keyfile": keyfile,
            "workers": options["workers"], "concurrency": max(1, settings.EMBEDDED_WORKERS),
            # The documentation the portal serves (the wheel installs no README): what `systemctl help` opens.
            "docs_url": f"https://{f'[{url_host}]' if ':' in url_host else url_host}:{port}/docs/",
            "capabilities": "AmbientCapabilities=CAP_NET_BIND_SERVICE\n" if port < 1024 and user != "root" else "",
        }
        units = {unit_dir / name: Template((DEPLOY_DIR / name).read_text()).substitute(values) for name in UNITS}
        env_text = ("# The appliance's production environment (appliance install --production). Secrets: 0600.\n"
                    + "".join(env_line(name, value) for name, value in environment.items()))
        return {"prefix": prefix, "config_dir": config_dir, "units": units, "env_file": env_file,
                "env_text": env_text, "environment": environment, "certfile": certfile, "keyfile": keyfile,
                "hosts": hosts, "addresses": addresses, "allowed_hosts": environment["DJANGO_ALLOWED_HOSTS"],
                "user": user, "uid": account.pw_uid, "gid": account.pw_gid, "bind": values["bind"], "port": port,
                "url_host": url_host,
                "new_certificate": not (certfile.exists() and keyfile.exists())}

    @staticmethod
    def _bind(bind: str) -> tuple[str, int]:
        host, sep, port = bind.rpartition(":")
        host = host.strip("[]")
        try:
            if not sep or not host:
                raise ValueError
            ipaddress.ip_address(host)
            number = int(port)
            if not 0 < number < 65536:
                raise ValueError
        except ValueError:
            raise CommandError(f"--bind {bind}: expected address:port, e.g. 0.0.0.0:8443 or [::]:443") from None
        return host, number

    @staticmethod
    def _host(name: str) -> str:
        labels = name.rstrip(".").split(".")
        if not name or not all(label and len(label) <= 63 and set(label.lower()) <= set(
                "abcdefghijklmnopqrstuvwxyz0123456789-") and not label.startswith("-") for label in labels):
            raise CommandError(f"--host {name!r}: not a DNS name")
        return name.rstrip(".").lower()

    def _environment(self, hosts: list[str], addresses: list[str]) -> dict[str, str]:
        database = os.environ.get("DATABASE_URL") or f"sqlite:///{settings.STATE_DIR / 'appliance.sqlite3'}"
        broker = settings.CELERY_BROKER_URL
        if not broker:
            try:
                broker = queue.broker_url(settings.DATABASES["default"])
            except ValueError as exc:
                raise CommandError(f"DATABASE_URL: {exc}") from None
        environment = {
            "APPLIANCE_ENV": "production",
            "DJANGO_SETTINGS_MODULE": "appliance.settings",
            "APPLIANCE_STATE_DIR": str(settings.STATE_DIR),
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "DJANGO_ALLOWED_HOSTS": ",".join(hosts + [f"[{a}]" if ":" in a else a for a in addresses]),
            "DATABASE_URL": database,
            "CELERY_BROKER_URL": broker,
        }
        # What else this shell configured travels into the services' environment as it is.
        for name in ("DATABASE_MIGRATE_URL", "CACHE_URL", "CELERY_RESULT_BACKEND", "DJANGO_STATIC_ROOT",
                     "APPLIANCE_SECRETS_KEY_FILE", "AUDIT_SIGNING_KEY_FILE", "AUDIT_WITNESS_FILE",
                     "AUDIT_WITNESS_SYSLOG", "INFLUXDB_URL", "INFLUXDB_TOKEN", "INFLUXDB_ORG", "INFLUXDB_BUCKET",
                     "APPLIANCE_TRUSTED_PROXIES", "APPLIANCE_TIME_ZONE", "DJANGO_HSTS_SECONDS",
                     "APPLIANCE_TELEMETRY_INGEST_URL", "APPLIANCE_TELEMETRY_INGEST_CA_FILE"):
            if os.environ.get(name):
                environment[name] = os.environ[name]
        # A checkout that is not installed into this interpreter: the services find the package here.
        package_root = str(Path(__import__("appliance").__file__).resolve().parents[1])
        if subprocess.run([sys.executable, "-I", "-c", "import appliance"], cwd="/",
                          capture_output=True).returncode != 0:
            environment["PYTHONPATH"] = package_root
        return environment

    # ----------------------------------------------------------------------------------------------
    def _show(self, plan) -> None:
        say = self.stdout.write
        say("Dry run: nothing is written or run.")
        for path, text in plan["units"].items():
            say(f"--- {path} (0644)\n{text}")
        masked = {**plan["environment"], "DJANGO_SECRET_KEY": "********"}
        say(f"--- {plan['env_file']} (0600)\n" + "".join(env_line(n, v) for n, v in masked.items()))
        if plan["new_certificate"]:
            say(f"--- {plan['certfile']}, {plan['keyfile']} (0600): a self-signed certificate for "
                f"{', '.join(plan['hosts'] + plan['addresses'])}")
        else:
            say(f"--- {plan['certfile']}, {plan['keyfile']}: kept as they are")
        for step in STEPS:
            say(f"run: {sys.executable} -m django {shlex.join(step)}  (with {plan['env_file']})")

    def _write(self, plan) -> list[Path]:
        changed = []
        plan["config_dir"].mkdir(parents=True, exist_ok=True)
        (plan["config_dir"] / "tls").mkdir(mode=0o755, exist_ok=True)
        for path, text in plan["units"].items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if self._put(path, text.encode(), 0o644):
                changed.append(path)
        if self._put(plan["env_file"], plan["env_text"].encode(), 0o600):
            changed.append(plan["env_file"])
        if plan["new_certificate"]:
            cert, key = self_signed_certificate(plan["hosts"], plan["addresses"])
            self._put(plan["keyfile"], key, 0o600, owner=(plan["uid"], plan["gid"]))
            self._put(plan["certfile"], cert, 0o644)
            changed += [plan["certfile"], plan["keyfile"]]
        return changed

    @staticmethod
    def _put(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> bool:
        """Write `data` atomically with `mode` (and owner) unless the file already holds it; True if written."""
        if path.exists() and path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
        temporary = path.with_name(f".{path.name}.new")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        if owner is not None and os.geteuid() == 0:
            os.chown(temporary, *owner)
        os.replace(temporary, path)
        return True

    def _run_steps(self, plan) -> None:
        """The steps, in one process that has the production environment (a Django start-up each would
        cost seconds apiece)."""
        # The services will not have this shell's broker, cache or development switches (a shell that
        # allowed Django's async-unsafe calls, say): check what they will run with.
        left_out = ("CELERY_BROKER_URL", "CACHE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE", "DJANGO_DEBUG")
        environment = {**{k: v for k, v in os.environ.items() if k not in left_out}, **plan["environment"]}
        script = ("import sys, django; from django.core.management import call_command; django.setup()\n"
                  f"for step in {[list(step) for step in STEPS]!r}:\n"
                  "    print('step:', step[0], flush=True); call_command(*step)\n")
        result = subprocess.run([sys.executable, "-c", script], env=environment, cwd=settings.STATE_DIR,
                                capture_output=True, text=True)
        steps = [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("step: ")]
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()[-4000:]
            failed = steps[-1] if steps else "start-up"
            raise CommandError(f"{failed} (with the environment of {plan['env_file']}) failed:\n{output}")
        self.stdout.write(f"{', '.join(steps)}: done")
        if os.geteuid() == 0 and plan["uid"] != 0:
            # The services run as the account: the state directory (made and filled as root) becomes its own.
            for root, dirs, files in os.walk(settings.STATE_DIR):
                for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                    os.lchown(name, plan["uid"], plan["gid"])

    def _verify_units(self, plan) -> None:
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.stdout.write("systemd-analyze is not installed: the units were not verified by systemd.")
            return
        result = subprocess.run([analyze, "verify", "--man=no", *map(str, plan["units"])],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise CommandError(f"systemd-analyze verify found problems in the units:\n{result.stderr.strip()}")
        self.stdout.write("systemd-analyze verify: the units are valid.")
