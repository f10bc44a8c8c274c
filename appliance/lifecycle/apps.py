from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "appliance.lifecycle"
    label = "lifecycle"
    verbose_name = "Model lifecycle"
