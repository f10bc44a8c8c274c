"""Lending nodes between pools: propose, approve, execute step by step, reclaim, roll back.

A plan moves through LendingPlan's state table:

  proposed -> approved -> draining -> moved -> active -> reclaiming -> returned
  (rejected from proposed; rolled-back from any unfinished state; failed when a step fails)

- draining: the nodes are drained in Slurm (when the lending pool is the training pool) and the plan waits
  for their running jobs until the lending pool's reclaim time has passed, then requeues them;
- moved: the nodes' pool membership changed and the workloads stage is rerun on them (a node run of the
  provisioning app) when the appliance has completed that stage before; the plan waits for that run;
- active: lent; at the window's end, or when someone asks, the plan reclaims them;
- reclaiming: membership back, the workloads stage rerun again, then the nodes resumed in Slurm.

Leaving the inference pool, the nodes' model deployments are stopped at the drain (or reclaim) and, once the
nodes are out of the pool, deployed again on its other GPUs where they fit (step `redeploy`).

`advance(plan)` takes every step that is due; the Celery task `lending.advance` calls `advance_due()`.
Every change of state is one PlanStep and one audit record (`lending.plan.<step>`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from appliance import audit
from appliance.accounts.services import ApproverNotIndependent, require_independent_approver
from appliance.core.conflicts import StateConflict
from appliance.core.roles import can
from appliance.inventory.models import Pool, PoolMembership

from . import slurmctl
from .models import HOLDING, TRANSITIONS, LendingPlan, LendingPolicy, PlanState, PlanStep

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_NODES = 64
MAX_REASON = 1000
MAX_WINDOW = timedelta(days=31)
Outcome = PlanStep.Outcome
# sinfo's states (its %T, without the flag suffixes) of a node that takes jobs: nothing to resume.
SERVING_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})


class LendingError(Exception):
    """A plan or a step refused; the message names the field or the rule."""


class LendingDenied(LendingError):
    """The actor's role (or being the proposer) does not allow it."""


class LendingConflict(LendingError, StateConflict):
    """The plan's state does not allow the step (a plan already approved, rejected or ended): a 409."""


class LendingNotIndependent(LendingConflict):
    """The one four-eyes rule refuses the approver (accounts.services.require_independent_approver): a 409
    like the lifecycle's and audit retention's; `field` names the account at fault ("approver" or
    "requester"), as the message does first."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


# ---- reading ---------------------------------------------------------------------------------------------

def policy_of(pool: Pool) -> LendingPolicy | None:
    return LendingPolicy.objects.filter(pool=pool).first()


def _pool(name, field: str) -> Pool:
    if not isinstance(name, str) or not name.strip():
        raise LendingError(f"{field}: a pool name is required")
    pools = list(Pool.objects.filter(name=name.strip()).select_related("appliance"))
    if not pools:
        raise LendingError(f"{field}: no pool named {name.strip()!r}")
    if len(pools) > 1:
        raise LendingError(f"{field}: {len(pools)} appliances have a pool named {name.strip()!r}")
    return pools[0]


def _aware(value, field: str) -> datetime:
    if isinstance(value, str):
        from django.utils.dateparse import parse_datetime

        parsed = parse_datetime(value.strip()) if value.strip() else None
        if parsed is None:
            raise LendingError(f"{field}: {value!r} is not a date and time (ISO 8601)")
        value = parsed
    if not isinstance(value, datetime):
        raise LendingError(f"{field}: a date and time is required")
    return timezone.make_aware(value) if timezone.is_naive(value) else value


def check_window(policy: LendingPolicy, start: datetime, end: datetime) -> None:
    """The window must lie inside one of the policy's allowed windows (days and hours, local time)."""
    if policy.any_time:
        return
    local = timezone.localtime(start)
    days = set(policy.window_days or range(7))
    first, last = policy.window_start_hour, policy.window_end_hour
    length = timedelta(hours=(last - first) % 24 or 24)
    for back in (0, 1):  # an overnight window may have begun the day before
        day = (local - timedelta(days=back)).replace(hour=0, minute=0, second=0, microsecond=0)
        opens = day + timedelta(hours=first)
        closes = opens + length
        if day.weekday() in days and opens <= local < closes:
            if end > closes:
                raise LendingError(f"window_end: the policy of pool {policy.pool} allows lending until "
                                   f"{closes:%Y-%m-%d %H:%M} in this window; {timezone.localtime(end):%Y-%m-%d %H:%M} "
                                   "is later")
            return
    named = ", ".join(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[d] for d in sorted(days))
    raise LendingError(f"window_start: the policy of pool {policy.pool} allows lending from {first:02d}:00 to "
                       f"{last % 24:02d}:00 on {named}; {local:%a %Y-%m-%d %H:%M} is outside")


