"""The recommendations page says when the detectors run: not yet after a bootstrap (every 15 minutes once the
worker runs), the last and the next run once they have, no promise when they stopped; and it offers "run now"
to the roles that may act on findings, which runs them as the command line's --refresh does (audited with
the person as actor when it opens or resolves a finding). The clock is set, so no minute turning matters."""

from datetime import timedelta

import pytest

from appliance.analytics import findings
from appliance.analytics.models import AttributionCursor, Finding
from appliance.audit.models import AuditRecord
from appliance.celery import app
from appliance.core.roles import Role
from tests.analytics.test_findings import UNTIL, site  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db
NOW = UNTIL - timedelta(minutes=50)  # 2026-01-07 23:10 UTC, the day of the site's job hours in its window


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)


def schedule_text(client) -> str:
    html = client.get("/analytics/recommendations/").content.decode()
    part = html[html.index('data-testid="detectors-schedule"'):]
    return part[:part.index("</div>")]


def test_the_periodic_task_runs_as_often_as_the_page_says():
    assert app.conf.beat_schedule["analytics-findings"]["schedule"] == findings.REFRESH_EVERY_S == 900


def test_before_a_first_run_the_page_says_they_have_not_run_and_when_they_will(clock, client_for, db):
    text = schedule_text(client_for(Role.VIEWER))
    assert ("The detectors have not run yet: they run every 15 minutes once the worker has started, over the "
            "attributed GPU-hours of the last day.") in text
    assert 'data-testid="run-detectors"' not in text  # a viewer may not run them


def test_after_a_run_the_last_and_the_next(clock, client_for, db):
    AttributionCursor.objects.create(name="findings", attributed_until=NOW)
    AttributionCursor.objects.filter(name="findings").update(updated_at=NOW - timedelta(minutes=20))
    text = schedule_text(client_for(Role.VIEWER))
    # Ran at 22:50; 23:05 passed without a run being seen yet, so the next is 23:20.
    assert ("The detectors last ran at 2026-01-07 22:50 UTC; they run next at about 2026-01-07 23:20 UTC (every 15 "
            "minutes).") in text
    AttributionCursor.objects.filter(name="findings").update(updated_at=NOW - timedelta(minutes=46))
    text = schedule_text(client_for(Role.VIEWER))
    assert "The detectors have not run since 2026-01-07 22:24 UTC: no worker runs them." in text
    assert "run next" not in text


def test_an_operator_runs_them_now_and_the_page_says_what_they_found(clock, client_for, users, site):  # noqa: F811
    operator = client_for(Role.OPERATOR)
    assert 'data-testid="run-detectors"' in schedule_text(operator)
    response = operator.post("/analytics/recommendations/refresh/", follow=True)
    html = response.content.decode()
    opened = Finding.objects.filter(state=Finding.State.OPEN).count()
    assert opened >= 1
    assert f"The detectors ran: {opened} found, {opened} opened, 0 resolved." in html
    assert "The detectors last ran at 2026-01-07 23:10 UTC; they run next at about 2026-01-07 23:25 UTC" in html
    record = AuditRecord.objects.filter(event="analytics.findings.refresh").get()
    assert record.actor_username == users[Role.OPERATOR].username


def test_a_viewer_may_not_run_them(client_for, db):
    assert client_for(Role.VIEWER).post("/analytics/recommendations/refresh/").status_code == 403
    assert client_for(Role.OPERATOR).get("/analytics/recommendations/refresh/").status_code == 405
    assert not AttributionCursor.objects.filter(name="findings").exists()
