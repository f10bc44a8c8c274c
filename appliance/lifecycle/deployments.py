"""Deployments: a production version served as an inference service on an appliance's inference pool.

deploy() checks the version (production, its files intact: integrity.require_intact, a full re-hash on the
version's first deployment to the node it is placed on, else the deployment is BLOCKED and nothing reaches
the pool), sizes it with the partitioning advisor from the architecture the
registry read from its files, for the pool's GPU model, places it on free GPUs or MIG instances of the
pool (the layout the inventory recorded, less what other deployments hold), renders its manifests
(manifests.py) and applies them. Each rollout is its own Kubernetes Deployment named
<service>-<deployment id>; the Service named after the service moves to it only once it is healthy, and
the deployment it replaces is then REPLACED and its pods deleted (blue/green: the old one serves until
the new one does).

follow() is the health check: it reads what the pool reports (pods ready, their GPUs, and on those GPUs
the service as owner in the node's job map with memory in use), never what was applied. A rollout moves
from rolling_out to healthy, or to failed when the pool says it cannot run (no GPU or MIG instance matching
the request, a GPU off the bus, an image that cannot be pulled, a crashing server) or when it is not
healthy within LIFECYCLE_ROLLOUT_DEADLINE_SECONDS; a healthy deployment that stops being healthy fails.
A failed rollout's pods are deleted so that its GPUs are free again; the Service keeps routing to the
previous deployment.

On a simulated appliance the pool is appliance/simulation/kubernetes.py (no Kubernetes API server can be
installed here): follow() runs its reconcile step, and when the workload driver does not run, the
workload model's serve() that loads the ready services' GPUs. A real appliance's pool is its Kubernetes
API server, which this build does not reach: deploying there is refused with a message saying so, and
the manifests can be rendered for it (manifests.render).

rollback(service) moves production back to the previous production version (services.rollback_production)
and deploys it, in one audited action.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from appliance import audit
from appliance.core.roles import can
from appliance.inventory.models import Appliance, Pool
from appliance.partitioning import profiles, sizing
from appliance.partitioning.layout import current_layout
from appliance.telemetry.placements import Placement

from . import manifests
from .errors import Conflict, Forbidden, IntegrityRefused, LifecycleError, NotFound
from .models import WEIGHT_FORMATS, ArtifactFormat, Deployment, ModelVersion, Stage

# A DNS label short enough that "<service>-<deployment id>" is one too.
SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,50}[a-z0-9])?$")
ACTIVE = (Deployment.State.PENDING, Deployment.State.ROLLING_OUT, Deployment.State.HEALTHY)
# What the pool reports that will not resolve by waiting (the simulation has no autoscaler).
FATAL_REASONS = frozenset({"Unschedulable", "ErrImagePull", "CrashLoopBackOff", "NotFound"})
# Replaced, stopped and blocked rollouts stay among the current deployments this long (current()).
RECENT = timedelta(hours=24)
MAX_CONTEXT = 10_000_000
MAX_CONCURRENCY = 100_000


def _rollout_deadline() -> int:
    return int(getattr(settings, "LIFECYCLE_ROLLOUT_DEADLINE_SECONDS", 600))


def service_name_for(model_name: str) -> str:
    """The default service name: the model's name as a DNS label ("Llama-3.1_8B" -> "llama-3-1-8b")."""
    text = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-")
    if not text or not text[0].isalpha():
        text = f"m-{text}".rstrip("-")
    return text[:52].rstrip("-")


def workload_name(deployment: Deployment) -> str:
    return f"{deployment.name}-{deployment.pk}"


# ---- checks ----------------------------------------------------------------------------------------------

def _require_deployer(user) -> None:
    """`user` None is the appliance itself (its own account on the command line); a person needs models.deploy."""
    if user is not None and not can(user, "models.deploy"):
        raise Forbidden(_("%(user)s may not deploy models (needs models.deploy)") % {"user": user.get_username()})


