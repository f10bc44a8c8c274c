"""Acceptance values as the portal shows them: a measured number carries the unit of the bound it is
checked against (`392.6 Gb/s` under `>= 380 Gb/s`), a missing one is a dash that says so.

    {% load acceptance_values %}
    {{ check.measured|measured_against:check.expected }}
"""

import re

from django import template

from appliance.core.templatetags.appliance_format import key_values, measure

register = template.Library()

# "<op> <number> <unit>", as acceptance expectations are written (">= 380 Gb/s", "<= 5 %").
THRESHOLD = re.compile(r"^\s*(?:[<>]=?|==?|!=|≥|≤)?\s*-?[0-9][0-9.]*\s*([^\s0-9].*?)\s*$")


def unit_of(expected) -> str:
    """The unit of a bound written as text; empty when it names none."""
    if not isinstance(expected, str):
        return ""
    found = THRESHOLD.match(expected)
    return found.group(1) if found else ""


@register.filter
def measured_against(value, expected):
    """A measured number with the unit of its bound; a structure as key=value text (never a Python
    repr); other values as `measure` shows them."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return measure(value, unit_of(expected))
    if isinstance(value, dict | list | tuple):
        return key_values(value)
    return measure(value)