def _held_nodes(exclude: int | None = None) -> dict[str, int]:
    held = {}
    for plan in LendingPlan.objects.filter(state__in=HOLDING).exclude(pk=exclude).only("pk", "nodes"):
        for name in plan.nodes:
            held[name] = plan.pk
    return held


def _lent_count(pool: Pool) -> int:
    return sum(len(plan.nodes) for plan in LendingPlan.objects.filter(from_pool=pool, state__in=HOLDING))


# ---- proposing and deciding ------------------------------------------------------------------------------

def propose(*, nodes: list[str], from_pool: str, to_pool: str, window_start, window_end, reason: str, actor,
            finding=None, now: datetime | None = None) -> LendingPlan:
    """Check a plan against the lending pool's policy and record it as proposed (approved at once when that
    policy allows automatic approval). Raises LendingError naming the field or the rule."""
    now = now or timezone.now()
    if not can(actor, "analytics.change"):
        raise LendingDenied("your role may not propose lending plans")
    if not isinstance(nodes, list | tuple) or not nodes:
        raise LendingError("nodes: at least one node name is required")
    if len(nodes) > MAX_NODES:
        raise LendingError(f"nodes: at most {MAX_NODES} nodes in one plan")
    for name in nodes:
        if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
            raise LendingError(f"nodes: {str(name)[:70]!r} is not a node name")
    if len(set(nodes)) != len(nodes):
        raise LendingError("nodes: a node is named twice")
    lender, borrower = _pool(from_pool, "from_pool"), _pool(to_pool, "to_pool")
    if lender.pk == borrower.pk:
        raise LendingError("to_pool: a pool cannot lend to itself")
    if lender.kind == borrower.kind:
        raise LendingError(f"to_pool: pools {lender} and {borrower} are both {lender.kind} pools; a plan lends "
                           "between the training and the inference pool")
    if lender.appliance_id != borrower.appliance_id:
        raise LendingError(f"to_pool: pool {borrower} is on appliance {borrower.appliance}, not {lender.appliance}")
    if not isinstance(reason, str) or not reason.strip():
        raise LendingError("reason: say why the nodes are lent")
    if len(reason) > MAX_REASON:
        raise LendingError(f"reason: at most {MAX_REASON} characters")
    start, end = _aware(window_start, "window_start"), _aware(window_end, "window_end")
    if end <= start:
        raise LendingError("window_end: must be after window_start")
    if end <= now:
        raise LendingError("window_end: the window is already over")
    if end - start > MAX_WINDOW:
        raise LendingError(f"window_end: a window lasts at most {MAX_WINDOW.days} days")

    with transaction.atomic():
        Pool.objects.select_for_update().filter(pk__in=[lender.pk, borrower.pk]).count()
        policy = policy_of(lender)
        if policy is None or not policy.may_lend:
            raise LendingError(f"from_pool: the policy of pool {lender} does not allow lending its nodes")
        members = set(PoolMembership.objects.filter(pool=lender).values_list("node__name", flat=True))
        unknown = sorted(set(nodes) - members)
        if unknown:
            raise LendingError(f"nodes: {', '.join(unknown)} not in pool {lender}")
        held = _held_nodes()
        busy = sorted(name for name in nodes if name in held)
        if busy:
            raise LendingError("nodes: " + ", ".join(f"{name} is in lending plan #{held[name]}" for name in busy))
        kept = len(members) - _lent_count(lender) - len(nodes)
        if kept < policy.minimum_nodes:
            raise LendingError(f"nodes: pool {lender} keeps at least {policy.minimum_nodes} node(s); "
                               f"lending {len(nodes)} would leave {max(kept, 0)}")
        check_window(policy, start, end)
        plan = LendingPlan.objects.create(
            appliance=lender.appliance, from_pool=lender, to_pool=borrower, nodes=sorted(nodes), window_start=start,
            window_end=end, reason=reason.strip(), proposed_by=actor, finding=finding, created=now)
        _step(plan, "propose", Outcome.SUCCESS,
              f"{', '.join(plan.nodes)} from {lender} to {borrower}, {start.isoformat()} to {end.isoformat()}",
              actor=actor, details={"finding": finding.pk if finding else None, "reason": plan.reason})
        if policy.automatic_approval:
            _move(plan, PlanState.APPROVED)
            plan.approved_automatically = True
            plan.save(update_fields=["state", "approved_automatically", "updated"])
            _step(plan, "approve", Outcome.SUCCESS, f"approved by the policy of pool {lender} (automatic approval)",
                  actor=actor)
    return plan


