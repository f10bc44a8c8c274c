"""manage.py models list|show|evaluate|transition|request|requests|approve|reject|cancel|alias|history

    models list [NAME] [--search TEXT] [--stage STAGE] [--json]
    models show NAME VERSION [--json]
    models evaluate NAME VERSION --name EVAL --metric accuracy=0.61 [--dataset name=..,uri=..,sha256=..]
                    [--job ID] [--passed | --failed] [--notes TEXT]
    models transition NAME VERSION STAGE [--reason TEXT]
    models request NAME VERSION --reason TEXT --evidence EVALUATION_ID [--stage production] [--alias NAME]
    models requests [NAME] [--state pending|approved|rejected|expired|cancelled|all] [--json]
    models approve REQUEST [--reason TEXT]
    models reject REQUEST --reason TEXT
    models cancel REQUEST
    models alias NAME ALIAS VERSION | models alias NAME ALIAS --delete
    models history NAME [--version N] [--at ISO-TIME] [--json]

Reading needs nobody; changing needs the account of APPLIANCE_TOKEN (requests, approvals, rejections and
withdrawals always: a second person must be a person).
"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import CommandError
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from .common import (
    acting,
    acting_user,
    dataset,
    number_value,
    print_json,
    request_id,
    require_person,
    version_number,
)


def _model_arguments(parser, *, version=True):
    parser.add_argument("name", metavar="NAME", help=_("the registered model"))
    if version:
        parser.add_argument("version", metavar="VERSION", type=version_number, help=_("the version number"))


def add_arguments(parser, subcommand: str) -> None:
    from appliance.lifecycle.models import Stage

    if subcommand == "list":
        parser.add_argument("name", metavar="NAME", nargs="?", help=_("list this model's versions"))
        parser.add_argument("--search", default="", metavar="TEXT", help=_("models whose name or description has it"))
        parser.add_argument("--stage", choices=Stage.values, help=_("versions in this stage"))
        parser.add_argument("--json", action="store_true")
    elif subcommand == "show":
        _model_arguments(parser)
        parser.add_argument("--json", action="store_true")
    elif subcommand == "evaluate":
        _model_arguments(parser)
        parser.add_argument("--name", dest="evaluation", required=True, metavar="EVAL",
                            help=_("the evaluation's name (mmlu, red-team-2026-03, ...)"))
        parser.add_argument("--metric", action="append", type=number_value, default=[], metavar="NAME=NUMBER")
        parser.add_argument("--dataset", action="append", type=dataset, default=[], metavar="name=N,uri=U[,sha256=H]")
        parser.add_argument("--job", default="", metavar="ID", help=_("the Slurm job that ran it"))
        verdict = parser.add_mutually_exclusive_group()
        verdict.add_argument("--passed", dest="passed", action="store_true", default=None)
        verdict.add_argument("--failed", dest="passed", action="store_false")
        parser.add_argument("--notes", default="")
    elif subcommand == "transition":
        _model_arguments(parser)
        parser.add_argument("stage", metavar="STAGE", choices=Stage.values, help=", ".join(Stage.values))
        parser.add_argument("--reason", default="")
    elif subcommand == "request":
        _model_arguments(parser)
        # The stage also positionally, as `models transition NAME VERSION STAGE` takes it.
        parser.add_argument("target", nargs="?", metavar="STAGE", choices=Stage.values,
                            help=_("the stage asked for (default production; also --stage)"))
        parser.add_argument("--stage", default="production", choices=Stage.values)
        parser.add_argument("--reason", required=True)
        parser.add_argument("--evidence", action="append", type=request_id, default=[], metavar="EVALUATION_ID",
                            help=_("an evaluation of this version (repeat for several)"))
        parser.add_argument("--alias", default="", help=_("an alias the approval also points at the version"))
    elif subcommand == "requests":
        from appliance.lifecycle.models import PromotionRequest

        parser.add_argument("name", metavar="NAME", nargs="?", help=_("only this model's requests"))
        parser.add_argument("--state", default=PromotionRequest.State.PENDING,
                            choices=[*PromotionRequest.State.values, "all"],
                            help=_("requests in this state (default: pending, those waiting for a second person)"))
        parser.add_argument("--json", action="store_true")
    elif subcommand == "cancel":
        parser.add_argument("request", metavar="REQUEST", type=request_id, help=_("the request's number"))
    elif subcommand in ("approve", "reject"):
        parser.add_argument("request", metavar="REQUEST", type=request_id, help=_("the request's number"))
        parser.add_argument("--reason", required=subcommand == "reject", default="")
    elif subcommand == "alias":
        parser.add_argument("name", metavar="NAME", help=_("the registered model"))
        parser.add_argument("alias", metavar="ALIAS")
        parser.add_argument("version", metavar="VERSION", type=version_number, nargs="?")
        parser.add_argument("--delete", action="store_true", help=_("remove the alias"))
    elif subcommand == "history":
        parser.add_argument("name", metavar="NAME", help=_("the registered model"))
        parser.add_argument("--version", type=version_number, metavar="N", help=_("only this version's events"))
        parser.add_argument("--at", metavar="TIME", help=_("the stages and aliases at this time (ISO 8601)"))
        parser.add_argument("--json", action="store_true")


def handle(command, options) -> int:
    user = acting_user()
    with acting(user):
        return HANDLERS[options["subcommand"]](command, options, user)


# -- reading -------------------------------------------------------------------------------------------

def _list(command, options, user) -> int:
    from appliance.lifecycle import services
    from appliance.lifecycle.models import ModelVersion, RegisteredModel

    if options["name"]:
        model = services.get_model(options["name"])
        versions = ModelVersion.objects.filter(model=model).order_by("-number")
        if options["stage"]:
            versions = versions.filter(stage=options["stage"])
        aliases = {}
        for alias in model.aliases.select_related("version"):
            aliases.setdefault(alias.version.number, []).append(alias.name)
        rows = [{"version": v.number, "stage": v.stage, "format": v.format, "job": v.training_job,
                 "verification": v.verification, "aliases": sorted(aliases.get(v.number, [])),
                 "registered": v.created} for v in versions]
        if options["json"]:
            print_json(command, rows)
            return 0
        command.stdout.write(f"{'VERSION':>7}  {'STAGE':<11} {'FORMAT':<12} {'JOB':<10} {'VERIFIED':<11} ALIASES")
        for row in rows:
            command.stdout.write(f"{row['version']:>7}  {row['stage']:<11} {row['format']:<12} {row['job'] or '-':<10} "
                                 f"{row['verification']:<11} {', '.join(row['aliases'])}")
        return 0
    models = RegisteredModel.objects.annotate(version_count=Count("versions")).order_by("name")
    if options["search"]:
        models = models.filter(Q(name__icontains=options["search"]) | Q(description__icontains=options["search"]))
    if options["stage"]:
        models = models.filter(versions__stage=options["stage"]).distinct()
    production = dict(ModelVersion.objects.filter(stage="production").values_list("model_id", "number"))
    rows = [{"name": m.name, "versions": m.version_count, "production": production.get(m.pk),
             "risk_class": m.risk_class, "owner": m.owner.get_username() if m.owner_id else ""}
            for m in models.select_related("owner")]
    if options["json"]:
        print_json(command, rows)
        return 0
    command.stdout.write(f"{'NAME':<40} {'VERSIONS':>8} {'PRODUCTION':>10}  RISK")
    for row in rows:
        command.stdout.write(f"{row['name']:<40} {row['versions']:>8} {row['production'] or '-':>10}  {row['risk_class']}")
    return 0


def version_document(version) -> dict:
    return {
        "model": version.model.name, "version": version.number, "stage": version.stage,
        "description": version.description, "tags": version.tags, "source": version.source,
        "storage_path": version.storage_path, "format": version.format, "architecture": version.architecture,
        "architecture_error": version.architecture_error,
        "registered_by": version.registered_by.get_username() if version.registered_by_id else "",
        "registered": version.created,
        "lineage": {"job": version.training_job, "training": version.training, "datasets": version.datasets,
                    "code_revision": version.code_revision, "hyperparameters": version.hyperparameters,
                    "metrics": version.metrics,
                    "parent": f"{version.parent.model.name}/{version.parent.number}" if version.parent_id else ""},
        "artifacts": [{"path": a.path, "size": a.size, "sha256": a.sha256, "state": a.state}
                      for a in version.artifacts.all()],
        "signed_at": version.signed_at, "verification": version.verification, "verified_at": version.verified_at,
        "aliases": sorted(version.aliases.values_list("name", flat=True)),
        "evaluations": [{"id": e.pk, "name": e.name, "metrics": e.metrics, "passed": e.passed, "job": e.job,
                         "datasets": e.datasets} for e in version.evaluations.all()],
        "requests": [{"id": r.pk, "stage": r.target_stage, "state": r.state, "requested_by": r.requested_by_username,
                      "decided_by": r.decided_by_username, "expires_at": r.expires_at}
                     for r in version.requests.order_by("created")],
    }


def _show(command, options, user) -> int:
    from appliance.lifecycle import services

    version = services.get_version(options["name"], options["version"])
    document = version_document(version)
    if options["json"]:
        print_json(command, document)
        return 0
    write = command.stdout.write
    write(f"{document['model']} v{document['version']}: {document['stage']}"
          + (" (" + _("aliases: %(aliases)s") % {"aliases": ", ".join(document["aliases"])} + ")"
             if document["aliases"] else ""))
    write(_("source: %(source)s (%(format)s)") % document)
    arch = document["architecture"]
    if arch:
        write(_("architecture: %(architecture)s, %(params)s parameters, %(layers)s layers, %(dtype)s") % {
            "architecture": arch.get("architecture") or "?", "params": f"{arch.get('params', 0):,}",
            "layers": arch.get("layers"), "dtype": arch.get("dtype")})
    elif document["architecture_error"]:
        write(_("architecture: not read (%(error)s)") % {"error": document["architecture_error"]})
    lineage, training = document["lineage"], document["lineage"]["training"]
    if lineage["job"]:
        # Analytics attributes a job's GPU-hours after its hours are rolled up: say so rather than "?".
        usage = (_("%(hours)s GPU-hours, efficiency %(efficiency)s") % {
            "hours": training["gpu_hours"], "efficiency": training.get("efficiency")}
            if training.get("gpu_hours") is not None else _("GPU-hours not attributed by analytics yet"))
        write(_("training: Slurm job %(job)s of %(user)s on %(nodes)s, %(gpus)s GPUs, %(start)s - %(end)s, "
                "%(usage)s") % {
            "job": lineage["job"], "user": training.get("user") or "?", "nodes": ", ".join(training.get("nodes") or [])
            or "?", "gpus": training.get("gpus", "?"), "start": training.get("start") or "?",
            "end": training.get("end") or "?", "usage": usage})
    for item in lineage["datasets"]:
        write(_("dataset: %(name)s %(uri)s sha256 %(sha256)s") % {**item, "sha256": item["sha256"] or "-"})
    if lineage["code_revision"]:
        write(_("code: %(revision)s") % {"revision": lineage["code_revision"]})
    if lineage["parent"]:
        write(_("parent: %(parent)s") % {"parent": lineage["parent"]})
    write(_("verification: %(state)s; signed %(signed)s") % {
        "state": document["verification"], "signed": document["signed_at"] or _("no")})
    for artifact in document["artifacts"]:
        write(f"  {artifact['sha256']}  {artifact['size']:>14,}  {artifact['path']}")
    for evaluation in document["evaluations"]:
        verdict = {True: _("passed"), False: _("failed"), None: ""}[evaluation["passed"]]
        write(_("evaluation #%(id)s %(name)s %(metrics)s %(verdict)s") % {
            **evaluation, "metrics": ", ".join(f"{k}={v}" for k, v in evaluation["metrics"].items()),
            "verdict": verdict})
    for request in document["requests"]:
        write(_("request #%(id)s to %(stage)s by %(requested_by)s: %(state)s") % request)
    return 0


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(_("--at: %(text)r is not an ISO 8601 time (2026-03-02T14:00:00+00:00)") % {
            "text": text[:60]}) from None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment


def _history(command, options, user) -> int:
    from appliance.lifecycle import services

    model = services.get_model(options["name"])
    if options["at"]:
        state = services.state_at(model, _parse_time(options["at"]))
        if options["json"]:
            print_json(command, state)
            return 0
        command.stdout.write(_("%(model)s at %(at)s:") % {"model": model.name, "at": options["at"]})
        for number, stage in state["stages"].items():
            command.stdout.write(f"  v{number}: {stage}")
        for name, number in state["aliases"].items():
            command.stdout.write(f"  @{name} -> v{number}")
        return 0
    version = services.get_version(model.name, options["version"]) if options["version"] else None
    events = services.timeline(model, version)
    if options["json"]:
        print_json(command, events)
        return 0
    for event in events:
        at = timezone.localtime(event["at"]).isoformat(timespec="seconds")
        kind = event["kind"]
        if kind == "stage":
            what = _("v%(version)s -> %(stage)s") % event
            if event.get("reason"):
                what += ": " + event["reason"].splitlines()[0][:200]
        elif kind == "alias":
            what = _("@%(alias)s -> v%(version)s") % event
        elif kind == "request":
            what = _("request #%(request)s: v%(version)s to %(stage)s, %(state)s") % event
            if event["decided_by"]:
                what += _(" by %(who)s") % {"who": event["decided_by"]}
        elif kind == "evaluation":
            what = _("evaluation %(name)s of v%(version)s") % event
        else:
            what = _("deployment %(name)s of v%(version)s: %(state)s") % event
        command.stdout.write(f"{at}  {event['by'] or '-':<16} {what}")
    return 0


# -- changing ------------------------------------------------------------------------------------------

def _evaluate(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("adding an evaluation"))
    version = services.get_version(options["name"], options["version"])
    evaluation = services.add_evaluation(version, user=user, name=options["evaluation"],
                                         datasets=options["dataset"], metrics=dict(options["metric"]),
                                         job=options["job"], passed=options["passed"], notes=options["notes"])
    command.stdout.write(_("evaluation #%(id)s %(name)s attached to %(model)s v%(version)s") % {
        "id": evaluation.pk, "name": evaluation.name, "model": version.model.name, "version": version.number})
    return 0


def _transition(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("changing a stage"))
    version = services.get_version(options["name"], options["version"])
    former = version.stage
    services.transition(version, options["stage"], user=user, reason=options["reason"])
    command.stdout.write(_("%(model)s v%(version)s: %(former)s -> %(stage)s") % {
        "model": version.model.name, "version": version.number, "former": former, "stage": options["stage"]})
    return 0


def _request(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("requesting a transition"))
    version = services.get_version(options["name"], options["version"])
    request = services.request_transition(version, options["target"] or options["stage"], user=user, reason=options["reason"],
                                          evidence=options["evidence"], alias=options["alias"])
    command.stdout.write(_("request #%(id)s: %(model)s v%(version)s to %(stage)s, waiting for a second person "
                           "until %(expires)s") % {"id": request.pk, "model": version.model.name,
                                                   "version": version.number, "stage": request.target_stage,
                                                   "expires": request.expires_at.isoformat(timespec="seconds")})
    return 0


def _requests(command, options, user) -> int:
    from appliance.lifecycle import services
    from appliance.lifecycle.models import PromotionRequest

    # A pending request past its lifetime reads as expired (as in the portal's inbox) before the periodic
    # task marks it so: reading changes nothing.
    now, states = timezone.now(), PromotionRequest.State
    rows = (PromotionRequest.objects.select_related("version__model").prefetch_related("evidence")
            .order_by("-created"))
    if options["name"]:
        rows = rows.filter(version__model=services.get_model(options["name"]))
    if options["state"] == states.PENDING:
        rows = rows.filter(state=states.PENDING, expires_at__gt=now)
    elif options["state"] == states.EXPIRED:
        rows = rows.filter(Q(state=states.EXPIRED) | Q(state=states.PENDING, expires_at__lte=now))
    elif options["state"] != "all":
        rows = rows.filter(state=options["state"])

    def state(row):
        return states.EXPIRED if row.state == states.PENDING and row.expires_at <= now else row.state

    documents = [{"id": row.pk, "model": row.version.model.name, "version": row.version.number,
                  "to": row.target_stage, "alias": row.alias, "state": state(row),
                  "requested_by": row.requested_by_username, "reason": row.reason,
                  "evidence": sorted(evaluation.pk for evaluation in row.evidence.all()),
                  "expires": row.expires_at.isoformat(timespec="seconds"),
                  "decided_by": row.decided_by_username or None,
                  "decided": row.decided_at.isoformat(timespec="seconds") if row.decided_at else None,
                  "decision_reason": row.decision_reason} for row in rows]
    if options["json"]:
        print_json(command, documents)
        return 0
    if not documents:
        command.stdout.write(_("no requests") if options["state"] == "all" else
                             _("no %(state)s requests") % {"state": options["state"]})
        return 0
    for row in documents:
        line = _("request #%(id)s: %(model)s v%(version)s to %(to)s, %(state)s, asked by %(requester)s: "
                 "%(reason)s") % {**row, "requester": row["requested_by"],
                                  "reason": (row["reason"].splitlines() or [""])[0][:120]}
        if row["state"] == PromotionRequest.State.PENDING:
            line += _(" (waiting for a second person until %(expires)s)") % row
        elif row["decided_by"]:
            line += _(" (%(state)s by %(decider)s at %(decided)s)") % {**row, "decider": row["decided_by"]}
        command.stdout.write(line)
    return 0


def _request_row(number: int):
    from appliance.lifecycle.errors import NotFound
    from appliance.lifecycle.models import PromotionRequest

    request = PromotionRequest.objects.select_related("version__model").filter(pk=number).first()
    if request is None:
        raise NotFound(_("request #%(id)s does not exist") % {"id": number}, "request")
    return request


def _approve(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("approving a request"))
    request = services.approve(_request_row(options["request"]), user=user, reason=options["reason"])
    command.stdout.write(_("request #%(id)s approved: %(model)s v%(version)s is %(stage)s") % {
        "id": request.pk, "model": request.version.model.name, "version": request.version.number,
        "stage": request.target_stage})
    return 0


def _reject(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("rejecting a request"))
    request = services.reject(_request_row(options["request"]), user=user, reason=options["reason"])
    command.stdout.write(_("request #%(id)s rejected") % {"id": request.pk})
    return 0


def _cancel(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("withdrawing a request"))
    request = services.cancel(_request_row(options["request"]), user=user)
    command.stdout.write(_("request #%(id)s withdrawn") % {"id": request.pk})
    return 0


def _alias(command, options, user) -> int:
    from appliance.lifecycle import services

    require_person(user, _("changing an alias"))
    model = services.get_model(options["name"])
    if options["delete"]:
        if options["version"] is not None:
            raise CommandError(_("VERSION: not with --delete"))
        services.delete_alias(model, options["alias"], user=user)
        command.stdout.write(_("%(model)s@%(alias)s removed") % {"model": model.name, "alias": options["alias"]})
        return 0
    if options["version"] is None:
        raise CommandError(_("VERSION: the version the alias points at is needed (or --delete)"))
    version = services.get_version(model.name, options["version"])
    services.set_alias(model, options["alias"], version, user=user)
    command.stdout.write(_("%(model)s@%(alias)s -> v%(version)s") % {
        "model": model.name, "alias": options["alias"], "version": version.number})
    return 0


HANDLERS = {"list": _list, "show": _show, "history": _history, "evaluate": _evaluate, "transition": _transition,
            "request": _request, "requests": _requests, "approve": _approve, "reject": _reject, "cancel": _cancel,
            "alias": _alias}
