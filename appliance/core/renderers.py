"""The API's JSON renderers (their own module: DRF's settings import it while DRF's views load)."""

import orjson
from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder


class JSONRenderer(renderers.JSONRenderer):
    """UTF-8 JSON. Text that is not valid Unicode (a lone surrogate a request sent, echoed in an error
    message) is written with \\u escapes instead of failing the whole response."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            self.ensure_ascii = True
            return super().render(data, accepted_media_type, renderer_context)


# Dates, times, dataclasses and subclasses of the basic types go through DRF's encoder, as in JSONRenderer:
# the same text for a datetime ("...Z", milliseconds), none of orjson's own forms.
_ORJSON_OPTIONS = (orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS)


class LargeJSONRenderer(JSONRenderer):
    """JSONRenderer's text, written by orjson: for the read views whose answers are large (the telemetry
    Overview of 1,000 nodes is 0.8 MB, which the standard library takes 20 ms to write and orjson 2). What
    orjson does not take (an integer past 64 bits, a lone surrogate) and an indented answer (`Accept:
    application/json; indent=2`) are written by JSONRenderer. One difference: a float that is not a number
    (NaN, infinity) is written as null, where JSONRenderer refuses it; these views send None for a missing
    value."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        if self.get_indent(accepted_media_type, renderer_context or {}) is None:
            try:
                text = orjson.dumps(data, default=JSONEncoder().default, option=_ORJSON_OPTIONS)
            except orjson.JSONEncodeError:
                pass
            else:
                # As JSONRenderer: the two line separators JavaScript source may not hold, escaped.
                return text.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")
        return super().render(data, accepted_media_type, renderer_context)
