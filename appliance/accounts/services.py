"""Accounts: creating users, setting roles and passwords. Views, API and commands call these."""

import secrets

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction
from django.utils.translation import gettext as _

from appliance.core.conflicts import StateConflict
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


class ApproverNotIndependent(StateConflict, ValueError):
    """A four-eyes decision by people who are not two independent persons; the message says why and `field`
    names whose account is the reason ("approver" or "requester"). A StateConflict: every surface answers
    it 409 naming that field (appliance.core.conflicts)."""

    def __init__(self, message: str, field: str = "approver"):
        super().__init__(message)
        self.field = field


def _makers(user) -> dict[int, str]:
    """Every account above `user` in its chain of creators: {pk: username}."""
    makers, maker = {}, user.created_by
    while maker is not None and maker.pk not in makers and maker.pk != user.pk:
        makers[maker.pk] = maker.get_username()
        maker = maker.created_by
    return makers


def _latest_change(user) -> tuple[object, str]:
    """When the account last became able to take part in a decision, and how: made, re-enabled or given its
    role (the change a requester, or someone on their behalf, could make for the occasion)."""
    changes = [(user.date_joined, _("was created")), (user.active_since, _("was re-enabled")),
               (user.role_since, _("was given the role %(role)s") % {"role": user.role})]
    return max(changes, key=lambda change: change[0])


def require_independent_approver(approver, requester, *, since, what: str, second: str) -> None:
    """The one four-eyes rule. `approver` may decide what `requester` asked at `since` only if they are two
    independent people:
    - two distinct accounts;
    - no creator link either way, at any depth (neither made the other, nor made an account that made it);
    - neither account was created, re-enabled or given its role within settings.FOUR_EYES_COOLING_PERIOD
      before the request (nor since): an account made or promoted for the occasion does not count.
    `what` names the decision ("archiving"), `second` the approver wanted ("a second Administrator").
    Raises ApproverNotIndependent; its `field` is the account at fault.

    Accounts that only share a creator (A made both B and C) are not linked: C may decide what B asked. A
    common creator is the normal case, not a sign of one person: an appliance's accounts are made by its one
    or two Administrators, so refusing siblings would refuse nearly every pair, and the decisions would go
    round the rule rather than through it. What that leaves open, one Administrator making two accounts and
    acting as both, no link between accounts can tell from two colleagues made by the same Administrator: the
    cooling period holds both accounts back first, each account's creation is recorded with its creator
    (so a decision by two accounts of one maker shows in the audit log), and one account per person is the
    site's to keep (its directory, its procedure for handing out accounts)."""
    if requester is None:
        raise ApproverNotIndependent(
            _("requester: the account that asked no longer exists; %(what)s needs a new request") % {"what": what},
            "requester")
    if requester.pk == approver.pk:
        raise ApproverNotIndependent(_("approver: %(what)s needs %(second)s, not the one who asked") % {
            "what": what, "second": second})
    approver_name, requester_name = approver.get_username(), requester.get_username()
    if requester.pk in _makers(approver):
        raise ApproverNotIndependent(
            _("approver: %(name)r was created by %(requester)r, who asked (directly or through accounts they "
              "made); the approver must be an account the requester did not make") % {
                "name": approver_name, "requester": requester_name})
    if approver.pk in _makers(requester):
        raise ApproverNotIndependent(
            _("approver: %(name)r created %(requester)r, who asked (directly or through accounts they made); "
              "the approver must not have made the requester's account") % {
                "name": approver_name, "requester": requester_name})
    cooling = settings.FOUR_EYES_COOLING_PERIOD
    for field, account in (("requester", requester), ("approver", approver)):
        changed_at, change = _latest_change(account)
        if changed_at > since - cooling:
            raise ApproverNotIndependent(
                _("%(field)s: %(name)r %(change)s at %(at)s, less than %(hours)s h before the request; an account "
                  "takes part in a four-eyes decision only %(hours)s h after it was created, re-enabled or given its "
                  "role: a request made from %(until)s on can be decided") % {
                    "field": field, "name": account.get_username(), "change": change,
                    "at": changed_at.isoformat(timespec="seconds"), "hours": _hours(cooling),
                    "until": (changed_at + cooling).isoformat(timespec="seconds")},
                field)


def _hours(period) -> str:
    hours = period.total_seconds() / 3600
    return f"{hours:g}"
