from django.apps import AppConfig


class AnalyticsConfig(AppConfig):
    name = "appliance.analytics"
    label = "analytics"
    verbose_name = "Analytics"

    def ready(self):
        # The telemetry's job pages link a job's Efficiency page, or say when it will be attributed.
        from appliance.telemetry import jobinfo

        from .jobinfo import attribution_state

        jobinfo.register(jobinfo.ATTRIBUTION, attribution_state)
