"""The API's JSON parser: bodies are untrusted input, with a size and a nesting depth limit.

Set as DRF's default parser (settings.REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]), so every API
view refuses an oversized or deeply nested body with a 400 and a clear message before any view
code, serializer or audit record walks it.
"""

import json

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant


def nesting_depth_exceeds(value, limit: int) -> bool:
    """True when arrays and objects in `value` nest deeper than `limit` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        max_bytes, max_depth = settings.API_JSON_MAX_BYTES, settings.API_JSON_MAX_DEPTH
        if stream is None:
            raise ParseError("JSON parse error: the request has no body.")
        raw = stream.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ParseError(f"JSON body too large: the limit is {max_bytes} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error: the body is not {encoding} text.") from exc
        too_deep = ParseError(f"JSON body nested too deeply: the limit is {max_depth} levels of arrays and objects.")
        try:
            data = json.loads(text, parse_constant=strict_constant if self.strict else None)
        except RecursionError:  # the decoder gave up before the depth check could
            raise too_deep from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error: {exc}") from None
        if nesting_depth_exceeds(data, max_depth):
            raise too_deep
        return data


def require_strings_for_text() -> None:
    """DRF's CharField (and so its e-mail, slug, URL and regex fields) turns a JSON number into text
    (0 becomes "0"). The schema says string: a client that sends a number where a name goes has made
    a mistake, and guessing hides it. Installed once, from the core app's ready()."""
    from rest_framework import serializers

    lenient = serializers.CharField.to_internal_value
    if getattr(lenient, "requires_strings", False):
        return

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return lenient(self, data)

    to_internal_value.requires_strings = True
    serializers.CharField.to_internal_value = to_internal_value
