"""A run started through the API goes through a real Celery worker (Redis broker) and finishes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kombu.pools
import pytest
import redis
from django.db import connection
from rest_framework.test import APIClient

from appliance.celery import app as celery_app
from appliance.core.roles import Role
from appliance.provisioning.models import Run
from appliance.provisioning.states import RunState

REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def database_url() -> str:
    """The test database, as the worker process must reach it."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture
def broker(settings):
    try:
        redis.Redis.from_url(REDIS_URL).flushdb()
    except redis.ConnectionError:
        pytest.fail(f"the Redis server of this machine is not answering at {REDIS_URL}")
    settings.CELERY_BROKER_URL = REDIS_URL
    previous = celery_app.conf.broker_url
    celery_app.conf.broker_url = REDIS_URL
    forget_broker_connections()
    yield REDIS_URL
    celery_app.conf.broker_url = previous
    forget_broker_connections()


def forget_broker_connections():
    """The app caches its connection and producer pools at first use (an earlier test may have made
    them for the in-memory broker); a process that switches brokers must drop both. They come from
    kombu's process-wide registry, which must be emptied too: closing only the app's connection
    pool left the registry's producer pool holding it closed ("Acquire on closed pool")."""
    kombu.pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def worker(broker, state_dir, tmp_path, catalogue, settings):
    settings.PROVISIONING_CATALOGUE = "tests.provisioning.catalogue:CATALOGUE"
    if connection.settings_dict["ENGINE"].endswith("sqlite3") and connection.settings_dict["NAME"] in ("", ":memory:"):
        pytest.skip("an in-memory test database is invisible to another process")
    env = {
        **os.environ,
        "CELERY_BROKER_URL": broker,
        "DATABASE_URL": database_url(),
        "APPLIANCE_STATE_DIR": str(state_dir),
        "APPLIANCE_SECRETS_KEY_FILE": str(settings.SECRETS_KEY_FILE),
        "APPLIANCE_PROVISIONING_CATALOGUE": "tests.provisioning.catalogue:CATALOGUE",
        "PYTHONPATH": str(settings.BASE_DIR),
    }
    log = open(tmp_path / "worker.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "appliance", "worker", "-P", "solo", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"test-{os.getpid()}@%h"],
        cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


def test_a_run_started_through_the_api_finishes_in_a_celery_worker(worker, users, appliance, tmp_path):
    client = APIClient()
    client.force_authenticate(users[Role.OPERATOR])
    started = time.monotonic()
    response = client.post("/api/v1/provisioning/runs/", {"appliance": "lab", "stages": ["first"], "nodes": ["gpu01"]},
                           format="json")
    assert response.status_code == 202, response.content
    # The request returned without running anything.
    assert time.monotonic() - started < 5
    run_id = response.json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.finished:
            break
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        time.sleep(0.5)
    else:
        pytest.fail("the run did not finish within 120 s:\n" + (tmp_path / "worker.log").read_text()[-3000:])
    assert run.state == RunState.SUCCEEDED, run.message
    assert run.worker_pid == worker.pid and run.worker_pid != os.getpid()
    assert run.requested_by.username == "operator-user"
    stage_run = run.stage_runs.get()
    assert stage_run.events_emitted == stage_run.events_stored > 0
    assert Path(appliance.nodes.get(name="gpu01").sysroot, "etc/probe-marker").exists()
    assert not Path(appliance.nodes.get(name="gpu02").sysroot, "etc/probe-marker").exists()
