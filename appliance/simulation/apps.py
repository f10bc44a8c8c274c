from django.apps import AppConfig


class SimulationConfig(AppConfig):
    name = "appliance.simulation"
    label = "simulation"

    def ready(self):
        # The workload model's own inference services are placed by no scheduler the product asks: the
        # ingest's check of a collector's job ids learns of them here (telemetry.placements).
        from appliance.telemetry import placements

        from . import workload

        placements.register("simulated-workload", workload.node_placements)
