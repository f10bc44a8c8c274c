"""The attribution's state of a job, for the telemetry's job pages (telemetry.jobinfo.ATTRIBUTION): its
Efficiency page once the ledger has a GPU-hour of it, else when the attribution runs next.

A minute is attributed by the first run after it is complete (ledger.COMPLETE_AFTER_S after its end);
runs come every ANALYTICS_ATTRIBUTE_EVERY_SECONDS from the cursor's last save. A job whose minutes the
attribution has passed without a GPU-hour of it says so instead of promising a run."""

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from appliance.core.roles import can

from .models import AttributionCursor, CauseHour

# A cursor not saved for this many runs: the attribution is not running (no worker), no run is promised.
STALLED_RUNS = 5


def every() -> timedelta:
    return timedelta(seconds=max(10, settings.ANALYTICS_ATTRIBUTE_EVERY_SECONDS))


def attribution_state(job: str, first: datetime | None, user=None, now: datetime | None = None) -> dict | None:
    """{"attributed", "url", "next_run", "passed", "stalled_since"} for job `job` whose first minute the
    telemetry saw at `first`; None for a user who may not see the Efficiency pages."""
    if user is not None and not can(user, "analytics.view"):
        return None
    from .ledger import COMPLETE_AFTER_S, CURSOR  # numpy and the rules: not at every process's start

    url = reverse("analytics:job", args=[job])
    if CauseHour.objects.filter(job=job).exists():
        return {"attributed": True, "url": url, "next_run": None, "passed": False, "stalled_since": None}
    now = now or timezone.now()
    cursor = AttributionCursor.objects.filter(name=CURSOR).first()
    interval = every()
    state = {"attributed": False, "url": url, "next_run": None, "passed": False, "stalled_since": None}
    if cursor is not None and cursor.attributed_until is not None and first is not None \
            and cursor.attributed_until > first + timedelta(minutes=1):
        state["passed"] = True
        return state
    if cursor is not None and now - cursor.updated_at > STALLED_RUNS * interval:
        state["stalled_since"] = cursor.updated_at
        return state
    ready = max(now, (first or now) + timedelta(minutes=1, seconds=COMPLETE_AFTER_S))
    if cursor is None:
        state["next_run"] = ready
    else:
        runs = max(0, math.ceil((ready - cursor.updated_at) / interval))
        state["next_run"] = cursor.updated_at + runs * interval
    return state
