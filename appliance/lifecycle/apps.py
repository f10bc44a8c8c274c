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
        # and checks a collector's service names against where deployments were placed (placements.py)
        from appliance.telemetry import placements

        from .deployments import node_placements

        placements.register("deployments", node_placements)
