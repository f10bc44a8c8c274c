"""The site's maintenance window (appliance.maintenance), when the firmware stage may restart servers to
apply BIOS values their BMCs staged: its rules (the redfish_reset module's own, which the site validation
loads) and what the site import keeps of it."""

import datetime

import pytest

from appliance.inventory.models import Appliance
from appliance.inventory.services import import_site, validate_site
from appliance.inventory.sitedef import SiteValidationError, window_rules

UTC = datetime.UTC
NAME_LINE = "  name: demo\n"


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("window", "moment", "open_"), [
    ({"start": "01:00", "end": "05:00"}, "2026-12-01T00:59", False),  # every day by default, UTC
    ({"start": "01:00", "end": "05:00"}, "2026-12-01T01:00", True),
    ({"start": "01:00", "end": "05:00"}, "2026-12-01T05:00", False),  # the end is outside
    # Saturday 22:00 to Sunday 06:00: Sunday 05:59 is inside (opened on Saturday), Sunday 22:00 is not.
    ({"days": ["sat"], "start": "22:00", "end": "06:00"}, "2026-12-06T05:59", True),
    ({"days": ["sat"], "start": "22:00", "end": "06:00"}, "2026-12-05T23:30", True),
    ({"days": ["sat"], "start": "22:00", "end": "06:00"}, "2026-12-05T21:59", False),
    ({"days": ["fri"], "start": "22:00", "end": "06:00"}, "2026-12-05T05:59", True),
    ({"days": ["sat"], "start": "22:00", "end": "06:00"}, "2026-12-06T22:00", False),
    # 02:00 in Moscow (UTC+3) is 23:00 UTC the day before.
    ({"days": ["tue"], "start": "01:00", "end": "03:00", "timezone": "Europe/Moscow"}, "2026-11-30T23:00", True),
    ({"days": ["tue"], "start": "01:00", "end": "03:00", "timezone": "Europe/Moscow"}, "2026-12-01T01:00", False),
    ({"start": "00:00", "end": "24:00"}, "2026-12-01T23:59", True),
])
def test_a_window_is_open_on_its_days_between_its_times_in_its_zone(window, moment, open_):
    assert window_rules().is_open(window, at(moment)) is open_


DEMO_WINDOW = '  maintenance:\n    window: {start: "00:00", end: "24:00"}\n    reset_timeout: 300\n'


def without_the_demo_window(demo_text: str) -> str:
    """The demo site with its always-open window taken out, for a test to write its own."""
    assert demo_text.count(DEMO_WINDOW) == 1
    return demo_text.replace(DEMO_WINDOW, "")


def test_the_site_definition_names_the_line_of_a_bad_window(site_env, demo_text):
    text = without_the_demo_window(demo_text).replace(NAME_LINE, NAME_LINE + "  maintenance:\n    reset_timeout: 5\n"
                             "    window: {days: [sat, someday], start: \"25:00\", end: \"06:00\", timezone: Mars/Base}\n", 1)
    line = next(number for number, row in enumerate(text.splitlines(), start=1) if "someday" in row)
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "site.yml")
    errors = [str(error) for error in caught.value.errors if error.path.startswith("appliance")]
    assert sorted(errors) == sorted([
        f"site.yml:{line - 1}: appliance.maintenance.reset_timeout: 5 is out of range (must be between 30 and 86400)",
        f"site.yml:{line}: appliance.maintenance.window.start: '25:00' is not a time of day HH:MM (00:00 to 24:00)",
        f"site.yml:{line}: appliance.maintenance.window.days: 'someday' is not one of mon, tue, wed, thu, fri, sat, sun",
        f"site.yml:{line}: appliance.maintenance.window.timezone: 'Mars/Base' is not a known time zone "
        "(an IANA name such as Europe/Moscow)",
    ])


def test_the_import_keeps_the_window_in_the_appliance_settings(site_env, demo_text):
    text = without_the_demo_window(demo_text).replace(NAME_LINE, NAME_LINE + "  maintenance:\n    reset_timeout: 600\n"
                             "    window: {days: [sat, sun], start: \"22:00\", end: \"06:00\", timezone: Europe/Moscow}\n", 1)
    import_site(text, "site.yml")
    appliance = Appliance.objects.get(name="demo")
    assert appliance.settings["maintenance"] == {
        "reset_timeout": 600,
        "window": {"days": ["sat", "sun"], "start": "22:00", "end": "06:00", "timezone": "Europe/Moscow"},
    }
