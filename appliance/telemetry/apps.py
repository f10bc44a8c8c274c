from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "appliance.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
