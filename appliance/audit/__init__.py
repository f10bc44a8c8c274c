"""The audit log's one entry point: `from appliance import audit; audit.record("event.name", ...)`.

Every state-changing action of the suite, from any channel (web, api, cli, task), records here.
Code that records many changes in one transaction wraps them in `with audit.batch(): ...`.
"""


def record(event: str, **kwargs):
    """Append one record to the hash-chained log (see appliance.audit.services.record)."""
    from .services import record as _record

    return _record(event, **kwargs)


def batch(using: str | None = None):
    """Write the records made inside the block together when it ends (see appliance.audit.services.batch)."""
    from .services import batch as _batch

    return _batch(using)
