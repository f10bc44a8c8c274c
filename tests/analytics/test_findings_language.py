"""Generated text in the reader's language: the detectors store a finding's summary and proposal in English
(the API's and the audit log's language) whoever ran them, and in Russian beside it; the recommendations
pages show the Russian one in the Russian interface. A Text renders again in another language, the
figures given to it (a span of hours, a joined list) too."""

from datetime import timedelta

import pytest
from django.utils import translation

from appliance.analytics import findings
from appliance.analytics.models import Finding
from appliance.analytics.texts import gettext as _
from appliance.analytics.texts import joined
from appliance.core.roles import Role
from tests.analytics.test_findings import UNTIL, site  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db
NOW = UNTIL - timedelta(minutes=50)
THROTTLED_EN = ("GPU 5 of gpu02 was throttled 20% of its time (0.2 GPU-hours; reason: thermal; SM clock 1500.0 MHz "
                "of 1980; up to 90 °C, at or above the 87 °C at which an H100 slows for heat)")
THROTTLED_RU = ("GPU 5 узла gpu02 был в троттлинге 20% своего времени (0.2 GPU-часов; причина: нагрев; частота SM "
                "1500.0 МГц из 1980; до 90 °C, не ниже 87 °C, при которых H100 снижает частоты из-за нагрева)")
COOLING_RU = "проверьте охлаждение: воздушный поток, вентиляторы, температуру на входе и радиатор этого GPU"


@pytest.fixture
def refreshed(site, monkeypatch):  # noqa: F811
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)
    with translation.override("ru"):  # a Russian operator pressed "run now"
        findings.refresh()
    return Finding.objects.get(key="throttled:gpu02/gpu5")


def test_stored_in_english_whoever_ran_them_and_in_russian_beside_it(refreshed):
    assert refreshed.summary == THROTTLED_EN
    assert refreshed.proposal == "check cooling: airflow, fans, inlet temperature and the heatsink of this GPU"
    assert refreshed.evidence["translations"] == {"ru": {"summary": THROTTLED_RU, "proposal": COOLING_RU}}
    straggler = Finding.objects.get(key="straggler:gpu02/gpu3")
    assert straggler.summary.startswith("GPU 3 of gpu02 held back 1 of its 1 jobs")
    assert straggler.evidence["translations"]["ru"]["summary"].startswith("GPU 3 узла gpu02 задерживал 1 из своих 1 "
                                                                          "заданий")
    assert "с 2026-01-07 10:00 до 11:00 UTC" in straggler.evidence["translations"]["ru"]["summary"]  # its span too
    assert straggler.evidence["translations"]["ru"]["summary"].endswith(" (троттлинг: мощность)")  # the reason too
    assert straggler.summary.endswith(" (throttled: power)") and straggler.evidence["reasons"] == ["power"]


def test_the_pages_show_the_readers_language(refreshed, client_for):
    client = client_for(Role.VIEWER)
    russian = client.get("/analytics/recommendations/", HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert THROTTLED_RU in russian and COOLING_RU in russian and THROTTLED_EN not in russian
    english = client.get("/analytics/recommendations/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert THROTTLED_EN in english and THROTTLED_RU not in english
    one = client.get(f"/analytics/recommendations/{refreshed.pk}/", HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert f'<p data-testid="summary">{THROTTLED_RU}</p>' in one
    assert "translations" not in one  # the texts are not shown again as a figure


def test_a_finding_written_before_reads_as_stored(refreshed, client_for):
    Finding.objects.filter(pk=refreshed.pk).update(evidence={"share": 0.2})
    russian = client_for(Role.VIEWER).get("/analytics/recommendations/", HTTP_ACCEPT_LANGUAGE="ru").content.decode()
    assert THROTTLED_EN in russian


def test_a_text_renders_again_with_its_figures_and_joins():
    span = _("%(start)s to %(end)s %(zone)s") % {"start": "2026-01-07 10:00", "end": "11:00", "zone": "UTC"}
    text = _("no slowdown reason reported") + " · " + span
    assert text == "no slowdown reason reported · 2026-01-07 10:00 to 11:00 UTC"
    assert text.in_language("ru") == "причина замедления не сообщается · с 2026-01-07 10:00 до 11:00 UTC"
    both = joined("; ", [_("Every GPU"), span])
    assert (both, both.in_language("ru")) == ("Every GPU; 2026-01-07 10:00 to 11:00 UTC",
                                              "Все GPU; с 2026-01-07 10:00 до 11:00 UTC")
    with pytest.raises(TypeError):
        span % {"start": "again"}  # noqa: B018 (a message given its figures takes no more)