def _locked(plan: LendingPlan) -> LendingPlan:
    return LendingPlan.objects.select_for_update().select_related("appliance", "from_pool", "to_pool").get(pk=plan.pk)


def _move(plan: LendingPlan, state: str) -> None:
    if state not in TRANSITIONS[plan.state]:
        raise LendingConflict(f"state: a {plan.state} plan cannot become {state}")
    plan.state = state


def approve(plan: LendingPlan, actor) -> LendingPlan:
    if not can(actor, "pools.approve"):
        raise LendingDenied("your role may not approve lending plans")
    try:
        with transaction.atomic():
            plan = _locked(plan)
            policy = policy_of(plan.from_pool)
            if not (policy and policy.automatic_approval):
                # The one four-eyes rule: another person, independent of the proposer (no creator link, no
                # account made, re-enabled or promoted for the occasion).
                try:
                    require_independent_approver(actor, plan.proposed_by, since=plan.created,
                                                 what=f"{plan} (the policy of pool {plan.from_pool} does not allow "
                                                      "automatic approval)", second="another person")
                except ApproverNotIndependent as exc:
                    raise LendingNotIndependent(str(exc), exc.field) from None
            _move(plan, PlanState.APPROVED)
            plan.approved_by = actor
            plan.save(update_fields=["state", "approved_by", "updated"])
            _step(plan, "approve", Outcome.SUCCESS, f"approved by {actor.get_username()}", actor=actor)
    except LendingNotIndependent as exc:
        # Recorded outside the refused transaction, which would take the record with it.
        audit.record("lending.plan.approve", target=plan, actor=actor, outcome="failure", reason=str(exc),
                     details={"state": plan.state, "field": exc.field,
                              "proposed_by": plan.proposed_by.get_username() if plan.proposed_by else None})
        raise
    return plan


def reject(plan: LendingPlan, actor, reason: str) -> LendingPlan:
    if not can(actor, "pools.approve"):
        raise LendingDenied("your role may not reject lending plans")
    if not isinstance(reason, str) or not reason.strip():
        raise LendingError("reason: say why the plan is rejected")
    with transaction.atomic():
        plan = _locked(plan)
        _move(plan, PlanState.REJECTED)
        plan.message = reason.strip()[:MAX_REASON]
        plan.save(update_fields=["state", "message", "updated"])
        _step(plan, "reject", Outcome.SUCCESS, plan.message, actor=actor)
    return plan


def request_reclaim(plan: LendingPlan, actor) -> LendingPlan:
    """The lending pool wants its nodes back before the window ends: the next advance reclaims them."""
    if not can(actor, "analytics.change"):
        raise LendingDenied("your role may not reclaim lent nodes")
    with transaction.atomic():
        plan = _locked(plan)
        if plan.state not in (PlanState.MOVED, PlanState.ACTIVE):
            raise LendingConflict(f"state: only a moved or active plan is reclaimed; {plan} is {plan.state}")
        plan.reclaim_requested = True
        plan.save(update_fields=["reclaim_requested", "updated"])
        _step(plan, "reclaim-request", Outcome.SUCCESS, f"reclaim asked by {actor.get_username()}", actor=actor)
    return advance(plan)


