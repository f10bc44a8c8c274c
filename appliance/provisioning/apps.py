from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "appliance.provisioning"
    label = "provisioning"
