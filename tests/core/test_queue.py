"""The database queue of embedded mode: work a process queued and did not run (it died) waits in the
database, and the next serving process runs it, as the user who asked."""

import threading

import pytest
from django.db import connection

from appliance.celery import app
from appliance.core import context, dispatch, queue
from appliance.core.tasks import queue_cleanup

ran: dict = {}
done = threading.Event()


@app.task(name="tests.core.queue.remember")
def remember(value):
    ran.update(value=value, actor=context.current().actor_username, thread=threading.current_thread().name)
    done.set()


def rows(visible: bool) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM kombu_message WHERE visible = %s", [visible])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_work_left_in_the_queue_by_a_dead_process_runs_in_the_next_serving_process(make_user, settings):
    settings.CELERY_BROKER_URL = ""
    user = make_user("operator", "carol")
    url = queue.broker_url(connection.settings_dict)
    assert url == f"sqla+sqlite:///{connection.settings_dict['NAME']}" or url.startswith("sqla+postgresql+psycopg://")
    # What dispatch.enqueue leaves in the database when its process dies before a thread took the work.
    with context.acting_as(user, channel="web"):
        snapshot = context.current().snapshot()
    ran.clear()
    done.clear()
    # Work that earlier tests of this session committed to the queue and nobody consumed is not this test's.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM kombu_message")
    with queue.connection(url) as broker:
        remember.apply_async(args=(99,), kwargs={dispatch.CONTEXT_KWARG: snapshot}, connection=broker)
    assert rows(visible=True) == 1
    assert not done.wait(0.5)

    dispatch.start_embedded_worker()  # what wsgi.py / asgi.py do at start
    try:
        assert done.wait(20), "the serving process's consumer did not run the queued work"
    finally:
        dispatch.stop_embedded_worker()
    assert ran == {"value": 99, "actor": "carol", "thread": ran["thread"]}
    assert ran["thread"].startswith("appliance-worker")
    assert rows(visible=True) == 0 and rows(visible=False) == 1
    assert queue_cleanup() == 1  # the beat's housekeeping deletes the taken message's row
    assert rows(visible=False) == 0
