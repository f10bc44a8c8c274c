import re
import time
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout

from . import context

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR", "")


class RequestContextMiddleware:
    """Gives every request an id of the server's own (echoed as X-Request-ID) and opens its action
    context. A client's X-Request-ID is the client's correlation id: kept beside the server's id
    (request.client_request_id, in the request's audit record), never used as it, so that no client
    can choose or reuse the id that ties audit records to a request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request.client_request_id = incoming if _CLIENT_REQUEST_ID.match(incoming) else ""
        request_id = str(uuid.uuid4())
        request.request_id = request_id
        channel = "api" if request.path.startswith("/api/") else "web"
        ctx = context.ActionContext(
            channel=channel, request_id=request_id, source_address=client_address(request),
            user_agent=request.headers.get("User-Agent", "")[:512], request=request,
        )
        with context.use(ctx):
            response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response


class SessionIdleTimeoutMiddleware:
    """Logs a browser session out after APPLIANCE_SESSION_IDLE_TIMEOUT seconds without a request."""

    KEY = "_last_activity"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session") \
                and request.session.session_key is not None:
            now = int(time.time())
            last = request.session.get(self.KEY)
            if last is not None and now - last > settings.SESSION_IDLE_TIMEOUT:
                request.session_expired = True
                logout(request)
                minutes = max(1, settings.SESSION_IDLE_TIMEOUT // 60)
                messages.info(request, f"Your session ended after {minutes} minutes without activity; log in again.")
            else:
                request.session[self.KEY] = now
        return self.get_response(request)
