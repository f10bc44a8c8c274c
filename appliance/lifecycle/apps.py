from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "appliance.lifecycle"
    label = "lifecycle"
    verbose_name = "Model lifecycle"

    def ready(self):
        # The job pages link the model versions a job trained (lineage, both ways).
        from appliance.telemetry import jobinfo

        from .jobinfo import versions_of

        jobinfo.register(jobinfo.VERSIONS, versions_of)
