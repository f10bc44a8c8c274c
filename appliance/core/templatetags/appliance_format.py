"""Filters that make values readable on every page, whatever app shows them:

    {% load appliance_format %}
    {{ run.started|when }}               2026-12-01 10:15:02 UTC  (ISO 8601 in the portal's zone)
    {{ check.measured|measure:"Gb/s" }}  392.6 Gb/s               (a missing value is "—", never None)
    {{ node.labels|readable }}           a definition list (dict) or a list, never a Python repr
    {{ node.labels|key_values }}         rack=A1, slot=3          (one line, for table cells)
"""

import datetime
from decimal import Decimal

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()

MISSING = "—"
# Nested site values are shown up to this depth; deeper levels print as key=value text.
MAX_DEPTH = 4


@register.filter
def when(value, precision: str = "seconds"):
    """An aware datetime in the current time zone as `YYYY-MM-DD HH:MM:SS ZONE`; a date as `YYYY-MM-DD`.
    `|when:"minutes"` drops the seconds. A missing value is "—"."""
    if value in (None, ""):
        return MISSING
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime.datetime):
        if timezone.is_aware(value):
            value = timezone.localtime(value)
        pattern = "%Y-%m-%d %H:%M" if precision == "minutes" else "%Y-%m-%d %H:%M:%S"
        zone = value.tzname() or timezone.get_current_timezone_name()
        return f"{value.strftime(pattern)} {zone}"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _number(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | Decimal):
        if value != value:  # NaN
            return MISSING
        text = f"{float(value):.2f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(value)


@register.filter
def measure(value, unit: str = ""):
    """A measured value with its unit: `392.6 Gb/s`. Numbers keep at most two decimals; a missing
    value is "—" without a unit; a text value (a bound such as ">= 380 Gb/s") is shown as it is."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            return value
    text = _number(value)
    return f"{text} {unit}" if unit and text != MISSING else text


def _scalar(value) -> str:
    if value is None:
        return MISSING
    if isinstance(value, int | float | Decimal | bool):
        return _number(value)
    return str(value)


def _inline(value, depth: int = 0) -> str:
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return "…"
        return ", ".join(f"{key}={_inline(item, depth + 1)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            return "…"
        return ", ".join(_inline(item, depth + 1) for item in value)
    return _scalar(value)


def _html(value, depth: int) -> str:
    if isinstance(value, dict):
        if not value:
            return MISSING
        if depth >= MAX_DEPTH:
            return escape(_inline(value))
        rows = format_html_join("", "<dt>{}</dt><dd>{}</dd>",
                                ((key, mark_safe(_html(item, depth + 1))) for key, item in value.items()))
        return f'<dl class="readable">{rows}</dl>'
    if isinstance(value, list | tuple):
        if not value:
            return MISSING
        if all(not isinstance(item, dict | list | tuple) for item in value):
            return escape(", ".join(_scalar(item) for item in value))
        if depth >= MAX_DEPTH:
            return escape(_inline(value))
        items = format_html_join("", "<li>{}</li>", ((mark_safe(_html(item, depth + 1)),) for item in value))
        return f'<ul class="readable">{items}</ul>'
    return escape(_scalar(value))


@register.filter
def readable(value):
    """A dict as a definition list, a list of scalars as one comma-separated line, a list of dicts
    as a list of definition lists; keys and values escaped. Never a Python repr."""
    return mark_safe(_html(value, 0))  # noqa: S308 - every key and value above goes through escape()


@register.filter
def key_values(value):
    """One line of `key=value, key=value` (nested values inline): for table cells."""
    if value in (None, "", {}, []):
        return MISSING
    return _inline(value)
