"""manage.py partition plan|apply|size: the MIG and time-slicing planner, applying a plan through the
partitioning stage, and the sizing advisor. Each subcommand lives in appliance/partitioning/cli/<name>.py,
which defines add_arguments(parser) and handle(command, options) -> int (the exit status)."""

import importlib

from django.core.management.base import BaseCommand

SUBCOMMANDS = {
    "plan": "Plan MIG layouts and time-slicing for a set of GPUs and requests (YAML or JSON).",
    "apply": "Apply a saved plan (or a plan file) to the appliance through the partitioning stage.",
    "size": "Size a model: memory for weights and KV cache, the smallest placement, throughput ceilings.",
}


class Command(BaseCommand):
    help = "GPU partitioning: plan MIG and time-slicing layouts, apply them, and size models."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        for name, text in SUBCOMMANDS.items():
            module = importlib.import_module(f"appliance.partitioning.cli.{name}")
            module.add_arguments(sub.add_parser(name, help=text, description=text))

    def handle(self, *args, **options):
        module = importlib.import_module(f"appliance.partitioning.cli.{options['subcommand']}")
        status = module.handle(self, options)
        if status:
            raise SystemExit(status)
