"""The analytics clock: Celery beat (or the embedded worker's timer) runs attribution and the findings."""

from celery import shared_task


# Every 15 minutes: the findings follow the attributed hours. No `task.run` record of every tick; a
# refresh that opens or resolves findings records analytics.findings.refresh with what it changed.
@shared_task(name="analytics.refresh_findings", audit_record_run=False)
def refresh_findings() -> dict:
    from . import findings

    return findings.refresh()
