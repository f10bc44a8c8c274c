"""The attribution clock: Celery beat (or the embedded worker's timer) adds each complete minute to the ledger."""

from celery import shared_task

from . import ledger


# No `task.run` record of every tick (every minute): attribution adds derived figures, not anything an actor
# changed; a rebuild a person asks for is recorded (analytics.attribution.rebuild).
@shared_task(name="analytics.attribute", audit_record_run=False)
def attribute() -> dict:
    return ledger.run_incremental()
