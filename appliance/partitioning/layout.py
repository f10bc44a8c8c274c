"""The layout an appliance's GPUs have now, as the inventory knows it.

What NVML reported is the truth: the partitioning stage's module returns the instances it found (fact
`appliance_mig_instances`, kept in Node.facts as `mig_instances`) and the node's time-slicing (fact
`appliance_time_slicing`, kept as `time_slicing`: {"replicas": N, "gpus": [index, ...]} or null); the GPU
rows carry the MIG mode the gpu stage read. Nothing here asks a node: a layout read between runs is the
one the last run saw.
"""

from __future__ import annotations

from appliance.inventory.models import GPU

from . import formats, profiles


def _instances_by_gpu(facts: dict) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for item in (facts or {}).get("mig_instances") or []:
        if not isinstance(item, dict):
            continue
        try:
            index = int(item["gpu"])
            instance = {"profile": str(item["profile"]), "start": int(item["start"]),
                        "gpu_instance": int(item["gpu_instance"]),
                        "compute_instance": int(item.get("compute_instance", 0)),
                        "uuid": str(item.get("uuid") or "")}
        except (KeyError, TypeError, ValueError):
            # A record from before the stage recorded placements cannot be placed on the slices; it is
            # left out rather than guessed (the next partitioning run records it whole).
            continue
        found.setdefault(index, []).append(instance)
    for instances in found.values():
        instances.sort(key=lambda i: (i["start"], i["gpu_instance"]))
    return found


def _time_sliced(facts: dict) -> dict[int, dict]:
    try:
        counts = formats.time_sliced((facts or {}).get("time_slicing"))
    except (TypeError, ValueError, AttributeError):
        return {}
    return {index: {"replicas": replicas} for index, replicas in counts.items()}


def pool_replicas(pool) -> int:
    """The time-slicing replicas an inference pool's settings give every GPU of its nodes (site file:
    `settings: {time_slicing: {replicas: N}}`), 0 when the pool does not time-slice."""
    if pool is None or getattr(pool, "kind", None) != "inference":
        return 0
    try:
        replicas = int(((pool.settings or {}).get("time_slicing") or {}).get("replicas") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0
    return replicas if replicas > 1 else 0


def laid_out(facts: dict, gpu_count: int, replicas: int) -> bool:
    """Whether the partitioning stage left the node a layout of its own, not its pool's: MIG instances, or
    GPUs time-sliced otherwise than the pool's settings time-slice all of them (`replicas`, 0 for none).
    Every bootstrap's partitioning stage records each GPU node's layout, the pool's when nobody changed
    it: such a node keeps its pool's device plugin config."""
    facts = facts or {}
    if "mig_instances" not in facts and "time_slicing" not in facts:
        return False  # no partitioning run has recorded it yet
    if facts.get("mig_instances"):
        return True
    sliced = _time_sliced(facts)
    default = {index: {"replicas": replicas} for index in range(gpu_count)} if replicas else {}
    return sliced != default


def current_layout(appliance) -> dict:
    """{"gpus": [{id, node, index, model, pool, mig_mode, mig, time_slicing}]} for every GPU of the
    appliance, in node and index order. `model` is the profile table's id (None for a GPU the table does
    not list); `mig` is None while MIG mode is off, else the instances NVML reported ([] when none);
    `time_slicing` is {"replicas": N} for a GPU the node's device plugin time-slices, else None."""
    gpus = (GPU.objects.filter(node__appliance=appliance)
            .select_related("node", "node__pool_membership__pool").order_by("node__name", "index"))
    per_node: dict[int, tuple[dict, dict]] = {}
    counts: dict[int, int] = {}
    for gpu in gpus:
        counts[gpu.node_id] = counts.get(gpu.node_id, 0) + 1
    result = []
    for gpu in gpus:
        node = gpu.node
        membership = getattr(node, "pool_membership", None)
        if node.pk not in per_node:
            replicas = pool_replicas(membership.pool if membership else None)
            if laid_out(node.facts, counts[node.pk], replicas):
                per_node[node.pk] = (_instances_by_gpu(node.facts), _time_sliced(node.facts))
            else:
                # Its pool's config applies: every GPU shared as the pool's settings say (demo.yml: x4).
                per_node[node.pk] = ({}, {index: {"replicas": replicas} for index in range(counts[node.pk])}
                                     if replicas else {})
        instances, sliced = per_node[node.pk]
        table = profiles.model_for_name(gpu.model)
        mine = instances.get(gpu.index)
        mig_on = gpu.mig_mode == GPU.MigMode.ENABLED or bool(mine)
        result.append({
            "id": str(gpu),
            "node": node.name,
            "index": gpu.index,
            "model": table.id if table else None,
            "pool": membership.pool.name if membership else None,
            "mig_mode": gpu.mig_mode,
            "mig": list(mine or []) if mig_on else None,
            "time_slicing": None if mig_on else sliced.get(gpu.index),
        })
    return {"gpus": result}


def planner_current(layout: dict) -> list[dict]:
    """The layout in the planner's `current` shape (its output's gpus): [{id, model, mig: [{profile, start}]
    | None, time_slicing}], for the GPUs planner_gpus lists (those the profile table knows)."""
    return [{"id": g["id"], "model": g["model"],
                      "mig": None if g["mig"] is None else [{"profile": i["profile"], "start": i["start"]}
                                                            for i in g["mig"]],
                      "time_slicing": g["time_slicing"]} for g in layout["gpus"] if g["model"]]


def planner_gpus(layout: dict) -> list[dict]:
    """The GPUs a plan may use: those the profile table knows, as the planner's input [{id, model, pool}]."""
    return [{"id": g["id"], "model": g["model"], **({"pool": g["pool"]} if g["pool"] else {})}
            for g in layout["gpus"] if g["model"]]
