"""manage.py partition apply PLAN [--appliance NAME] [--dry-run]

PLAN is a saved plan's number (`partition plan --save`, the portal, the API) or a YAML/JSON file holding a
planner result (its `gpus`: [{id, mig: [{profile, start}] | null, time_slicing: {replicas} | null}]),
which is checked against the appliance and saved as a plan first. The plan's instance diff is printed,
then the partitioning stage runs on the nodes whose GPUs change and this command waits for it (and for
the workloads run that re-renders gres.conf and the device plugin config after it). With --dry-run the
stage runs in check mode and prints, per node and GPU, what it would destroy and create; nothing changes.
"""

from __future__ import annotations

import re

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from appliance.partitioning import services
from appliance.partitioning.models import Plan

PLAN_NUMBER = re.compile(r"^[0-9]{1,9}$")
APPLIANCE_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
LAYOUT_TASK = "MIG layout"


def add_arguments(parser) -> None:
    parser.add_argument("plan", metavar="PLAN",
                        help=_("a saved plan's number, or a YAML or JSON file with a planner result"))
    parser.add_argument("--appliance", metavar="NAME", help=_("the appliance (needed when there are several)"))
    parser.add_argument("--dry-run", action="store_true",
                        help=_("run the stage in check mode: print the instance diff, change nothing"))


def _appliance(name: str | None):
    from appliance.inventory.models import Appliance

    if name is not None:
        if not APPLIANCE_NAME.fullmatch(name):
            raise CommandError(_("--appliance: %(name)r is not an appliance name") % {"name": name})
        found = Appliance.objects.filter(name=name).first()
        if found is None:
            raise CommandError(_("--appliance: no appliance %(name)s") % {"name": name})
        return found
    appliances = list(Appliance.objects.order_by("name")[:2])
    if len(appliances) != 1:
        raise CommandError(_("--appliance NAME is needed: %(count)s appliances") % {
            "count": _("no") if not appliances else _("several")})
    return appliances[0]


def _plan(argument: str, appliance) -> Plan:
    if PLAN_NUMBER.fullmatch(argument):
        plan = Plan.objects.filter(appliance=appliance, number=int(argument)).first()
        if plan is None:
            raise CommandError(_("PLAN: appliance %(appliance)s has no plan %(number)s") % {
                "appliance": appliance.name, "number": argument})
        return plan
    from .plan import _Source

    source = _Source(argument, _("plan file"))
    if not isinstance(source.data, dict) or "gpus" not in source.data:
        raise CommandError(_("%(path)s: a planner result (a mapping with gpus) is needed") % {"path": argument})
    try:
        return services.save_result(appliance, source.data, user=None,
                                    description=_("from %(path)s") % {"path": argument[-150:]})
    except services.PlanRefused as exc:
        raise CommandError("\n".join(f"{argument}: {error}" for error in exc.errors)) from None


def _instances(items) -> str:
    return ", ".join(f"{i['profile']}@{i['start']}" for i in items)


def describe_disruption(disruption: dict) -> list[str]:
    """One line per GPU the plan changes: instances destroyed and created, MIG mode, time-slicing."""
    lines = []
    for gpu in disruption.get("gpus_changed") or []:
        parts = []
        destroyed = [i for i in disruption.get("destroyed") or [] if i["gpu"] == gpu]
        created = [i for i in disruption.get("created") or [] if i["gpu"] == gpu]
        for change in disruption.get("mig_mode_changes") or []:
            if change["gpu"] == gpu:
                parts.append(_("MIG on") if change["enabled"] else _("MIG off"))
        if destroyed:
            parts.append(_("destroy %(instances)s") % {"instances": _instances(destroyed)})
        if created:
            parts.append(_("create %(instances)s") % {"instances": _instances(created)})
        for change in disruption.get("time_slicing_changes") or []:
            if change["gpu"] == gpu:
                parts.append(_("time-slicing %(old)s -> %(new)s replicas") % {"old": change["from"] or "-",
                                                                            "new": change["to"] or "-"})
        lines.append(f"  {gpu}: {'; '.join(parts)}")
    return lines


def stage_diffs(run) -> dict[str, dict]:
    """{host: {GPU index: diff}} the partitioning stage's mig_layout task returned (in check mode: what it
    would do)."""
    from appliance.provisioning.models import TaskEvent

    found: dict[str, dict] = {}
    for event in TaskEvent.objects.filter(stage_run__run=run, stage_run__stage=services.STAGE, event="runner_on_ok",
                                          task=LAYOUT_TASK).order_by("counter"):
        result = (event.data or {}).get("res") or {}
        found[event.host] = result.get("changes") or {}
    return found


def handle(command, options) -> int:
    from appliance.core import dispatch
    from appliance.provisioning.models import Run

    appliance = _appliance(options.get("appliance"))
    plan = _plan(options["plan"], appliance)
    write = command.stdout.write
    write(_("Plan %(number)d of %(appliance)s (%(state)s): %(count)d GPU(s) change") % {
        "number": plan.number, "appliance": appliance.name, "state": plan.state,
        "count": len((plan.result.get("disruption") or {}).get("gpus_changed") or [])})
    for line in describe_disruption(plan.result.get("disruption") or {}):
        write(line)
    try:
        run = services.apply_plan(plan, user=None, dry_run=options["dry_run"])
    except (services.PlanRefused, PermissionDenied) as exc:
        raise CommandError(str(exc)) from None
    write(_("Run #%(run)d started on %(nodes)s; waiting for it.") % {"run": run.pk, "nodes": ", ".join(run.node_names)})
    dispatch.drain()
    run.refresh_from_db()
    write(_("Run #%(run)d: %(state)s (%(changed)d changed, %(failed)d failed)%(reason)s") % {
        "run": run.pk, "state": run.state, "changed": run.changed_count, "failed": run.failed_count,
        "reason": f": {run.reason}" if run.reason and run.state != "succeeded" else ""})
    if options["dry_run"]:
        diffs = stage_diffs(run)
        if not any(diffs.values()):
            write(_("Nothing would change."))
        for host, gpus in sorted(diffs.items()):
            for index, diff in sorted(gpus.items(), key=lambda item: int(item[0])):
                parts = []
                if diff.get("mig_mode"):
                    parts.append(_("MIG %(mode)s") % {"mode": diff["mig_mode"]})
                if diff.get("destroy"):
                    parts.append(_("destroy %(instances)s") % {"instances": _instances(diff["destroy"])})
                if diff.get("create"):
                    parts.append(_("create %(instances)s") % {"instances": _instances(diff["create"])})
                if diff.get("complete"):
                    parts.append(_("complete %(instances)s") % {"instances": _instances(diff["complete"])})
                write(f"  {host}/gpu{index}: {'; '.join(parts)}")
    else:
        plan.refresh_from_db()
        write(_("Plan %(number)d: %(state)s") % {"number": plan.number, "state": plan.state})
        follow = Run.objects.filter(appliance=appliance, created__gt=run.created, stages=["workloads"]).first()
        if follow is not None:
            write(_("Workloads run #%(run)d (gres.conf, device plugin config): %(state)s") % {
                "run": follow.pk, "state": follow.state})
    return 0 if run.state == "succeeded" else 1