# ---- steps -----------------------------------------------------------------------------------------------

def _step(plan: LendingPlan, name: str, outcome: str, message: str, *, actor=None, details: dict | None = None,
          now: datetime | None = None) -> PlanStep:
    step = PlanStep.objects.create(plan=plan, name=name, state=plan.state, outcome=outcome, message=message,
                                   details=details or {}, actor=actor.get_username() if actor else "",
                                   at=timezone.now())  # when it happened, whatever clock the plan was advanced by
    audit.record(f"lending.plan.{name.replace('-', '_')}", target=plan, outcome="failure" if outcome == Outcome.FAILURE else "success",
                 details={"state": plan.state, "outcome": outcome, "message": message, "nodes": plan.nodes,
                          "from_pool": plan.from_pool.name, "to_pool": plan.to_pool.name, **(details or {})},
                 actor=actor)
    if name not in ("propose", "reclaim-request"):
        plan.message = message
        LendingPlan.objects.filter(pk=plan.pk).update(message=message)
    return step


def _uses_slurm(pool: Pool) -> bool:
    return pool.kind == Pool.Kind.TRAINING


def _slurm_states(plan: LendingPlan) -> dict:
    try:
        return slurmctl.node_states(plan.appliance, plan.nodes)
    except slurmctl.SlurmCommandError as exc:
        return {"error": str(exc)}


def _set_pool(plan: LendingPlan, pool: Pool) -> list[str]:
    """Move the plan's nodes into `pool`; returns those that moved."""
    moved = []
    for membership in PoolMembership.objects.select_related("node", "pool").filter(node__name__in=plan.nodes,
                                                                                 node__appliance=plan.appliance):
        if membership.pool_id != pool.pk:
            membership.pool = pool
            membership.save()
            moved.append(membership.node.name)
    return sorted(moved)


def _workloads_nodes(plan: LendingPlan) -> list[str]:
    """The nodes the workloads stage reruns on once the plan's nodes changed pool. A training node lent out
    stays in slurm.conf, drained, to come back with a resume: its own files change, nothing else. Nodes
    lent INTO a training pool join the Slurm cluster (and leave it when they return): slurm.conf names every
    node and partition and must be the same file on the controller and on every Slurm node (slurmctld
    refuses a slurmd it does not know), so the run covers the management node and every member of a
    training pool too."""
    from appliance.partitioning.services import slurm_cluster_nodes

    names = set(plan.nodes)
    if _uses_slurm(plan.to_pool):
        names |= slurm_cluster_nodes(plan.appliance)
    return sorted(names)


def _rerun_workloads(plan: LendingPlan, actor=None) -> tuple[str, str, int | None]:
    """Start the workloads stage on the plan's nodes, and the Slurm cluster's when they join or leave it
    (_workloads_nodes; one node run). Returns (outcome, message, run id)."""
    from appliance.provisioning import services as provisioning
    from appliance.provisioning.models import Run, StageRun
    from appliance.provisioning.states import StageState

    if not StageRun.objects.filter(run__appliance=plan.appliance, stage="workloads",
                                   state=StageState.SUCCEEDED).exists():
        return (Outcome.SKIPPED, f"the workloads stage has never completed on appliance {plan.appliance}: not rerun; "
                "the nodes keep the workload files they have", None)
    nodes = _workloads_nodes(plan)
    try:
        run = provisioning.start_run(plan.appliance, kind=Run.Kind.NODE, stages=["workloads"], nodes=nodes,
                                     user=actor)
    except provisioning.RunRefused as exc:
        return Outcome.FAILURE, f"the workloads stage could not start: {exc}", None
    return Outcome.SUCCESS, f"the workloads stage runs on {', '.join(nodes)} (run #{run.pk})", run.pk