def _integer(value, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise LifecycleError(_("%(field)s: expected an integer from %(low)d to %(high)d, got %(value)s") % {
            "field": field, "low": low, "high": high, "value": repr(value)[:40]}, field)
    return value


def _check_inputs(version, runtime, name, context, concurrency, dtype) -> str:
    if not isinstance(version, ModelVersion):
        raise NotFound(_("version: no such model version"), "version")
    if version.format == ArtifactFormat.OTHER:
        raise Conflict(_("version: %(model)s v%(number)s holds no weight files (%(formats)s): nothing to serve") % {
            "model": version.model.name, "number": version.number, "formats": WEIGHT_FORMATS}, "version")
    if runtime not in Deployment.Runtime.values:
        raise LifecycleError(_("runtime: %(value)s is not one of %(known)s") % {
            "value": repr(runtime)[:40], "known": ", ".join(Deployment.Runtime.values)}, "runtime")
    if name is None:
        name = service_name_for(version.model.name)
    if not isinstance(name, str) or not SERVICE_NAME.fullmatch(name):
        raise LifecycleError(_("name: %(value)s is not a service name (a DNS label of at most 52 characters: "
                               "lowercase letters, digits and '-', starting with a letter)") % {
            "value": repr(name)[:80]}, "name")
    _integer(context, "context", 1, MAX_CONTEXT)
    _integer(concurrency, "concurrency", 1, MAX_CONCURRENCY)
    if dtype is not None and dtype not in sizing.WEIGHT_DTYPES:
        raise LifecycleError(_("dtype: %(value)s is not one of %(known)s") % {
            "value": repr(dtype)[:40], "known": ", ".join(sizing.WEIGHT_DTYPES)}, "dtype")
    return name


def _appliance(appliance) -> Appliance:
    if isinstance(appliance, Appliance):
        return appliance
    candidates = Appliance.objects.filter(pools__kind=Pool.Kind.INFERENCE).distinct().order_by("name")
    if appliance is not None:
        found = candidates.filter(name=str(appliance)).first() if isinstance(appliance, str) else None
        if found is None:
            raise NotFound(_("appliance: no appliance %(name)s with an inference pool") % {
                "name": repr(appliance)[:70]}, "appliance")
        return found
    found = list(candidates[:2])
    if len(found) != 1:
        raise LifecycleError(_("appliance: %(count)s appliances have an inference pool; name one") % {
            "count": "no" if not found else "several"}, "appliance")
    return found[0]


def _pool(appliance: Appliance) -> Pool:
    pool = appliance.pools.filter(kind=Pool.Kind.INFERENCE).order_by("name").first()
    if pool is None:
        raise Conflict(_("appliance: %(name)s has no inference pool") % {"name": appliance.name}, "appliance")
    return pool


def _cluster(appliance: Appliance) -> Path:
    from appliance.simulation import kubernetes

    if not appliance.simulated:
        raise Conflict(_("appliance: %(name)s is a real appliance, and this build does not reach a Kubernetes API "
                         "server; its manifests can be rendered and applied by the site's own tooling") % {
            "name": appliance.name}, "appliance")
    return kubernetes.state_file(settings.SIMULATION_DIR, appliance.name)


def _pool_nodes(pool: Pool) -> list:
    return list(pool.nodes.order_by("name"))


# ---- sizing and placement ---------------------------------------------------------------------------------

def _used_devices(appliance: Appliance, exclude: int | None = None) -> set[tuple]:
    used = set()
    for deployment in Deployment.objects.filter(appliance=appliance, state__in=ACTIVE).exclude(pk=exclude):
        for device in deployment.placement or []:
            used.add((device["node"], int(device["gpu"]), device.get("gpu_instance")))
    return used


def _held(used: set[tuple], node: str, index: int, instance: int | None) -> bool:
    return any(n == node and i == index and (instance is None or g is None or g == instance) for n, i, g in used)


def size_for_pool(version: ModelVersion, pool: Pool, *, context: int, concurrency: int, dtype: str | None):
    """(the advisor's result for the pool's GPU model, the pool's GPUs as the layout records them)."""
    layout = current_layout(pool.appliance)
    gpus = [g for g in layout["gpus"] if g["pool"] == pool.name and g["model"]]
    if not gpus:
        raise Conflict(_("pool %(pool)s has no GPU the sizing advisor knows") % {"pool": pool.name}, "appliance")
    if not version.architecture:
        raise LifecycleError(_("version: %(version)s has no architecture read from its files (%(why)s): it cannot "
                               "be sized") % {"version": version, "why": version.architecture_error or "unknown"},
                             "version")
    gpu_model = Counter(g["model"] for g in gpus).most_common(1)[0][0]
    per_node = max(Counter(g["node"] for g in gpus).values())
    try:
        result = sizing.size(version.architecture, dtype=dtype, context=context, concurrency=concurrency,
                             gpu_model=gpu_model, gpus_per_node=per_node, nodes=1)
    except sizing.SizingError as exc:
        field = str(exc).split(":", 1)[0] if ":" in str(exc) else "version"
        raise LifecycleError(str(exc), field if field in ("dtype", "context", "concurrency") else "version") from None
    if not result["fits"]:
        raise Conflict(_("version: %(version)s does not fit one node of the pool: %(reason)s") % {
            "version": version, "reason": result["reason"]}, "version")
    return result, [g for g in gpus if g["model"] == gpu_model]


def place(result: dict, gpus: list[dict], used: set[tuple], strategy: str) -> tuple[str, list[dict]]:
    """(node, devices [{gpu, profile, gpu_instance, resource}]): the smallest free MIG instance that holds a
    model the advisor put on a MIG profile (else a whole GPU), `tp x pp` free whole GPUs of one node for
    the others. Conflict when the pool has no such free place."""
    placement = result["placement"]
    need = placement["per_gpu_bytes"]
    if placement["kind"] == "mig" and strategy in ("mixed", "single"):
        instances = []
        for gpu in gpus:
            table = profiles.model(gpu["model"])
            for instance in gpu["mig"] or []:
                try:
                    profile = table.profile(instance["profile"])
                except KeyError:
                    continue
                usable = math.floor(profile.memory_gb * sizing.GB * sizing.GPU_MEMORY_UTILIZATION)
                if usable >= need and not _held(used, gpu["node"], gpu["index"], instance["gpu_instance"]):
                    instances.append((profile.memory_gb, profile.compute_slices, gpu["node"], gpu["index"],
                                      instance["gpu_instance"], profile.name))
        if instances:
            node, index, instance, profile = min(instances)[2:]
            return node, [{"node": node, "gpu": index, "profile": profile, "gpu_instance": instance,
                           "resource": manifests.gpu_resource(profile, strategy)}]
    count = placement["gpus"]
    free: dict[str, list[int]] = {}
    for gpu in gpus:
        if gpu["mig"] is None and not _held(used, gpu["node"], gpu["index"], None):
            free.setdefault(gpu["node"], []).append(gpu["index"])
    for node in sorted(free):
        if len(free[node]) >= count:
            return node, [{"node": node, "gpu": index, "profile": None, "gpu_instance": None,
                           "resource": "nvidia.com/gpu"} for index in sorted(free[node])[:count]]
    what = (_("a free MIG instance of at least %(profile)s or a whole GPU") % {"profile": placement["profile"]}
            if placement["kind"] == "mig" else _("%(count)d free whole GPU(s) on one node") % {"count": count})
    raise Conflict(_("placement: the inference pool has no %(what)s (free whole GPUs: %(free)s)") % {
        "what": what, "free": ", ".join(f"{n}: {len(i)}" for n, i in sorted(free.items())) or _("none")},
        "placement")


# ---- deploy ----------------------------------------------------------------------------------------------

def _details(version: ModelVersion, name: str, runtime: str, **extra) -> dict:
    return {"model": version.model.name, "version": version.number, "name": name, "runtime": runtime, **extra}


def _refuse(event: str, target, user, exc: LifecycleError, details: dict) -> None:
    audit.record(event, target=target, actor=user, outcome="failure", reason=str(exc)[:1000], details=details)


def _plan(version, *, user, runtime, name, appliance, context, concurrency, dtype, event, rollback=False) -> dict:
    """Everything checked and computed before the pool changes; a refusal is audited (`event`) and raised."""
    details = {"runtime": runtime, "name": name if isinstance(name, str) else None}
    try:
        _require_deployer(user)
        name = _check_inputs(version, runtime, name, context, concurrency, dtype)
        details = _details(version, name, runtime)
        appliance = _appliance(appliance)
        pool = _pool(appliance)
        path = _cluster(appliance)
        if not rollback and version.stage != Stage.PRODUCTION:
            raise Conflict(_("version: %(version)s is %(stage)s; only a production version is deployed") % {
                "version": version, "stage": version.stage}, "version")
        other = (Deployment.objects.filter(appliance=appliance, name=name, state__in=ACTIVE)
                 .exclude(version__model=version.model).select_related("version__model").first())
        if other is not None:
            raise Conflict(_("name: service %(name)s serves model %(model)s") % {
                "name": name, "model": other.version.model.name}, "name")
        result, gpus = size_for_pool(version, pool, context=context, concurrency=concurrency, dtype=dtype)
        strategy = str((pool.settings or {}).get("mig_strategy", "single"))
        node, devices = place(result, gpus, _used_devices(appliance), strategy)
    except LifecycleError as exc:
        _refuse(event, version if isinstance(version, ModelVersion) else None, user, exc, details)
        raise
    return {"version": version, "name": name, "runtime": runtime, "appliance": appliance, "pool": pool,
            "path": path, "sizing": result, "node": node, "devices": devices, "context": context,
            "concurrency": concurrency, "details": details}


def _insert(**fields) -> Deployment:
    """A new deployment row without the row capture's record: the service records lifecycle.deployment.create
    itself (who, what, or the refusal), and the capture's record of the same name would say "success" without
    the person, even for a blocked deployment (the pattern of partitioning's _save)."""
    deployment = Deployment(**fields)
    models.Model.save(deployment)
    return deployment


def deployed_on_before(version: ModelVersion, appliance: Appliance, node: str) -> bool:
    """Has a deployment of `version` on `appliance` been placed on `node` before (any that got past its
    integrity check: every state but blocked)?"""
    placements = (Deployment.objects.filter(version=version, appliance=appliance)
                  .exclude(state=Deployment.State.BLOCKED).values_list("placement", flat=True))
    return any(spot.get("node") == node for placement in placements for spot in placement or [])


def _check_intact(plan: dict, *, user, event: str) -> None:
    """integrity.require_intact, in full (every file re-hashed) when the version was never deployed on the
    plan's node: the node serves the files' bytes, which a stat cannot vouch for (a file rewritten in place
    with its size, mtime and even ctime put back, by someone able to set the clock). Later deployments of
    the version to that node take the quick check. The plan's details (the deployment's audit record) say
    which ran: integrity "full" or "quick" (quick may still have turned into a full re-hash), first_on_node.
    A refusal leaves a BLOCKED deployment (the record of the attempt) and the pool untouched."""
    from . import integrity

    version = plan["version"]
    first = not deployed_on_before(version, plan["appliance"], plan["node"])
    plan["details"]["first_on_node"] = first
    try:
        result = integrity.require_intact(version, user=user, full=first)
    except IntegrityRefused as exc:
        plan["details"]["integrity"] = "full" if exc.result.full else "quick"
        with transaction.atomic():
            blocked = _insert(
                name=plan["name"], version=version, appliance=plan["appliance"], pool=plan["pool"].name,
                runtime=plan["runtime"], state=Deployment.State.BLOCKED, state_detail=str(exc),
                sizing=plan["sizing"], created_by=user)
            _refuse(event, blocked, user, exc, {**plan["details"], "state": Deployment.State.BLOCKED,
                                                "node": plan["node"]})
        raise
    plan["details"]["integrity"] = "full" if result.full else "quick"


def _create(plan: dict, *, user, event: str, reason: str = "", extra: dict | None = None) -> Deployment:
    """The deployment row, its manifests applied to the pool, and the one audit record (inside the caller's
    transaction: a failure to apply leaves neither)."""
    from appliance.simulation import kubernetes

    version, name = plan["version"], plan["name"]
    # Another deployment may have taken the GPUs since the plan was made: decide under the appliance's lock.
    Appliance.objects.select_for_update().get(pk=plan["appliance"].pk)
    used = _used_devices(plan["appliance"])
    taken = [d for d in plan["devices"] if _held(used, d["node"], int(d["gpu"]), d["gpu_instance"])]
    if taken:
        raise Conflict(_("placement: %(gpus)s of %(node)s was just given to another deployment; deploy again") % {
            "gpus": ", ".join(f"gpu{d['gpu']}" for d in taken), "node": plan["node"]}, "placement")
    previous = (Deployment.objects.filter(appliance=plan["appliance"], name=name, state=Deployment.State.HEALTHY)
                .order_by("-created").first())
    deployment = _insert(
        name=name, version=version, appliance=plan["appliance"], pool=plan["pool"].name, runtime=plan["runtime"],
        state=Deployment.State.ROLLING_OUT, sizing=plan["sizing"], placement=plan["devices"], previous=previous,
        created_by=user, state_detail=_("applied; waiting for the pool to report it ready"))
    workload = workload_name(deployment)
    text, container = manifests.render(
        service=name, workload=workload, deployment_id=deployment.pk, model=version.model.name,
        version=version.number, runtime=plan["runtime"], storage_path=version.storage_path or version.source,
        pool=plan["pool"].name, node=plan["node"], devices=plan["devices"], sizing=plan["sizing"],
        context=plan["context"], concurrency=plan["concurrency"])
    deployment.manifests = text
    deployment.save(update_fields=["manifests", "updated"])
    kubernetes.apply(plan["path"], {"name": workload, "service": name, "node": plan["node"],
                                    "devices": plan["devices"], "image": container["image"],
                                    "container": container["name"], "deployment": deployment.pk,
                                    "model": version.model.name, "version": version.number})
    audit.record(event, target=deployment, actor=user, reason=reason, details={
        **plan["details"], **(extra or {}), "deployment": deployment.pk, "node": plan["node"],
        "placement": [f"gpu{d['gpu']}" + (f"/{d['profile']}" if d["profile"] else "") for d in plan["devices"]],
        "previous": previous.pk if previous else None})
    return deployment


def deploy(version: ModelVersion, *, user, runtime: str = "vllm", name: str | None = None, appliance=None,
           context: int = 4096, concurrency: int = 8, dtype: str | None = None) -> Deployment:
    event = "lifecycle.deployment.create"
    plan = _plan(version, user=user, runtime=runtime, name=name, appliance=appliance, context=context,
                 concurrency=concurrency, dtype=dtype, event=event)
    _check_intact(plan, user=user, event=event)
    try:
        with transaction.atomic():
            deployment = _create(plan, user=user, event=event)
    except Conflict as exc:
        _refuse(event, version, user, exc, plan["details"])
        raise
    return follow(deployment)


def current(now=None):
    """The deployments worth showing by default (the portal's deployments page, `models deployments`):
    rollouts that run or are on their way (pending, rolling out, healthy), a service's newest rollout when
    it failed (the service is down: someone must look), and whatever changed in the last RECENT (a rollout
    just replaced, stopped, blocked). Older replaced, stopped, blocked and superseded failed rollouts are
    history, listed on request."""
    now = now or timezone.now()
    newer = Deployment.objects.filter(appliance=models.OuterRef("appliance"), name=models.OuterRef("name"),
                                      created__gt=models.OuterRef("created"))
    return Deployment.objects.filter(
        models.Q(state__in=ACTIVE) | (models.Q(state=Deployment.State.FAILED) & ~models.Exists(newer))
        | models.Q(updated__gte=now - RECENT))


def placed_on(appliance, *, nodes=(), gpus=()) -> list[tuple[Deployment, list[str]]]:
    """The running deployments (pending, rolling out, healthy) of `appliance` placed on any of `nodes`
    (names) or `gpus` ("node/gpuN"), in service-name order, each with the nodes or GPUs of those it holds
    (a partition plan's changed GPUs, a lending plan's nodes)."""
    nodes, gpus = set(nodes), set(gpus)
    if not nodes and not gpus:
        return []
    found = []
    for deployment in (Deployment.objects.filter(appliance=appliance, state__in=ACTIVE)
                       .select_related("version__model", "appliance").order_by("name", "pk")):
        spots = deployment.placement or []
        held = sorted(({spot["node"] for spot in spots} & nodes) | ({f"{spot['node']}/gpu{spot['gpu']}"
                                                                      for spot in spots} & gpus))
        if held:
            found.append((deployment, held))
    return found


def running(name) -> Deployment:
    """The newest running rollout (pending, rolling out or healthy) of the service of that name."""
    if not isinstance(name, str) or not SERVICE_NAME.fullmatch(name):
        raise LifecycleError(_("name: %(value)s is not a service name") % {"value": repr(name)[:80]}, "name")
    current = (Deployment.objects.filter(name=name, state__in=ACTIVE)
               .select_related("version__model", "appliance").order_by("-created").first())
    if current is None:
        raise NotFound(_("name: no service %(name)s is deployed") % {"name": name}, "name")
    return current


def served_options(deployment: Deployment) -> dict:
    """How `deployment` was served (service name, appliance, runtime, limits): deploy()'s options to serve
    it again."""
    return {"runtime": deployment.runtime, "name": deployment.name, "appliance": deployment.appliance,
            "context": int(deployment.sizing.get("context") or 4096),
            "concurrency": int(deployment.sizing.get("concurrency") or 8), "dtype": deployment.sizing.get("dtype")}


def redeploy(deployment: Deployment, *, user) -> Deployment:
    """Serve a stopped deployment's version again under its service name, runtime and limits, placed anew on
    the pool's free GPUs or MIG instances (after a partition plan changed the GPU it ran on)."""
    return deploy(deployment.version, user=user, **served_options(deployment))


def rollback(name_or_deployment, *, user, reason) -> Deployment:
    """Production back to the previous production version and that version deployed under the same service
    name, with the runtime and limits it was served with before: one action, audited lifecycle.deployment.rollback (the registry records the
    stage change). The deployment it replaces becomes REPLACED once the rollback is healthy."""
    from . import services

    event = "lifecycle.deployment.rollback"
    current = name_or_deployment if isinstance(name_or_deployment, Deployment) else None
    try:
        _require_deployer(user)
        if current is None:
            current = running(name_or_deployment)
        if not isinstance(reason, str) or not reason.strip():
            raise LifecycleError(_("reason: say why the service is rolled back"), "reason")
        previous = services.previous_production(current.version.model)
        if previous is None:
            raise Conflict(_("name: model %(model)s has no earlier production version to roll back to") % {
                "model": current.version.model.name}, "name")
    except LifecycleError as exc:
        _refuse(event, current, user, exc, {"name": getattr(current, "name", None)})
        raise
    # The previous version's service as it ran (runtime, limits), else the current one's.
    served = (Deployment.objects.filter(appliance=current.appliance, name=current.name, version=previous,
                                        state=Deployment.State.REPLACED).order_by("-created").first() or current)
    options = {**served_options(served), "name": current.name, "appliance": current.appliance}
    plan = _plan(previous, user=user, event=event, rollback=True, **options)
    _check_intact(plan, user=user, event=event)
    try:
        with transaction.atomic():
            services.rollback_production(current.version.model, user=user, reason=reason)
            previous.refresh_from_db()
            deployment = _create(plan, user=user, event=event, reason=reason.strip(),
                                 extra={"rolled_back": current.pk, "from_version": current.version.number})
    except LifecycleError as exc:  # the registry's refusal record rolled back with the rest: this one says it
        _refuse(event, current, user, exc, plan["details"])
        raise
    return follow(deployment)


def stop(name_or_deployment, *, user, reason) -> Deployment:
    """Delete the service's pods (and its Service when it routes to them); the deployment (or the service's
    running rollout, given its name) is STOPPED."""
    from appliance.simulation import kubernetes

    event = "lifecycle.deployment.stop"
    deployment = name_or_deployment if isinstance(name_or_deployment, Deployment) else None
    try:
        _require_deployer(user)
        if deployment is None:
            deployment = running(name_or_deployment)
        if not isinstance(reason, str) or not reason.strip():
            raise LifecycleError(_("reason: say why the service is stopped"), "reason")
        if deployment.state not in ACTIVE:
            raise Conflict(_("deployment %(name)s is %(state)s: nothing runs to stop") % {
                "name": deployment.name, "state": deployment.state}, "state")
        path = _cluster(deployment.appliance)
    except LifecycleError as exc:
        _refuse(event, deployment, user, exc,
                {"name": deployment.name if deployment is not None else repr(name_or_deployment)[:80]})
        raise
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        routed = kubernetes.read(path)["services"].get(deployment.name, {}).get("selects") == workload_name(deployment)
        before = deployment.state
        deployment.state = Deployment.State.STOPPED
        deployment.state_detail = reason.strip()
        deployment.save(update_fields=["state", "state_detail", "updated"])
        kubernetes.delete(path, workload_name(deployment))
        if routed:
            kubernetes.route(path, deployment.name, None)
        audit.record(event, target=deployment, actor=user, reason=reason.strip(),
                     details={"name": deployment.name, "model": deployment.version.model.name,
                              "version": deployment.version.number, "from": before})
    _observe(deployment.appliance, path)
    return deployment


# ---- the health check ------------------------------------------------------------------------------------

def _observe(appliance: Appliance, path: Path) -> None:
    """The pool's reconcile step, and without the workload driver the load of its ready services."""
    from appliance.simulation import kubernetes, workload

    pool = _pool(appliance)
    nodes = _pool_nodes(pool)
    kubernetes.reconcile(path, {node.name: node.sysroot for node in nodes})
    if workload.driver_pid() is None:
        names = {node.name for node in nodes}
        specs = [workload.NodeSpec(**spec) for spec in workload.node_specs(appliance)[0] if spec["name"] in names]
        workload.serve(specs, kubernetes.serving(path), instances=kubernetes.instance_owners(path))


def live_state(deployment: Deployment) -> dict:
    """What the pool reports now: the pods (phase, ready, reason), each placed GPU's owner in the node's job
    map and its memory in use, whether the Service routes to it, and `healthy` (all of them)."""
    from appliance.simulation import kubernetes
    from appliance.simulation import state as node_state

    path = _cluster(deployment.appliance)
    data = kubernetes.read(path)
    workload = data["workloads"].get(workload_name(deployment))
    result = {"workload": workload_name(deployment), "exists": workload is not None,
              "routed": data["services"].get(deployment.name, {}).get("selects") == workload_name(deployment)}
    if workload is None:
        return result | {"phase": None, "ready": False, "ready_replicas": 0, "replicas": 0, "reason": "NotFound",
                         "message": _("the pool has no workload %(name)s") % {"name": workload_name(deployment)},
                         "gpus": [], "loaded": False, "healthy": False}
    observed, desired = workload.get("observed") or {}, workload["desired"]
    current = bool(observed) and observed.get("generation") == desired.get("generation")
    sysroots = {node.name: node.sysroot for node in deployment.appliance.nodes.filter(
        name__in={d["node"] for d in deployment.placement})}
    gpus = []
    states: dict[str, dict] = {}
    for device in deployment.placement:
        node = device["node"]
        if node not in states:
            try:
                states[node] = node_state.load(sysroots[node]) if sysroots.get(node) else {}
            except node_state.StateError:
                states[node] = {}
        state = states[node]
        gpu = next((g for g in state.get("gpus", []) if g["index"] == int(device["gpu"])), {})
        held = state.get("gpu_owners") or {}
        # A MIG instance has its own entry in the job map (several services may share the GPU).
        key = str(device["gpu"]) if device.get("gpu_instance") is None else f"{device['gpu']}/{device['gpu_instance']}"
        owner = held.get(key) or {}
        gpus.append({"node": node, "gpu": device["gpu"], "profile": device.get("profile"),
                     "owner": owner.get("service") or owner.get("job") or "",
                     "memory_used_bytes": int(gpu.get("memory_used_bytes") or 0),
                     "utilization_gpu": int(gpu.get("utilization_gpu") or 0)})
    loaded = bool(gpus) and all(g["owner"] == deployment.name and g["memory_used_bytes"] > 0 for g in gpus)
    ready = current and bool(observed.get("ready"))
    reason, message = observed.get("reason", "") if current else "", observed.get("message", "") if current else ""
    if not current:
        reason, message = "Pending", _("the pool has not reported this rollout yet")
    elif ready and not loaded:
        idle = next(g for g in gpus if g["owner"] != deployment.name or g["memory_used_bytes"] <= 0)
        reason, message = "NotServing", _("the pods are ready but GPU %(gpu)s of %(node)s is not serving the model "
                                          "(owner %(owner)s, %(memory)d bytes in use)") % {
            "gpu": idle["gpu"], "node": idle["node"], "owner": idle["owner"] or _("none"),
            "memory": idle["memory_used_bytes"]}
    return result | {"phase": observed.get("phase"), "ready": ready, "ready_replicas": observed.get("ready_replicas", 0),
                     "replicas": observed.get("replicas", 0), "restarts": observed.get("restarts", 0),
                     "reason": reason, "message": message, "gpus": gpus, "loaded": loaded,
                     "healthy": ready and loaded, "checked_at": observed.get("checked_at")}


def _move(deployment: Deployment, state: str, detail: str, health: dict | None = None) -> None:
    before = deployment.state
    deployment.state = state
    deployment.state_detail = detail
    if health is not None:
        deployment.health = health
    deployment.save(update_fields=["state", "state_detail", "health", "updated"])
    audit.record("lifecycle.deployment.state", target=deployment,
                 outcome="failure" if state == Deployment.State.FAILED else "success", reason=detail[:1000],
                 details={"name": deployment.name, "model": deployment.version.model.name,
                          "version": deployment.version.number, "from": before, "to": state})


def follow(deployment: Deployment) -> Deployment:
    """The health check of one deployment: rolling_out -> healthy (the Service moves to it, the deployment
    it replaces is REPLACED) or failed; healthy -> failed when the pool stops serving it."""
    from appliance.simulation import kubernetes

    deployment = Deployment.objects.select_related("version__model", "appliance").get(pk=deployment.pk)
    if deployment.state not in ACTIVE:
        return deployment
    path = _cluster(deployment.appliance)
    _observe(deployment.appliance, path)
    live = live_state(deployment)
    health = {key: live[key] for key in ("phase", "ready", "reason", "message", "loaded", "routed", "gpus")}
    health["checked_at"] = timezone.now().isoformat()
    changed = False
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if deployment.state not in ACTIVE:
            return deployment
        age = time.time() - deployment.created.timestamp()
        if live["healthy"] and deployment.state != Deployment.State.HEALTHY:
            kubernetes.route(path, deployment.name, workload_name(deployment))
            health["routed"] = True
            _move(deployment, Deployment.State.HEALTHY,
                  _("ready and serving on %(gpus)s") % {"gpus": ", ".join(
                      f"{g['node']}/gpu{g['gpu']}" + (f"/{g['profile']}" if g["profile"] else "")
                      for g in live["gpus"])}, health)
            # Only older ones: a rollout that became ready late must not replace a newer deployment of the name.
            for older in (Deployment.objects.select_for_update(of=("self",))
                          .filter(appliance=deployment.appliance, name=deployment.name, state__in=ACTIVE,
                                  pk__lt=deployment.pk).select_related("version__model")):
                kubernetes.delete(path, workload_name(older))
                _move(older, Deployment.State.REPLACED, _("replaced by deployment %(id)d (%(version)s)") % {
                    "id": deployment.pk, "version": deployment.version})
            changed = True
        elif not live["healthy"] and (live["reason"] in FATAL_REASONS or deployment.state == Deployment.State.HEALTHY
                                      or age > _rollout_deadline()):
            detail = (f"{live['reason']}: {live['message']}" if live["reason"] in FATAL_REASONS
                      or deployment.state == Deployment.State.HEALTHY
                      else _("not healthy within %(seconds)d s: %(reason)s: %(message)s") % {
                          "seconds": _rollout_deadline(), "reason": live["reason"], "message": live["message"]})
            kubernetes.delete(path, workload_name(deployment))
            if live["routed"]:
                kubernetes.route(path, deployment.name, None)
            _move(deployment, Deployment.State.FAILED, detail, health)
            changed = True
    if changed:
        _observe(deployment.appliance, path)
    return deployment


def follow_all() -> list[int]:
    """Follow every deployment that is rolling out or serving; returns the ids whose state changed."""
    changed = []
    for deployment in Deployment.objects.filter(state__in=ACTIVE).select_related("appliance").order_by("pk"):
        before = deployment.state
        try:
            after = follow(deployment).state
        except LifecycleError:
            continue
        if after != before:
            changed.append(deployment.pk)
    return changed


def node_placements(node):
    """The services this registry's deployments put on `node` (telemetry.placements' provider): each
    deployment that runs there, or ran there in the last RECENT (ended when it was last updated), by its
    service's name, the owner the node's job map names. None for a node outside an inference pool."""
    membership = getattr(node, "pool_membership", None)
    if membership is None or membership.pool.kind != Pool.Kind.INFERENCE:
        return None
    found = []
    for deployment in (Deployment.objects.filter(appliance_id=node.appliance_id)
                       .exclude(state__in=(Deployment.State.BLOCKED,))
                       .filter(models.Q(state__in=ACTIVE) | models.Q(updated__gte=timezone.now() - RECENT))
                       .only("name", "state", "placement", "created", "updated")):
        if any(spot.get("node") == node.name for spot in deployment.placement or []):
            found.append(Placement(deployment.name, deployment.created,
                                   None if deployment.state in ACTIVE else deployment.updated))
    return found
