"""Partition plans: planned against the appliance's current layout, saved, applied through the
partitioning stage (a provisioning run), rolled back by applying the previous layout again.

A plan's state follows its run (follow_run, connected to the run's saves in apps.py): applying ->
applied (the plan applied before it -> superseded) or failed.

Provisioning sits above partitioning in the app order; only the functions that start a run import it,
inside the function, as the CLI and the portal do.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance import audit
from appliance.core.roles import can
from appliance.inventory.models import Appliance

from . import profiles
from .layout import current_layout, planner_current, planner_gpus
from .models import Plan

STAGE = "partitioning"
WORKLOADS_STAGE = "workloads"
MAX_TIME_SLICING_REPLICAS = 64
APPLICABLE_STATES = (Plan.State.DRAFT, Plan.State.FAILED)


class PlanRefused(ValueError):
    """A plan that cannot be made or applied; each line names the place (requests[3].memory_gb, gpu04/gpu0)."""

    def __init__(self, errors: list[str], *, conflict: bool = False):
        self.errors = [str(e) for e in errors]
        # A refusal for the state of things (not a draft, stale, a run active, nothing applied), not for the
        # plan's content: the API answers 409 for it, 400 otherwise.
        self.conflict = conflict
        super().__init__("\n".join(self.errors))


# --------------------------------------------------------------------------------------------------
# Layout comparison

def _mig_set(mig) -> frozenset | None:
    return None if mig is None else frozenset((str(i["profile"]), int(i["start"])) for i in mig)


def _replicas(slicing) -> int:
    return int((slicing or {}).get("replicas") or 0) if isinstance(slicing, dict) else 0


def _same(a: dict, b: dict) -> bool:
    return _mig_set(a.get("mig")) == _mig_set(b.get("mig")) and _replicas(a.get("time_slicing")) == _replicas(
        b.get("time_slicing"))


def disruption(current: list[dict], target: list[dict]) -> dict:
    """What going from `current` to `target` (both [{id, mig, time_slicing}]) destroys, creates and keeps;
    GPUs `target` does not name keep their layout."""
    now = {g["id"]: g for g in current}
    result = {"destroyed": [], "created": [], "kept": [], "mig_mode_changes": [], "time_slicing_changes": [],
              "gpus_changed": []}
    for gpu in target:
        before = now.get(gpu["id"], {"mig": None, "time_slicing": None})
        old, new = _mig_set(before.get("mig")) or frozenset(), _mig_set(gpu.get("mig")) or frozenset()
        for key, instances in (("destroyed", old - new), ("created", new - old), ("kept", old & new)):
            result[key] += [{"gpu": gpu["id"], "profile": p, "start": s} for p, s in sorted(instances, key=lambda i: i[1])]
        if (before.get("mig") is None) != (gpu.get("mig") is None):
            result["mig_mode_changes"].append({"gpu": gpu["id"], "enabled": gpu.get("mig") is not None})
        if _replicas(before.get("time_slicing")) != _replicas(gpu.get("time_slicing")):
            result["time_slicing_changes"].append({"gpu": gpu["id"], "from": _replicas(before.get("time_slicing")),
                                                   "to": _replicas(gpu.get("time_slicing"))})
        if not _same(before, gpu):
            result["gpus_changed"].append(gpu["id"])
    return result


def result_errors(result, layout: dict) -> list[str]:
    """Why a planner result cannot be applied to the appliance whose layout is `layout`: GPUs it does not
    have, models that differ, an impossible MIG layout, MIG and time-slicing on one GPU."""
    if not isinstance(result, dict) or not isinstance(result.get("gpus"), list):
        return [_("result: a planner result has a list \"gpus\"")]
    known = {g["id"]: g for g in layout["gpus"]}
    errors = []
    seen = set()
    for n, gpu in enumerate(result["gpus"]):
        where = f"gpus[{n}]"
        if not isinstance(gpu, dict) or not isinstance(gpu.get("id"), str):
            errors.append(_("%(where)s: each GPU has a string \"id\"") % {"where": where})
            continue
        where = f"gpus[{n}] ({gpu['id']})"
        if gpu["id"] in seen:
            errors.append(_("%(where)s: the GPU is listed twice") % {"where": where})
        seen.add(gpu["id"])
        mine = known.get(gpu["id"])
        if mine is None:
            errors.append(_("%(where)s: the appliance has no such GPU") % {"where": where})
            continue
        mig, slicing = gpu.get("mig"), gpu.get("time_slicing")
        if mig is not None:
            if mine["model"] is None:
                errors.append(_("%(where)s: this GPU has no MIG profiles") % {"where": where})
                continue
            if gpu.get("model") not in (None, mine["model"]):
                errors.append(_("%(where)s: model %(model)s, but the GPU is a %(actual)s") % {
                    "where": where, "model": gpu.get("model"), "actual": mine["model"]})
            if not isinstance(mig, list) or not all(
                    isinstance(i, dict) and isinstance(i.get("profile"), str) and type(i.get("start")) is int
                    for i in mig):
                errors.append(_("%(where)s.mig: a list of {profile, start}") % {"where": where})
                continue
            for reason in profiles.layout_errors(profiles.model(mine["model"]), [(i["profile"], i["start"]) for i in mig]):
                errors.append(f"{where}.mig: {reason}")
            if slicing is not None:
                errors.append(_("%(where)s: a GPU is MIG or time-sliced, never both") % {"where": where})
        if slicing is not None:
            replicas = slicing.get("replicas") if isinstance(slicing, dict) else None
            if type(replicas) is not int or not 2 <= replicas <= MAX_TIME_SLICING_REPLICAS:
                errors.append(_("%(where)s.time_slicing.replicas: an integer from 2 to %(most)d") % {
                    "where": where, "most": MAX_TIME_SLICING_REPLICAS})
    return errors


def changed_nodes(target: list[dict], layout: dict) -> dict[str, list[str]]:
    """node -> the GPUs of it the target changes."""
    by_id = {g["id"]: g for g in layout["gpus"]}
    nodes: dict[str, list[str]] = {}
    for gpu in target:
        mine = by_id.get(gpu["id"])
        if mine is not None and not _same(mine, gpu):
            nodes.setdefault(mine["node"], []).append(gpu["id"])
    return dict(sorted(nodes.items()))


def _current_of(layout: dict, ids: set[str]) -> list[dict]:
    return [g for g in planner_current(layout) if g["id"] in ids]


# --------------------------------------------------------------------------------------------------
# Plans

def _save(plan: Plan, **options) -> None:
    # Each step a plan takes is one record of its own (partitioning.plan.*, with what matters in it), not a
    # change-capture diff of the whole result besides: the pattern of provisioning's cancel_run.
    models.Model.save(plan, **options)


def _next_number(appliance) -> int:
    return (Plan.objects.filter(appliance=appliance).aggregate(n=Max("number"))["n"] or 0) + 1


def applied_plan(appliance) -> Plan | None:
    return Plan.objects.filter(appliance=appliance, state=Plan.State.APPLIED).order_by("-applied_at", "-number").first()


def with_applied_placements(appliance, current: list[dict]) -> dict:
    """The planner's `current`: the layout now and where the applied plan put each replica, so that
    planning the same requests again keeps the services where they run (the planner checks each placement
    against the layout now and passes over those it no longer holds)."""
    applied = applied_plan(appliance)
    return {"gpus": current, "placed": list((applied.result or {}).get("placed") or []) if applied else []}


def _spot(placement: dict) -> dict:
    return {"gpu": placement.get("gpu"), "kind": placement.get("kind"), "profile": placement.get("profile"),
            "start": placement.get("start")}


def service_moves(serving: list[dict] | None, placed: list[dict], destroyed: list[dict] | None = None) -> dict:
    """What a plan does to the services that run now: `serving` is where the applied plan placed each
    (request, replica), `placed` where the new plan places it. {"moved": [{request, replica, from, to}],
    "restarted": [...] (same place, but its MIG instance is destroyed and made again), "stopped": [...]
    (placed now, not by the new plan), "started": [...] (new)}. The planner knows the layout, not which
    service runs where: the applied plan is the record of that."""
    before = {(p.get("request"), p.get("replica")): p for p in serving or []}
    after = {(p.get("request"), p.get("replica")): p for p in placed or []}
    remade = {(d.get("gpu"), d.get("profile"), d.get("start")) for d in destroyed or []}
    moves: dict[str, list] = {"moved": [], "restarted": [], "stopped": [], "started": []}
    for key in sorted(set(before) | set(after), key=lambda k: (str(k[0]), int(k[1] or 0))):
        name = {"request": key[0], "replica": key[1]}
        old, new = before.get(key), after.get(key)
        if old is None:
            moves["started"].append({**name, "to": _spot(new)})
        elif new is None:
            moves["stopped"].append({**name, "from": _spot(old)})
        elif _spot(old) != _spot(new):
            moves["moved"].append({**name, "from": _spot(old), "to": _spot(new)})
        elif (new.get("gpu"), new.get("profile"), new.get("start")) in remade:
            moves["restarted"].append({**name, "at": _spot(new)})
    return moves


def deployments_hit(appliance, gpus_changed) -> list[dict]:
    """The model deployments (appliance/lifecycle) running on GPUs whose layout a plan changes: applying it
    takes their GPU or MIG instance away (the deployments' health check then fails them), so the plan says
    which, for the person who applies it: [{deployment, name, model, version, gpus}]."""
    from appliance.lifecycle.deployments import placed_on

    return [{"deployment": deployment.pk, "name": deployment.name, "model": deployment.version.model.name,
             "version": deployment.version.number, "gpus": gpus}
            for deployment, gpus in placed_on(appliance, gpus=gpus_changed or ())]


def with_service_moves(appliance, result: dict) -> dict:
    """The planner's result with disruption.services (the moves of the services the applied plan placed)
    and disruption.deployments (the model deployments on GPUs it changes)."""
    applied = applied_plan(appliance)
    serving = (applied.result or {}).get("placed") if applied else []
    disruption = dict(result.get("disruption") or {})
    disruption["services"] = service_moves(serving, result.get("placed") or [], disruption.get("destroyed"))
    disruption["deployments"] = deployments_hit(appliance, disruption.get("gpus_changed"))
    return {**result, "disruption": disruption}


def _create(appliance, *, user, description, requests, gpus, current, result) -> Plan:
    with transaction.atomic():
        Appliance.objects.select_for_update().filter(pk=appliance.pk).first()
        plan = Plan(
            appliance=appliance, number=_next_number(appliance), description=description[:200],
            requests=requests, gpus=gpus, current=current, result=result, previous=applied_plan(appliance),
            created_by=user if getattr(user, "is_authenticated", False) else None)
        _save(plan)
        audit.record("partitioning.plan.create", target=plan, details={
            "number": plan.number, "requests": len(requests), "gpus": len(gpus),
            "served_weight": result.get("served_weight"), "total_weight": result.get("total_weight"),
            "unplaced": len(result.get("unplaced") or []),
            "optimality": (result.get("optimality") or {}).get("status"),
            "gap_percent": (result.get("optimality") or {}).get("gap_percent"),
            "gpus_changed": list((result.get("disruption") or {}).get("gpus_changed") or [])})
    return plan


def save_plan(appliance, requests, *, user, description: str = "", gpus=None) -> Plan:
    """Plan `requests` for the appliance's GPUs (or `gpus`, a subset of them) against its current layout
    and save the plan (a draft). Raises PlanRefused naming the bad item."""
    from . import planner

    layout = current_layout(appliance)
    if gpus is None:
        gpus = planner_gpus(layout)
    else:
        known = {g["id"] for g in layout["gpus"]}
        unknown = [str(g.get("id")) for g in gpus if not isinstance(g, dict) or g.get("id") not in known]
        if unknown:
            raise PlanRefused([_("gpus: %(ids)s not in appliance %(appliance)s") % {
                "ids": ", ".join(unknown), "appliance": appliance.name}])
    current = _current_of(layout, {g["id"] for g in gpus})
    try:
        result = planner.plan(gpus, requests, with_applied_placements(appliance, current))
    except planner.PlanInputError as exc:
        raise PlanRefused([str(exc)]) from None
    return _create(appliance, user=user, description=description, requests=list(requests), gpus=list(gpus),
                   current=current, result=with_service_moves(appliance, result))


def save_result(appliance, result, *, user, description: str = "") -> Plan:
    """Save a planner result made elsewhere (a file given to `partition apply`) as a plan, after checking
    it against the appliance; its disruption is computed here against the current layout."""
    layout = current_layout(appliance)
    errors = result_errors(result, layout)
    if errors:
        raise PlanRefused(errors)
    ids = {g["id"] for g in result["gpus"]}
    current = _current_of(layout, ids)
    target = [{"id": g["id"], "model": next(m["model"] for m in layout["gpus"] if m["id"] == g["id"]),
               "mig": None if g.get("mig") is None else [{"profile": i["profile"], "start": i["start"]} for i in g["mig"]],
               "time_slicing": None if g.get("time_slicing") is None else {"replicas": g["time_slicing"]["replicas"]}}
              for g in result["gpus"]]
    changes = disruption(current, target)
    changes["deployments"] = deployments_hit(appliance, changes["gpus_changed"])
    saved = {**{k: v for k, v in result.items() if k in ("placed", "unplaced", "served_weight", "total_weight")},
             "gpus": target, "disruption": changes}
    gpus = [g for g in planner_gpus(layout) if g["id"] in ids]
    return _create(appliance, user=user, description=description, requests=[], gpus=gpus, current=current,
                   result=saved)


def plan_problems(plan: Plan, layout: dict | None = None) -> list[str]:
    """Why `plan` cannot be applied now: errors in its layout, or a layout that changed since it was made."""
    layout = layout or current_layout(plan.appliance)
    errors = result_errors(plan.result, layout)
    if errors:
        return errors
    ids = {g["id"] for g in plan.result["gpus"]}
    now = {g["id"]: g for g in _current_of(layout, ids)}
    then = {g["id"]: g for g in plan.current or []}
    moved = sorted(i for i in ids if i in now and not _same(now[i], then.get(i, {"mig": None, "time_slicing": None})))
    if moved:
        return [_("plan %(number)d is stale: the layout of %(gpus)s changed since it was made; plan again") % {
            "number": plan.number, "gpus": ", ".join(moved)}]
    return []


def check_may_apply(user) -> None:
    """Applying a plan changes the GPUs through a provisioning run: partitioning.change and provisioning.run."""
    if user is None:
        return  # the CLI, run by the appliance's own account
    missing = [c for c in ("partitioning.change", "provisioning.run") if not can(user, c)]
    if missing:
        raise PermissionDenied(_("applying a partition plan needs %(capabilities)s") % {
            "capabilities": ", ".join(missing)})


def _refuse(plan: Plan, errors: list[str], user, *, conflict: bool = False) -> None:
    audit.record("partitioning.plan.apply", target=plan, outcome="failure", reason="; ".join(errors)[:500],
                 details={"number": plan.number}, actor=user if getattr(user, "is_authenticated", False) else None)
    raise PlanRefused(errors, conflict=conflict)


def _busy(appliance) -> str | None:
    """Why nothing can be applied on the appliance now (a provisioning run active), or None."""
    from appliance.provisioning.services import active_run

    run = active_run(appliance)
    return None if run is None else _("appliance %(appliance)s: %(run)s is %(state)s; cancel it or wait for it") % {
        "appliance": appliance.name, "run": run, "state": run.state}


def apply_plan(plan: Plan, *, user, dry_run: bool = False):
    """Start the partitioning stage on the nodes whose GPUs the plan changes; returns the provisioning run.
    A dry run reports the instance diff through the stage's check mode and leaves the plan a draft."""
    from appliance.core import dispatch
    from appliance.provisioning import services as provisioning
    from appliance.provisioning.tasks import execute_run_task

    check_may_apply(user)
    if plan.state not in APPLICABLE_STATES:
        _refuse(plan, [_("plan %(number)d is %(state)s; only a draft (or a failed plan) is applied") % {
            "number": plan.number, "state": plan.state}], user, conflict=True)
    busy = _busy(plan.appliance)
    if busy:
        _refuse(plan, [busy], user, conflict=True)
    layout = current_layout(plan.appliance)
    errors = result_errors(plan.result, layout)
    if errors:
        _refuse(plan, errors, user)
    stale = plan_problems(plan, layout)
    if stale:
        _refuse(plan, stale, user, conflict=True)
    nodes = changed_nodes(plan.result["gpus"], layout)
    if not nodes:
        _refuse(plan, [_("plan %(number)d changes no GPU: the layout is already the plan's") % {
            "number": plan.number}], user)
    try:
        with transaction.atomic():
            run = provisioning.create_run(plan.appliance, kind="stages", stages=[STAGE], nodes=list(nodes),
                                          dry_run=dry_run, user=user)
            plan.runs.add(run)
            if not dry_run:
                plan.run, plan.state = run, Plan.State.APPLYING
                plan.applied_by = user if getattr(user, "is_authenticated", False) else None
                _save(plan, update_fields=["run", "state", "applied_by", "updated"])
            audit.record("partitioning.plan.apply", target=plan, details={
                "number": plan.number, "run": run.pk, "dry_run": dry_run, "nodes": nodes})
    except provisioning.RunRefused as exc:
        _refuse(plan, exc.errors, user, conflict=_busy(plan.appliance) is not None)
    if not dry_run:
        _stop_deployments(plan, user)
    transaction.on_commit(lambda: dispatch.enqueue(execute_run_task, run.pk))
    return run


def _stop_deployments(plan: Plan, user) -> None:
    """Before the stage changes their GPUs, the model deployments on them are stopped (pods deleted: a
    service must not run on a GPU or MIG instance that is destroyed under it); follow_run deploys them
    again once the run ended, on the layout it left. Their ids are kept in the plan (moved_deployments)."""
    from appliance.lifecycle import deployments
    from appliance.lifecycle.errors import LifecycleError

    changed = ((plan.result or {}).get("disruption") or {}).get("gpus_changed") or ()
    moved = []
    for deployment, gpus in deployments.placed_on(plan.appliance, gpus=changed):
        try:   # a refusal is audited by stop() itself; the stage then changes the GPU under the service
            deployments.stop(deployment, user=user, reason=f"partition plan {plan.number} changes "
                             f"{', '.join(gpus)}; it is deployed again once the plan's run has ended")
        except LifecycleError:
            continue
        moved.append(deployment.pk)
    if moved:
        plan.result = {**plan.result, "moved_deployments": moved}
        _save(plan, update_fields=["result", "updated"])


def _redeploy_moved(plan: Plan) -> None:
    """The run that applied (or failed to apply) `plan` ended: the deployments it stopped are deployed again
    on the layout the GPUs have now (partitioning.plan.state says which came back, and which could not)."""
    from appliance.lifecycle import deployments
    from appliance.lifecycle.errors import LifecycleError
    from appliance.lifecycle.models import Deployment

    back, refused = [], []
    for deployment in (Deployment.objects.filter(pk__in=(plan.result or {}).get("moved_deployments") or [],
                                                 state=Deployment.State.STOPPED)
                       .select_related("version__model", "appliance").order_by("pk")):
        try:
            again = deployments.redeploy(deployment, user=None)
        except LifecycleError as exc:
            refused.append({"deployment": deployment.pk, "name": deployment.name, "reason": str(exc)[:300]})
            continue
        back.append({"deployment": again.pk, "name": again.name, "state": again.state, "replaces": deployment.pk})
    if back or refused:
        audit.record("partitioning.plan.state", target=plan, outcome="failure" if refused else "success",
                     reason="; ".join(f"{r['name']}: {r['reason']}" for r in refused)[:1000],
                     details={"number": plan.number, "redeployed": back, "not_redeployed": refused})


def rollback(appliance, *, user):
    """Plan the layout the appliance had before its applied plan (the previous applied plan's, or the one
    the first plan was made against) as a new plan, and apply it. Returns the new plan."""
    check_may_apply(user)
    busy = _busy(appliance)
    if busy:  # before the rollback's plan is saved: none is left behind that was never applied
        raise PlanRefused([busy], conflict=True)
    applied = applied_plan(appliance)
    if applied is None:
        raise PlanRefused([_("appliance %(appliance)s has no applied partition plan to roll back") % {
            "appliance": appliance.name}], conflict=True)
    if applied.previous is not None and applied.previous.result.get("gpus"):
        target, source = applied.previous.result["gpus"], _("plan %(number)d") % {"number": applied.previous.number}
    else:
        target, source = applied.current, _("the layout before plan %(number)d") % {"number": applied.number}
    result = {"gpus": [{"id": g["id"], "model": g.get("model"), "mig": g.get("mig"),
                        "time_slicing": g.get("time_slicing")} for g in target]}
    plan = save_result(appliance, result, user=user,
                       description=_("Rollback of plan %(number)d to %(source)s") % {"number": applied.number,
                                                                                    "source": source})
    audit.record("partitioning.plan.rollback", target=plan, details={
        "number": plan.number, "rolls_back": applied.number, "to": str(source)})
    apply_plan(plan, user=user)
    plan.refresh_from_db()
    return plan


def follow_run(run) -> None:
    """A run that carried a plan ended: the plan is applied (the one applied before it superseded) or failed."""
    from appliance.provisioning.states import RunState

    if run.dry_run or run.state not in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED):
        return
    if list(run.stages) == [WORKLOADS_STAGE]:
        for plan in Plan.objects.filter(runs=run, state=Plan.State.APPLIED).exclude(run=run):
            _resume_drained(plan, run)
    for plan in Plan.objects.filter(run=run, state=Plan.State.APPLYING):
        with transaction.atomic():
            if run.state == RunState.SUCCEEDED:
                for older in Plan.objects.filter(appliance=plan.appliance, state=Plan.State.APPLIED):
                    older.state = Plan.State.SUPERSEDED
                    _save(older, update_fields=["state", "updated"])
                    audit.record("partitioning.plan.state", target=older,
                                 details={"number": older.number, "state": older.state, "by": plan.number})
                plan.state, plan.applied_at = Plan.State.APPLIED, timezone.now()
            else:
                plan.state = Plan.State.FAILED
            _save(plan, update_fields=["state", "applied_at", "updated"])
            audit.record("partitioning.plan.state", target=plan,
                         details={"number": plan.number, "state": plan.state, "run": run.pk, "run_state": run.state})
            if plan.state == Plan.State.APPLIED and plan.appliance.simulated:
                _sync_simulated_devices(plan.appliance, list(run.node_names))
            if plan.state == Plan.State.APPLIED and plan.appliance.pools.exists():
                transaction.on_commit(lambda plan=plan: rerender_workloads(plan, list(run.node_names)))
            # Applied or failed, the GPUs are as the run left them: the services it stopped come back there.
            transaction.on_commit(lambda plan=plan: _redeploy_moved(plan))


