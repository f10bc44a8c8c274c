"""API tokens: issuing, checking, listing and revoking. The API, the portal and Django's admin call these.

A token reads `apl_<prefix>.<secret>`: the prefix (12 hex digits) names the row and is shown in
lists; the secret (32 random bytes) is stored only as its SHA-256 digest, so the database holds
nothing a caller could present. A plain digest is enough: the secret is random, not a password.
"""

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance import audit
from appliance.core.roles import can

from .models import ApiToken

TAG = "apl_"
# How stale `last_used` may get: refreshing it on every request would write on every read.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TokenError(ValueError):
    """A token that cannot be used; the message is safe to show the caller."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def issue_token(user, name: str = "", *, via: str = "api") -> tuple[ApiToken, str]:
    """A new token for `user` (its owner asks: tokens are never made for somebody else).
    Returns the row and the token text, which is shown this once."""
    if not user.is_active:
        raise TokenError("user: " + _("the account is deactivated"))
    name = name.strip()
    if len(name) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise TokenError("name: " + _("at most 100 printable characters"))
    secret = secrets.token_urlsafe(32)
    now = timezone.now()
    token = ApiToken.objects.create(user=user, name=name, prefix=secrets.token_hex(6), digest=_digest(secret),
                                    created=now, expires=now + timedelta(days=settings.TOKEN_TTL_DAYS))
    audit.record("auth.token.create", target=token, actor=user, details={
        "owner": user.get_username(), "prefix": token.prefix, "name": name, "via": via,
        "expires": token.expires.isoformat()})
    return token, f"{TAG}{token.prefix}.{secret}"


def authenticate(text: str) -> ApiToken:
    """The token `text` stands for, if it may be used now; TokenError (with the reason) otherwise."""
    prefix, dot, secret = text.removeprefix(TAG).partition(".")
    if not text.startswith(TAG) or not dot or not prefix or not secret:
        raise TokenError("Invalid token.")
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not hmac.compare_digest(token.digest, _digest(secret)):
        raise TokenError("Invalid token.")
    now = timezone.now()
    if token.revoked is not None:
        raise TokenError("Token revoked.")
    if token.expires <= now:
        raise TokenError("Token expired.")
    if not token.user.is_active:
        raise TokenError("User inactive or deleted.")
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now
    return token


def visible_to(user):
    """The tokens `user` may list: everyone's for those who read accounts, otherwise their own."""
    tokens = ApiToken.objects.select_related("user", "revoked_by").order_by("-created")
    return tokens if can(user, "accounts.view") else tokens.filter(user=user)


def may_revoke(user, token: ApiToken) -> bool:
    return token.user_id == user.pk or can(user, "accounts.manage")


@transaction.atomic
def revoke_token(token: ApiToken, user) -> ApiToken:
    """Revoke at once. The owner revokes their own tokens; Administrators revoke anyone's."""
    if not may_revoke(user, token):
        raise PermissionError(f"{token}: only its owner or an Administrator may revoke it")
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked is not None:
        raise TokenError(_("%(token)s was already revoked") % {"token": token.label})
    token.revoked, token.revoked_by = timezone.now(), user
    token.save(update_fields=["revoked", "revoked_by"])
    audit.record("auth.token.revoke", target=token, actor=user, details={
        "owner": token.user.get_username(), "prefix": token.prefix, "name": token.name})
    return token
