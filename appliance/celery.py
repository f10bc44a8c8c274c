"""The Celery application. Tasks are thin wrappers around service functions."""

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

app = Celery("appliance", task_cls="appliance.core.tasks:ContextTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
if not app.conf.broker_url:
    # Embedded mode: appliance.core.dispatch queues work in the database queue of the connection in use
    # (a test run's database included) through connections of its own; nothing goes through the app's.
    # A Celery worker is given the database queue explicitly: CELERY_BROKER_URL=sqla+... (what
    # `appliance install --production` writes; appliance.core.queue).
    app.conf.broker_url = "memory://"
app.autodiscover_tasks()


def beat_schedule() -> dict:
    """What `celery -A appliance beat` runs, and, with no broker, the embedded worker's timers
    (appliance.core.dispatch.start_embedded_beat)."""
    return {
        # Checking at half the heartbeat timeout bounds how long a run whose worker died can still
        # show as running.
        "provisioning-watchdog": {
            "task": "provisioning.watchdog",
            "schedule": max(5, settings.PROVISIONING_HEARTBEAT_TIMEOUT // 2),
        },
        # A signed checkpoint every AUDIT_CHECKPOINT_EVERY_SECONDS while records are unsigned, so an
        # idle appliance's last records are sealed too.
        "audit-checkpoint-clock": {
            "task": "audit.seal_unsigned",
            "schedule": max(1, settings.AUDIT_CHECKPOINT_EVERY_SECONDS),
        },
        # Refused anonymous requests are counted per source and minute; this writes the finished minutes.
        "audit-refused-requests": {
            "task": "audit.flush_refused_requests",
            "schedule": 30,
        },
        # Per-minute telemetry rollups of complete hours become per-hour rows; old rows go by age.
        "telemetry-fold-prune": {
            "task": "telemetry.fold_and_prune",
            "schedule": 300,
        },
        # Findings (recommendations) follow the attributed GPU-hours.
        "analytics-findings": {
            "task": "analytics.refresh_findings",
            "schedule": 900,
        },
        # Each complete minute of GPU rollups is attributed to a cause and added to the ledger (CauseHour).
        "analytics-attribute": {
            "task": "analytics.attribute",
            "schedule": max(10, settings.ANALYTICS_ATTRIBUTE_EVERY_SECONDS),
        },
        # Lending plans move on: drains whose jobs ended (or whose deadline passed), windows that closed.
        "lending-advance": {
            "task": "lending.advance",
            "schedule": 60,
        },
        # Promotion requests that waited past their time expire; deployments rolling out are checked.
        "lifecycle-expire-requests": {
            "task": "lifecycle.expire_requests",
            "schedule": 300,
        },
        "lifecycle-follow-deployments": {
            "task": "lifecycle.follow_deployments",
            "schedule": 30,
        },
        # Versions registered from a running job's batch script get the job's end once Slurm reports it.
        "lifecycle-refresh-training": {
            "task": "lifecycle.refresh_training",
            "schedule": 60,   # slurmctld forgets an ended job after MinJobAge (300 s by default)
        },
        # Every registered version's files are re-hashed in full (a changed file raises an audited alert).
        "lifecycle-verify-artifacts": {
            "task": "lifecycle.verify_artifacts",
            "schedule": max(60, settings.LIFECYCLE_FULL_VERIFY_EVERY_SECONDS),
        },
        # The database queue keeps the rows of the messages workers took: delete them.
        "queue-cleanup": {
            "task": "core.queue_cleanup",
            "schedule": 600,
        },
    }


app.conf.beat_schedule = beat_schedule()