def drained_nodes(plan: Plan) -> list[str]:
    """The Slurm nodes the partitioning stage drained for `plan`: those of the training pool whose GPUs the
    plan changes (the role drains a Slurm node before its GPUs change and leaves it drained)."""
    from appliance.inventory.models import Pool

    changed = {str(gpu).rpartition("/")[0] for gpu in ((plan.result or {}).get("disruption") or {}).get("gpus_changed") or []}
    training = plan.appliance.nodes.filter(pool_membership__pool__kind=Pool.Kind.TRAINING, name__in=changed)
    return sorted(training.values_list("name", flat=True))


def _resume_drained(plan: Plan, run) -> None:
    """The workloads run after an applied plan ended: Slurm now has the nodes' new GRES (gres.conf with the
    MIG devices, slurm.conf's Gres=, daemons restarted), so the nodes the stage drained take jobs again. When
    that run failed they stay drained: a job must not be given GPUs by a configuration that no longer exists."""
    from appliance.lending import slurmctl
    from appliance.provisioning.states import RunState

    nodes = drained_nodes(plan)
    if not nodes:
        return
    details = {"number": plan.number, "workloads_run": run.pk, "nodes": nodes}
    if run.state != RunState.SUCCEEDED:
        audit.record("partitioning.plan.state", target=plan, outcome="failure", details=details,
                     reason=_("the workloads run %(run)s did not succeed: %(nodes)s stay drained in Slurm until it "
                              "is run again") % {"run": run.pk, "nodes": ", ".join(nodes)})
        return
    try:
        slurmctl.resume(plan.appliance, nodes)
    except slurmctl.SlurmCommandError as exc:
        audit.record("partitioning.plan.state", target=plan, outcome="failure", details=details,
                     reason=str(exc)[:500])
        return
    audit.record("partitioning.plan.state", target=plan, details={**details, "resumed": nodes})


