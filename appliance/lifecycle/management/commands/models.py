"""manage.py models register|list|show|evaluate|transition|request|requests|approve|reject|cancel|alias|history|
verify|clear-tampered|deploy|rollback|stop|deployments|card|mlflow-import: the model registry from the command line (`appliance models ...` on an
installed appliance, and from a Slurm job's batch script). Each subcommand lives in
appliance/lifecycle/cli/<module>.py, which defines add_arguments(parser) and handle(command, options) -> int
(the exit status)."""

import importlib

from django.core.management.base import BaseCommand

# subcommand -> (module in appliance/lifecycle/cli/, help)
SUBCOMMANDS = {
    "register": ("register", "Register a model version from its files (in a Slurm job: the job is its lineage)."),
    "list": ("registry", "List registered models and their versions."),
    "show": ("registry", "Show a model version: lineage, artifacts, stage, aliases, history."),
    "evaluate": ("registry", "Attach an evaluation (datasets and metrics) to a version."),
    "transition": ("registry", "Move a version to another stage (one that needs no approval)."),
    "request": ("registry", "Ask for a transition that needs approval (to production)."),
    "requests": ("registry", "List promotion requests (default: those waiting for a second person)."),
    "approve": ("registry", "Approve a request another person made (four-eyes)."),
    "reject": ("registry", "Reject a request, with the reason."),
    "cancel": ("registry", "Withdraw a request you made that is still pending."),
    "alias": ("registry", "Set or remove an alias of a model."),
    "history": ("registry", "Which version held which stage and alias, and who changed it (at a point in time)."),
    "verify": ("verify", "Verify a version's files against their hashes and signature (quick or full)."),
    "clear-tampered": ("verify", "Lift a version's tampered verdict once a full verification passes "
                                 "(Administrator, with a reason)."),
    "deploy": ("deploy", "Deploy a production version on the inference pool."),
    "rollback": ("deploy", "Roll a deployment back to the previous production version."),
    "stop": ("deploy", "Stop a deployed service: its pods deleted, its GPUs free again."),
    "deployments": ("deploy", "List the current deployments and their state (--all: every rollout)."),
    "card": ("card", "Export a version's model card (lineage, evaluations, approvals, hashes, signature)."),
    "mlflow-import": ("mlflow_import", "Import an MLflow model registry (its REST API or an export)."),
}


class Command(BaseCommand):
    help = "The model registry: versions, lineage, evaluations, approvals, verification and deployments."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        for name, (module_name, text) in SUBCOMMANDS.items():
            module = importlib.import_module(f"appliance.lifecycle.cli.{module_name}")
            module.add_arguments(sub.add_parser(name, help=text, description=text), name)

    def handle(self, *args, **options):
        module_name = SUBCOMMANDS[options["subcommand"]][0]
        module = importlib.import_module(f"appliance.lifecycle.cli.{module_name}")
        status = module.handle(self, options)
        if status:
            raise SystemExit(status)
