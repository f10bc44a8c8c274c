"""`appliance docs build`: builds the documentation site into the state directory, where /docs/ serves it
(the portal also builds it on the first visit when it is missing or stale)."""

from django.core.management.base import BaseCommand, CommandError

from appliance.portal import docs


class Command(BaseCommand):
    help = "The documentation site served at /docs/."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        build = actions.add_parser("build", help="build the site into the state directory (strict)")
        build.add_argument("--if-stale", action="store_true",
                           help="build only when the site is missing or was built from other sources")

    def handle(self, *args, **options):
        if options["if_stale"] and docs.is_current():
            self.stdout.write(f"documentation up to date: {docs.site_dir()}")
            return
        try:
            site = docs.build()
        except Exception as exc:  # MkDocs' own errors (a broken link in strict mode) say what and where
            raise CommandError(f"the documentation did not build: {exc}") from exc
        self.stdout.write(f"documentation built: {site} (served at /docs/)")
