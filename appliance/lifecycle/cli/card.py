"""manage.py models card NAME VERSION [--format json|md|html] [--output FILE]

Writes the version's model card (lineage, evaluations, approvals, hashes, signature, history, deployments)
to standard output or to FILE; every export is recorded (lifecycle.card.export), as the account whose token
is in APPLIANCE_TOKEN, or the OS user. VERSION is a number, or an alias of the model (production, ...).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from appliance.lifecycle import cards
from appliance.lifecycle.errors import LifecycleError, NotFound

VERSION = re.compile(r"^[0-9]{1,9}$")
ALIAS = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def add_arguments(parser, subcommand: str = "card") -> None:
    parser.add_argument("name", help=_("the registered model's name"))
    parser.add_argument("version", help=_("the version's number, or an alias of the model (production, ...)"))
    parser.add_argument("--format", choices=cards.FORMATS, default="md",
                        help=_("json (the card as data), md (Markdown) or html (a standalone printable page)"))
    parser.add_argument("--output", metavar="FILE", help=_("write the card to FILE instead of standard output"))


def version_named(name: str, version: str):
    """The version NAME VERSION names: a number, or an alias of the model. NotFound / LifecycleError."""
    from appliance.lifecycle import services
    from appliance.lifecycle.models import Alias

    if VERSION.fullmatch(version):
        return services.get_version(name, int(version))
    if not ALIAS.fullmatch(version):
        raise LifecycleError(_("version: %(value)r is neither a number nor an alias name") % {"value": version},
                             "version")
    model = services.get_model(name)
    alias = Alias.objects.select_related("version__model").filter(model=model, name=version).first()
    if alias is None:
        raise NotFound(_("alias: %(model)s has no alias %(alias)s") % {"model": model.name, "alias": version},
                       "alias")
    return alias.version


def _write(path: str, text: str) -> None:
    """Write FILE whole or not at all (a temporary file beside it, renamed over it)."""
    target = Path(path)
    if target.is_dir():
        raise CommandError(_("output: %(path)s is a directory") % {"path": path})
    directory = target.parent if str(target.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".card-")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)
    except OSError as exc:
        raise CommandError(f"output: {path}: {exc.strerror or exc}") from None


def handle(command, options) -> int:
    from appliance.lifecycle.cli.common import acting, acting_user

    user = acting_user()
    with acting(user):
        version = version_named(options["name"], options["version"])
        text, _content_type, _name = cards.export(version, options["format"], user=user)
    if options.get("output"):
        _write(options["output"], text)
        command.stdout.write(_("model card of %(model)s version %(number)d written to %(path)s")
                             % {"model": version.model.name, "number": version.number, "path": options["output"]})
    else:
        command.stdout.write(text, ending="")
    return 0
