from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "appliance.lifecycle"
    label = "lifecycle"
