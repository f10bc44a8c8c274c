from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "appliance.portal"
    label = "portal"
