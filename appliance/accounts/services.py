"""Accounts: creating users, setting roles and passwords. Views, API and commands call these."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

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
        raise ValueError(f"username: {username!r} already exists")
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
        raise ValueError("role: the last active Administrator cannot be given another role")
    user.role = role
    user.save()
    return user


@transaction.atomic
def set_active(user, active: bool, acting_user=None):
    """Activate or deactivate an account. A deactivated user can neither log in nor use an API token."""
    if not active:
        if acting_user is not None and acting_user.pk == user.pk:
            raise ValueError("is_active: you cannot deactivate your own account")
        if user.role == Role.ADMINISTRATOR and not _other_active_administrators(user):
            raise ValueError("is_active: the last active Administrator cannot be deactivated")
    user.is_active = active
    user.save()
    return user


@transaction.atomic
def change_own_password(user, old_password: str, new_password: str):
    """A user sets their own password, proving the current one. The User model records
    accounts.password.change; the caller keeps its session (update_session_auth_hash)."""
    if not user.check_password(old_password):
        raise ValueError("old_password: this is not your current password")
    validate_password(new_password, user)
    user.set_password(new_password)
    user.save()
    return user
