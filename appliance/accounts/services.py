"""Accounts: creating users, setting roles and passwords. Views, API and commands call these."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from appliance.core.roles import Role


def generate_password() -> str:
    return secrets.token_urlsafe(18)


@transaction.atomic
def create_user(username: str, role: str, password: str, email: str = ""):
    User = get_user_model()
    if role not in Role.values:
        raise ValueError(f"role: {role!r} is not one of {', '.join(Role.values)}")
    if User.objects.filter(username=username).exists():
        raise ValueError(f"username: {username!r} already exists")
    user = User(username=username, email=email, role=role)
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


@transaction.atomic
def set_role(user, role: str):
    if role not in Role.values:
        raise ValueError(f"role: {role!r} is not one of {', '.join(Role.values)}")
    user.role = role
    user.save()
    return user
