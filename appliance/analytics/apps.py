from django.apps import AppConfig


class AnalyticsConfig(AppConfig):
    name = "appliance.analytics"
    label = "analytics"
    verbose_name = "Analytics"