def _sync_simulated_devices(appliance, names: list[str]) -> None:
    """On a simulated appliance: each changed node's slurmd sees the MIG device files of the instances its
    GPUs now have (on a real node the driver makes them under /dev/nvidia-caps)."""
    from appliance.simulation import slurm as simulated_slurm

    for node in appliance.nodes.filter(name__in=names):
        simulated_slurm.sync_mig_devices(node)


def slurm_cluster_nodes(appliance) -> set[str]:
    """The nodes that hold the Slurm cluster's slurm.conf: the management node (the controller) and every
    member of a training pool. The file names every node and must be the same on all of them."""
    from appliance.inventory.models import Pool

    return (set(appliance.nodes.filter(role="management").values_list("name", flat=True))
            | set(appliance.nodes.filter(pool_membership__pool__kind=Pool.Kind.TRAINING).values_list("name", flat=True)))


def workloads_nodes(appliance, nodes: list[str]) -> list[str]:
    """The nodes the workloads stage reruns on after `nodes` changed layout: them, the management node, and
    every Slurm node when one of them is a Slurm node (slurm.conf names each node's MIG types in Gres= and
    must be the same file on every node of the cluster)."""
    from appliance.inventory.models import Pool

    names = set(nodes) | set(appliance.nodes.filter(role="management").values_list("name", flat=True))
    if appliance.nodes.filter(pool_membership__pool__kind=Pool.Kind.TRAINING, name__in=nodes).exists():
        names |= slurm_cluster_nodes(appliance)
    return sorted(names)


