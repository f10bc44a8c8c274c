from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "appliance.core"
    label = "core"
