from django.apps import AppConfig


class PartitioningConfig(AppConfig):
    name = "appliance.partitioning"
    label = "partitioning"
