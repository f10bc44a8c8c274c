"""A minute's holders: the seconds each job or service held a GPU in a minute that changed hands, as the
collector times them sweep by sweep (rollup.py) and sends them in a gpu_rollup line's `holders` field,
"41:35,chat-7b:20": a job id (queries.JOB_PATTERN, which has no comma), a colon, whole seconds. The seconds
no holder is named for are nobody's (unallocated). A row without holders had one holder, its `job`, or
none, for the whole minute."""

from __future__ import annotations

import re

from .queries import JOB_PATTERN

_JOB = re.compile(JOB_PATTERN + r"\Z")
_SECONDS = re.compile(r"\d{1,2}\Z")
MAX_HOLDERS = 60  # a holder the collector names held at least one second of the minute


class HoldersError(ValueError):
    """A holders text that is not what a collector sends (the message says what)."""


def parse(text: str, step: int = 60) -> list[tuple[str, int]]:
    """[(job, seconds)] of a holders text, checked: each job once, with its pattern, seconds from 0 to
    `step`, all together at most `step`; [] for an empty text."""
    if not text:
        return []
    holders: list[tuple[str, int]] = []
    parts = text.split(",")
    if len(parts) > MAX_HOLDERS:
        raise HoldersError(f"{len(parts)} holders; a minute has at most {MAX_HOLDERS}")
    for part in parts:
        job, colon, seconds = part.rpartition(":")
        if not colon or not _SECONDS.match(seconds):
            raise HoldersError(f"{part[:120]!r} is not job:seconds (whole seconds)")
        if not _JOB.match(job):
            raise HoldersError(f"job {job[:60]!r} does not match {_JOB.pattern}")
        if not 0 <= int(seconds) <= step:
            raise HoldersError(f"{job}: {seconds} seconds is out of range (0 to {step})")
        if any(job == known for known, _ in holders):
            raise HoldersError(f"job {job} is named twice")
        holders.append((job, int(seconds)))
    total = sum(seconds for _, seconds in holders)
    if total > step:
        raise HoldersError(f"the seconds add up to {total}, more than the minute's {step}")
    return holders


def as_text(holders: list[tuple[str, int]]) -> str:
    return ",".join(f"{job}:{seconds}" for job, seconds in holders)
