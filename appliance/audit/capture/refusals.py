"""Refused anonymous requests: counted per source address and minute, recorded once per pair.

Anyone can send requests without credentials. Writing one permanent, append-only record per refusal
let anyone grow the log at will (300 requests added 710 KB in 11 s). Instead every refusal of an
anonymous request adds one to a counter in the cache, keyed by its source address and its minute;
once that minute is over, one `access.anonymous.denied` record per source says how many requests
from it were refused in that minute (by status) and what the first of them was. The evidence
stays, and the log grows by at most one record per source per minute.

The counters live in the cache named by settings.REFUSAL_COUNTER_CACHE: with CACHE_URL set that is
Redis, shared by every process; without it each process counts its own (an in-memory cache) and
writes its own records. A finished minute is written out by whichever comes first: the next
request that process serves (at most one flush per process and minute), or the periodic flush
(`audit.flush_refused_requests`, run by Celery beat). Each (minute, source) is claimed with an
atomic add before it is written, so it is recorded once even when several processes flush at once.
"""

import logging
import time
from datetime import UTC, datetime

from celery import shared_task
from django.conf import settings
from django.core.cache import caches

from appliance import audit
from appliance.core import context

log = logging.getLogger(__name__)

EVENT = "access.anonymous.denied"
PREFIX = "audit:refused:"
MINUTE = 60
# A refusal is counted in the minute it ends in; its counter may be written a moment after the
# minute boundary. A minute is flushed only after this many seconds have passed beyond its end.
GRACE_SECONDS = 5
MAX_PATH = 500


def _cache():
    return caches[settings.REFUSAL_COUNTER_CACHE]


def _ttl() -> int:
    return settings.REFUSAL_COUNTER_RETENTION_MINUTES * MINUTE


def _key(minute: int, *parts) -> str:
    return PREFIX + ":".join([str(minute), *map(str, parts)])


def _increment(cache, key: str, ttl: int) -> int:
    """Add one to a counter, creating it at 1 (atomic on Redis and in the in-memory cache)."""
    if cache.add(key, 1, ttl):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between the add and the incr
        cache.add(key, 1, ttl)
        return 1


def count(request, response, reason: str, now: float | None = None) -> None:
    """Count one refused anonymous request against its source address and the current minute."""
    now = time.time() if now is None else now
    minute = int(now // MINUTE)
    address = context.current().source_address or "unknown"
    cache, ttl = _cache(), _ttl()
    if _increment(cache, _key(minute, "count", address), ttl) == 1:
        # First refusal of this source in this minute: give it a slot, so the flush can find it.
        slot = _increment(cache, _key(minute, "sources"), ttl)
        match = getattr(request, "resolver_match", None)
        cache.set(_key(minute, "slot", slot), {
            "address": address,
            "channel": context.current().channel,
            "first": {
                "at": datetime.fromtimestamp(now, UTC).isoformat(),
                "method": request.method,
                "path": request.path[:MAX_PATH],
                "status": response.status_code,
                "view": match.view_name if match is not None and match.view_name else "",
                "reason": reason,
                "user_agent": context.current().user_agent,
                "request_id": context.current().request_id,
                "client_request_id": getattr(request, "client_request_id", ""),
            },
        }, ttl)
    _increment(cache, _key(minute, "status", address, response.status_code), ttl)


def _finished_minutes(now: float) -> range:
    """The minutes a flush may write out now: ended at least GRACE_SECONDS ago, within retention."""
    last_finished = int((now - GRACE_SECONDS) // MINUTE) - 1
    oldest = last_finished - settings.REFUSAL_COUNTER_RETENTION_MINUTES + 1
    flushed = _cache().get(PREFIX + "flushed-through")
    first = max(oldest, flushed + 1) if flushed is not None else oldest
    return range(first, last_finished + 1)


def _record(minute: int, slot: dict, statuses: dict[str, int]) -> None:
    first = slot["first"]
    total = sum(statuses.values())
    start = datetime.fromtimestamp(minute * MINUTE, UTC)
    details = {
        "count": total,
        "statuses": statuses,
        "window_start": start.isoformat(),
        "window_seconds": MINUTE,
        "first": first,
    }
    reason = (f"{total} anonymous request(s) refused from {slot['address']} in the minute from "
              f"{start:%Y-%m-%d %H:%M} UTC; the first: {first['reason']}")
    ctx = context.ActionContext(channel=slot["channel"], request_id=first["request_id"],
                                source_address=slot["address"], user_agent=first["user_agent"])
    with context.use(ctx):
        audit.record(EVENT, outcome="denied", reason=reason, target_type="url", target_name=first["path"],
                     details=details)


def flush(now: float | None = None) -> int:
    """Write one record per (source, minute) for every finished minute not written yet.
    Returns how many records were written."""
    now = time.time() if now is None else now
    cache, ttl = _cache(), _ttl()
    written = 0
    minutes = _finished_minutes(now)
    sources = cache.get_many([_key(m, "sources") for m in minutes])
    for minute in minutes:
        for number in range(1, (sources.get(_key(minute, "sources")) or 0) + 1):
            claim = _key(minute, "written", number)
            if not cache.add(claim, 1, ttl):
                continue  # another process wrote (or is writing) it
            try:
                slot = cache.get(_key(minute, "slot", number))
                if slot is None:
                    continue  # the cache lost it (evicted, restarted): nothing left to write
                status_keys = {_key(minute, "status", slot["address"], status): str(status)
                               for status in (401, 403)}
                found = cache.get_many(list(status_keys))
                statuses = {status_keys[key]: value for key, value in found.items() if value}
                _record(minute, slot, statuses or {str(slot["first"]["status"]): 1})
                written += 1
            except Exception:
                cache.delete(claim)  # let the next flush try again
                raise
    if minutes:
        # Once, after the loop: a failure above leaves the mark where it was, and the claims keep the
        # next flush from writing a minute twice (a fresh cache has 1,440 minutes to walk).
        cache.set(PREFIX + "flushed-through", minutes[-1], ttl)
    return written


_next_flush_at = 0.0


def flush_at_minute_boundary(now: float | None = None) -> None:
    """Called on every request: the first request a process serves in a new minute flushes the
    minutes that ended (once per process and minute; a failure is logged, never the request's)."""
    global _next_flush_at
    now = time.time() if now is None else now
    if now < _next_flush_at:
        return
    _next_flush_at = (int(now // MINUTE) + 1) * MINUTE + GRACE_SECONDS
    try:
        flush(now)
    except Exception:
        log.exception("writing the counts of refused anonymous requests failed; the next flush retries")


# Beat runs it every 30 s: what it writes are audit records already; a `task.run` record of each tick
# would fill the log and keep an idle appliance's tail unsigned (see capture/tasks.py).
@shared_task(name="audit.flush_refused_requests", audit_record_run=False)
def flush_refused_requests(now: float | None = None) -> int:
    return flush(now)
