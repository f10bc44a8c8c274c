"""manage.py partition plan --requests FILE [--current FILE] [--json] [--appliance NAME [--save]]

FILE (YAML or JSON) has `gpus: [{id, model, pool}]` and `requests: [{name, memory_gb, compute_slices,
replicas, isolation, weight, pool}]`; --current FILE the layout now (the planner's output `gpus`, or a
mapping with `gpus`). With --appliance NAME the appliance's own GPUs are planned (when FILE has no gpus)
against the layout its inventory knows; --save keeps the plan (a draft to apply with `partition apply`).
Bad input is one error naming the file, its line where the file has one, and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from appliance.core import resources
from appliance.partitioning import planner

MAX_FILE_BYTES = 16 * 1024 * 1024
FILE_KEYS = {"gpus", "requests"}
# "requests[3].memory_gb", "current.gpus[0].mig[1].start", "gpus[2]": the place a PlanInputError names.
_PLACE = re.compile(r"^(?P<place>[a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*)(?::|$)")
_STEP = re.compile(r"([a-z_]+)|\[(\d+)\]")


def add_arguments(parser) -> None:
    parser.add_argument("--requests", required=True, metavar="FILE",
                        help=_("YAML or JSON with gpus: [{id, model, pool}] and requests: [{name, memory_gb, "
                               "compute_slices, replicas, isolation, weight, pool}]"))
    parser.add_argument("--current", metavar="FILE",
                        help=_("the layout now (YAML or JSON: the gpus of a planner result); without it every "
                               "GPU is taken as unpartitioned"))
    parser.add_argument("--json", action="store_true", help=_("print the planner result as JSON"))
    parser.add_argument("--appliance", metavar="NAME",
                        help=_("plan the appliance's GPUs (when FILE has no gpus) against its current layout"))
    parser.add_argument("--save", action="store_true",
                        help=_("save the plan for the appliance (needs --appliance), to apply with partition apply"))
    parser.add_argument("--description", default="", help=_("a description of the saved plan"))


class _Source:
    """A file read as YAML (JSON is read by the same parser), with its node tree for line numbers."""

    def __init__(self, path: str, what: str):
        self.path = path
        file = Path(path)
        if not file.is_file():
            raise CommandError(_("%(what)s %(path)s: not a readable file") % {"what": what, "path": path})
        if file.stat().st_size > MAX_FILE_BYTES:
            raise CommandError(_("%(path)s: larger than %(limit)d MiB") % {"path": path,
                                                                          "limit": MAX_FILE_BYTES // 1048576})
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        try:
            self.node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = f":{mark.line + 1}" if mark else ""
            raise CommandError(f"{path}{line}: {_('not YAML or JSON')}: {exc.problem or exc}") from None
        except yaml.YAMLError as exc:
            raise CommandError(f"{path}: {_('not YAML or JSON')}: {exc}") from None

    def line_of(self, place: str) -> int | None:
        """The line of `place` ("requests[3].memory_gb") in the file, or of the nearest item above it."""
        node = self.node
        line = node.start_mark.line + 1 if node is not None else None
        for name, index in _STEP.findall(place):
            if isinstance(node, yaml.MappingNode) and name:
                found = next((value for key, value in node.value if getattr(key, "value", None) == name), None)
                if found is None:
                    break
                node = found
            elif isinstance(node, yaml.SequenceNode) and index:
                if int(index) >= len(node.value):
                    break
                node = node.value[int(index)]
            else:
                break
            line = node.start_mark.line + 1
        return line

    def error(self, message: str) -> CommandError:
        """`message` names a place (requests[3].memory_gb: ...); the error adds the file and its line."""
        match = _PLACE.match(message)
        line = self.line_of(match["place"]) if match else None
        return CommandError(f"{self.path}{f':{line}' if line else ''}: {message}")


def _read_plan_file(path: str) -> tuple[_Source, list | None, list]:
    source = _Source(path, "--requests")
    data = source.data
    if not isinstance(data, dict):
        raise CommandError(f"{path}: {_('a mapping with gpus and requests is needed')}")
    unknown = sorted(set(map(str, data)) - FILE_KEYS)
    if unknown:
        raise source.error(f"{unknown[0]}: " + _("unknown key (keys: gpus, requests)"))
    if "requests" not in data:
        raise CommandError(f"{path}: requests: " + _("missing"))
    return source, data.get("gpus"), data["requests"]


def handle(command, options) -> int:
    if options["save"] and not options["appliance"]:
        raise CommandError(_("--save needs --appliance: a plan is saved for an appliance"))
    if options["appliance"] and options["current"]:
        raise CommandError(_("--current and --appliance: the appliance's own layout is the current one"))
    source, gpus, requests = _read_plan_file(options["requests"])
    current = None
    current_source = None
    appliance = None
    if options["appliance"]:
        from appliance.inventory.models import Appliance
        from appliance.partitioning.layout import current_layout, planner_current, planner_gpus

        appliance = Appliance.objects.filter(name=options["appliance"]).first()
        if appliance is None:
            raise CommandError(_("appliance %(name)s: no such appliance") % {"name": options["appliance"]})
        layout = current_layout(appliance)
        known = {g["id"]: g for g in planner_gpus(layout)}
        if gpus is None:
            gpus = list(known.values())
            if not gpus:
                raise CommandError(_("appliance %(name)s: no GPU of a model with MIG profiles in its inventory")
                                   % {"name": appliance.name})
        elif isinstance(gpus, list):
            for i, gpu in enumerate(gpus):
                if isinstance(gpu, dict) and gpu.get("id") not in known:
                    raise source.error(f"gpus[{i}].id: " + _("%(id)r is not a GPU of appliance %(name)s with "
                                                              "MIG profiles") % {"id": gpu.get("id"),
                                                                                  "name": appliance.name})
        wanted = {g.get("id") for g in gpus if isinstance(g, dict)}
        from appliance.partitioning.services import with_applied_placements

        current = with_applied_placements(appliance, [g for g in planner_current(layout) if g["id"] in wanted])
    elif gpus is None:
        raise CommandError(f"{source.path}: gpus: " + _("missing (or give --appliance to plan its GPUs)"))
    if options["current"]:
        current_source = _Source(options["current"], "--current")
        current = current_source.data
    try:
        result = planner.plan(gpus, requests, current)
    except planner.PlanInputError as exc:
        message = str(exc)
        if message.startswith("current") and current_source is not None:
            place = message[len("current"):].lstrip(".")
            line = current_source.line_of(place.split(":", 1)[0])
            raise CommandError(f"{current_source.path}{f':{line}' if line else ''}: {message}") from None
        if message.startswith("current"):
            raise CommandError(f"appliance {appliance.name}: {message}") from None
        raise source.error(message) from None
    number = None
    if appliance is not None and not options["current"]:
        from appliance.partitioning.services import with_service_moves

        result = with_service_moves(appliance, result)
    if options["save"]:
        from appliance.partitioning import services

        try:
            plan = services.save_plan(appliance, requests, user=None, description=options["description"],
                                      gpus=gpus)
        except services.PlanRefused as exc:
            raise CommandError("\n".join(exc.errors)) from None
        result = plan.result
        number = plan.number
    if options["json"]:
        out = dict(result)
        if number is not None:
            out = {"plan": number, **out}
        command.stdout.write(json.dumps(out, indent=2))
    else:
        command.stdout.write(table(result))
        if number is not None:
            command.stdout.write(_("Saved as plan %(number)s of %(appliance)s (apply it: %(program)s partition "
                                   "apply %(number)s)") % {"number": number, "appliance": appliance.name,
                                                           "program": resources.program()})
    return 0


def _layout_text(gpu: dict) -> str:
    if gpu["mig"] is not None:
        instances = " ".join(f"{i['profile']}@{i['start']}" for i in gpu["mig"])
        return _("MIG") + (f" {instances}" if instances else " " + _("(no instance)"))
    if gpu["time_slicing"]:
        return _("time-sliced x%(replicas)d") % {"replicas": gpu["time_slicing"]["replicas"]}
    return _("whole")


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[k]) for k, cell in enumerate(row)).rstrip() for row in rows]


def optimality_text(result: dict) -> str:
    """What is known of the plan's optimality, in one line ("" for a result without it: a file made
    elsewhere)."""
    optimality = result.get("optimality")
    if not optimality:
        return ""
    # The portal's words (partitioning/_result.html), so that the catalog holds them once.
    bound = f"{optimality['bound_weight']:g}"
    if optimality["status"] == "optimal":
        text = _("Optimal: no plan serves more weight (bound %(bound)s).") % {"bound": bound}
    else:
        text = _("Within %(gap)s%% of the bound: no plan serves more than %(bound)s.") % {
            "gap": f"{optimality['gap_percent']:g}", "bound": bound}
    source = _("solver's plan") if optimality["plan_from"] == "solver" else _("greedy plan")
    return f"{text} ({source}; {optimality['note']})"


def table(result: dict) -> str:
    """The result as text for a terminal: the layout per GPU, what is placed where, what is not and why,
    and the disruption."""
    lines = _columns([[_("GPU"), _("MODEL"), _("LAYOUT")]]
                     + [[g["id"], g["model"], _layout_text(g)] for g in result["gpus"]])
    lines.append("")
    lines.append(_("Served weight %(served)g of %(total)g: %(placed)d replicas placed, %(unplaced)d not") % {
        "served": result["served_weight"], "total": result["total_weight"], "placed": len(result["placed"]),
        "unplaced": len(result["unplaced"])})
    optimality = optimality_text(result)
    if optimality:
        lines.append(optimality)
    if result["placed"]:
        kinds = {"mig": _("MIG"), "time_slicing": _("time-sliced"), "whole": _("whole GPU")}
        lines += _columns([[_("REQUEST"), _("REPLICA"), _("GPU"), _("KIND"), _("PROFILE")]]
                          + [[p["request"], str(p["replica"]), p["gpu"], kinds[p["kind"]],
                              f"{p['profile']}@{p['start']}" if p["profile"] else "-"] for p in result["placed"]])
    if result["unplaced"]:
        lines.append("")
        lines.append(_("Not placed:"))
        lines += [f"  {u['request']} #{u['replica']}: {u['reason']}" for u in result["unplaced"]]
    d = result["disruption"]
    lines.append("")
    lines.append(_("Disruption: %(created)d instances created, %(destroyed)d destroyed, %(kept)d kept; "
                   "%(gpus)d GPUs change") % {"created": len(d["created"]), "destroyed": len(d["destroyed"]),
                                              "kept": len(d["kept"]), "gpus": len(d["gpus_changed"])})
    for change in d["mig_mode_changes"]:
        lines.append("  " + (_("%(gpu)s: MIG mode on") if change["enabled"] else _("%(gpu)s: MIG mode off"))
                     % {"gpu": change["gpu"]})
    for change in d["time_slicing_changes"]:
        lines.append("  " + _("%(gpu)s: time-slicing replicas %(from)s -> %(to)s") % {
            "gpu": change["gpu"], "from": change["from"] or _("none"), "to": change["to"] or _("none")})
    for key, label in (("destroyed", _("destroyed")), ("created", _("created"))):
        for instance in d[key]:
            lines.append(f"  {instance['gpu']}: {label} {instance['profile']}@{instance['start']}")
    for hit in d.get("deployments") or []:
        lines.append("  " + _("model deployment %(name)s (%(model)s v%(version)s) on %(gpus)s: interrupted, its GPU "
                              "changes (deploy it again once the plan is applied)") % {
            **hit, "gpus": ", ".join(hit["gpus"])})
    services = d.get("services")
    if services:  # planned for an appliance: its services as the applied plan placed them
        def where(spot):
            return f"{spot['gpu']} {spot['profile']}@{spot['start']}" if spot.get("profile") else str(spot["gpu"])

        for move in services["moved"]:
            lines.append("  " + _("%(service)s moves: %(from)s -> %(to)s") % {
                "service": f"{move['request']} #{move['replica']}", "from": where(move["from"]), "to": where(move["to"])})
        for move in services["restarted"]:
            lines.append("  " + _("%(service)s restarts: its instance is made again") % {
                "service": f"{move['request']} #{move['replica']}"})
        for move in services["stopped"]:
            lines.append("  " + _("%(service)s stops (not placed)") % {"service": f"{move['request']} #{move['replica']}"})
    return "\n".join(lines)
