import re
import time
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from . import context
from .addresses import client_address

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestContextMiddleware:
    """Gives every request an id of the server's own (echoed as X-Request-ID) and opens its action
    context. A client's X-Request-ID is the client's correlation id: kept beside the server's id
    (request.client_request_id, in the request's audit record), never used as it, so that no client
    can choose or reuse the id that ties audit records to a request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request.client_request_id = incoming if _CLIENT_REQUEST_ID.fullmatch(incoming) else ""
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


LOGIN_TIME_KEY = "_authenticated_at"


def stamp_login(sender, request, user, **kwargs):
    """user_logged_in receiver: the session's maximum age counts from this moment."""
    session = getattr(request, "session", None)
    if session is not None:
        now = int(time.time())
        session[LOGIN_TIME_KEY] = now
        session[SessionLimitsMiddleware.ACTIVITY_KEY] = now


class SessionLimitsMiddleware:
    """Ends a browser session after APPLIANCE_SESSION_IDLE_TIMEOUT seconds without a request, and in
    any case APPLIANCE_SESSION_MAX_AGE seconds after its login, however busy it is.

    Both clocks live in the session (server side), not in the cookie's expiry: a cookie expiry is
    pushed forward whenever the session is saved, which would make the maximum age a sliding one.
    A session without a login time (made before this rule existed) is ended too.
    """

    ACTIVITY_KEY = "_last_activity"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session") \
                and request.session.session_key is not None:
            now = int(time.time())
            session = request.session
            logged_in_at, last = session.get(LOGIN_TIME_KEY), session.get(self.ACTIVITY_KEY)
            if logged_in_at is None or now - logged_in_at > settings.SESSION_COOKIE_AGE:
                self._end(request, "max_age", _("Your session reached its maximum length of %(duration)s; "
                                                "log in again.") % {"duration": _duration(settings.SESSION_COOKIE_AGE)})
            elif last is not None and now - last > settings.SESSION_IDLE_TIMEOUT:
                self._end(request, "idle", _("Your session ended after %(duration)s without activity; "
                                             "log in again.") % {"duration": _duration(settings.SESSION_IDLE_TIMEOUT)})
            else:
                session[self.ACTIVITY_KEY] = now
        return self.get_response(request)

    @staticmethod
    def _end(request, cause: str, message: str) -> None:
        request.session_expired = cause
        logout(request)
        messages.info(request, message)


def _duration(seconds: int) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        hours = seconds // 3600
        return ngettext("%(count)d hour", "%(count)d hours", hours) % {"count": hours}
    minutes = max(1, seconds // 60)
    return ngettext("%(count)d minute", "%(count)d minutes", minutes) % {"count": minutes}
