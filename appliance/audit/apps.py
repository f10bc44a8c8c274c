from django.apps import AppConfig, apps
from django.db.models.signals import post_delete


class AuditConfig(AppConfig):
    name = "appliance.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from . import catalogue, checks  # noqa: F401  (checks registers the trigger check)
        from .tracking import AuditedModel, record_delete

        for model in apps.get_models():
            if issubclass(model, AuditedModel):
                catalogue.register_model(model._meta.app_label, model._meta.model_name,
                                         str(model._meta.verbose_name))
                post_delete.connect(record_delete, sender=model, dispatch_uid=f"audit-delete-{model._meta.label}")

        from .capture import install as install_capture

        install_capture()
