from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.auth.models import UserManager as DjangoUserManager
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from appliance.audit import record
from appliance.audit.tracking import AuditedModel, AuditedQuerySet
from appliance.core.roles import Role


class UserManager(DjangoUserManager.from_queryset(AuditedQuerySet)):
    pass


class User(AuditedModel, AbstractUser):
    """A person using the suite. Exactly one role; Administrators also get Django's admin site."""

    role = models.CharField(max_length=20, choices=Role.choices, default=Role.VIEWER)
    # Who made the account (none: the command line), since when it holds its role and since when it is
    # enabled: the four-eyes rule (accounts.services.require_independent_approver) refuses people linked by
    # creation, and accounts made, promoted or re-enabled within its cooling period.
    created_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    role_since = models.DateTimeField(default=timezone.now)
    active_since = models.DateTimeField(default=timezone.now)

    objects = UserManager()
    audit_exclude = ("last_login",)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def save(self, *args, **kwargs):
        self.is_staff = self.is_superuser = self.role == Role.ADMINISTRATOR
        using = kwargs.get("using") or self._state.db or "default"
        with transaction.atomic(using=using):
            stored = None if self._state.adding else type(self)._base_manager.filter(pk=self.pk).first()
            if self._state.adding:
                # A new account holds its role and is enabled from the moment it is made.
                self.role_since = self.active_since = self.date_joined
            if stored is not None and stored.role != self.role:
                self.role_since = timezone.now()
                if kwargs.get("update_fields") is not None:
                    kwargs["update_fields"] = {*kwargs["update_fields"], "role_since", "is_staff", "is_superuser"}
            if stored is not None and self.is_active and not stored.is_active:
                self.active_since = timezone.now()
                if kwargs.get("update_fields") is not None:
                    kwargs["update_fields"] = {*kwargs["update_fields"], "active_since"}
            super().save(*args, **kwargs)
            if stored is not None and stored.role != self.role:
                record("accounts.role.change", target=self, details={"role": [stored.role, self.role]})
            if stored is not None and stored.password != self.password:
                record("accounts.password.change", target=self)

    @property
    def role_label(self) -> str:
        return Role(self.role).label


class ApiToken(models.Model):
    """An API token. Only the SHA-256 digest of its secret is stored: the secret is shown once, when the
    token is made, and cannot be read back by anyone, an Administrator or a database reader included.

    Revoking keeps the row (who revoked it, when) as evidence; an expired or revoked token is refused.
    Not an AuditedModel: issuing and revoking record their own events (appliance.accounts.tokens), and
    `last_used` moving is not a change anyone audits.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, help_text="public part of the token, shown in lists")
    digest = models.CharField(max_length=64, help_text="SHA-256 of the secret part, hex")
    created = models.DateTimeField(default=timezone.now)
    expires = models.DateTimeField()
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")

    class Meta:
        ordering = ["-created"]
        verbose_name = _("API token")

    def __str__(self) -> str:
        # English: audit records and API messages name the token this way.
        return f"token {self.prefix}" + (f" ({self.name})" if self.name else "")

    @property
    def label(self) -> str:
        """The token as the portal names it, in the reader's language."""
        if self.name:
            return gettext("token %(prefix)s (%(name)s)") % {"prefix": self.prefix, "name": self.name}
        return gettext("token %(prefix)s") % {"prefix": self.prefix}

    @property
    def state(self) -> str:
        if self.revoked is not None:
            return "revoked"
        return "expired" if self.expires <= timezone.now() else "active"

    @property
    def state_label(self) -> str:
        """`state` in the reader's language (`state` itself is a value templates and the API compare)."""
        return str(TOKEN_STATE_LABELS[self.state])


TOKEN_STATE_LABELS = {"active": _("active"), "expired": _("expired"), "revoked": _("revoked")}