def rerender_workloads(plan: Plan, nodes: list[str]):
    """After a plan was applied: the workloads stage on its nodes and the management node renders gres.conf
    (File= per MIG device) and the device plugin config from the instances the partitioning stage recorded
    (it comes before partitioning in the catalogue, so it is a run of its own). Returns the run, or None
    when it could not start (the reason is audited)."""
    from appliance.core import dispatch
    from appliance.provisioning import services as provisioning
    from appliance.provisioning.tasks import execute_run_task

    names = workloads_nodes(plan.appliance, nodes)
    try:
        run = provisioning.create_run(plan.appliance, kind="stages", stages=[WORKLOADS_STAGE], nodes=names,
                                      user=plan.applied_by)
    except provisioning.RunRefused as exc:
        audit.record("partitioning.plan.state", target=plan, outcome="failure", reason=str(exc)[:500],
                     details={"number": plan.number, "workloads_run": None})
        return None
    plan.runs.add(run)  # before it starts: its end resumes the Slurm nodes the stage drained (follow_run)
    audit.record("partitioning.plan.state", target=plan,
                 details={"number": plan.number, "state": plan.state, "workloads_run": run.pk})
    dispatch.enqueue(execute_run_task, run.pk)
    return run


def plan_for_run(run) -> Plan | None:
    return Plan.objects.filter(runs=run).order_by("-number").first()
