"""Placeholder: the helper that owns this subcommand replaces this file."""

from django.core.management.base import CommandError


def add_arguments(parser) -> None:
    pass


def handle(command, options) -> int:
    raise CommandError("not built yet")
