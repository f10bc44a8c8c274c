"""Rate limits keyed on the real client address (see addresses.py), never on a header the client chose."""

from django.http import HttpResponse
from django.template.loader import render_to_string
from rest_framework.throttling import SimpleRateThrottle

from .addresses import client_address


class LoginRateThrottle(SimpleRateThrottle):
    """The per-address limit on password attempts, shared by the portal login and the token endpoint
    (same scope, same cache key): a client gets one budget, whichever door it knocks on."""

    scope = "login"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


class LoginThrottleMixin:
    """Portal view mixin: POSTs (password attempts) beyond the per-address rate get a 429 page."""

    def post(self, request, *args, **kwargs):
        throttle = LoginRateThrottle()
        if not throttle.allow_request(request, self):
            wait = int(throttle.wait() or 60) + 1
            body = render_to_string("accounts/throttled.html", {"wait": wait}, request=request)
            response = HttpResponse(body, status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)
