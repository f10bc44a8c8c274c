from django.db import models


class TimestampedModel(models.Model):
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class ApplianceSetting(models.Model):
    """A setting of the appliance kept in its database, so that the portal, the workers and every command
    line see the same value whatever their environment (a caller cannot lower a policy by exporting a
    variable). Changed only through the service that owns it, which records the change."""

    name = models.CharField(max_length=100, primary_key=True)
    value = models.JSONField()
    changed = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} = {self.value!r}"
