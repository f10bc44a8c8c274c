"""`manage.py audit`: export, verify, checkpoint, public-key, keys, retention. Thin wrappers around the
audit services.

`audit verify PATH` runs with no database at all: no system checks, no queries, and it asks the
command recorder not to write a `cli.command` record (`audit_record_invocation = False`).
"""

import argparse
import getpass
import sys
from datetime import UTC, datetime

from django.contrib.auth import authenticate
from django.core.management.base import BaseCommand, CommandError
from django.http import HttpRequest

from appliance.core import resources


def parse_moment(text: str) -> datetime:
    """ISO 8601 date or date-time; without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date or date-time (2026-01-31 or 2026-01-31T12:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "The audit log: export bundles, verify them offline or verify the live log, checkpoints, retention."
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        export = sub.add_parser("export", help="write an export bundle (records, manifest, public key)")
        export.add_argument("--format", required=True, choices=["jsonl", "cef", "syslog", "ocsf", "csv"])
        export.add_argument("--out", required=True, help="bundle directory to create")
        # The log page's filters, by the same names (one parser: appliance.audit.queries).
        from appliance.audit.queries import AuditRecordFilter

        for name, log_filter in AuditRecordFilter.base_filters.items():
            option = "--" + name.replace("_", "-")
            if name == "since":
                export.add_argument(option, dest="filter_since", type=parse_moment,
                                    help="first instant included (ISO 8601; UTC when no offset)")
            elif name == "until":
                export.add_argument(option, dest="filter_until", type=parse_moment,
                                    help="first instant excluded (ISO 8601; UTC when no offset)")
            else:
                choices = getattr(log_filter, "extra", {}).get("choices")
                export.add_argument(option, dest=f"filter_{name}", metavar="VALUE", help=f"{log_filter.label}" + (
                    f" (one of {', '.join(str(value) for value, _label in choices)})" if choices else ""))

        verify = sub.add_parser("verify", help="verify an export bundle offline, or the live log with --database")
        verify.add_argument("path", nargs="?", help="bundle directory")
        verify.add_argument("--public-key", help="PEM file of an audit public key obtained independently")
        verify.add_argument("--key-list", help="the appliance's published key list (`audit keys export`): every "
                            "key with its validity; a statement signed by a key past its end is refused")
        verify.add_argument("--trust-bundle-key", action="store_true",
                            help="check against the bundle's own public-key.pem (proves consistency only, not "
                                 "who made the bundle); without it and without a trusted key the answer is "
                                 "'unverified' (exit status 3)")
        verify.add_argument("--database", action="store_true", help="verify the live log instead of a bundle")

        sub.add_parser("checkpoint", help="sign a checkpoint of the log as it is now")
        sub.add_parser("install-triggers", help="put back the audit tables' triggers (as the tables' owner)")
        sub.add_parser("rotate-key", help="replace the signing key (the handover is signed by the old and the new key)")
        public_key = sub.add_parser("public-key", help="print or write the audit public key (PEM)")
        public_key.add_argument("--out", help="file to write instead of printing")
        keys = sub.add_parser("keys", help="the published key list: every signing key with its validity")
        key_actions = keys.add_subparsers(dest="action", required=True)
        key_export = key_actions.add_parser("export", help="write the key list (signed by the current key) for "
                                            "auditors; give it again after every rotate-key")
        key_export.add_argument("--out", help="file to write instead of printing")

        retention = sub.add_parser("retention", help="archive old records under dual control")
        actions = retention.add_subparsers(dest="action", required=True)
        for name, text in (("request", "ask to archive records older than a cut-off"),
                           ("approve", "approve a request (a different Administrator)"),
                           ("archive", "carry out an approved request")):
            action = actions.add_parser(name, help=text)
            action.add_argument("--user", required=True, help="the Administrator acting")
            action.add_argument("--password-file", help="file holding the Administrator's password (first line); "
                                "asked for on the terminal otherwise")
            if name == "request":
                action.add_argument("--cutoff", required=True, type=parse_moment,
                                    help="records before this instant are archived")
                action.add_argument("--bundle", required=True, help="verified export bundle of exactly that range")
            else:
                action.add_argument("id", type=int, help="retention request number")
        actions.add_parser("list", help="list retention requests")
        floor = actions.add_parser("floor", help="show the retention floor (days), or set it (an Administrator)")
        floor.add_argument("days", nargs="?", type=int, help="new floor in days")
        floor.add_argument("--user", help="the Administrator acting (to set it)")
        floor.add_argument("--password-file", help="file holding the Administrator's password (first line)")

    @staticmethod
    def _offline(options) -> bool:
        return options.get("subcommand") == "verify" and not options.get("database")

    def run_from_argv(self, argv):
        self.audit_record_invocation = not (len(argv) > 2 and argv[2] == "verify" and "--database" not in argv)
        return super().run_from_argv(argv)

    def execute(self, *args, **options):
        if self._offline(options):
            self.audit_record_invocation = False
        return super().execute(*args, **options)

    def handle(self, *args, subcommand, **options):
        return getattr(self, f"handle_{subcommand.replace('-', '_')}")(**options)

    def handle_export(self, *, format, out, **options):
        from appliance.audit.export import ExportError, export_bundle
        from appliance.audit.queries import FilterError, select_records

        params = {}
        for key, value in options.items():
            if key.startswith("filter_") and value is not None:
                params[key.removeprefix("filter_")] = value.isoformat() if isinstance(value, datetime) else value
        try:
            selection = select_records(params)
            manifest = export_bundle(out, format, selection=selection)
        except FilterError as exc:
            raise CommandError("; ".join(f"--{name.replace('_', '-')}: {' '.join(messages)}"
                                         for name, messages in exc.errors.items())) from exc
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        span = manifest.get("selection") or manifest["range"]
        stated = ", ".join(f"{name}={value}" for name, value in manifest["filter"].items())
        kind = "a selection of records" if "selection" in manifest else "records"
        self.stdout.write(f"exported {kind} #{span['first_sequence']}..#{span['last_sequence']} "
                          f"({span['count']}){f' matching {stated}' if stated else ''} as {format} to {out}; "
                          f"key {manifest['key_id']}")

    def handle_verify(self, *, path=None, public_key=None, key_list=None, trust_bundle_key=False, database=False,
                      **options):
        if database:
            if path:
                raise CommandError("give a bundle PATH or --database, not both")
            if public_key or key_list or trust_bundle_key:
                raise CommandError("--public-key, --key-list and --trust-bundle-key are for a bundle; --database "
                                   "checks against this appliance's own keys")
            from appliance.audit.verify_database import verify_database

            result = verify_database()
        else:
            if not path:
                raise CommandError("give a bundle PATH, or --database for the live log")
            from appliance.audit.verify import verify_bundle

            if trust_bundle_key and (public_key or key_list):
                raise CommandError("--trust-bundle-key is for a bundle checked without --public-key or --key-list")
            result = verify_bundle(path, public_key, key_list)
        for note in result.notes:
            self.stderr.write(note)
        if result.ok and not result.trusted and not trust_bundle_key:
            # No damage found, but nothing outside the bundle vouches for its key: not "intact".
            self.stderr.write(result.summary())
            sys.exit(3)
        if result.ok:
            if not result.trusted:
                self.stderr.write("checked against the bundle's own key only (--trust-bundle-key)")
                self.stdout.write(f"{result.checked_summary()} ({result.seconds:.2f} s)")
                return
            # An unsealed tail alone is not damage: the summary says "unsealed", the exit status is 0.
            self.stdout.write(f"{result.summary()} ({result.seconds:.2f} s)")
            return
        self.stderr.write(result.summary())
        for finding in result.findings[1:]:
            self.stderr.write(f"also: {finding}")
        sys.exit(1)

    def handle_checkpoint(self, **options):
        from appliance.audit.checkpoints import make_checkpoint

        try:
            checkpoint = make_checkpoint()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"checkpoint #{checkpoint.tree_size} root {checkpoint.root_hash} key {checkpoint.key_id}")

    def handle_install_triggers(self, **options):
        from django.db import DatabaseError, router, transaction

        from appliance import audit
        from appliance.audit import dbroles, triggers
        from appliance.audit.models import AuditRecord

        using = router.db_for_write(AuditRecord)
        with dbroles.as_owner(using) as connection:
            before = triggers.problems(connection)
            try:
                with transaction.atomic(using=using):
                    triggers.install(connection)
                    audit.record("audit.triggers.install", target_type="audit.log", target_name="audit log",
                                 details={"problems_found": before})
            except DatabaseError as exc:
                raise CommandError(f"the triggers cannot be installed by this database role ({exc}); connect as "
                                   "the tables' owner (DATABASE_MIGRATE_URL)") from exc
            left = triggers.problems(connection)
        if left:
            raise CommandError("still wrong after installing: " + "; ".join(left))
        self.stdout.write(f"audit triggers installed ({len(before)} problem(s) found before); "
                          f"now run `{resources.program()} audit verify --database`")

    def handle_rotate_key(self, **options):
        from appliance.audit.keys import rotate_signing_key
        from appliance.audit.signing import SigningKeyError

        try:
            rotation = rotate_signing_key()
        except SigningKeyError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"signing key {rotation.old_key_id} replaced by {rotation.new_key_id} after record "
                          f"#{rotation.tree_size}; give auditors the new public key (`audit public-key`)")

    def handle_public_key(self, *, out=None, **options):
        from appliance.audit.signing import load_signing_key

        key = load_signing_key()
        if out:
            with open(out, "w") as handle:
                handle.write(key.public_pem())
            self.stdout.write(f"public key {key.key_id} written to {out}")
        else:
            self.stdout.write(key.public_pem().rstrip("\n"))

    def handle_keys(self, *, action, out=None, **options):
        import json

        from appliance.audit.keys import key_list

        document = key_list()
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
        if out:
            with open(out, "w") as handle:
                handle.write(text)
            self.stdout.write(f"key list of {len(document['keys'])} key(s), signed by {document['key_id']}, "
                              f"written to {out}")
        else:
            self.stdout.write(text.rstrip("\n"))

    def _administrator(self, username: str, password_file: str | None):
        if password_file:
            try:
                with open(password_file) as handle:
                    password = handle.readline().rstrip("\n")
            except OSError as exc:
                raise CommandError(f"{password_file}: {exc.strerror}") from exc
        else:
            password = getpass.getpass(f"password of {username}: ")
        # Through the same authentication as the portal, lockout policy included; the request stands
        # for the terminal.
        request = HttpRequest()
        request.META.update(REMOTE_ADDR="127.0.0.1", HTTP_USER_AGENT="manage.py audit retention")
        user = authenticate(request, username=username, password=password)
        if user is None:
            raise CommandError(f"user: {username!r}: wrong username or password")
        return user

    def handle_retention(self, *, action, **options):
        from appliance.audit import retention

        if action == "list":
            for request in retention.list_requests():
                approved = f", approved by {request.approved_by_username}" if request.approved_by_username else ""
                self.stdout.write(f"#{request.pk} {request.state}: records #{request.first_sequence}.."
                                  f"#{request.last_sequence} ({request.count}) before {request.cutoff.isoformat()}, "
                                  f"asked by {request.requested_by_username}{approved}")
            return
        if action == "floor" and options.get("days") is None:
            self.stdout.write(f"records are kept at least {retention.retention_floor_days()} days")
            return
        if action == "floor" and not options.get("user"):
            raise CommandError("floor: --user (an Administrator) is needed to change the floor")
        user = self._administrator(options["user"], options.get("password_file"))
        try:
            if action == "request":
                request = retention.request_retention(user, options["cutoff"], options["bundle"])
                self.stdout.write(f"retention request #{request.pk}: records #{request.first_sequence}.."
                                  f"#{request.last_sequence} ({request.count}); a second Administrator must approve")
            elif action == "floor":
                days = retention.set_retention_floor(options["days"], user)
                self.stdout.write(f"records are now kept at least {days} days")
            elif action == "approve":
                request = retention.approve_retention(options["id"], user)
                self.stdout.write(f"retention request #{request.pk} approved")
            else:
                from appliance.audit import dbroles

                # Removing records is the owner's: the runtime role has no DELETE on the audit log.
                with dbroles.as_owner():
                    tombstone = retention.archive_retention(options["id"], user)
                self.stdout.write(f"archived records #{tombstone.first_sequence}..#{tombstone.last_sequence} "
                                  f"({tombstone.count}); tombstone root {tombstone.range_root}")
        except retention.RetentionError as exc:
            raise CommandError(str(exc)) from exc
