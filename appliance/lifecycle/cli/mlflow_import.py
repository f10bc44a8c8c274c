"""manage.py models mlflow-import (--url URL [--token-env VAR] | --export PATH) [--rewrite-source OLD=NEW]...
[--json]

Imports another MLflow model registry (appliance/lifecycle/mlflow_import.py says what arrives and the export's
layout): from its REST API (the token, if it needs one, read from the environment variable --token-env names,
never from the command line), or from an export directory or file of the API's own search responses.
Versions whose files are not under this appliance's artifact roots are reported and skipped; --rewrite-source
maps the other registry's path prefixes onto this appliance's. Run it again: nothing already imported is
added twice. Acts as the account whose token is in APPLIANCE_TOKEN, or as the appliance itself (the OS user).
Exit status: 0 everything imported (or already there), 2 some versions or aliases skipped (listed), 1 refused.
"""

from __future__ import annotations

import json
import os
import re

from django.utils.translation import gettext as _

from appliance.lifecycle import mlflow_import
from appliance.lifecycle.errors import LifecycleError

SKIPPED = 2
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _variable(text: str) -> str:
    if not VARIABLE.fullmatch(text or ""):
        raise ValueError(text)
    return text


_variable.__name__ = "environment variable name"


def add_arguments(parser, subcommand: str = "mlflow-import") -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help=_("the MLflow server's URL (its REST API: /api/2.0/mlflow/...)"))
    source.add_argument("--export", help=_("an export: a directory of registered-models*.json and "
                                           "model-versions*.json (the search endpoints' responses), or one file "
                                           "holding both"))
    parser.add_argument("--token-env", type=_variable, default="MLFLOW_TRACKING_TOKEN",
                        help=_("the environment variable holding the server's token (default %(default)s)"))
    parser.add_argument("--rewrite-source", action="append", default=[], metavar="OLD=NEW",
                        help=_("read a version's source under the path prefix OLD at NEW on this appliance "
                               "(repeatable)"))
    parser.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def handle(command, options) -> int:
    from .common import acting, acting_user

    user = acting_user()
    with acting(user):
        try:
            rewrites = mlflow_import.parse_rewrites(options["rewrite_source"])
            if options["url"]:
                token = os.environ.get(options["token_env"], "").strip() or None
                report = mlflow_import.from_rest(options["url"], token, user=user, rewrites=rewrites)
            else:
                report = mlflow_import.from_export(options["export"], user=user, rewrites=rewrites)
        except LifecycleError as exc:
            command.stderr.write(f"error: {exc}")
            return 1
    if options["json"]:
        command.stdout.write(json.dumps(report.as_details(), indent=1))
    else:
        for line in report.models_created:
            command.stdout.write(_("model created: %(name)s") % {"name": line})
        for line in report.versions_imported:
            command.stdout.write(_("version imported: %(line)s") % {"line": line})
        for line in report.aliases_set:
            command.stdout.write(_("alias set: %(line)s") % {"line": line})
        for item in report.skipped:
            where = "/".join(part for part in (item["model"], item["version"]) if part)
            command.stderr.write(_("skipped %(where)s: %(reason)s") % {"where": where or "-", "reason": item["reason"]})
        command.stdout.write(_("%(models)d models created, %(versions)d versions imported, %(existing)d already "
                               "there, %(skipped)d skipped") % {
            "models": len(report.models_created), "versions": len(report.versions_imported),
            "existing": len(report.versions_existing), "skipped": len(report.skipped)})
    return SKIPPED if report.skipped else 0
