"""The analytics clock: Celery beat (or the embedded worker's timer) runs attribution and the findings."""

from celery import shared_task

from . import ledger


# Every minute: each complete minute of rollups is added to the ledger. No `task.run` record of every tick:
# attribution adds derived figures, not anything an actor changed; a rebuild a person asks for is recorded
# (analytics.attribution.rebuild).
@shared_task(name="analytics.attribute", audit_record_run=False)
def attribute(*, until: str | None = None) -> dict:
    from datetime import datetime

    result = ledger.run_incremental(until=datetime.fromisoformat(until) if until else None)
    # The page's summaries follow at once, so the first read after a new minute does not pay for it.
    from . import services

    result["summary"] = services.refresh_summary()
    return result


# Every 15 minutes: the findings follow the attributed hours. No `task.run` record of every tick; a
# refresh that opens or resolves findings records analytics.findings.refresh with what it changed.
@shared_task(name="analytics.refresh_findings", audit_record_run=False)
def refresh_findings() -> dict:
    from . import findings

    return findings.refresh()
