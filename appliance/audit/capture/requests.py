"""Web and API requests: every state-changing request, and every refusal, leaves a record.

A refused request of a signed-in user is recorded as it happens (`access.denied`). A refused
anonymous request is counted instead, per source address and minute, and each source's count is
recorded once its minute is over (capture/refusals.py): anyone may send anonymous requests, and
one permanent record for each would let anyone flood the log.

Listed right after appliance.core.middleware.RequestContextMiddleware, so that it runs inside the
request's action context (request id, source address, user agent) and sees the final response
after authentication, the views and every other middleware have had their say.
"""

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.utils import translation

from appliance import audit

from . import refusals

STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# 429: a rate limit (password attempts per address) refused the request; counted like the others, so
# that hammering the login cannot write a record per attempt.
DENIAL_STATUSES = {401: "authentication required", 403: "permission denied", 429: "too many requests"}
MAX_PATH = 2000


def _view_name(request) -> str:
    match = getattr(request, "resolver_match", None)
    return match.view_name if match is not None and match.view_name else ""


def _api_error_message(response) -> str:
    """The message of the suite's API error body ({"error": {"message": ...}}, or MLflow's
    {"error_code", "message"}), if this is one."""
    data = getattr(response, "data", None)
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))
    if "error_code" in data:  # the MLflow-compatible API's body (appliance/lifecycle/mlflow_api.py)
        return str(data.get("message", ""))
    return str(data.get("detail", ""))


def denial_reason(request, response) -> str:
    return (getattr(request, "audit_denial_reason", "")
            or _api_error_message(response)
            or DENIAL_STATUSES[response.status_code])


def _details(request, response) -> dict:
    # The query string stays out: it is where clients put tokens they should not.
    details = {"method": request.method, "path": request.path[:MAX_PATH], "status": response.status_code,
               "view": _view_name(request)}
    client_request_id = getattr(request, "client_request_id", "")
    if client_request_id:  # the client's own correlation id (X-Request-ID), beside the server's
        details["client_request_id"] = client_request_id
    return details


def _authenticated(user):
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def request_actor(request):
    """Who made the request: the user at the end of it (a login's new user, a token's owner), or,
    when the request ended the session (logout, idle timeout), the user it started with."""
    return _authenticated(getattr(request, "user", None)) or getattr(request, "audit_user_at_start", None)


class AuditRequestMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        status = response.status_code
        actor = request_actor(request)
        common = {"actor": actor, "target_type": "url", "target_name": request.path[:255]}
        if getattr(request, "audit_recorded_by_view", False):
            # The view keeps its own record (appliance.telemetry.ingest_views: a collector's writes are
            # measurements, not actions; its refusals are recorded once per node and minute).
            pass
        elif status in DENIAL_STATUSES and actor is None:
            refusals.count(request, response, denial_reason(request, response))
        elif status in DENIAL_STATUSES:
            audit.record("access.denied", outcome="denied", reason=denial_reason(request, response),
                         details=_details(request, response), **common)
        elif request.method in STATE_CHANGING_METHODS:
            failed = status >= 400
            reason = (_api_error_message(response) or f"HTTP {status}") if failed else ""
            audit.record("api.request", outcome="failure" if failed else "success", reason=reason,
                         details=_details(request, response), **common)
        refusals.flush_at_minute_boundary()
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        # Session authentication has run by now; the view may still log the user out.
        request.audit_user_at_start = _authenticated(getattr(request, "user", None))
        return None

    def process_exception(self, request, exception):
        # Django turns PermissionDenied into a bare 403 page; keep its message as the reason, in the
        # default language (the page shows it in the reader's; the audit log is English).
        if isinstance(exception, PermissionDenied):
            with translation.override(settings.LANGUAGE_CODE):
                request.audit_denial_reason = str(exception) or DENIAL_STATUSES[403]
        return None
