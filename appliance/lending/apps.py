from django.apps import AppConfig


class LendingConfig(AppConfig):
    """Moving whole nodes between the training and the inference pool for a time: policies, plans, reclaim."""

    name = "appliance.lending"
    label = "lending"
    verbose_name = "Lending"
