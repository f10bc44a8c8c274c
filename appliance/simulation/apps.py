from django.apps import AppConfig


class SimulationConfig(AppConfig):
    name = "appliance.simulation"
    label = "simulation"
