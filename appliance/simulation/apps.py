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

        # The demo's story, told at the end of a simulated appliance's bootstrap (provisioning cannot import
        # the lifecycle it goes through: it sends a signal).
        from appliance.provisioning.signals import demo_workload_started

        from . import demo

        demo_workload_started.connect(demo.on_demo_workload_started, dispatch_uid="simulation.demo.story")
