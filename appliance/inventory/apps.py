from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "appliance.inventory"
    label = "inventory"
