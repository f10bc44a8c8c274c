"""The Celery application. Tasks are thin wrappers around service functions."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

app = Celery("appliance", task_cls="appliance.core.tasks:ContextTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
if not app.conf.broker_url:
    # Embedded mode: nothing is ever sent to a broker (appliance.core.dispatch runs tasks in-process).
    app.conf.broker_url = "memory://"
app.autodiscover_tasks()
