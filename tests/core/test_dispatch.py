import threading

import pytest
from django.db import transaction

from appliance.celery import app
from appliance.core import context, dispatch

seen: dict = {}
done = threading.Event()


@app.task(name="tests.core.remember_context")
def remember_context(value):
    ctx = context.current()
    seen.update(value=value, channel=ctx.channel, actor=ctx.actor_username, thread=threading.current_thread().name)
    done.set()


@pytest.mark.django_db(transaction=True)
def test_embedded_dispatch_runs_after_commit_off_thread_with_the_actor(make_user, settings):
    settings.CELERY_BROKER_URL = ""
    user = make_user("operator", "alice")
    seen.clear()
    done.clear()
    with context.acting_as(user, channel="web"), transaction.atomic():
        dispatch.enqueue(remember_context, 42)
        assert not done.wait(0.2), "work must not start before the transaction commits"
    assert done.wait(10)
    assert seen["value"] == 42
    assert seen["channel"] == "task"
    assert seen["actor"] == "alice"
    assert seen["thread"] != threading.current_thread().name


@pytest.mark.django_db(transaction=True)
def test_rolled_back_transaction_sends_nothing(settings):
    settings.CELERY_BROKER_URL = ""
    done.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        dispatch.enqueue(remember_context, 1)
        raise RuntimeError
    assert not done.wait(0.5)


@pytest.mark.django_db(transaction=True)
def test_work_enqueued_from_a_web_request_carries_the_user_not_the_request(make_user, settings, rf):
    settings.CELERY_BROKER_URL = ""
    user = make_user("operator", "bob")
    request = rf.post("/provisioning/")
    request.user = user
    seen.clear()
    done.clear()
    with context.use(context.ActionContext(channel="web", request_id="req-12345678", request=request)):
        dispatch.enqueue(remember_context, 7)
    assert done.wait(10)
    assert seen["actor"] == "bob" and seen["channel"] == "task"
