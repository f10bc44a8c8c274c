"""manage.py models verify NAME VERSION [--full] [--json]

Checks a version's files against what was registered and signed: quick (size, mtime and inode of every
file, no file missing or added, the signature over the recorded hashes; no file is read), or --full
(model-signing's verifier re-hashes every file). VERSION is a number or an alias of the model. The result
is written on the version and recorded (lifecycle.version.verify; lifecycle.version.tampered when the
files changed), as the account whose token is in APPLIANCE_TOKEN, or the OS user.
Exit status: 0 intact, 2 not intact (the files named), 1 refused (no such model or version).

manage.py models clear-tampered NAME VERSION --reason TEXT

Lifts a tampered verdict (which no later verification overwrites): an Administrator, with the reason, and
only when the full verification it runs passes (lifecycle.version.tamper_clear).
Exit status: 0 cleared, 2 the full verification fails (the verdict stays), 1 refused.
"""

from __future__ import annotations

import json

from django.utils.translation import gettext as _

from appliance.lifecycle import integrity
from appliance.lifecycle.errors import IntegrityRefused, LifecycleError

NOT_INTACT = 2


def add_arguments(parser, subcommand: str = "verify") -> None:
    parser.add_argument("name", help=_("the registered model's name"))
    parser.add_argument("version", help=_("the version's number, or an alias of the model (production, ...)"))
    if subcommand == "clear-tampered":
        parser.add_argument("--reason", required=True, help=_("why the files can be trusted again (recorded)"))
        return
    parser.add_argument("--full", action="store_true",
                        help=_("re-hash every file with model-signing's verifier (reads the whole model)"))
    parser.add_argument("--json", action="store_true", help=_("print the result as JSON"))


def handle(command, options) -> int:
    if options["subcommand"] == "clear-tampered":
        return clear_tampered(command, options)
    from .card import version_named
    from .common import acting_user

    try:
        user = acting_user()
        version = version_named(options["name"], options["version"])
        result = integrity.verify(version, full=options["full"], user=user)
    except LifecycleError as exc:
        command.stderr.write(f"error: {exc}")
        return 1
    if options["json"]:
        command.stdout.write(json.dumps({"model": version.model.name, "version": version.number,
                                         **result.as_dict()}, indent=1))
    else:
        kind = _("full") if result.full else _("quick")
        command.stdout.write(_("%(model)s v%(number)d: %(state)s (%(kind)s, %(seconds).3f s): %(detail)s") % {
            "model": version.model.name, "number": version.number, "state": result.state, "kind": kind,
            "seconds": result.seconds, "detail": result.detail})
    return 0 if result.ok else NOT_INTACT


def clear_tampered(command, options) -> int:
    from .card import version_named
    from .common import acting_user

    try:
        user = acting_user()
        version = version_named(options["name"], options["version"])
        result = integrity.clear_tampered(version, user=user, reason=options["reason"])
    except IntegrityRefused as exc:
        command.stderr.write(f"error: {exc}")
        return NOT_INTACT
    except LifecycleError as exc:
        command.stderr.write(f"error: {exc}")
        return 1
    command.stdout.write(_("%(model)s v%(number)d: the tampered verdict is cleared (full verification, %(seconds).3f "
                           "s): %(detail)s") % {"model": version.model.name, "number": version.number,
                                                 "seconds": result.seconds, "detail": result.detail})
    return 0
