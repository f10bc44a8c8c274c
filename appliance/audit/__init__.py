"""The audit log's one entry point: `from appliance import audit; audit.record("event.name", ...)`.

Every state-changing action of the suite, from any channel (web, api, cli, task), records here.
"""


def record(event: str, **kwargs):
    """Append one record to the hash-chained log (see appliance.audit.services.record)."""
    from .services import record as _record

    return _record(event, **kwargs)
