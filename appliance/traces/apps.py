from django.apps import AppConfig


class TracesConfig(AppConfig):
    """Utilization traces imported from other systems (CSV or Parquet), analyzed like the appliance's own."""

    name = "appliance.traces"
    label = "traces"
    verbose_name = "Imported traces"
