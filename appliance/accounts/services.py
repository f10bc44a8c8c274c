"""Accounts: creating users, setting roles and passwords. Views, API and commands call these."""

import secrets

from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction
from django.utils.translation import gettext as _

from appliance.core.roles import Role


def generate_password() -> str:
    return secrets.token_urlsafe(18)


@transaction.atomic
def create_user(username: str, role: str, password: str, email: str = "", created_by=None):
    """`created_by`: the user making the account (None from the command line)."""
    User = get_user_model()
    if role not in Role.values:
        raise ValueError(f"role: {role!r} is not one of {', '.join(Role.values)}")
    if User.objects.filter(username=username).exists():
        raise ValueError("username: " + _("%(username)r already exists") % {"username": username})
    user = User(username=username, email=email, role=role, created_by=created_by)
    validate_password(password, user)
    user.set_password(password)
    user.save()
    return user


@transaction.atomic
def ensure_administrator(username: str, password: str | None = None) -> tuple[object, str | None]:
    """Create the first administrator if missing. Returns (user, password if one was generated)."""
    User = get_user_model()
    existing = User.objects.filter(username=username).first()
    if existing is not None:
        if existing.role != Role.ADMINISTRATOR:
            raise ValueError(f"user {username!r} exists with role {existing.role}, not administrator")
        return existing, None
    generated = None
    if not password:
        password = generated = generate_password()
    return create_user(username, Role.ADMINISTRATOR, password), generated


def _other_active_administrators(user) -> bool:
    User = get_user_model()
    return User.objects.select_for_update().filter(role=Role.ADMINISTRATOR, is_active=True).exclude(pk=user.pk).exists()


@transaction.atomic
def set_role(user, role: str):
    if role not in Role.values:
        raise ValueError(f"role: {role!r} is not one of {', '.join(Role.values)}")
    # The appliance must never be left without someone who can manage accounts.
    if user.role == Role.ADMINISTRATOR and role != Role.ADMINISTRATOR and user.is_active \
            and not _other_active_administrators(user):
        raise ValueError("role: " + _("the last active Administrator cannot be given another role"))
    user.role = role
    user.save()
    return user


@transaction.atomic
def set_active(user, active: bool, acting_user=None):
    """Activate or deactivate an account. A deactivated user can neither log in nor use an API token."""
    if not active:
        if acting_user is not None and acting_user.pk == user.pk:
            raise ValueError("is_active: " + _("you cannot deactivate your own account"))
        if user.role == Role.ADMINISTRATOR and not _other_active_administrators(user):
            raise ValueError("is_active: " + _("the last active Administrator cannot be deactivated"))
    user.is_active = active
    user.save()
    return user


def check_current_password(user, password: str, request) -> None:
    """Proving the current password is a password attempt like a login: through authenticate(), so a
    wrong one is recorded (auth.login.failure) and counts towards the username's lockout. Someone holding
    a stolen session or token cannot guess the password behind it unhindered. `request`: the Django
    request, or DRF's for the API (where the API answers the lockout itself, as the token endpoint does)."""
    if authenticate(request, username=user.get_username(), password=password) is not None:
        return
    if getattr(request, "axes_locked_out", False):
        raise ValueError("old_password: " + _("too many failed attempts for this username; try again later"))
    raise ValueError("old_password: " + _("this is not your current password"))


def change_own_password(user, old_password: str, new_password: str, request):
    """A user sets their own password, proving the current one. The User model records
    accounts.password.change; the caller keeps its session (update_session_auth_hash)."""
    # Outside the change's transaction: a wrong attempt's record and count must outlive the refusal.
    check_current_password(user, old_password, request)
    validate_password(new_password, user)
    with transaction.atomic():
        user.set_password(new_password)
        user.save()
    return user


class ApproverNotIndependent(ValueError):
    """An approval by someone who is not a second, independent person; the message says why."""


def require_independent_approver(user, *, requester_id, requester_username: str, since, what: str, second: str,
                                 role: str) -> None:
    """Four-eyes: `user` may approve what `requester_id` asked at `since` only if they are another person whom
    the requester could not have made or promoted for the occasion: not the requester, an account that existed
    and held its role before the request, and not one the requester created (directly or through accounts
    they created). `what` names the action ("archiving"), `second` the approver wanted ("a second
    Administrator"), `role` the role held ("an Administrator"). Raises ApproverNotIndependent."""
    if requester_id is not None and requester_id == user.pk:
        raise ApproverNotIndependent(_("approver: %(what)s needs %(second)s, not the one who asked") % {
            "what": what, "second": second})
    name = user.get_username()
    if user.date_joined >= since:
        raise ApproverNotIndependent(
            _("approver: %(name)r was created after the request; the approver must be an account that existed "
              "before it") % {"name": name})
    if user.role_since >= since:
        raise ApproverNotIndependent(
            _("approver: %(name)r became %(role)s after the request; the approver must have been one before it")
            % {"name": name, "role": role})
    maker, seen = user.created_by, {user.pk}
    while maker is not None and maker.pk not in seen:
        if maker.pk == requester_id:
            raise ApproverNotIndependent(
                _("approver: %(name)r was created by %(requester)r, who asked; the approver must be an account "
                  "the requester did not make") % {"name": name, "requester": requester_username})
        seen.add(maker.pk)
        maker = maker.created_by

