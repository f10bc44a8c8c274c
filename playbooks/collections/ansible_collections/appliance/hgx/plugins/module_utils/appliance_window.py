# The site's maintenance window: when the firmware stage may restart servers to apply staged BIOS values.
#
#   maintenance:
#     window: {days: [sat, sun], start: "22:00", end: "06:00", timezone: Europe/Moscow}
#
# A window opens on each listed day at `start` and closes at `end` (the next day when `end` is not after
# `start`; "24:00" is midnight at the end of the day). `days` defaults to every day, `timezone` to UTC.
# Pure Python: the redfish_reset module and the controller's site validation use the same rules
# (appliance.inventory.sitedef loads this file).

from __future__ import annotations

import datetime
import re

try:
    import zoneinfo
except ImportError:  # Python < 3.9 on a controller: only UTC
    zoneinfo = None

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
CLOCK = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$|^24:00$")
KEYS = ("days", "start", "end", "timezone")


def problems(window):
    """Every problem of a window definition, as 'key: message' strings (empty when it is valid)."""
    if not isinstance(window, dict):
        return ["a mapping with start, end and optionally days and timezone"]
    found = [f"{key}: unknown key (allowed: {', '.join(KEYS)})" for key in window if key not in KEYS]
    for key in ("start", "end"):
        value = window.get(key)
        if value is None:
            found.append(f"{key}: missing (a time of day, HH:MM)")
        elif not isinstance(value, str) or not CLOCK.match(value):
            found.append(f"{key}: {value!r} is not a time of day HH:MM (00:00 to 24:00)")
    if window.get("start") == "24:00":
        found.append("start: a window starts at 23:59 at the latest")
    days = window.get("days", list(DAYS))
    if not isinstance(days, list) or not days:
        found.append(f"days: a non-empty list of {', '.join(DAYS)}")
    else:
        found.extend(f"days: {day!r} is not one of {', '.join(DAYS)}" for day in days if day not in DAYS)
    zone = window.get("timezone", "UTC")
    try:
        _zone(zone)
    except (ValueError, KeyError) as exc:
        found.append(f"timezone: {exc}")
    return found


def _zone(name):
    if name == "UTC":
        return datetime.timezone.utc
    if zoneinfo is None or not isinstance(name, str):
        raise ValueError(f"{name!r} is not a known time zone")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a known time zone (an IANA name such as Europe/Moscow)") from None


def _minutes(clock):
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def describe(window):
    days = window.get("days", list(DAYS))
    day_text = "every day" if sorted(days, key=DAYS.index) == list(DAYS) else ",".join(days)
    return f"{day_text} {window['start']}-{window['end']} {window.get('timezone', 'UTC')}"


def is_open(window, now=None):
    """Whether `now` (an aware datetime; default the current time) falls inside the window."""
    zone = _zone(window.get("timezone", "UTC"))
    local = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(zone)
    days = set(window.get("days", DAYS))
    start, end = _minutes(window["start"]), _minutes(window["end"])
    minute = local.hour * 60 + local.minute
    today, yesterday = DAYS[local.weekday()], DAYS[(local.weekday() - 1) % 7]
    if start < end:
        return today in days and start <= minute < end
    # The window runs past midnight: tonight's part, or the morning part of one opened yesterday.
    return (today in days and minute >= start) or (yesterday in days and minute < end)
