"""The ingest endpoint's HTTP side: InfluxDB v2's write API (`POST /api/v2/write`), its `/health`,
`/ready` and `/ping`, under /telemetry/ingest/. A collector writes here with influxdb-client, unchanged, as it would
to an InfluxDB: the answers are InfluxDB's (204, or JSON {"code", "message"} with the status).

No session, no CSRF token: a collector is not a browser, it authenticates every write with its node's
token. Writes are not audited one by one (measurements, not actions); a refused write is, once per node
(or, without a valid token, per source address) and minute, and so is a write that named jobs no scheduler
puts on its node (kept unverified: placements.py).
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import caches
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from appliance import audit
from appliance.core import context

from . import ingest
from .lineprotocol import PRECISIONS

log = logging.getLogger(__name__)

REFUSAL_KEY = "telemetry:ingest-refused:"
UNVERIFIED_KEY = "telemetry:ingest-unverified:"


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


def _record_refusal(request, error: ingest.IngestError, collector=None) -> None:
    """One telemetry.ingest.refused record per node (or source address) and minute: a collector that
    keeps retrying a refused write must not grow the audit log at its pace."""
    who = collector.node.name if collector is not None else (context.current().source_address or "unknown")
    minute = int(time.time() // 60)
    if not caches[settings.REFUSAL_COUNTER_CACHE].add(f"{REFUSAL_KEY}{minute}:{who}", 1, 120):
        return
    details = {"status": error.status, "path": request.path[:200]}
    if collector is not None:
        audit.record("telemetry.ingest.refused", target=collector.node, outcome="denied", reason=error.message,
                     details=details)
    else:
        audit.record("telemetry.ingest.refused", target_type="url", target_name=request.path[:255],
                     outcome="denied", reason=error.message, details=details)


def _record_unverified(collector, stored) -> None:
    """One telemetry.ingest.unverified_job record per node and minute: the job ids its rows named that no
    scheduler puts on it (the rows were kept, their job blank)."""
    minute = int(time.time() // 60)
    if not caches[settings.REFUSAL_COUNTER_CACHE].add(f"{UNVERIFIED_KEY}{minute}:{collector.node.name}", 1, 120):
        return
    jobs = dict(sorted(stored.unverified.items())[:20])
    audit.record("telemetry.ingest.unverified_job", target=collector.node, outcome="denied",
                 reason=f"{collector.node.name} named jobs no scheduler puts on it: {', '.join(jobs)}; its rows are "
                        "kept without them",
                 details={"jobs": jobs, "job_count": len(stored.unverified),
                          "schedulers_unavailable": stored.unavailable})


@csrf_exempt
def write(request):
    request.audit_recorded_by_view = True
    if request.method != "POST":
        response = _error(405, "method not allowed", "POST line protocol to this URL")
        response["Allow"] = "POST"
        return response
    collector = None
    try:
        collector = ingest.authenticate(request.headers.get("Authorization", ""))
        precision = request.GET.get("precision", "ns")
        if precision not in PRECISIONS:
            raise ingest.IngestError(400, "invalid", f"precision {precision[:10]!r}: expected one of "
                                                     f"{', '.join(PRECISIONS)}")
        body = ingest.read_body(request, request.META.get("CONTENT_LENGTH"), request.headers.get("Content-Encoding"))
        ingest.admit(collector, body.count(b"\n") + 1)
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            raise ingest.IngestError(400, "invalid", f"the body is not UTF-8 (byte {exc.start})") from None
        parsed = ingest.parse(text, collector.node.name, precision)
        stored = ingest.store(collector, parsed)
        if stored.unverified:
            _record_unverified(collector, stored)
    except ingest.IngestError as error:
        if error.status in (401, 403, 429):
            _record_refusal(request, error, collector)
        elif collector is not None:
            log.warning("telemetry ingest from %s refused (%s): %s", collector.node.name, error.status, error.message)
        response = _error(error.status, error.code, error.message)
        if getattr(error, "retry_after", None):
            response["Retry-After"] = str(error.retry_after)
        return response
    return HttpResponse(status=204)


@require_GET
def health(request):
    """InfluxDB's /health: the database answers."""
    request.audit_recorded_by_view = True
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"name": "appliance", "message": "ready for writes", "status": "pass", "checks": [],
                         "version": _version()})


STARTED = time.time()


def _go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (what InfluxDB's /ready says under "up"): 1h2m3.5s."""
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    text = f"{rest:.6f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


@require_GET
def ready(request):
    """InfluxDB's /ready (clients probe it before writing): 200 {"status": "ready", "started", "up"}."""
    from datetime import UTC, datetime

    request.audit_recorded_by_view = True
    return JsonResponse({"status": "ready", "started": datetime.fromtimestamp(STARTED, UTC).isoformat(),
                         "up": _go_duration(max(0.0, time.time() - STARTED))})


@require_GET
def ping(request):
    request.audit_recorded_by_view = True
    response = HttpResponse(status=204)
    response["X-Influxdb-Version"] = _version()
    return response


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("appliance-suite")
    except PackageNotFoundError:
        return "unknown"