def _run_result(plan: LendingPlan) -> str | None:
    """None while the plan's run is unfinished; else its state ("succeeded" when there is none)."""
    from appliance.provisioning.models import Run
    from appliance.provisioning.states import RUN_FINISHED

    if plan.run_id is None:
        return "succeeded"
    run = Run.objects.filter(pk=plan.run_id).first()
    if run is None:
        return "failed"
    return run.state if run.state in RUN_FINISHED else None


def _fail(plan: LendingPlan, name: str, message: str, details: dict | None = None) -> None:
    _move(plan, PlanState.FAILED)
    plan.save(update_fields=["state", "updated"])
    _step(plan, name, Outcome.FAILURE, message, details=details)


def _begin_reconfigure(plan: LendingPlan, pool: Pool, state: str, now: datetime) -> None:
    moved = _set_pool(plan, pool)
    if plan.state != state:
        _move(plan, state)
        plan.save(update_fields=["state", "updated"])
    _step(plan, "move", Outcome.SUCCESS, f"{', '.join(plan.nodes)} now in pool {pool}", now=now,
          details={"moved": moved, "pool": pool.name})
    left = plan.to_pool if pool == plan.from_pool else plan.from_pool
    if not _uses_slurm(left):
        # The nodes are out of the inference pool now: what its drain stopped is placed on its other GPUs,
        # as Kubernetes reschedules the pods of a drained node (after the commit: deploy() writes the
        # pool's state, which a rollback here could not take back).
        transaction.on_commit(lambda plan_id=plan.pk: _redeploy_evicted(plan_id))
    outcome, message, run_id = _rerun_workloads(plan)
    plan.run_id = run_id
    plan.save(update_fields=["run_id", "updated"])
    if outcome == Outcome.FAILURE:
        _fail(plan, "workloads", message)
        return
    _step(plan, "workloads", outcome, message, now=now, details={"run": run_id})


def _evict_deployments(plan: LendingPlan, pool: Pool) -> list[dict]:
    """The inference pool's side of a drain: the model deployments (appliance/lifecycle) placed on the plan's
    nodes are stopped (their pods deleted and their GPUs freed; audited lifecycle.deployment.stop, by the
    appliance), since the nodes leave the pool. They are not moved: the drain step names them, to be
    deployed again on the pool's other GPUs. Raises LifecycleError when one cannot be stopped."""
    from appliance.lifecycle import deployments

    stopped = []
    for deployment, nodes in deployments.placed_on(plan.appliance, nodes=plan.nodes):
        deployments.stop(deployment, user=None, reason=f"{', '.join(nodes)} leave pool {pool} (lending plan {plan.pk})")
        stopped.append({"deployment": deployment.pk, "name": deployment.name, "model": deployment.version.model.name,
                        "version": deployment.version.number, "nodes": nodes})
    return stopped


def _redeploy_evicted(plan_id: int) -> None:
    """The deployments the plan's last drain (or reclaim) stopped on the inference side, deployed again under
    their service names on the inference pool's GPUs (the plan's nodes no longer among them): one step,
    `redeploy`, naming those that came back and those that did not fit (they stay stopped, with the
    reason; the plan goes on). A service someone deployed again meanwhile is left as it is."""
    from appliance.lifecycle import deployments
    from appliance.lifecycle.errors import LifecycleError
    from appliance.lifecycle.models import Deployment

    plan = LendingPlan.objects.select_related("appliance", "from_pool", "to_pool").get(pk=plan_id)
    stopped_by = (plan.steps.filter(name__in=("drain", "reclaim")).order_by("-pk").values_list("details", flat=True)
                  .first() or {}).get("deployments") or []
    back, refused = [], []
    for deployment in (Deployment.objects.filter(pk__in=[entry["deployment"] for entry in stopped_by],
                                                 state=Deployment.State.STOPPED)
                       .select_related("version__model", "appliance").order_by("name", "pk")):
        if Deployment.objects.filter(appliance=deployment.appliance, name=deployment.name,
                                     state__in=deployments.ACTIVE).exists():
            continue
        try:
            again = deployments.redeploy(deployment, user=None)
        except LifecycleError as exc:
            refused.append({"deployment": deployment.pk, "name": deployment.name, "reason": str(exc)[:300]})
            continue
        back.append({"deployment": again.pk, "name": again.name, "state": again.state, "replaces": deployment.pk,
                     "gpus": [f"{spot['node']}/gpu{spot['gpu']}" for spot in again.placement or []]})
    if not back and not refused:
        return
    parts = []
    if back:
        parts.append("deployed again: " + ", ".join(f"{entry['name']} on {', '.join(entry['gpus'])}"
                                                    for entry in back))
    if refused:
        parts.append("not deployed again (they stay stopped): " + "; ".join(f"{entry['name']}: {entry['reason']}"
                                                                          for entry in refused))
    with transaction.atomic():
        _step(_locked(plan), "redeploy", Outcome.FAILURE if refused else Outcome.SUCCESS, "; ".join(parts),
              details={"redeployed": back, "not_redeployed": refused})


