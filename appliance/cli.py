"""The `appliance` command (the wheel's console entry point): manage.py's commands, Django's and the
appliance's, for an installed appliance: `appliance bootstrap --no-input`, `appliance simulation status`,
`appliance audit verify --database`, ... `python -m appliance` is the same command."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
