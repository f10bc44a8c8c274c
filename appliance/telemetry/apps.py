from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "appliance.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self):
        # Provisioning runs the monitoring stage but may not import this app: it finds the providers by name.
        from appliance.provisioning import catalogue

        from . import stage_vars

        catalogue.register_provider("telemetry.monitoring_stage_vars", stage_vars.monitoring_stage_vars)
        catalogue.register_provider("telemetry.monitoring_stage_secrets", stage_vars.monitoring_stage_secrets)
