"""What every `manage.py models ...` subcommand shares: who acts (the API token in APPLIANCE_TOKEN, else
nobody: the appliance itself, named in the audit log by the OS user and channel "cli"), the audit context,
refusals turned into one line, and the typed values the subcommands take (model names, version numbers,
key=value pairs)."""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager

from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.translation import gettext as _

from appliance.core import context

TOKEN_VARIABLE = "APPLIANCE_TOKEN"
VERSION_NUMBER = re.compile(r"^[0-9]{1,9}$")
REQUEST_ID = re.compile(r"^#?[0-9]{1,12}$")
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


def acting_user():
    """The account whose API token is in APPLIANCE_TOKEN, or None (nobody: the appliance itself). A token
    that is set but cannot be used is an error, never a silent fall back to nobody."""
    from appliance.accounts.tokens import TokenError, authenticate

    text = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return authenticate(text).user
    except TokenError as exc:
        raise CommandError(f"{TOKEN_VARIABLE}: {exc}") from None


def require_person(user, what: str):
    if user is None:
        raise CommandError(_("%(what)s needs a person: set %(variable)s to your API token (portal: your account, "
                             "API tokens)") % {"what": what, "variable": TOKEN_VARIABLE})
    return user


@contextmanager
def acting(user):
    """The audit context of a CLI action: channel cli, the token's user when there is one, and every
    LifecycleError as one line naming its field."""
    from appliance.lifecycle.errors import LifecycleError

    try:
        with context.acting_as(user, channel="cli"):
            yield
    except LifecycleError as exc:
        raise CommandError(str(exc)) from None


def version_number(text: str) -> int:
    if not VERSION_NUMBER.fullmatch(text or ""):
        raise ValueError(text)
    return int(text)


version_number.__name__ = "version number"


def request_id(text: str) -> int:
    if not REQUEST_ID.fullmatch(text or ""):
        raise ValueError(text)
    return int(text.lstrip("#"))


request_id.__name__ = "request number"


def key_value(text: str) -> tuple[str, str]:
    """KEY=VALUE, the key a name (letters, digits, . _ / -)."""
    key, equals, value = (text or "").partition("=")
    if not equals or not KEY.fullmatch(key):
        raise ValueError(text)
    return key, value


key_value.__name__ = "KEY=VALUE"


def number_value(text: str) -> tuple[str, float | int]:
    key, value = key_value(text)
    try:
        number = int(value) if re.fullmatch(r"-?[0-9]{1,18}", value) else float(value)
    except ValueError:
        raise ValueError(text) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(text)
    return key, number


number_value.__name__ = "NAME=NUMBER"


def typed_value(text: str) -> tuple[str, object]:
    """KEY=VALUE where VALUE becomes a number, true/false, or stays text: hyperparameters."""
    key, value = key_value(text)
    if value in ("true", "false"):
        return key, value == "true"
    try:
        return number_value(text)
    except ValueError:
        return key, value


typed_value.__name__ = "KEY=VALUE"


def dataset(text: str) -> dict:
    """name=NAME,uri=URI[,sha256=HEX]: a dataset of the lineage (the service checks each part)."""
    parts = {}
    for item in (text or "").split(","):
        key, equals, value = item.partition("=")
        if not equals or key not in ("name", "uri", "sha256") or key in parts:
            raise ValueError(text)
        parts[key] = value
    if "name" not in parts:
        raise ValueError(text)
    return parts


dataset.__name__ = "name=NAME,uri=URI[,sha256=HEX]"


def print_json(command, data) -> None:
    command.stdout.write(json.dumps(data, indent=2, sort_keys=True, cls=DjangoJSONEncoder))