def _leave(plan: LendingPlan, pool: Pool) -> tuple[str, str, dict] | None:
    """Drain the nodes: in Slurm when `pool` is scheduled by Slurm; else (the inference pool) stop the model
    deployments placed on them. Returns (outcome, message, details), or None when Slurm or the pool refused
    (the plan has failed)."""
    if not _uses_slurm(pool):
        from appliance.lifecycle.errors import LifecycleError

        try:
            stopped = _evict_deployments(plan, pool)
        except LifecycleError as exc:
            _fail(plan, "drain", f"stopping the model deployments on {', '.join(plan.nodes)} failed: {exc}")
            return None
        if not stopped:
            return (Outcome.SUCCESS, f"no model deployment of pool {pool} runs on {', '.join(plan.nodes)}",
                    {"deployments": []})
        names = ", ".join(f"{d['name']} ({d['model']} v{d['version']})" for d in stopped)
        return (Outcome.SUCCESS, f"model deployments on the nodes stopped: {names}; they are deployed again on the "
                "pool's other GPUs once the nodes have left it", {"deployments": stopped})
    why = f"lent to pool {plan.to_pool} by lending plan {plan.pk}" if pool == plan.from_pool else \
        f"returning to pool {plan.from_pool} (lending plan {plan.pk})"
    try:
        slurmctl.drain(plan.appliance, plan.nodes, why)
    except slurmctl.SlurmCommandError as exc:
        _fail(plan, "drain", f"drain in Slurm failed: {exc}")
        return None
    return (Outcome.SUCCESS, f"drained in Slurm ({why}); running jobs may finish until the deadline",
            {"slurm": _slurm_states(plan)})


def _jobs_block(plan: LendingPlan, pool: Pool, now: datetime) -> bool:
    """Whether jobs of `pool`'s Slurm still hold the nodes (requeued once the deadline has passed)."""
    if not _uses_slurm(pool):
        return False
    try:
        jobs = slurmctl.jobs_on(plan.appliance, plan.nodes)
    except slurmctl.SlurmCommandError as exc:
        _fail(plan, "drain", f"listing the nodes' jobs failed: {exc}")
        return True
    if not jobs:
        return False
    requeue = [job["id"] for job in jobs if job["state"] in slurmctl.REQUEUED_STATES]
    if requeue and plan.deadline and now >= plan.deadline:
        try:
            slurmctl.requeue(plan.appliance, requeue)
        except slurmctl.SlurmCommandError as exc:
            _fail(plan, "requeue", f"requeueing jobs {', '.join(requeue)} failed: {exc}")
            return True
        _step(plan, "requeue", Outcome.SUCCESS, f"deadline passed: jobs {', '.join(requeue)} requeued",
              details={"jobs": jobs})
    return True


