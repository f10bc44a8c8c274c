"""Pages every app shares: the health probe and the appliance's own error pages.

Error pages never show code, settings or tracebacks (DEBUG is off unless a developer turns it on).
Under /api/ an error is the API's one error body; elsewhere it is a page inside the portal frame.
"""

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularRedocView

from . import csp
from .api_root import unversioned_hint

API_PREFIX = "/api/"


def health(request):
    """Liveness for load balancers: the database answers. Open to all, reveals nothing."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def _is_api(request) -> bool:
    return request.path.startswith(API_PREFIX)


def _api_error(request, status: int, code: str, message: str) -> JsonResponse:
    body = {"error": {"status": status, "code": code, "message": message},
            "request_id": getattr(request, "request_id", "")}
    return JsonResponse(body, status=status)


def bad_request(request, exception):
    # The API answers in English (its messages are read by programs and become audit reasons).
    if _is_api(request):
        return _api_error(request, 400, "bad_request", "The request could not be understood.")
    return render(request, "400.html", {"message": _("The request could not be understood.")}, status=400)


def permission_denied(request, exception):
    # The message says why (the views raise PermissionDenied("Your role does not allow this.")).
    message = str(exception)
    if _is_api(request):
        return _api_error(request, 403, "permission_denied", message or "You may not see this page.")
    return render(request, "403.html", {"message": message or _("You may not see this page.")}, status=403)


def page_not_found(request, exception):
    if _is_api(request):
        return _api_error(request, 404, "not_found", unversioned_hint(request.path) or "Not found.")
    return render(request, "404.html", {"request_path": request.path}, status=404)


def server_error(request):
    """Rendered without the request's context: whatever failed (the database, a context
    processor) must not fail the error page too."""
    if _is_api(request):
        return _api_error(request, 500, "server_error",
                          "The appliance failed to answer this request; the error is in its log.")
    return HttpResponse(loader.get_template("500.html").render(
        {"request_id": getattr(request, "request_id", "")}), status=500)


class ApiReferenceView(SpectacularRedocView):
    """The Redoc API reference. Redoc styles the page with <style> elements it writes at run time
    and cannot give a nonce, so this page alone allows inline styles (never inline scripts)."""

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = csp.policy(getattr(request, csp.NONCE_ATTRIBUTE, ""), inline_styles=True)
        return response
