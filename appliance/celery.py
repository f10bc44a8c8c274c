"""The Celery application. Tasks are thin wrappers around service functions."""

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

app = Celery("appliance", task_cls="appliance.core.tasks:ContextTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
if not app.conf.broker_url:
    # Embedded mode: nothing is ever sent to a broker (appliance.core.dispatch runs tasks in-process).
    app.conf.broker_url = "memory://"
app.autodiscover_tasks()

# `celery -A appliance beat` runs the provisioning watchdog: checking at half the heartbeat timeout
# bounds how long a run whose worker died can still show as running.
app.conf.beat_schedule = {
    "provisioning-watchdog": {
        "task": "provisioning.watchdog",
        "schedule": max(5, settings.PROVISIONING_HEARTBEAT_TIMEOUT // 2),
    },
    # Refused anonymous requests are counted per source and minute; this writes the finished minutes.
    "audit-refused-requests": {
        "task": "audit.flush_refused_requests",
        "schedule": 30,
    },
}