def _arrive(plan: LendingPlan, pool: Pool) -> bool:
    """Resume the nodes in Slurm when `pool` is scheduled by Slurm. False when Slurm refused (plan failed)."""
    if not _uses_slurm(pool):
        return True
    try:
        # A node that has just joined the cluster (lent into the training pool: slurm.conf names it now)
        # registers idle: it has nothing to resume, and Slurm refuses to resume a node that is not drained or down.
        serving = {node for node, state in slurmctl.node_states(plan.appliance, plan.nodes).items()
                   if state.rstrip("*~#$@+^!%-") in SERVING_STATES}
        resumed = [node for node in plan.nodes if node not in serving]
        if resumed:
            slurmctl.resume(plan.appliance, resumed)
    except slurmctl.SlurmCommandError as exc:
        _fail(plan, "resume", f"resume in Slurm failed: {exc}")
        return False
    idle = sorted(serving)
    if not idle:
        message = f"resumed in Slurm: {', '.join(plan.nodes)} serve pool {pool}"
    elif not resumed:
        message = f"{', '.join(plan.nodes)} serve pool {pool} in Slurm: idle there, nothing to resume"
    else:
        message = (f"resumed in Slurm: {', '.join(resumed)}; {', '.join(idle)} idle there: "
                   f"{', '.join(plan.nodes)} serve pool {pool}")
    _step(plan, "resume", Outcome.SUCCESS, message, details={"slurm": _slurm_states(plan), "resumed": resumed})
    return True


def _in_pool(plan: LendingPlan, pool: Pool) -> bool:
    return PoolMembership.objects.filter(node__appliance=plan.appliance, node__name__in=plan.nodes, pool=pool).exists()


def _advance_once(plan: LendingPlan, now: datetime) -> bool:
    """Take the step that is due, if any. Returns whether the plan changed."""
    policy = policy_of(plan.from_pool)
    wait = timedelta(minutes=policy.reclaim_minutes if policy else 30)
    if plan.state == PlanState.APPROVED:
        if now < plan.window_start:
            return False
        if now >= plan.window_end:  # approved too late, or no worker ran while its window lasted
            _move(plan, PlanState.ROLLED_BACK)
            plan.save(update_fields=["state", "updated"])
            _step(plan, "rollback", Outcome.SUCCESS, "the window ended before the plan began: nothing was done")
            return True
        _move(plan, PlanState.DRAINING)
        plan.deadline = now + wait
        plan.save(update_fields=["state", "deadline", "updated"])
        left = _leave(plan, plan.from_pool)
        if left is not None:
            _step(plan, "drain", left[0], left[1], details={"deadline": plan.deadline.isoformat(), **left[2]})
        return True
    if plan.state == PlanState.DRAINING:
        if _jobs_block(plan, plan.from_pool, now):
            return plan.state == PlanState.FAILED  # a requeue is a step, not a change of state: wait for the jobs
        _begin_reconfigure(plan, plan.to_pool, PlanState.MOVED, now)
        return True
    if plan.state == PlanState.RECLAIMING and _in_pool(plan, plan.to_pool):
        if _jobs_block(plan, plan.to_pool, now):
            return plan.state == PlanState.FAILED
        _begin_reconfigure(plan, plan.from_pool, PlanState.RECLAIMING, now)
        return True
    if plan.state in (PlanState.MOVED, PlanState.RECLAIMING):
        result = _run_result(plan)
        if result is None:
            return False
        if result != "succeeded":
            _fail(plan, "workloads", f"the workloads stage run #{plan.run_id} ended {result}")
            return True
        if plan.state == PlanState.MOVED:
            if not _arrive(plan, plan.to_pool):
                return True
            _move(plan, PlanState.ACTIVE)
            plan.save(update_fields=["state", "updated"])
            _step(plan, "activate", Outcome.SUCCESS, f"{', '.join(plan.nodes)} serve pool {plan.to_pool}")
            return True
        if not _arrive(plan, plan.from_pool):
            return True
        _move(plan, PlanState.RETURNED)
        plan.save(update_fields=["state", "updated"])
        _step(plan, "return", Outcome.SUCCESS, f"{', '.join(plan.nodes)} back in pool {plan.from_pool}")
        return True
    if plan.state == PlanState.ACTIVE:
        if not plan.reclaim_requested and now < plan.window_end:
            return False
        why = "reclaim asked" if plan.reclaim_requested else "the window ended"
        _move(plan, PlanState.RECLAIMING)
        plan.deadline = now + wait
        plan.save(update_fields=["state", "deadline", "updated"])
        left = _leave(plan, plan.to_pool)
        if left is not None:
            _step(plan, "reclaim", Outcome.SUCCESS, f"{why}: {', '.join(plan.nodes)} return to pool {plan.from_pool}"
                  + (f"; {left[1]}" if left[0] == Outcome.SUCCESS else ""),
                  details={"deadline": plan.deadline.isoformat(), **left[2]})
        return True
    return False


