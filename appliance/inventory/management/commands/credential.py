"""`manage.py credential create|set-secret|set|bind|unbind|list|delete`: the Administrator's BMC logins,
InfluxDB tokens and collector ingest endpoints (`--kind`).

The secret is read from a prompt that does not echo, or from a file the Administrator names
(`--secret-file FILE`, `-` for standard input); it is never an argument, so it never reaches the
shell history, the process list or the audit record of the command.
"""

import getpass
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from appliance.core import resources
from appliance.inventory import credentials
from appliance.inventory.models import Credential


class Command(BaseCommand):
    help = ("Manage the credentials a site definition names (BMC logins, InfluxDB tokens, collector ingest "
            "endpoints): create one, set its secret, bind it to the endpoints it may be sent to, list or delete them. "
            "Secrets are prompted for or read from a file.")

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True,
                                        metavar="{create,set-secret,set,bind,unbind,list,delete}")
        create = actions.add_parser("create", help="create a credential (the secret is prompted for)")
        create.add_argument("name")
        create.add_argument("--kind", choices=credentials.KIND_CHOICES, default=Credential.Kind.BMC,
                            help="bmc: a BMC login (user name and password); influxdb: the token the collectors "
                                 "write the site's InfluxDB with; ingest: endpoints the nodes may send their own "
                                 "ingest tokens to (no secret)")
        create.add_argument("--username", default="", help="the BMC user name (a BMC login only)")
        create.add_argument("--endpoint", action="append", default=[], dest="endpoints", metavar="URL",
                            help="an endpoint it may be sent to (https://host[:port]); repeat for more")
        create.add_argument("--description", default="")
        create.add_argument("--ca-file", default="", help="PEM CA bundle that verifies the endpoints' certificates")
        self._secret_source(create)

        secret = actions.add_parser("set-secret", help="replace the secret (prompted for)")
        secret.add_argument("name")
        self._secret_source(secret)

        change = actions.add_parser("set", help="change the user name, description or CA file")
        change.add_argument("name")
        change.add_argument("--username")
        change.add_argument("--description")
        change.add_argument("--ca-file", help="PEM CA bundle ('' for the system's)")

        for verb, text in (("bind", "allow sending the credential to these endpoints"),
                           ("unbind", "stop sending the credential to these endpoints")):
            sub = actions.add_parser(verb, help=text)
            sub.add_argument("name")
            sub.add_argument("endpoints", nargs="+", metavar="URL", help="https://host[:port] or host:port")

        actions.add_parser("list", help="list the credentials (never their secrets)")
        delete = actions.add_parser("delete", help="delete a credential no BMC uses")
        delete.add_argument("name")

    @staticmethod
    def _secret_source(parser):
        parser.add_argument("--secret-file", metavar="FILE",
                            help="read the secret from the first line of FILE ('-': standard input) instead of a prompt")

    def handle(self, *args, action, **options):
        try:
            getattr(self, "_" + action.replace("-", "_"))(options)
        except credentials.CredentialError as exc:
            raise CommandError(str(exc), returncode=1) from None

    # actions

    def _create(self, options):
        kind = options["kind"]
        if kind == Credential.Kind.BMC and not options["username"]:
            raise CommandError("a BMC login needs --username", returncode=1)
        secret = "" if kind == Credential.Kind.INGEST else self._read_secret(options)
        credential = credentials.create(
            options["name"], kind=kind, username=options["username"], secret=secret,
            endpoints=options["endpoints"], description=options["description"], ca_file=options["ca_file"])
        what = f"user {credential.username}" if credential.kind == Credential.Kind.BMC else credential.kind
        self.stdout.write(f"credential {credential.name} created ({what}; "
                          f"bound to {', '.join(credential.endpoints) or 'no endpoint yet'})")

    def _set_secret(self, options):
        if credentials.get(options["name"]).kind == Credential.Kind.INGEST:
            raise CommandError(f"credential {options['name']} is an ingest credential: it holds no secret",
                               returncode=1)
        credential = credentials.update(options["name"], secret=self._read_secret(options))
        self.stdout.write(f"credential {credential.name}: secret replaced")

    def _set(self, options):
        changes = {key: options[key] for key in ("username", "description", "ca_file") if options.get(key) is not None}
        if not changes:
            raise CommandError("nothing to change: give --username, --description or --ca-file", returncode=1)
        credential = credentials.update(options["name"], **changes)
        self.stdout.write(f"credential {credential.name}: {', '.join(sorted(changes))} changed")

    def _bind(self, options):
        credential = credentials.bind(options["name"], options["endpoints"])
        self.stdout.write(f"credential {credential.name} is bound to {', '.join(credential.endpoints)}")

    def _unbind(self, options):
        credential = credentials.unbind(options["name"], options["endpoints"])
        self.stdout.write(f"credential {credential.name} is bound to {', '.join(credential.endpoints) or 'no endpoint'}")

    def _list(self, options):
        rows = list(Credential.objects.order_by("name"))
        if not rows:
            self.stdout.write(f"no credentials ({resources.program()} credential create NAME --username USER --endpoint URL)")
            return
        for credential in rows:
            used = sorted(credential.bmcs.values_list("node__name", flat=True))
            used += [f"telemetry of {name}" for name in credentials.named_by_sites(credential)]
            who = f"user {credential.username}  " if credential.kind == Credential.Kind.BMC else ""
            secret = ("no secret (the nodes' own tokens)" if credential.kind == Credential.Kind.INGEST
                      else f"secret {'set' if credential.secret else 'NOT SET'}")
            self.stdout.write(f"{credential.name}  {credential.kind}  {who}{secret}")
            self.stdout.write(f"  endpoints: {', '.join(credential.endpoints) or '(none)'}")
            if credential.ca_file:
                self.stdout.write(f"  CA file:   {credential.ca_file}")
            self.stdout.write(f"  used by:   {', '.join(used) or '(nothing)'}")
            if credential.description:
                self.stdout.write(f"  {credential.description}")

    def _delete(self, options):
        credentials.delete(options["name"])
        self.stdout.write(f"credential {options['name']} deleted")

    # the secret

    def _read_secret(self, options) -> str:
        source = options.get("secret_file")
        if source:
            try:
                text = sys.stdin.read() if source == "-" else Path(source).read_text()
            except OSError as exc:
                raise CommandError(f"{source}: {exc.strerror}", returncode=1) from None
            except UnicodeDecodeError:
                raise CommandError(f"{source}: not a text file", returncode=1) from None
            lines = text.splitlines()
            return lines[0] if lines else ""
        if not sys.stdin.isatty():
            raise CommandError("no terminal to prompt for the secret: give --secret-file FILE (or - for standard "
                               "input)", returncode=1)
        first = getpass.getpass("Secret: ")
        if getpass.getpass("Secret (again): ") != first:
            raise CommandError("the two secrets differ; nothing changed", returncode=1)
        return first
