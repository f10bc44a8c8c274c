from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from appliance.inventory.services import import_site, validate_site
from appliance.inventory.sitedef import SiteValidationError


class Command(BaseCommand):
    help = ("Check a site definition (`site validate FILE`: writes nothing) or bring the inventory in line "
            "with it (`site import FILE [--dry-run]`: applies and prints only the differences).")

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{validate,import}")
        validate = actions.add_parser("validate", help="check FILE and print every error")
        validate.add_argument("file")
        imported = actions.add_parser("import", help="import FILE into the inventory, all or nothing")
        imported.add_argument("file")
        imported.add_argument("--dry-run", action="store_true", help="show the changes without writing them")

    def handle(self, *args, action, file, dry_run=False, **options):
        try:
            text = Path(file).read_text()
        except OSError as exc:
            raise CommandError(f"{file}: {exc.strerror}", returncode=1) from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"{file}: not a text file ({exc.reason})", returncode=1) from exc
        try:
            if action == "validate":
                site = validate_site(text, file)
                self.stdout.write(f"{file}: valid ({site.summary()})")
                return
            result = import_site(text, file, dry_run=dry_run)
        except SiteValidationError as exc:
            for error in exc.errors:
                self.stderr.write(str(error))
            count = len(exc.errors)
            raise CommandError(f"{file}: {count} error{'' if count == 1 else 's'}, nothing written",
                               returncode=1) from exc
        for change in result.changes:
            self.stdout.write(str(change))
        if not result.changed:
            self.stdout.write(f"{file}: no changes")
        else:
            counts = result.counts()
            self.stdout.write(f"{file}: {len(result.changes)} changes ({counts['create']} created, "
                              f"{counts['update']} updated, {counts['delete']} deleted)")
        if dry_run:
            self.stdout.write("dry run: nothing written")
