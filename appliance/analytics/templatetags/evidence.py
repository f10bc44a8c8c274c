"""Evidence for people, not Python: a finding's or a verdict's figures with their units and a sensible
precision, in the reader's language (Django's number formatting: "10,1 GB/s" in Russian).

    {% load evidence %}
    {{ value|figure:"read_bps" }}     10.1 GB/s      (the key says the unit: *_bps, *share*, iowait, gpu_hours ...)
    {{ finding.evidence|evidence }}   a definition list; a list of records as a table, never a repr
    {{ check.note|readable_note }}    "20577986904.257416 B/s of 2.14e+10 B/s" -> "20.6 GB/s of 21.4 GB/s"

The evidence itself is written by the rules (rules.py, findings.py) in plain units (bytes/s, ratios); this
is only how the pages show it."""

import re

from django import template
from django.utils.formats import number_format
from django.utils.html import escape, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

register = template.Library()

MISSING = "—"
RATIO_KEYS = ("share", "ratio", "busy", "iowait", "efficiency", "util_fraction", "_active")
RATE_UNITS = ("B/s", "kB/s", "MB/s", "GB/s", "TB/s")


def _number(value: float, digits: int) -> str:
    text = number_format(round(value, digits), decimal_pos=digits)
    if digits:  # no trailing zeros: 96%, 15.7%
        sep = number_format(0.5, decimal_pos=1)[1]
        text = text.rstrip("0").rstrip(sep) if sep in text else text
    return text


def rate(value: float) -> str:
    size, unit = abs(float(value)), 0
    while size >= 1000 and unit < len(RATE_UNITS) - 1:
        size, unit = size / 1000, unit + 1
    digits = 0 if unit == 0 or size >= 100 else 1
    return f"{'-' if value < 0 else ''}{_number(size, digits)} {RATE_UNITS[unit]}"


def percent(value: float) -> str:
    return f"{_number(100 * float(value), 1)}%"


@register.filter
def figure(value, key: str = ""):
    """One value as read: its unit from its key (a metric's name)."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if not isinstance(value, int | float):
        return value
    name = str(key).lower().split(" ", 1)[0]
    if name.endswith("_bps") or name.endswith("bps"):
        return rate(value)
    if any(word in name for word in RATIO_KEYS):
        return percent(value)
    if "gpu_hours" in name:
        unit = _("GPU-h")
        return f"{_number(float(value), 2)} {unit}"
    if name.endswith("_mib"):
        return f"{_number(value / 1024, 1)} GiB"
    if name.endswith("_w"):
        return f"{_number(float(value), 0)} W"
    if name.endswith("_c"):
        return f"{_number(float(value), 1)} °C"
    if isinstance(value, int):
        return number_format(value, force_grouping=abs(value) >= 10000)
    return _number(float(value), 2 if abs(value) < 100 else 1 if abs(value) < 1000 else 0)


def _html(value, key: str, depth: int) -> str:
    if isinstance(value, dict):
        if not value:
            return MISSING
        return '<dl class="readable">' + format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>",
            ((name, mark_safe(_html(item, name, depth + 1))) for name, item in value.items())) + "</dl>"  # noqa: S308
    if isinstance(value, list | tuple):
        if not value:
            return MISSING
        if all(isinstance(item, dict) for item in value) and depth < 3:
            columns = list(dict.fromkeys(name for item in value for name in item))
            head = format_html_join("", "<th scope=\"col\">{}</th>", ((name,) for name in columns))
            rows = "".join("<tr>" + "".join(f"<td>{_html(item.get(name), name, depth + 1)}</td>" for name in columns)
                           + "</tr>" for item in value)
            return f'<table class="compact evidence-rows" data-sort="off"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        return escape(", ".join(str(figure(item, key)) for item in value))
    return escape(figure(value, key))


@register.filter
def evidence(value, key: str = ""):
    """A finding's evidence (a dict of figures, lists of records) as a definition list, every figure with
    its unit; keys and values escaped."""
    return mark_safe(_html(value, key, 0))  # noqa: S308 - every key and value above goes through escape()


def check_text(check: dict) -> tuple:
    """A verdict's check as the page prints it (the same figures read the same: the rows' key)."""
    metric = check.get("metric", "")
    return (metric, figure(check.get("value"), metric), check.get("op"), figure(check.get("threshold"), metric),
            bool(check.get("held")), readable_note(check.get("note") or ""))


NOTE_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(\s*B/s)?(?![\w.])")


@register.filter
def readable_note(text):
    """A rule's note with its numbers readable: bytes/s scaled (20.6 GB/s), long floats rounded."""
    if not text:
        return text

    def one(match):
        number, unit = float(match.group(1)), match.group(2)
        if unit:
            return rate(number)
        if "." not in match.group(1) and "e" not in match.group(1).lower():
            return match.group(0)
        return _number(number, 2 if abs(number) < 100 else 0)

    return NOTE_NUMBER.sub(one, str(text))
