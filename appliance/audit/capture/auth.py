"""Logins, failed logins, logouts (idle timeouts included) and lockouts."""

from axes.helpers import get_failure_limit
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

from appliance import audit

IDLE_TIMEOUT_REASON = "session idle timeout"
MAX_AGE_REASON = "session maximum age reached"


def on_logged_in(sender, request, user, **kwargs):
    audit.record("auth.login.success", actor=user, target=user,
                 details={"backend": getattr(user, "backend", "") or ""})


def lock_state(request, credentials) -> str:
    """'open', 'locking' (this failure reached the limit) or 'locked' (an attempt while locked).

    axes counts failures made during a lockout too (each one restarts the cool-off), so the
    attempt that locks is the one whose count equals the limit; a count above it, or none at
    all when axes refused before counting, is an attempt against a lock already in place.
    """
    if request is None or not getattr(request, "axes_locked_out", False):
        return "open"
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None or failures > get_failure_limit(request, credentials):
        return "locked"
    return "locking"


_FAILURE_REASONS = {"open": "invalid credentials", "locking": "invalid credentials; the username is now locked out",
                    "locked": "username is locked out"}


def _user_pk(username: str) -> str:
    User = get_user_model()
    if not username:
        return ""
    pk = User._base_manager.filter(**{User.USERNAME_FIELD: username}).values_list("pk", flat=True).first()
    return "" if pk is None else str(pk)


def on_login_failed(sender, credentials, request=None, **kwargs):
    User = get_user_model()
    # Only the username: Django masks the password in `credentials`, and nothing else is wanted.
    username = str(credentials.get(User.USERNAME_FIELD) or credentials.get("username") or "")[:150]
    audit.record("auth.login.failure", outcome="failure", reason=_FAILURE_REASONS[lock_state(request, credentials)],
                 target_type=User._meta.label_lower, target_id=_user_pk(username), target_name=username,
                 details={"attempted_username": username})


# request.session_expired (set by core.middleware.SessionLimitsMiddleware) -> (reason, cause)
_EXPIRY = {"idle": (IDLE_TIMEOUT_REASON, "idle timeout"), "max_age": (MAX_AGE_REASON, "maximum age")}


def on_logged_out(sender, request, user=None, **kwargs):
    if user is None:
        return
    reason, cause = _EXPIRY.get(getattr(request, "session_expired", ""), ("", "user"))
    audit.record("auth.logout", actor=user, target=user, reason=reason, details={"cause": cause})


def on_locked_out(sender, request=None, username=None, ip_address=None, **kwargs):
    credentials = getattr(request, "axes_credentials", None) or {}
    if lock_state(request, credentials) != "locking":
        # Attempts against a lock already in place are recorded as failed logins that say so.
        return
    User = get_user_model()
    username = str(username or "")[:150]
    failures = request.axes_failures_since_start
    cooloff = settings.AXES_COOLOFF_TIME
    audit.record("auth.lockout", outcome="denied", reason=f"{failures} failed logins",
                 target_type=User._meta.label_lower, target_id=_user_pk(username), target_name=username,
                 details={"username": username, "failures": failures,
                          "failure_limit": get_failure_limit(request, credentials),
                          "cooloff_seconds": int(cooloff.total_seconds()) if hasattr(cooloff, "total_seconds") else None,
                          "address": ip_address or ""})


def connect() -> None:
    user_logged_in.connect(on_logged_in, dispatch_uid="audit-login")
    user_login_failed.connect(on_login_failed, dispatch_uid="audit-login-failed")
    user_logged_out.connect(on_logged_out, dispatch_uid="audit-logout")
    user_locked_out.connect(on_locked_out, dispatch_uid="audit-lockout")
