"""Recommendations below 600 px: each finding is a card, every field on its own line with its name, so
the Proposal is on screen at 390 px (it was a table column off to the right); at 1440 px a table still."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from appliance.analytics.models import Finding
from appliance.core.roles import Role
from tests.e2e.conftest import screenshot
from tests.e2e.test_telemetry_pages import axe_violations

pytestmark = pytest.mark.django_db(transaction=True)

PROPOSAL = "Stage the dataset on local NVMe before the job starts (read share of /mnt/scratch 96%)."


@pytest.fixture
def finding():
    now = timezone.now()
    return Finding.objects.create(key="input-bound:4242", kind="input-bound", subject="job 4242", job="4242",
                                  severity=12.5, summary="Job 4242 waited on input for 12.5 GPU-hours.",
                                  proposal=PROPOSAL, window_start=now - timedelta(hours=1), window_end=now,
                                  first_seen=now, last_seen=now)


@pytest.mark.parametrize(("width", "cards"), [(390, True), (1440, False)])
def test_recommendations_are_cards_when_narrow(page, log_in, finding, width, cards):
    page.set_viewport_size({"width": width, "height": 900})
    log_in(Role.VIEWER)
    page.wait_for_url(re.compile(r"/$"))
    page.goto("/analytics/recommendations/")
    proposal = page.get_by_test_id("proposal")
    expect(proposal).to_have_text(PROPOSAL)
    box = proposal.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width
    display = page.locator(f'tr[data-finding="{finding.pk}"]').evaluate("row => getComputedStyle(row).display")
    assert (display == "block") is cards
    if cards:
        label = proposal.evaluate("cell => getComputedStyle(cell, '::before').content")
        assert label == '"Proposal"'
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []
    screenshot(page, f"recommendations-{width}")
