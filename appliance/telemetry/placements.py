"""Which jobs a scheduler put on a node: what the ingest checks a collector's job ids against.

A collector labels each GPU's minute with the job that held it, read from a job map on the node itself
(/run/appliance/gpu-owners.json), so a node's token could name any job: gpu02 writing `hpc_job=1` rows
while job 1 runs on gpu01 would put gpu02's GPUs on job 1's page and in its attribution. The ingest keeps
a job id on a row only where a scheduler puts that job on that node over that minute; any other row is
kept with its job blank and the id the node named in `unverified_job`, so that it drops out of the job
pages and the attribution (which read `job`) while the node's own numbers stay.

The schedulers are above telemetry in the layers, so they register providers here from their app's
ready(): lending the training pool's Slurm (squeue), lifecycle the registry's deployments on the
inference pool, the simulation its workload model's own services. A provider is called with a Node and
returns the jobs it places there (Placement: start and end as the scheduler says; end None while the job
runs), None when the node is not its scheduler's, or raises Unavailable when it should know but cannot
say (the controller does not answer).

What the providers said is kept in JobPlacement, so a minute sent late (a collector's buffer draining after
an outage) is checked against where the job was then, even once the scheduler has forgotten it. A write
asks the providers at most once and only when a row's job is not covered by what is kept (a job new on the
node, or a running job last confirmed more than OPEN_TRUST before the minute); each node is asked at most
every ASK_INTERVAL_S (sooner, every MIN_ASK_INTERVAL_S, for a minute that ended after the last answer).
When no provider can answer (the scheduler down), a job the scheduler last saw running on the node is
still taken and any other stays unverified: never re-labelled later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import caches
from django.db import transaction
from django.utils import timezone

from . import holders
from .models import MINUTE, JobPlacement

log = logging.getLogger(__name__)

# Clocks of a node and of its scheduler differ by seconds, and a job starts or ends inside a minute.
SLACK = timedelta(minutes=1)
# A running job confirmed this recently covers the node's newer minutes without asking again.
OPEN_TRUST = timedelta(minutes=5)
ASK_INTERVAL_S = 30.0
MIN_ASK_INTERVAL_S = 5.0
ASKED_KEY = "telemetry:placements-asked:"


class Unavailable(Exception):
    """A provider whose scheduler manages the node cannot say what runs there now."""


@dataclass(frozen=True)
class Placement:
    job: str
    start: datetime | None
    end: datetime | None  # None: running when asked


Provider = Callable[..., "list[Placement] | None"]
_PROVIDERS: dict[str, Provider] = {}


def register(source: str, provider: Provider) -> None:
    """Make a scheduler's provider known (an app's ready(); registering again replaces it)."""
    _PROVIDERS[source] = provider


def providers() -> dict[str, Provider]:
    return dict(_PROVIDERS)


@dataclass
class Verdict:
    """What a write's job ids came to: the jobs kept unverified, with their rows, and whether a scheduler
    that manages the node could not answer."""

    unverified: dict[str, int]
    unavailable: list[str]


def _covers(placement: JobPlacement, start: datetime) -> bool:
    end = start + timedelta(seconds=MINUTE)
    if placement.start is not None and end <= placement.start - SLACK:
        return False
    return placement.end is None or start < placement.end + SLACK


def _stale(placement: JobPlacement, start: datetime) -> bool:
    return placement.end is None and start + timedelta(seconds=MINUTE) > placement.seen_at + OPEN_TRUST


def _kept(node, jobs) -> dict[str, list[JobPlacement]]:
    found: dict[str, list[JobPlacement]] = {}
    for placement in JobPlacement.objects.filter(node=node, job__in=sorted(jobs)):
        found.setdefault(placement.job, []).append(placement)
    return found


def _may_ask(node, newest_end: datetime, now_s: float) -> bool:
    asked = caches["default"].get(f"{ASKED_KEY}{node.pk}")
    if asked is None or now_s - asked >= ASK_INTERVAL_S:
        return True
    # an answer given before the minute ended may not have known its job yet
    return now_s - asked >= MIN_ASK_INTERVAL_S and asked < newest_end.timestamp()


def ask(node, now: datetime | None = None) -> list[str]:
    """Ask every provider about `node` and keep what they say; returns the sources that could not answer.
    A job kept as running that a provider no longer lists ended after it was last seen."""
    now = now or timezone.now()
    unavailable = []
    caches["default"].set(f"{ASKED_KEY}{node.pk}", now.timestamp(), int(ASK_INTERVAL_S * 4))
    for source, provider in providers().items():
        try:
            found = provider(node)
        except Unavailable as exc:
            log.warning("job placements of %s: %s did not answer: %s", node.name, source, exc)
            unavailable.append(source)
            continue
        if found is not None:
            _keep(node, source, found, now)
    return unavailable


def _keep(node, source: str, found: list[Placement], now: datetime) -> None:
    merged: dict[str, Placement] = {}
    for placement in found:
        before = merged.get(placement.job)
        if before is not None:
            starts = [t for t in (before.start, placement.start) if t is not None]
            ends = None if before.end is None or placement.end is None else max(before.end, placement.end)
            placement = Placement(placement.job, min(starts) if starts else None, ends)
        merged[placement.job] = placement
    with transaction.atomic():
        kept = {row.job: row for row in JobPlacement.objects.select_for_update().filter(node=node, source=source)}
        # a write of the same node asking at the same moment may add the same rows: theirs are as good
        JobPlacement.objects.bulk_create(
            [JobPlacement(node=node, source=source, job=job, start=placement.start, end=placement.end, seen_at=now)
             for job, placement in merged.items() if job not in kept], ignore_conflicts=True)
        for job, placement in merged.items():
            row = kept.get(job)
            if row is None:
                continue
            starts = [t for t in (row.start, placement.start) if t is not None]
            row.start, row.end, row.seen_at = (min(starts) if starts else None), placement.end, now
            row.save(update_fields=["start", "end", "seen_at"])
        gone = [row.pk for job, row in kept.items() if job not in merged and row.end is None]
        for row in JobPlacement.objects.filter(pk__in=gone):
            row.end = row.seen_at
            row.save(update_fields=["end"])


def verify(node, rows: dict, now: datetime | None = None, now_s: float | None = None) -> Verdict:
    """Check the job of each GPU row of one write (`rows`: {(gpu, instance, start): values}, as the ingest
    parsed them) against the node's placements, asking the providers at most once; a row whose job is not
    placed on the node over its minute gets job "" and `unverified_job` the id it named. So does each of a
    minute's holders (its `holders`): one not placed there moves to `unverified_holders`."""
    claims: dict[str, list[datetime]] = {}
    held = {key: holders.parse(values.get("holders") or "") for key, values in rows.items()}
    for (_gpu, _instance, start), values in rows.items():
        for job in {values.get("job"), *(name for name, _ in held[(_gpu, _instance, start)])} - {None, ""}:
            claims.setdefault(job, []).append(start)
    verdict = Verdict({}, [])
    if not claims:
        return verdict
    kept = _kept(node, claims)

    def covered(job: str, start: datetime) -> bool:
        return any(_covers(placement, start) for placement in kept.get(job, ()))

    def fresh(job: str, start: datetime) -> bool:
        return any(_covers(placement, start) and not _stale(placement, start) for placement in kept.get(job, ()))

    doubtful = [start for job, starts in claims.items() for start in starts if not fresh(job, start)]
    if doubtful and _may_ask(node, max(doubtful) + timedelta(seconds=MINUTE), time.time() if now_s is None else now_s):
        verdict.unavailable = ask(node, now)
        kept = _kept(node, claims)
    for key, values in rows.items():
        start = key[2]
        job = values.get("job")
        if job and not covered(job, start):
            values["job"], values["unverified_job"] = "", job
            verdict.unverified[job] = verdict.unverified.get(job, 0) + 1
        if held[key]:
            # a holder not placed there keeps its seconds as the node said them, apart: nobody's in the ledger
            values["holders"] = holders.as_text([(name, part) for name, part in held[key] if covered(name, start)])
            values["unverified_holders"] = holders.as_text(
                [(name, part) for name, part in held[key] if not covered(name, start)])
            for name, _ in held[key]:
                if name != job and not covered(name, start):
                    verdict.unverified[name] = verdict.unverified.get(name, 0) + 1
    return verdict
