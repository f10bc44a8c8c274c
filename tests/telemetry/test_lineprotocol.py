"""The line protocol reader of the ingest endpoint: InfluxDB's syntax, escapes and value types, and a
clear message for each malformed line."""

import pytest

from appliance.telemetry.lineprotocol import LineError, iter_lines, parse_line


def as_tuple(line):
    return line.measurement, line.tags, line.fields, line.timestamp


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu_rollup,Hostname=gpu01,gpu=0 step=60,util=12.5 1796119200000000000",
     ("gpu_rollup", {"Hostname": "gpu01", "gpu": "0"}, {"step": 60.0, "util": 12.5}, 1796119200000000000)),
    ("m f=-1.5e3,g=.5,h=7", ("m", {}, {"f": -1500.0, "g": 0.5, "h": 7.0}, None)),
    ("m i=42i,n=-7i,u=18446744073709551615u", ("m", {}, {"i": 42, "n": -7, "u": 18446744073709551615}, None)),
    ("m a=t,b=TRUE,c=False,d=f", ("m", {}, {"a": True, "b": True, "c": False, "d": False}, None)),
    # escapes: a space and a comma in the measurement; comma, equals and space in tag keys and values
    (r"my\ meas\,x,ta\,g=v\=al\ ue f\ x=1 5",
     ("my meas,x", {"ta,g": "v=al ue"}, {"f x": 1.0}, 5)),
    # a backslash before another character stays; a doubled one is one backslash
    (r"m,path=C:\dir\\x f=1", ("m", {"path": "C:\\dir\\x"}, {"f": 1.0}, None)),
    # quoted strings keep spaces, commas and equals signs; \" and \\ are a quote and a backslash
    (r'event,Hostname=gpu01 message="XID 79, GPU=3 fell off",detail="{\"path\": \"a\\\\b\"}" 1796119200123456789',
     ("event", {"Hostname": "gpu01"}, {"message": "XID 79, GPU=3 fell off", "detail": '{"path": "a\\\\b"}'},
      1796119200123456789)),
    ('m s="",t="x y" -1', ("m", {}, {"s": "", "t": "x y"}, -1)),
])
def test_lines_read_as_influxdb_reads_them(text, expected):
    assert as_tuple(parse_line(text)) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("m", "no field set"),
    ("m ", "empty field"),
    ("m f=", "field f has no value"),
    ("m f", "field 'f' has no '='"),
    ("m f=nan", "field f: 'nan' is not a number"),
    ("m f=inf", "field f: 'inf' is not a number"),
    ("m f=1_000", "field f: '1_000' is not a number"),
    ("m f=1e999", "field f: 1e999 is not a finite number"),
    ("m f=9223372036854775808i", "out of the 64-bit range"),
    ('m f="open', "no closing quote"),
    ("m f=1 2 3", "unexpected text after the timestamp"),
    ("m f=1 12:00", "timestamp '12:00' is not an integer"),
    ("m,t= f=1", "tag 't=': empty key or value"),
    ("m,t f=1", "tag 't' has no '='"),
    ("m,t=1,t=2 f=1", "tag t appears twice"),
    ("m f=1,f=2", "field f appears twice"),
    ("m f=1,", "empty field"),
    (",t=1 f=1", "no measurement name"),
    ("m f=abc", "field f: 'abc' is not a number, a boolean or a quoted string"),
])
def test_a_malformed_line_says_what_is_wrong(text, message):
    with pytest.raises(LineError) as raised:
        parse_line(text)
    assert message in str(raised.value)


def test_blank_lines_comments_and_crlf_are_skipped_and_numbers_count_every_line():
    text = "# a comment\n\nm f=1 1\r\n  m f=2 2\n"
    assert [(number, line.fields["f"], line.timestamp) for number, line in iter_lines(text)] == \
        [(3, 1.0, 1), (4, 2.0, 2)]


def test_the_precision_scales_timestamps_to_nanoseconds():
    assert [line.timestamp for _, line in iter_lines("m f=1 1796119200", precision="s")] == [1796119200000000000]
    assert [line.timestamp for _, line in iter_lines("m f=1 1796119200000", precision="ms")] == [1796119200000000000]


def test_a_bad_line_carries_its_number():
    with pytest.raises(LineError) as raised:
        list(iter_lines("m f=1 1\nm f=2 2\nm f=oops 3\n"))
    assert raised.value.line == 3


def test_limits_of_lines_and_line_length():
    with pytest.raises(LineError) as raised:
        list(iter_lines("m f=1\n" * 3, max_lines=2))
    assert (raised.value.line, str(raised.value)) == (3, "more than 2 lines in one write")
    with pytest.raises(LineError) as raised:
        list(iter_lines("m f=1\nm f=" + "1" * 100, max_line_chars=50))
    assert (raised.value.line, str(raised.value)) == (2, "longer than 50 characters")
