"""manage.py models deploy NAME [--version N] [--runtime vllm|triton|nim] [--service-name S] ...
manage.py models rollback SERVICE --reason TEXT
manage.py models stop SERVICE --reason TEXT
manage.py models deployments [SERVICE] [--all] [--json]

Deploy a production version on the inference pool (sized by the advisor, placed on free GPUs or MIG
instances, followed until the pool reports it healthy or failed), or roll a service back to the model's
previous production version, or stop it (its pods deleted, its GPUs free again). `models deployments` lists
the services with their state as the pool's health check last saw it: as the portal's deployments page,
what runs, a service whose newest rollout failed and what changed in the last 24 hours (--all: every
rollout). Changing acts as the account whose API token is in APPLIANCE_TOKEN;
reading needs nobody."""

from __future__ import annotations

import json
import time

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError

from appliance.core import context
from appliance.lifecycle import deployments, services
from appliance.lifecycle.errors import LifecycleError
from appliance.lifecycle.models import Deployment


def add_arguments(parser, subcommand: str) -> None:
    if subcommand == "deployments":
        parser.add_argument("service", nargs="?", help="only this service's rollouts")
        parser.add_argument("--all", action="store_true",
                            help="every rollout, also older replaced, failed, blocked and stopped ones")
        parser.add_argument("--json", action="store_true", help="print the deployments as JSON")
        return
    if subcommand in ("rollback", "stop"):
        parser.add_argument("service", help="the service's name (a deployment's name)")
        parser.add_argument("--reason", required=True, help="why (recorded in the audit log)")
        if subcommand == "stop":
            parser.add_argument("--json", action="store_true", help="print the deployment as JSON")
            return
    else:
        parser.add_argument("model", help="the registered model's name")
        parser.add_argument("--version", type=int, default=None,
                            help="the version's number (default: the model's production version)")
        parser.add_argument("--runtime", default="vllm", choices=Deployment.Runtime.values)
        parser.add_argument("--service-name", default=None,
                            help="the service's name, a DNS label (default: made from the model's name)")
        parser.add_argument("--appliance", default=None, help="the appliance (default: the one with an inference pool)")
        parser.add_argument("--context", type=int, default=4096, help="context length the service holds (tokens)")
        parser.add_argument("--concurrency", type=int, default=8, help="sequences served at once")
        parser.add_argument("--dtype", default=None, help="the weights' dtype (default: the model files')")
    parser.add_argument("--wait", type=int, default=300, metavar="SECONDS",
                        help="follow the rollout until healthy or failed, at most this long (0: do not wait)")
    parser.add_argument("--json", action="store_true", help="print the deployment as JSON")


def _describe(deployment: Deployment) -> dict:
    return {"id": deployment.pk, "name": deployment.name, "model": deployment.version.model.name,
            "version": deployment.version.number, "runtime": deployment.runtime, "state": deployment.state,
            "detail": deployment.state_detail, "placement": deployment.placement,
            "previous": deployment.previous_id, "created": deployment.created.isoformat(timespec="seconds")}


def _where(deployment: Deployment) -> str:
    return ", ".join(f"{d['node']}/gpu{d['gpu']}" + (f"/{d['profile']}" if d.get("profile") else "")
                     for d in deployment.placement) or "-"


def _line(deployment: Deployment) -> str:
    return (f"deployment {deployment.pk}: {deployment.name} = {deployment.version.model.name} "
            f"v{deployment.version.number} ({deployment.runtime}) on {_where(deployment)}: {deployment.state}"
            + (f" ({deployment.state_detail})" if deployment.state_detail else ""))


def _list(command, options) -> int:
    """The services and their rollouts, newest first, as the last health check saw them."""
    rows = Deployment.objects.select_related("version__model").order_by("name", "-created")
    if options["service"]:
        if not deployments.SERVICE_NAME.fullmatch(options["service"]):
            command.stderr.write(f"error: name: {options['service'][:80]!r} is not a service name")
            return 1
        rows = rows.filter(name=options["service"])
    if not options["all"]:
        rows = rows.filter(pk__in=deployments.current().values("pk"))
    rows = list(rows)
    if options["json"]:
        command.stdout.write(json.dumps([_describe(row) for row in rows], indent=1))
    elif not rows:
        command.stdout.write("no deployments" if options["all"] else
                             "no service is deployed (--all lists older replaced, failed and stopped rollouts too)")
    else:
        for row in rows:
            command.stdout.write(_line(row))
    return 0


def _act(user, options) -> Deployment:
    if options["subcommand"] == "rollback":
        return deployments.rollback(options["service"], user=user, reason=options["reason"])
    model = services.get_model(options["model"])
    if options["version"] is None:
        version = services.production_version(model)
        if version is None:
            raise LifecycleError(f"version: model {model.name} has no production version", "version")
    else:
        version = services.get_version(model.name, options["version"])
    return deployments.deploy(version, user=user, runtime=options["runtime"], name=options["service_name"],
                              appliance=options["appliance"], context=options["context"],
                              concurrency=options["concurrency"], dtype=options["dtype"])


def _follow(command, deployment: Deployment, seconds: int) -> Deployment:
    """The pool's workload driver brings a rollout up in its own time: follow the health check, saying so."""
    deadline, said = time.monotonic() + seconds, ""
    while deployment.state == Deployment.State.ROLLING_OUT and time.monotonic() < deadline:
        if deployment.state_detail != said:
            said = deployment.state_detail
            command.stderr.write(f"deployment {deployment.pk}: rolling out ({said}); waiting up to {seconds} s")
        time.sleep(2)
        deployment = deployments.follow(deployment)
    return deployment


def handle(command, options) -> int:
    from .common import acting_user

    if options["subcommand"] == "deployments":
        return _list(command, options)
    try:
        user = acting_user()
        with context.acting_as(user, channel="cli"):
            if options["subcommand"] == "stop":
                deployment = deployments.stop(options["service"], user=user, reason=options["reason"])
            else:
                deployment = _act(user, options)
                deployment = _follow(command, deployment, max(0, options["wait"]))
    except (LifecycleError, PermissionDenied, CommandError) as exc:
        command.stderr.write(f"error: {exc}")
        return 1
    if options["json"]:
        command.stdout.write(json.dumps(_describe(deployment), indent=1))
    else:
        command.stdout.write(_line(deployment))
    if options["subcommand"] == "stop":
        return 0
    return 0 if deployment.state == Deployment.State.HEALTHY else 2
