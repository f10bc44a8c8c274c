"""Refused anonymous requests are counted per source address and minute and recorded once per pair:
a flood of them leaves a handful of records whose counts add up, not one record each."""

import os
import time
import uuid

import pytest
from django.core.cache import caches
from django.test import Client

from appliance.audit.capture import refusals
from appliance.audit.models import AuditRecord

pytestmark = pytest.mark.django_db

REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
EVENT = "access.anonymous.denied"


def later() -> float:
    """A moment at which every minute counted so far is over (past the grace seconds)."""
    return time.time() + 120


@pytest.fixture(params=["memory", "redis"])
def counter_cache(request, settings):
    """The counters in the in-memory cache (embedded default) and in a real Redis (CACHE_URL)."""
    if request.param == "redis":
        prefix = f"test-refusals-{uuid.uuid4().hex}"
        settings.CACHES = {**settings.CACHES, "refusals": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": prefix}}
    else:
        settings.CACHES = {**settings.CACHES, "refusals": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": f"test-{uuid.uuid4().hex}"}}
    settings.REFUSAL_COUNTER_CACHE = "refusals"
    cache = caches["refusals"]
    yield cache
    if request.param == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)


def test_300_refused_anonymous_requests_leave_a_few_records_whose_counts_add_up(counter_cache):
    client = Client(REMOTE_ADDR="198.51.100.7")
    before = AuditRecord.objects.count()
    for number in range(300):
        if number % 2:
            assert client.get("/api/v1/audit/records/").status_code == 401
        else:
            assert client.delete(f"/api/v1/inventory/nodes/{number}/").status_code == 401
    # Nothing per request: at most the flush of a minute boundary crossed during the loop.
    assert AuditRecord.objects.count() - before <= 1
    refusals.flush(now=later())
    summaries = list(AuditRecord.objects.filter(event=EVENT))
    assert 1 <= len(summaries) <= 2  # the loop may cross one minute boundary
    assert sum(rec.details["count"] for rec in summaries) == 300
    assert sum(sum(rec.details["statuses"].values()) for rec in summaries) == 300
    assert AuditRecord.objects.count() - before == len(summaries)
    for rec in summaries:
        assert rec.source_address == "198.51.100.7"
        assert rec.outcome == "denied" and rec.actor_username == "" and rec.channel == "api"
        assert rec.details["window_seconds"] == 60
        assert rec.details["first"]["status"] == 401
        assert rec.details["first"]["path"].startswith("/api/")
    assert not AuditRecord.objects.filter(event="access.denied").exists()


def test_each_source_address_gets_its_own_count(counter_cache):
    for address, requests in (("203.0.113.1", 3), ("2001:db8::5", 2)):
        client = Client(REMOTE_ADDR=address)
        for _ in range(requests):
            client.get("/api/v1/inventory/nodes/", headers={"User-Agent": f"scanner/{address}"})
    refusals.flush(now=later())
    counts = {}
    for rec in AuditRecord.objects.filter(event=EVENT):
        counts[rec.source_address] = counts.get(rec.source_address, 0) + rec.details["count"]
        assert rec.user_agent == f"scanner/{rec.source_address}"
    assert counts == {"203.0.113.1": 3, "2001:db8::5": 2}


def test_a_minute_is_recorded_once_however_often_and_from_wherever_it_is_flushed(counter_cache):
    client = Client(REMOTE_ADDR="192.0.2.44")
    for _ in range(4):
        client.get("/api/v1/audit/records/")
    moment = later()
    first = refusals.flush(now=moment)
    assert first >= 1
    # A second process's flush (the cache is shared; its own bookmark is not) writes nothing again.
    counter_cache.delete(refusals.PREFIX + "flushed-through")
    assert refusals.flush(now=moment) == 0
    assert refusals.flush(now=moment + 600) == 0
    assert sum(rec.details["count"] for rec in AuditRecord.objects.filter(event=EVENT)) == 4


def test_a_minute_still_running_is_not_flushed(counter_cache):
    Client(REMOTE_ADDR="192.0.2.45").get("/api/v1/audit/records/")
    now = time.time()
    assert refusals.flush(now=now - 61) == 0  # as seen a minute before the refusal: nothing finished
    assert not AuditRecord.objects.filter(event=EVENT).exists()
    assert refusals.flush(now=later()) == 1


def test_the_first_request_of_a_new_minute_writes_the_last_one(counter_cache, monkeypatch):
    Client(REMOTE_ADDR="192.0.2.46").get("/api/v1/audit/records/")
    monkeypatch.setattr(refusals, "_next_flush_at", 0.0)
    refusals.flush_at_minute_boundary(now=later())
    assert AuditRecord.objects.filter(event=EVENT, source_address="192.0.2.46").count() == 1
    # Once per process and minute: a second refusal in the same (future) minute waits for the next one.
    Client(REMOTE_ADDR="192.0.2.47").get("/api/v1/audit/records/")
    refusals.flush_at_minute_boundary(now=later())
    assert not AuditRecord.objects.filter(event=EVENT, source_address="192.0.2.47").exists()


def test_refusals_of_signed_in_users_are_still_recorded_one_by_one(client_for, counter_cache):
    client = client_for("viewer")
    for _ in range(3):
        assert client.get("/api/v1/audit/records/").status_code == 403
    assert AuditRecord.objects.filter(event="access.denied", actor_username="viewer-user").count() == 3
    assert refusals.flush(now=later()) == 0


def test_the_periodic_task_flushes(counter_cache):
    from appliance.celery import app

    Client(REMOTE_ADDR="192.0.2.48").get("/api/v1/audit/records/")
    assert app.conf.beat_schedule["audit-refused-requests"]["task"] == "audit.flush_refused_requests"
    task = app.tasks["audit.flush_refused_requests"]
    assert task.apply(kwargs={"now": later()}).get() == 1
