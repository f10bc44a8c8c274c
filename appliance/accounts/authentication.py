"""DRF authentication by API token (`Authorization: Token apl_...`); see tokens.py."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

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