def advance(plan: LendingPlan, now: datetime | None = None) -> LendingPlan:
    """Take every step that is due now (several when nothing has to be waited for)."""
    for _ in range(8):
        with transaction.atomic():
            locked = _locked(plan)
            changed = _advance_once(locked, now or timezone.now())
        if not changed:
            break
    return LendingPlan.objects.get(pk=plan.pk)


def advance_due(now: datetime | None = None) -> list[int]:
    """Advance every plan that may have a step due; returns the ids of those that changed state."""
    changed = []
    for plan in LendingPlan.objects.filter(state__in=[PlanState.APPROVED, PlanState.DRAINING, PlanState.MOVED,
                                                      PlanState.ACTIVE, PlanState.RECLAIMING]):
        before = plan.state
        after = advance(plan, now)
        if after.state != before:
            changed.append(plan.pk)
    return changed


def rollback(plan: LendingPlan, actor, reason: str) -> LendingPlan:
    """Undo whatever the plan did: nodes back in the lending pool (workloads stage rerun when they moved),
    resumed in Slurm when they were drained. Ends rolled-back."""
    if not can(actor, "pools.approve"):
        raise LendingDenied("your role may not roll back lending plans")
    if not isinstance(reason, str) or not reason.strip():
        raise LendingError("reason: say why the plan is rolled back")
    with transaction.atomic():
        plan = _locked(plan)
        _move(plan, PlanState.ROLLED_BACK)
        done = {"reason": reason.strip()[:MAX_REASON]}
        done["moved_back"] = _set_pool(plan, plan.from_pool)
        if done["moved_back"]:
            outcome, message, run_id = _rerun_workloads(plan, actor)
            done["workloads"] = {"outcome": outcome, "message": message, "run": run_id}
        # Slurm ends as it was before the plan: the lender's Slurm takes its nodes back, the borrower's lets go.
        if _uses_slurm(plan.from_pool) and plan.steps.filter(name="drain", outcome=Outcome.SUCCESS).exists():
            try:
                done["jobs_on_nodes"] = slurmctl.jobs_on(plan.appliance, plan.nodes)
                slurmctl.resume(plan.appliance, plan.nodes)
                done["resumed"] = plan.nodes
            except slurmctl.SlurmCommandError as exc:
                done["slurm_error"] = str(exc)
        if _uses_slurm(plan.to_pool) and plan.steps.filter(name="resume", outcome=Outcome.SUCCESS).exists():
            try:
                slurmctl.drain(plan.appliance, plan.nodes, f"lending plan {plan.pk} rolled back")
                done["drained"] = plan.nodes
                done["jobs_on_nodes"] = slurmctl.jobs_on(plan.appliance, plan.nodes)
            except slurmctl.SlurmCommandError as exc:
                done["slurm_error"] = str(exc)
        plan.save(update_fields=["state", "updated"])
        failed = "slurm_error" in done or done.get("workloads", {}).get("outcome") == Outcome.FAILURE
        parts = [part for part in (
            f"{', '.join(done['moved_back'])} back in pool {plan.from_pool}" if done["moved_back"] else "",
            f"resumed in Slurm ({', '.join(done['resumed'])})" if done.get("resumed") else "",
            f"drained in Slurm ({', '.join(done['drained'])}; running jobs may finish)" if done.get("drained") else "",
            f"Slurm refused: {done['slurm_error']}" if "slurm_error" in done else "",
            done.get("workloads", {}).get("message", "")) if part]
        message = f"rolled back by {actor.get_username()}: {'; '.join(parts) or 'nothing had changed yet'}"
        _step(plan, "rollback", Outcome.FAILURE if failed else Outcome.SUCCESS, message, actor=actor, details=done)
    return plan
