"""The formatting filters every page uses: ISO times with the zone, units on measured values,
site values readable (never a Python repr)."""

import datetime
import zoneinfo

import pytest
from django.template import Context, Template
from django.utils import timezone, translation

MOMENT = datetime.datetime(2026, 12, 1, 10, 15, 2, tzinfo=datetime.UTC)


def render(source: str, **context) -> str:
    return Template("{% load appliance_format %}" + source).render(Context(context))


def test_when_is_iso_with_the_zone():
    assert render("{{ t|when }}", t=MOMENT) == "2026-12-01 10:15:02 UTC"
    assert render('{{ t|when:"minutes" }}', t=MOMENT) == "2026-12-01 10:15 UTC"
    assert render("{{ t|when }}", t=None) == "—"
    assert render("{{ d|when }}", d=datetime.date(2026, 12, 1)) == "2026-12-01"


def test_when_follows_the_portal_time_zone():
    with timezone.override(zoneinfo.ZoneInfo("Europe/Moscow")):
        assert render("{{ t|when }}", t=MOMENT) == "2026-12-01 13:15:02 MSK"


@pytest.mark.parametrize("language", ["en", "ru"])
def test_plain_datetime_rendering_is_iso_with_zone_in_every_language(language):
    with translation.override(language):
        assert render("{{ t }}", t=MOMENT) == "2026-12-01 10:15:02 UTC"
        assert render("{{ t|date }}", t=MOMENT) == "2026-12-01"
        assert render('{{ t|date:"SHORT_DATETIME_FORMAT" }}', t=MOMENT) == "2026-12-01 10:15 UTC"


def test_measure_puts_the_unit_and_shows_missing_values_as_a_dash():
    assert render('{{ v|measure:"Gb/s" }}', v=392.6) == "392.6 Gb/s"
    assert render('{{ v|measure:"GB/s" }}', v=471.456) == "471.46 GB/s"
    assert render('{{ v|measure:"GPUs" }}', v=8) == "8 GPUs"
    assert render('{{ v|measure:"Gb/s" }}', v=None) == "—"
    assert render('{{ v|measure:"Gb/s" }}', v=">= 380 Gb/s") == "&gt;= 380 Gb/s"


def test_readable_renders_dicts_as_definition_lists_escaped():
    html = render("{{ v|readable }}", v={"rack": "A1", "slot": 3, "note": "<b>x</b>"})
    assert html == ('<dl class="readable"><dt>rack</dt><dd>A1</dd><dt>slot</dt><dd>3</dd>'
                    "<dt>note</dt><dd>&lt;b&gt;x&lt;/b&gt;</dd></dl>")
    assert render("{{ v|readable }}", v=["flock", "noatime"]) == "flock, noatime"
    assert render("{{ v|readable }}", v={}) == "—"
    nested = render("{{ v|readable }}", v={"ib0": {"pkey": "0x7fff", "mtu": 4092}})
    assert nested == ('<dl class="readable"><dt>ib0</dt><dd><dl class="readable"><dt>pkey</dt><dd>0x7fff</dd>'
                      "<dt>mtu</dt><dd>4092</dd></dl></dd></dl>")
    assert "{" not in nested and "'" not in nested


def test_key_values_is_one_line():
    assert render("{{ v|key_values }}", v={"rack": "A1", "slot": 3}) == "rack=A1, slot=3"
    assert render("{{ v|key_values }}", v={"ib0": {"mtu": 4092}}) == "ib0=mtu=4092"
    assert render("{{ v|key_values }}", v=None) == "—"


@pytest.mark.parametrize("language", ["en", "ru"])
def test_a_raw_number_keeps_its_decimal_point_in_every_language(language):
    with translation.override(language):
        assert render("{{ v }}", v=392.6) == "392.6"
