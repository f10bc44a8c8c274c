"""The telemetry clock: Celery beat (or the embedded worker's timer) folds complete hours and prunes by age."""

from celery import shared_task

from . import services


# No `task.run` record of every tick (every 5 minutes): folding rewrites measurements, not anything an
# actor changed, and a prune that deletes anything records telemetry.rollup.prune with its counts.
@shared_task(name="telemetry.fold_and_prune", audit_record_run=False)
def fold_and_prune() -> dict:
    """Fold first: a prune never deletes per-minute rows whose hour is not folded yet."""
    folded = services.fold()
    pruned = services.prune()
    return {"folded": [hour.isoformat() for hour in folded], "pruned": pruned}
