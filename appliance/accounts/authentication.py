"""DRF authentication by API token (`Authorization: Token apl_...`, see tokens.py), and for MLflow's clients
by Bearer token or HTTP Basic (BearerOrBasicAuthentication)."""

import base64
import binascii

from django.contrib.auth import authenticate
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from appliance.core.throttling import LoginRateThrottle

from . import tokens


class TokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: send `Token <token>`.")
        try:
            token = tokens.authenticate(header[1].decode("ascii"))
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        except tokens.TokenError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


class TokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes this authentication."""

    target_class = "appliance.accounts.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token apl_...`: an API token from /api/v1/accounts/token/ or /api/v1/accounts/tokens/"}


class PasswordAttempts(LoginRateThrottle):
    """The login page's per-address budget, as spent by HTTP Basic: only a wrong password counts. A Basic
    client sends its password with every call, so counting each call (as the login form counts each
    POST) would throttle a client that does nothing wrong."""

    def exhausted(self, request) -> bool:
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        self.history = [moment for moment in self.cache.get(self.key, []) if moment > self.now - self.duration]
        return len(self.history) >= self.num_requests

    def count_failure(self, request) -> None:
        self.exhausted(request)
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


class BearerOrBasicAuthentication(authentication.BaseAuthentication):
    """How MLflow's clients authenticate (the MLflow-compatible registry API, lifecycle/mlflow_api.py):
    `Authorization: Bearer <API token>` (MLFLOW_TRACKING_TOKEN holding an appliance token, checked as
    TokenAuthentication checks it) or `Basic` (MLFLOW_TRACKING_USERNAME/PASSWORD). A Basic password goes
    through django.contrib.auth.authenticate like a login: a wrong one is audited (auth.login.failure) and
    counts towards the username's lockout, and towards the address's password-attempt budget. No session
    is made or read, so these requests need no CSRF token."""

    LOCKED_OUT = "too many failed logins for this username; try again later"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        scheme = header[0].lower()
        if scheme not in (b"bearer", b"basic"):
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid authorization header: send `Bearer <token>` or "
                                                  "`Basic <credentials>`.")
        if scheme == b"bearer":
            try:
                token = tokens.authenticate(header[1].decode("ascii"))
            except UnicodeDecodeError:
                raise exceptions.AuthenticationFailed("Invalid token.") from None
            except tokens.TokenError as exc:
                raise exceptions.AuthenticationFailed(str(exc)) from None
            return token.user, token
        return self._basic(request, header[1])

    def _basic(self, request, encoded: bytes):
        try:
            username, colon, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise exceptions.AuthenticationFailed("Invalid basic credentials: not base64 of username:password.") \
                from None
        if not colon or not username:
            raise exceptions.AuthenticationFailed("Invalid basic credentials: not base64 of username:password.")
        attempts = PasswordAttempts()
        if attempts.exhausted(request):
            raise exceptions.Throttled(wait=attempts.wait())
        user = authenticate(request=request, username=username, password=password)
        if getattr(request, "axes_locked_out", False):
            raise exceptions.Throttled(detail=self.LOCKED_OUT)
        if user is None:
            attempts.count_failure(request)
            raise exceptions.AuthenticationFailed("wrong username or password")
        return user, None

    def authenticate_header(self, request):
        return 'Basic realm="appliance"'
