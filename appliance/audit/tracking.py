"""Change capture for models: every create, update and delete records a before/after diff in the
same transaction as the change. Bulk paths (QuerySet.update, bulk_create, bulk_update) go through
the same per-object path, so nothing reaches an audited table unrecorded, and write their records
together (audit.batch); deletes, cascades
included, are caught by the post_delete signal the audit app connects for every audited model.
"""

from django.db import models, transaction

from appliance.core.fields import EncryptedTextField

from .services import REDACTED, batch, is_secret_key, record, to_json


def _field_value(instance, field):
    return field.value_from_object(instance)


class AuditedQuerySet(models.QuerySet):
    def update(self, **kwargs):
        with batch(using=self.db):
            count = 0
            for obj in self.select_for_update():
                for name, value in kwargs.items():
                    setattr(obj, name, value)
                obj.save(update_fields=list(kwargs))
                count += 1
            return count

    update.queryset_only = True

    def bulk_create(self, objs, *args, **kwargs):
        with batch(using=self.db):
            for obj in objs:
                obj.save(force_insert=True, using=self.db)
        return objs

    def bulk_update(self, objs, fields, *args, **kwargs):
        with batch(using=self.db):
            for obj in objs:
                obj.save(update_fields=list(fields), using=self.db)
        return len(objs)


class AuditedModel(models.Model):
    """Base of every model whose changes the audit log must show."""

    audit_exclude: tuple[str, ...] = ("created", "updated")

    objects = AuditedQuerySet.as_manager()

    class Meta:
        abstract = True

    def audit_state(self) -> dict:
        state = {}
        for field in self._meta.concrete_fields:
            if field.name in self.audit_exclude:
                continue
            value = _field_value(self, field)
            if isinstance(field, EncryptedTextField) or is_secret_key(field.name):
                value = REDACTED if value else ""
            state[field.attname] = value
        return to_json(state)

    def _secret_fields(self):
        return [f for f in self._meta.concrete_fields
                if f.name not in self.audit_exclude and (isinstance(f, EncryptedTextField) or is_secret_key(f.name))]

    def _stored(self, using):
        if self._state.adding or self.pk is None:
            return None
        return type(self)._base_manager.using(using).filter(pk=self.pk).first()

    def save(self, *args, **kwargs):
        using = kwargs.get("using") or self._state.db or "default"
        with transaction.atomic(using=using):
            stored = self._stored(using)
            super().save(*args, **kwargs)
            after = self.audit_state()
            if stored is None:
                record(event_name(self, "create"), target=self, details={"after": after})
                return
            before = stored.audit_state()
            changes = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}
            # A secret that changed shows only that it changed, never a value or a digest of it.
            for field in self._secret_fields():
                if _field_value(stored, field) != _field_value(self, field):
                    changes[field.attname] = [REDACTED, REDACTED + " (changed)"]
            if changes:
                record(event_name(self, "update"), target=self, details={"changes": changes})


def event_name(instance, action: str) -> str:
    return f"{instance._meta.app_label}.{instance._meta.model_name}.{action}"


def record_delete(sender, instance, using, origin=None, **kwargs):
    record(event_name(instance, "delete"), target=instance, details={"before": instance.audit_state()})
