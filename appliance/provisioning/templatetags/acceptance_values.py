"""Acceptance values as the portal shows them: a measured number carries the unit of the bound it is
checked against (`392.6 Gb/s` under `>= 380 Gb/s`), a missing one is a dash that says so.

    {% load acceptance_values %}
    {{ check.measured|measured_against:check.expected }}
"""

from django import template

from appliance.core.templatetags.appliance_format import key_values, measure
from appliance.provisioning.acceptance import unit_of

register = template.Library()

@register.filter
def measured_against(value, expected):
    """A measured number with the unit of its bound; a structure as key=value text (never a Python
    repr); other values as `measure` shows them."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return measure(value, unit_of(expected))
    if isinstance(value, dict | list | tuple):
        return key_values(value)
    return measure(value)
