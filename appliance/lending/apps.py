from django.apps import AppConfig


class LendingConfig(AppConfig):
    """Moving whole nodes between the training and the inference pool for a time: policies, plans, reclaim."""

    name = "appliance.lending"
    label = "lending"
    verbose_name = "Lending"

    def ready(self):
        # The telemetry's job pages show what Slurm says about a job; telemetry may not import this app.
        from appliance.telemetry import jobinfo

        from .jobinfo import scheduler_facts

        jobinfo.register(jobinfo.SCHEDULER, scheduler_facts)
        # and checks a collector's job ids against where Slurm put them (placements.py)
        from appliance.telemetry import placements

        from . import slurmctl

        placements.register("slurm", slurmctl.node_placements)
