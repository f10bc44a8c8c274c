"""Background tasks: the actor who asked travels with the task through appliance.core.dispatch,
and each run records task.run; what the task changes is recorded under the same actor."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.celery import app as celery_app
from appliance.core import context, dispatch
from appliance.core.roles import Role
from appliance.inventory.models import Appliance

pytestmark = pytest.mark.django_db


@celery_app.task(name="tests.audit.create_appliance")
def create_appliance(name):
    Appliance.objects.create(name=name, description="made by a task")
    return name


@celery_app.task(name="tests.audit.fail")
def failing_task():
    raise ValueError("the disk is full")


@pytest.fixture
def eager_celery(settings):
    settings.CELERY_BROKER_URL = "memory://"
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


def test_task_run_records_the_actor_who_asked(users, eager_celery, django_capture_on_commit_callbacks):
    operator = users[Role.OPERATOR]
    with django_capture_on_commit_callbacks(execute=True), \
            context.acting_as(operator, channel="web", request_id="req-task-0001"):
        dispatch.enqueue(create_appliance, "from-task")

    run = AuditRecord.objects.get(event="task.run", target_name="tests.audit.create_appliance")
    assert run.outcome == "success"
    assert run.channel == "task"
    assert (run.actor_id, run.actor_username, run.actor_roles) == (operator.pk, operator.username, [Role.OPERATOR])
    assert run.request_id == "req-task-0001"
    assert run.details["task"] == "tests.audit.create_appliance" and run.details["eager"] is True
    assert run.details["duration_ms"] >= 0

    created = AuditRecord.objects.get(event="inventory.appliance.create", target_name="from-task")
    assert created.channel == "task" and created.actor_username == operator.username
    assert created.request_id == "req-task-0001"
    assert created.sequence < run.sequence


def test_failed_task_run_is_a_failure_with_the_error(users, eager_celery, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), \
            context.acting_as(users[Role.ADMINISTRATOR], channel="api", request_id="req-task-0002"):
        dispatch.enqueue(failing_task)
    run = AuditRecord.objects.get(event="task.run", target_name="tests.audit.fail")
    assert run.outcome == "failure"
    assert run.reason == "FAILURE: ValueError: the disk is full"
    assert run.actor_username == "administrator-user" and run.request_id == "req-task-0002"
