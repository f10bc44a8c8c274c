from django.apps import AppConfig
from django.db.models.signals import post_save


def _run_saved(sender, instance, **kwargs):
    # A plan's state follows the run that applies it (applying -> applied | failed).
    if instance.finished:
        from .services import follow_run

        follow_run(instance)


class PartitioningConfig(AppConfig):
    name = "appliance.partitioning"
    label = "partitioning"

    def ready(self):
        post_save.connect(_run_saved, sender="provisioning.Run", dispatch_uid="partitioning.follow_run")
