from django.contrib.auth.models import AbstractUser
from django.contrib.auth.models import UserManager as DjangoUserManager
from django.db import models, transaction

from appliance.audit import record
from appliance.audit.tracking import AuditedModel, AuditedQuerySet
from appliance.core.roles import Role


class UserManager(DjangoUserManager.from_queryset(AuditedQuerySet)):
    pass


class User(AuditedModel, AbstractUser):
    """A person using the suite. Exactly one role; Administrators also get Django's admin site."""

    role = models.CharField(max_length=20, choices=Role.choices, default=Role.VIEWER)

    objects = UserManager()
    audit_exclude = ("last_login",)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def save(self, *args, **kwargs):
        self.is_staff = self.is_superuser = self.role == Role.ADMINISTRATOR
        using = kwargs.get("using") or self._state.db or "default"
        with transaction.atomic(using=using):
            stored = None if self._state.adding else type(self)._base_manager.filter(pk=self.pk).first()
            super().save(*args, **kwargs)
            if stored is not None and stored.role != self.role:
                record("accounts.role.change", target=self, details={"role": [stored.role, self.role]})
            if stored is not None and stored.password != self.password:
                record("accounts.password.change", target=self)

    @property
    def role_label(self) -> str:
        return Role(self.role).label
