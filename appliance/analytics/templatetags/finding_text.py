"""A finding's summary and proposal in the reader's language:

    {% load finding_text %}
    {{ finding|read:"summary" }}   the detectors' Russian text on a Russian page, the stored English else
"""

from django import template
from django.utils import translation

from appliance.analytics.findings import read_in

register = template.Library()


@register.filter
def read(finding, part: str) -> str:
    if part not in ("summary", "proposal"):
        raise template.TemplateSyntaxError(f"read: {part!r} is not summary or proposal")
    return read_in(finding, part, translation.get_language())
