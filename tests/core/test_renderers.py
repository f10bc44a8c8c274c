"""The large-answer JSON renderer writes what the API's JSON renderer writes, faster; what orjson cannot
take falls back to it."""

import datetime
import decimal
import uuid

from django.utils.translation import gettext_lazy

from appliance.core.renderers import JSONRenderer, LargeJSONRenderer

PAYLOAD = {
    "at": datetime.datetime(2026, 12, 3, 13, 41, 7, 123456, tzinfo=datetime.UTC),
    "day": datetime.date(2026, 12, 3),
    "price": decimal.Decimal("1.50"),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "label": gettext_lazy("Overview"),
    "by_minute": {1764769260: [12.5, None, 0.1]},
    "text": "line\u2028separator, Ünïcode",
    "nested": [{"a": True}, (1, 2)],
}
# What the API's JSON renderer writes for PAYLOAD (written out, not computed).
EXPECTED = ('{"at":"2026-12-03T13:41:07.123456Z","day":"2026-12-03","price":1.5,'
            '"id":"12345678-1234-5678-1234-567812345678","label":"Overview","by_minute":{"1764769260":[12.5,null,0.1]},'
            '"text":"line\\u2028separator, Ünïcode","nested":[{"a":true},[1,2]]}').encode()


def test_it_writes_the_same_text_as_the_api_renderer():
    assert JSONRenderer().render(PAYLOAD) == EXPECTED
    assert LargeJSONRenderer().render(PAYLOAD) == EXPECTED


def test_what_orjson_cannot_take_is_written_by_the_api_renderer():
    big = {"n": 2**70}
    assert LargeJSONRenderer().render(big) == b'{"n":1180591620717411303424}'
    lone = {"text": "a\ud800b"}
    assert LargeJSONRenderer().render(lone) == b'{"text":"a\\ud800b"}'


def test_an_indented_answer_is_the_api_renderers():
    assert LargeJSONRenderer().render({"a": [1]}, "application/json; indent=2") == b'{\n  "a": [\n    1\n  ]\n}'


def test_nothing_is_an_empty_body():
    assert LargeJSONRenderer().render(None) == b""


def test_a_float_that_is_not_a_number_is_null_where_the_api_renderer_refuses_it():
    assert LargeJSONRenderer().render({"v": float("nan")}) == b'{"v":null}'
