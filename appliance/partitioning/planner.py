"""The MIG and time-slicing planner: from the appliance's GPUs, what its services need and the layout now,
a layout for every GPU with explicit MIG placements, which request replica lands where, what does not fit
and why, and the disruption compared with the layout now.

    plan(gpus, requests, current=None, *, options=None) -> dict

Pure Python, no Django (the CLI, the services, the portal and the benchmarks call it).

How it packs: every valid MIG layout of a GPU model is enumerated once (a few hundred on 8 memory
slices, checked with profiles.layout_errors), indexed by the multiset of its profiles. Request replicas
are then placed greedily by weight per share of a GPU (densest first), each on the option that costs the
least: a current instance that already fits (nothing changes), a new instance or a time-sliced share on
a GPU already in use (best fit: the smallest profile, the fullest GPU), a free GPU, and last a GPU whose
unused current instances have to go. New instances on a GPU are re-arranged freely (the table gives a
placement for the whole multiset); current instances kept stay where they are. A few orderings and
policies (soft requests preferring MIG or time-slicing, hard isolation first) are run and the plan that
serves the most weight, then disrupts least, wins.

Against a current layout three more kinds of pass join them: the passes of a plan from scratch, run again
and scored against the layout (planning again the requests a layout was planned for gives it back: no
GPU changes unless more weight is served); passes that first offer each replica what the layout already
has (requests that changed a little keep most of it); and, when `current` is a plan's whole output with
its `placed` list, a pass that first puts each replica back where that plan put it (a layout made by a
replan is kept too, and never serves less than it did).

After the greedy passes the exact solver (solver.py, HiGHS) packs the same replicas as an integer program
within a time limit; its plan replaces the greedy one only when it serves more weight, or as much with less
disruption, and passes plan_errors. Every result states its `optimality`: "optimal" or "within_bound" with
gap_percent and bound_weight (the solver's bound, its linear relaxation's, or the weight of every replica
that fits some GPU alone), where the plan came from and why (note). Without highspy, out of time or with
too large a program, the greedy plan stands and the plan says so.

Rules the result always keeps: every MIG layout passes profiles.layout_errors; time-sliced services on a
GPU need at most its memory together (and at most its 7 compute slices, counting the requests that state
compute_slices); a GPU is MIG, time-sliced or whole, never two; exclusive requests get one whole GPU per
replica; a request with a pool only lands on GPUs of that pool; a GPU with nothing placed keeps its
current layout unless the plan needs it.
"""

from __future__ import annotations

import math
import re
import time
from bisect import bisect_left, insort
from itertools import count

from appliance.partitioning import profiles as P
from appliance.partitioning import solver

GPU_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ISOLATIONS = ("hard", "soft", "exclusive")
# Limits on one plan (the API hands callers' input here): about 2 s of planning at most.
MAX_REPLICAS = 20_000
MAX_GPUS = 10_000
GPU_FIELDS = {"id", "model", "pool"}
REQUEST_FIELDS = {"name", "memory_gb", "compute_slices", "replicas", "isolation", "weight", "pool"}


class PlanInputError(ValueError):
    """Bad input to plan(): the message names the item and field ("requests[3].memory_gb: ...")."""


# ---------------------------------------------------------------------------------------------------
# Valid layouts per GPU model


_LAYOUTS: dict[str, dict[tuple[str, ...], list[tuple[tuple[str, int], ...]]]] = {}


def valid_layouts(gpu_model: P.GpuModel) -> dict[tuple[str, ...], list[tuple[tuple[str, int], ...]]]:
    """{sorted profile names: [layouts as sorted ((name, start), ...)]} for every valid layout of the model
    (the empty one included), each checked with profiles.layout_errors."""
    found = _LAYOUTS.get(gpu_model.id)
    if found is not None:
        return found
    layouts: list[tuple[tuple[str, int], ...]] = []

    def walk(slice_: int, chosen: list[tuple[str, int]]) -> None:
        if slice_ >= P.MEMORY_SLICES:
            layouts.append(tuple(sorted(chosen)))
            return
        walk(slice_ + 1, chosen)
        for profile in gpu_model.profiles:
            if slice_ in profile.placements:
                chosen.append((profile.name, slice_))
                if not P.layout_errors(gpu_model, chosen):
                    walk(slice_ + profile.memory_slices, chosen)
                chosen.pop()

    walk(0, [])
    index: dict[tuple[str, ...], list[tuple[tuple[str, int], ...]]] = {}
    for layout in layouts:
        assert not P.layout_errors(gpu_model, list(layout))
        index.setdefault(tuple(sorted(name for name, _ in layout)), []).append(layout)
    for candidates in index.values():
        # Deterministic choice: new instances as low as they go.
        candidates.sort(key=lambda layout: [start for _, start in layout])
    _LAYOUTS[gpu_model.id] = index
    return index


_ARRANGE: dict[tuple, tuple[tuple[str, int], ...] | None] = {}


def arrange(gpu_model: P.GpuModel, fixed: tuple[tuple[str, int], ...], new: tuple[str, ...]):
    """A valid layout holding the `fixed` instances where they are and the profiles `new` somewhere, as
    the new instances' ((name, start), ...) sorted; None when there is none."""
    key = (gpu_model.id, fixed, new)
    if key in _ARRANGE:
        return _ARRANGE[key]
    result = None
    names = tuple(sorted([name for name, _ in fixed] + list(new)))
    fixed_set = set(fixed)
    for layout in valid_layouts(gpu_model).get(names, ()):
        if fixed_set.issubset(layout):
            rest = list(layout)
            for item in fixed:
                rest.remove(item)
            result = tuple(sorted(rest))
            break
    _ARRANGE[key] = result
    return result


# ---------------------------------------------------------------------------------------------------
# Input


def _number(value, where: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlanInputError(f"{where}: {value!r} is not a number")
    if positive and value <= 0:
        raise PlanInputError(f"{where}: {value!r} must be greater than 0")
    if value > 1e9:
        raise PlanInputError(f"{where}: {value!r} is out of range")
    return value


def _integer(value, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanInputError(f"{where}: {value!r} is not an integer")
    if not low <= value <= high:
        raise PlanInputError(f"{where}: {value} is not between {low} and {high}")
    return value


def _text(value, where: str, pattern: re.Pattern) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise PlanInputError(f"{where}: {value!r} does not match {pattern.pattern}")
    return value


def _model(value, where: str) -> P.GpuModel:
    if not isinstance(value, str) or value not in P.MODELS:
        raise PlanInputError(f"{where}: {value!r} is not a GPU model of the profile table "
                             f"({', '.join(P.MODELS)})")
    return P.MODELS[value]


def check_gpus(gpus) -> list[dict]:
    if not isinstance(gpus, list):
        raise PlanInputError(f"gpus: a list of {{id, model, pool}} is needed, not {type(gpus).__name__}")
    if len(gpus) > MAX_GPUS:
        raise PlanInputError(f"gpus: {len(gpus)} GPUs; at most {MAX_GPUS}")
    seen: set[str] = set()
    out = []
    for i, gpu in enumerate(gpus):
        where = f"gpus[{i}]"
        if not isinstance(gpu, dict):
            raise PlanInputError(f"{where}: a mapping with id and model is needed, not {type(gpu).__name__}")
        unknown = sorted(set(map(str, gpu)) - GPU_FIELDS)
        if unknown:
            raise PlanInputError(f"{where}: unknown field {unknown[0]!r} (fields: id, model, pool)")
        gpu_id = _text(gpu.get("id"), f"{where}.id", GPU_ID)
        if gpu_id in seen:
            raise PlanInputError(f"{where}.id: {gpu_id!r} appears twice")
        seen.add(gpu_id)
        model = _model(gpu.get("model"), f"{where}.model")
        pool = gpu.get("pool")
        if pool is not None:
            pool = _text(pool, f"{where}.pool", POOL)
        out.append({"id": gpu_id, "model": model, "pool": pool})
    return out


def check_requests(requests) -> list[dict]:
    if not isinstance(requests, list):
        raise PlanInputError(f"requests: a list is needed, not {type(requests).__name__}")
    seen: set[str] = set()
    out = []
    total = 0
    for i, request in enumerate(requests):
        where = f"requests[{i}]"
        if not isinstance(request, dict):
            raise PlanInputError(f"{where}: a mapping with name, memory_gb and isolation is needed, "
                                 f"not {type(request).__name__}")
        unknown = sorted(set(map(str, request)) - REQUEST_FIELDS)
        if unknown:
            raise PlanInputError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(REQUEST_FIELDS))})")
        name = _text(request.get("name"), f"{where}.name", NAME)
        if name in seen:
            raise PlanInputError(f"{where}.name: {name!r} appears twice")
        seen.add(name)
        if "memory_gb" not in request:
            raise PlanInputError(f"{where}.memory_gb: missing")
        memory = _number(request["memory_gb"], f"{where}.memory_gb")
        compute = request.get("compute_slices")
        if compute is not None:
            compute = _integer(compute, f"{where}.compute_slices", 1, P.COMPUTE_SLICES)
        replicas = _integer(request.get("replicas", 1), f"{where}.replicas", 1, MAX_REPLICAS)
        total += replicas
        if total > MAX_REPLICAS:
            raise PlanInputError(f"{where}.replicas: the requests ask for more than {MAX_REPLICAS} replicas in all")
        isolation = request.get("isolation")
        if isolation not in ISOLATIONS:
            raise PlanInputError(f"{where}.isolation: {isolation!r} is not one of {', '.join(ISOLATIONS)}")
        weight = _number(request.get("weight", 1), f"{where}.weight")
        pool = request.get("pool")
        if pool is not None:
            pool = _text(pool, f"{where}.pool", POOL)
        out.append({"index": i, "name": name, "memory_gb": memory, "compute_slices": compute,
                    "replicas": replicas, "isolation": isolation, "weight": weight, "pool": pool})
    return out


def check_current(current, gpus: list[dict]) -> dict[str, tuple]:
    """{gpu id: (mig ((name, start), ...) sorted | None, time-slicing replicas | None)}."""
    layout: dict[str, tuple] = {g["id"]: (None, None) for g in gpus}
    if current is None:
        return layout
    entries = current.get("gpus") if isinstance(current, dict) else current
    where_list = "current.gpus" if isinstance(current, dict) else "current"
    if not isinstance(entries, list):
        raise PlanInputError(f"{where_list}: a list of GPU layouts is needed")
    by_id = {g["id"]: g for g in gpus}
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"{where_list}[{i}]"
        if not isinstance(entry, dict):
            raise PlanInputError(f"{where}: a mapping with id, mig and time_slicing is needed")
        gpu_id = _text(entry.get("id"), f"{where}.id", GPU_ID)
        if gpu_id not in by_id:
            raise PlanInputError(f"{where}.id: {gpu_id!r} is not one of the GPUs planned")
        if gpu_id in seen:
            raise PlanInputError(f"{where}.id: {gpu_id!r} appears twice")
        seen.add(gpu_id)
        model = by_id[gpu_id]["model"]
        if entry.get("model") is not None and entry["model"] != model.id:
            raise PlanInputError(f"{where}.model: {entry['model']!r}, but GPU {gpu_id} is a {model.id}")
        mig = entry.get("mig")
        ts = entry.get("time_slicing")
        if mig is not None and ts is not None:
            raise PlanInputError(f"{where}: a GPU is MIG or time-sliced, not both")
        mig_layout = None
        if mig is not None:
            if not isinstance(mig, list):
                raise PlanInputError(f"{where}.mig: a list of {{profile, start}} or null is needed")
            pairs = []
            for j, instance in enumerate(mig):
                if not isinstance(instance, dict):
                    raise PlanInputError(f"{where}.mig[{j}]: a mapping with profile and start is needed")
                name = instance.get("profile")
                if not isinstance(name, str):
                    raise PlanInputError(f"{where}.mig[{j}].profile: {name!r} is not a profile name")
                try:
                    model.profile(name)
                except KeyError as exc:
                    raise PlanInputError(f"{where}.mig[{j}].profile: {exc.args[0]}") from None
                start = _integer(instance.get("start"), f"{where}.mig[{j}].start", 0, P.MEMORY_SLICES - 1)
                pairs.append((name, start))
            errors = P.layout_errors(model, pairs)
            if errors:
                raise PlanInputError(f"{where}.mig: not a valid layout for {model.id}: {'; '.join(errors)}")
            mig_layout = tuple(sorted(pairs))
        replicas = None
        if ts is not None:
            if not isinstance(ts, dict):
                raise PlanInputError(f"{where}.time_slicing: a mapping with replicas or null is needed")
            replicas = _integer(ts.get("replicas"), f"{where}.time_slicing.replicas", 1, MAX_REPLICAS)
        layout[gpu_id] = (mig_layout, replicas)
    return layout


def check_placed(current, gpus: list[dict]) -> dict[tuple[str, int], tuple[str, str | None, int | None]]:
    """{(request, replica): (gpu id, profile | None, start | None)} from current.placed, where the current
    plan put each replica (a plan's own output may be handed back whole as `current`). Replicas of requests
    or GPUs no longer planned are passed over; an entry of the wrong shape is an error naming it."""
    if not isinstance(current, dict) or current.get("placed") is None:
        return {}
    entries = current["placed"]
    if not isinstance(entries, list):
        raise PlanInputError("current.placed: a list of {request, replica, gpu, profile, start} is needed")
    known = {g["id"] for g in gpus}
    hints: dict[tuple[str, int], tuple[str, str | None, int | None]] = {}
    for i, entry in enumerate(entries):
        where = f"current.placed[{i}]"
        if not isinstance(entry, dict):
            raise PlanInputError(f"{where}: a mapping with request, replica, gpu, profile and start is needed")
        request = _text(entry.get("request"), f"{where}.request", NAME)
        replica = _integer(entry.get("replica"), f"{where}.replica", 0, MAX_REPLICAS - 1)
        gpu_id = _text(entry.get("gpu"), f"{where}.gpu", GPU_ID)
        profile, start = entry.get("profile"), entry.get("start")
        if profile is not None and not isinstance(profile, str):
            raise PlanInputError(f"{where}.profile: {profile!r} is not a profile name")
        if profile is not None:
            start = _integer(start, f"{where}.start", 0, P.MEMORY_SLICES - 1)
        else:
            start = None
        if gpu_id in known:
            hints[(request, replica)] = (gpu_id, profile, start)
    return hints


# ---------------------------------------------------------------------------------------------------
# Packing state


class _Gpu:
    __slots__ = ("i", "id", "model", "pool", "cur_mig", "cur_ts", "mode", "fixed", "new",
                 "ts_items", "ts_mem", "ts_compute", "whole")

    def __init__(self, i: int, gpu: dict, cur_mig, cur_ts):
        self.i = i
        self.id = gpu["id"]
        self.model: P.GpuModel = gpu["model"]
        self.pool = gpu["pool"]
        self.cur_mig = cur_mig
        self.cur_ts = cur_ts
        self.mode = None            # None (nothing placed) | "mig" | "ts" | "whole"
        self.fixed = {inst: None for inst in cur_mig} if cur_mig is not None else {}  # kept current -> item
        self.new: list[tuple[str, object]] = []   # (profile name, item)
        self.ts_items: list = []
        self.ts_mem = 0.0
        self.ts_compute = 0
        self.whole = None

    def fixed_key(self) -> tuple:
        return tuple(sorted((inst, item is not None) for inst, item in self.fixed.items()))

    def new_names(self) -> tuple[str, ...]:
        return tuple(sorted(name for name, _ in self.new))

    def placed(self) -> bool:
        return self.mode is not None


class _Item:
    __slots__ = ("request", "replica", "memory", "compute", "isolation", "weight", "pool", "cands", "fixed_cands",
                 "cands_key", "size", "order")

    def __init__(self, request: dict, replica: int):
        self.request = request
        self.replica = replica
        self.memory = request["memory_gb"]
        self.compute = request["compute_slices"] or 0
        self.isolation = request["isolation"]
        self.weight = request["weight"]
        self.pool = request["pool"]
        self.cands: dict[str, tuple[P.Profile, ...]] = {}
        self.fixed_cands: dict[str, tuple[P.Profile, ...]] = {}
        self.cands_key: tuple = ()
        self.size = 1.0
        self.order = 0


def _mig_candidates(item: _Item, gpu_model: P.GpuModel, *, media: bool = False) -> tuple[P.Profile, ...]:
    """The profiles an item fits in, smallest first. New instances never take the media extensions
    (the planner creates none: nothing asks for them); a current +me instance may serve a request."""
    fits = [p for p in gpu_model.profiles if (media or not p.media_extensions) and p.memory_gb >= item.memory
            and p.compute_slices >= item.compute]
    return tuple(sorted(fits, key=lambda p: (p.memory_slices, p.compute_slices, p.media_extensions)))


_CREATABLE: dict[str, tuple[P.Profile, ...]] = {}


def _creatable(gpu_model: P.GpuModel) -> tuple[P.Profile, ...]:
    found = _CREATABLE.get(gpu_model.id)
    if found is None:
        found = _CREATABLE[gpu_model.id] = tuple(p for p in gpu_model.profiles if not p.media_extensions)
    return found


_ADDABLE: dict[tuple, tuple[P.Profile, ...]] = {}


def _addable(gpu_model: P.GpuModel, fixed: tuple, new_names: tuple[str, ...]) -> tuple[P.Profile, ...]:
    """The profiles of which one more new instance fits a GPU holding `fixed` and `new_names`."""
    key = (gpu_model.id, fixed, new_names)
    found = _ADDABLE.get(key)
    if found is None:
        found = _ADDABLE[key] = tuple(p for p in _creatable(gpu_model)
                                      if arrange(gpu_model, fixed, tuple(sorted(new_names + (p.name,)))) is not None)
    return found


def _fits_ts(item: _Item, gpu: _Gpu) -> bool:
    return (gpu.ts_mem + item.memory <= gpu.model.memory_gb + 1e-9
            and gpu.ts_compute + item.compute <= P.COMPUTE_SLICES)


class _Packer:
    """One greedy pass. GPUs are indexed by what an item asks of them so that placing one replica costs
    a few dictionary look-ups, not a scan of the appliance:
    - can_new[(model, pool, profile)][used memory slices]: MIG GPUs where a new instance of the profile
      fits (keeping their current instances);
    - can_fixed[(model, pool, profile)][used]: MIG GPUs with an unused current instance of the profile;
    - ts_lists[(model, pool)]: time-sliced GPUs sorted by the memory their services take;
    - free[(model, pool)]: GPUs with nothing placed and no current partitioning;
    - reclaim[(model, pool)][state]: GPUs whose current layout would have to change."""

    def __init__(self, gpus: list[_Gpu], items: list[_Item], *, soft_ts_first: bool):
        self.gpus = gpus
        self.items = items
        self.soft_ts_first = soft_ts_first
        self.can_new: dict[tuple, list[dict]] = {}
        self.can_fixed: dict[tuple, list[dict]] = {}
        self.mig_entries: dict[int, list[dict]] = {}
        self.ts_lists: dict[tuple, list] = {}
        self.ts_entry: dict[int, tuple] = {}
        self.ts_current: dict[tuple, list] = {}
        self.serial = count()
        self.free: dict[tuple, dict[int, None]] = {}
        self.reclaim: dict[tuple, dict[tuple, dict[int, None]]] = {}
        self.reclaim_key: dict[int, tuple] = {}
        self.pairs = sorted({(g.model.id, g.pool) for g in gpus}, key=lambda pair: (pair[0], str(pair[1])))
        self.failed: dict[tuple, float] = {}
        self.live: dict[tuple, dict[tuple, int]] = {}   # (model, pool) -> {index key with GPUs: count}
        self.pairs_for: dict = {}
        for gpu in gpus:
            if gpu.cur_mig is not None:
                self._mig_add(gpu)
            elif gpu.cur_ts is not None:
                self._ts_add(gpu)
            else:
                self.free.setdefault((gpu.model.id, gpu.pool), {})[gpu.i] = None
            self._reclaim_update(gpu)

    # -- indexes
    def _mig_add(self, gpu: _Gpu) -> None:
        entries = []
        used = sum(gpu.model.profile(name).memory_slices for name, _ in gpu.fixed) + \
            sum(gpu.model.profile(name).memory_slices for name, _ in gpu.new)
        for profile in _addable(gpu.model, tuple(sorted(gpu.fixed)), gpu.new_names()):
            entries.append(self._index(self.can_new, (gpu.model.id, gpu.pool, profile.name), used, gpu.i))
        for name in {name for (name, _), taken in gpu.fixed.items() if taken is None}:
            entries.append(self._index(self.can_fixed, (gpu.model.id, gpu.pool, name), used, gpu.i))
        self.mig_entries[gpu.i] = entries

    def _index(self, index: dict, key: tuple, used: int, i: int) -> list:
        entry = index.get(key)
        if entry is None:
            entry = index[key] = [0] + [{} for _ in range(P.MEMORY_SLICES + 1)]
        entry[used + 1][i] = None
        entry[0] += 1
        live = self.live.setdefault(key[:2], {})
        live[key] = live.get(key, 0) + 1
        return [entry, used + 1, live, key]

    def _mig_remove(self, gpu: _Gpu) -> None:
        for entry, slot, live, key in self.mig_entries.pop(gpu.i, ()):
            del entry[slot][gpu.i]
            entry[0] -= 1
            live[key] -= 1
            if not live[key]:
                del live[key]

    def _ts_add(self, gpu: _Gpu) -> None:
        entry = (gpu.ts_mem, next(self.serial), gpu.i)
        self.ts_entry[gpu.i] = entry
        insort(self.ts_lists.setdefault((gpu.model.id, gpu.pool), []), entry)
        if gpu.cur_ts is not None:
            # GPUs time-sliced now, apart: those serving fewer services than now, the others.
            below = len(gpu.ts_items) < gpu.cur_ts
            insort(self.ts_current.setdefault((gpu.model.id, gpu.pool, below), []), entry)

    def _ts_remove(self, gpu: _Gpu) -> None:
        entry = self.ts_entry.pop(gpu.i, None)
        if entry is not None:
            entries = self.ts_lists[(gpu.model.id, gpu.pool)]
            del entries[bisect_left(entries, entry)]
            if gpu.cur_ts is not None:
                entries = self.ts_current[(gpu.model.id, gpu.pool, len(gpu.ts_items) < gpu.cur_ts)]
                del entries[bisect_left(entries, entry)]

    def _reclaim_update(self, gpu: _Gpu) -> None:
        """A GPU is reclaimable while its current layout holds something it could give up: current
        instances that serve nothing, or (with nothing placed) a time-sliced or MIG layout."""
        old = self.reclaim_key.pop(gpu.i, None)
        if old is not None:
            group = self.reclaim[old[0]][old[1]]
            del group[gpu.i]
            if not group:
                del self.reclaim[old[0]][old[1]]
        unused = any(taken is None for taken in gpu.fixed.values())
        if gpu.mode == "ts" or gpu.mode == "whole" or not (unused or (gpu.mode is None and gpu.cur_ts is not None)):
            return
        state = (gpu.mode, gpu.cur_ts, gpu.fixed_key(), gpu.new_names())
        pair = (gpu.model.id, gpu.pool)
        self.reclaim.setdefault(pair, {}).setdefault(state, {})[gpu.i] = None
        self.reclaim_key[gpu.i] = (pair, state)

    # -- options: (cost, gpu index, (action, profile | instance | None)); the lowest cost wins
    def _eligible_pairs(self, item: _Item):
        found = self.pairs_for.get(item.pool)
        if found is None:
            found = self.pairs_for[item.pool] = [pair for pair in self.pairs if item.pool is None or pair[1] == item.pool]
        return found

    def _mig_option(self, item: _Item, *, tight: bool = False):
        """The best MIG option; tight: only a current instance of the size the item would be given new
        (so that it does not take an instance a larger replica was using)."""
        best = None
        any_fixed = bool(self.can_fixed)
        for model_id, pool in self._eligible_pairs(item):
            live = self.live.get((model_id, pool))
            if not live:
                continue
            fixed = item.fixed_cands.get(model_id, ()) if any_fixed else ()
            if tight:
                natural = item.cands.get(model_id, ())[:1]
                fixed = [p for p in fixed if natural and (p.memory_slices, p.compute_slices)
                         == (natural[0].memory_slices, natural[0].compute_slices)]
            for tier, index, cands in ((0, self.can_fixed, fixed),
                                       (1, self.can_new, () if tight else item.cands.get(model_id, ()))):
                for profile in cands:
                    key = (model_id, pool, profile.name)
                    if key not in live:
                        continue
                    entry = index.get(key)
                    if not entry or not entry[0]:
                        continue
                    for slot in range(P.MEMORY_SLICES + 1, 0, -1):   # the fullest GPU first
                        if entry[slot]:
                            cost = (tier, profile.memory_slices, profile.compute_slices, 1 - slot)
                            if best is None or cost < best[0]:
                                best = (cost, next(iter(entry[slot])),
                                        ("fixed", profile.name) if tier == 0 else ("new", profile))
                            break
                    break
        return best

    def _ts_option(self, item: _Item, *, current_only: bool = False):
        """The fullest time-sliced GPU with room for the item; current_only: among the GPUs time-sliced now,
        those serving fewer services than now first."""
        best = None
        if current_only:
            lists = [(pair[:2], entries, 0 if pair[2] else 1) for pair, entries in self.ts_current.items()]
        else:
            lists = [(pair, entries, 0) for pair, entries in self.ts_lists.items()]
        for pair, entries, rank in lists:
            if not entries or (item.pool is not None and item.pool != pair[1]):
                continue
            capacity = P.MODELS[pair[0]].memory_gb
            room = capacity - item.memory + 1e-9
            # Fullest first: the largest use that still leaves room.
            position = bisect_left(entries, (room, math.inf, 0))
            for k in range(position - 1, -1, -1):
                gpu = self.gpus[entries[k][2]]
                if _fits_ts(item, gpu):
                    cost = (1, rank, (capacity - gpu.ts_mem - item.memory) / capacity * P.MEMORY_SLICES, 0)
                    if best is None or cost < best[0]:
                        best = (cost, gpu.i, ("ts", None))
                    break
        return best

    def _free_option(self, item: _Item, kind: str):
        best = None
        for pair, group in self.free.items():
            if not group or (item.pool is not None and item.pool != pair[1]):
                continue
            gpu_model = P.MODELS[pair[0]]
            if kind == "mig":
                cands = item.cands.get(pair[0]) or ()
                if not cands:
                    continue
                cost, choice = (2, cands[0].memory_slices, cands[0].compute_slices, 0), ("open-mig", cands[0])
            elif kind == "ts":
                if item.memory > gpu_model.memory_gb:
                    continue
                cost, choice = (2, item.memory / gpu_model.memory_gb * P.MEMORY_SLICES, 0, 0), ("open-ts", None)
            else:
                if item.memory > gpu_model.memory_gb:
                    continue
                cost, choice = (2, gpu_model.memory_gb, 0, 0), ("whole", None)   # the smallest GPU that holds it
            if best is None or cost < best[0]:
                best = (cost, next(iter(group)), choice)
        return best

    def _reclaim_option(self, item: _Item):
        """Last resort: a GPU whose current layout has to change (unused current instances destroyed, a
        time-sliced or MIG GPU serving nothing planned turned into what the item needs)."""
        best = None
        for pair in self._eligible_pairs(item):
            gpu_model = P.MODELS[pair[0]]
            for (mode, cur_ts, fixed_key, new_names), group in self.reclaim.get(pair, {}).items():
                unused = sum(1 for _, taken in fixed_key if not taken)
                lost = unused + (1 if cur_ts is not None and mode is None else 0)
                cost = choice = None
                if item.isolation == "exclusive":
                    if mode is not None or item.memory > gpu_model.memory_gb:
                        continue
                    cost, choice = (3, lost, gpu_model.memory_gb, 0), ("whole", None)
                else:
                    kept = tuple(sorted(inst for inst, taken in fixed_key if taken))
                    for profile in item.cands.get(pair[0], ()):
                        if arrange(gpu_model, kept, tuple(sorted(new_names + (profile.name,)))) is not None:
                            cost = (3, lost, profile.memory_slices, profile.compute_slices)
                            choice = ("drop-mig", profile)
                            break
                    if (choice is None and item.isolation == "soft" and mode is None and cur_ts is None
                            and item.memory <= gpu_model.memory_gb):
                        cost, choice = (3, lost + 1, 0, 0), ("reclaim-ts", None)
                    if choice is None:
                        continue
                if best is None or cost < best[0]:
                    best = (cost, next(iter(group)), choice)
        return best

    # -- placing
    def place(self, item: _Item):
        memo = (item.isolation, item.pool, item.compute, item.cands_key)
        if item.memory >= self.failed.get(memo, math.inf):
            return None   # a replica no bigger failed already; GPUs only fill up
        if item.isolation == "exclusive":
            option = self._free_option(item, "whole") or self._reclaim_option(item)
        else:
            mig = self._mig_option(item)
            if mig is not None and mig[0][0] == 0:
                option = mig
            elif item.isolation == "hard":
                option = mig or self._free_option(item, "mig") or self._reclaim_option(item)
            else:
                ts = self._ts_option(item)
                if self.soft_ts_first:
                    option = ts or mig or self._free_option(item, "ts") or self._free_option(item, "mig")
                else:
                    option = mig or ts or self._free_option(item, "mig") or self._free_option(item, "ts")
                option = option or self._reclaim_option(item)
        if option is None:
            self.failed[memo] = min(item.memory, self.failed.get(memo, math.inf))
            return None
        return self._apply(item, option)

    def place_current(self, item: _Item):
        """Place a replica on what the current layout already offers, changing nothing else: an unused
        current MIG instance, room on a GPU time-sliced now, a whole GPU for an exclusive request."""
        if item.isolation == "exclusive":
            option = self._free_option(item, "whole")
        else:
            option = self._mig_option(item, tight=True)
            if option is not None and option[0][0] != 0:
                option = None
            if option is None and item.isolation == "soft":
                option = self._ts_option(item, current_only=True)
        return None if option is None else self._apply(item, option)

    def _apply(self, item: _Item, option):
        _, i, (action, what) = option
        gpu = self.gpus[i]
        self._mig_remove(gpu)
        self._ts_remove(gpu)
        self.free.get((gpu.model.id, gpu.pool), {}).pop(gpu.i, None)
        if action == "fixed":
            if isinstance(what, tuple):   # a given instance (profile, start)
                instance = what
            else:
                instance = next(inst for inst, taken in sorted(gpu.fixed.items()) if taken is None and inst[0] == what)
            gpu.fixed[instance] = item
            gpu.mode = "mig"
            self._mig_add(gpu)
        elif action in ("new", "open-mig", "drop-mig"):
            if action == "drop-mig":
                gpu.fixed = {inst: taken for inst, taken in gpu.fixed.items() if taken is not None}
            gpu.new.append((what.name, item))
            gpu.mode = "mig"
            self._mig_add(gpu)
        elif action in ("ts", "open-ts", "reclaim-ts"):
            gpu.fixed = {}
            gpu.mode = "ts"
            gpu.ts_items.append(item)
            gpu.ts_mem += item.memory
            gpu.ts_compute += item.compute
            self._ts_add(gpu)
        else:  # whole
            gpu.fixed = {}
            gpu.mode = "whole"
            gpu.whole = item
        self._reclaim_update(gpu)
        return gpu

    def place_where_it_was(self, item: _Item, gpu_i: int, profile: str | None, start: int | None):
        """Place a replica where the current plan put it, when that still holds it and changes nothing:
        the same unused current MIG instance, a share of the same GPU time-sliced now (within its current
        replicas), the same bare GPU for an exclusive request."""
        gpu = self.gpus[gpu_i]
        if item.pool is not None and gpu.pool != item.pool:
            return None
        if profile is not None:
            instance = (profile, start)
            if (item.isolation == "exclusive" or gpu.mode not in (None, "mig") or instance not in gpu.fixed
                    or gpu.fixed[instance] is not None
                    or all(p.name != profile for p in item.fixed_cands.get(gpu.model.id, ()))):
                return None
            option = ((), gpu_i, ("fixed", instance))
        elif gpu.cur_ts is not None:
            if (item.isolation != "soft" or gpu.mode not in (None, "ts") or len(gpu.ts_items) >= gpu.cur_ts
                    or not _fits_ts(item, gpu)):
                return None
            option = ((), gpu_i, ("ts", None))
        else:
            if (item.isolation != "exclusive" or gpu.mode is not None or gpu.cur_mig is not None
                    or item.memory > gpu.model.memory_gb):
                return None
            option = ((), gpu_i, ("whole", None))
        return self._apply(item, option)

    def run(self, keep_first: list[int] | None = None, were: list[tuple] | None = None) -> dict[int, _Gpu]:
        """Place the items in order; with were ([(position in self.items, gpu index, profile, start)]),
        those first go back where the current plan put them; with keep_first (positions), those are then
        offered what the current layout has, in that order."""
        where: dict[int, _Gpu] = {}
        for n, gpu_i, profile, start in were or ():
            gpu = self.place_where_it_was(self.items[n], gpu_i, profile, start)
            if gpu is not None:
                where[n] = gpu
        for n in keep_first or ():
            if n in where:
                continue
            gpu = self.place_current(self.items[n])
            if gpu is not None:
                where[n] = gpu
        for n, item in enumerate(self.items):
            if n in where:
                continue
            gpu = self.place(item)
            if gpu is not None:
                where[n] = gpu
        return where


# ---------------------------------------------------------------------------------------------------
# Result


def _layout_of(gpu: _Gpu):
    """(mig ((name, start), ...) | None, ts replicas | None, {item id: (profile, start)})."""
    if gpu.mode is None:
        return gpu.cur_mig, gpu.cur_ts, {}
    if gpu.mode == "ts":
        return None, len(gpu.ts_items), {}
    if gpu.mode == "whole":
        return None, None, {}
    fixed = tuple(sorted(gpu.fixed))
    names = gpu.new_names()
    starts = arrange(gpu.model, fixed, names)
    assert starts is not None, (gpu.id, fixed, names)
    by_name: dict[str, list[int]] = {}
    for name, start in starts:
        by_name.setdefault(name, []).append(start)
    where = {}
    for inst, item in gpu.fixed.items():
        if item is not None:
            where[id(item)] = inst
    for name, item in sorted(gpu.new, key=lambda pair: (pair[0], pair[1].order)):
        where[id(item)] = (name, by_name[name].pop(0))
    return tuple(sorted(fixed + starts)), None, where


def _score(gpus: list[_Gpu], layouts: dict[int, tuple]) -> tuple:
    """Disruption, lower is better: GPUs whose layout changes (each one drained), then MIG instances
    destroyed or created, then GPUs in use (whole GPUs left free for training)."""
    changed = moved = used = 0
    for gpu in gpus:
        mig, ts, _ = layouts[gpu.i]
        used += gpu.mode is not None
        if (mig, ts) != (gpu.cur_mig, gpu.cur_ts):
            changed += 1
            moved += len(set(gpu.cur_mig or ()) ^ set(mig or ()))
    return changed, moved, used


def _unplaced_reason(item: _Item, counts: dict[tuple, int]) -> str:
    """Why a replica was left out, in words; counts: {(model id, pool): GPUs}."""
    need = f"needs {item.memory:g} GB"
    if item.compute:
        need += f" and {item.compute} compute slice{'s' if item.compute > 1 else ''}"
    pool_counts = {pair: n for pair, n in counts.items() if item.pool is None or pair[1] == item.pool}
    if not pool_counts:
        return f"no GPU in pool {item.pool}" if item.pool else "no GPU to plan on"
    models = sorted({m for m, _ in pool_counts}, key=lambda m: (P.MODELS[m].memory_gb, m))
    where = f" in pool {item.pool}" if item.pool else ""
    if item.isolation == "exclusive":
        holding = sum(n for (m, _), n in pool_counts.items() if P.MODELS[m].memory_gb >= item.memory)
        if not holding:
            sizes = ", ".join(f"one {m} has {P.MODELS[m].memory_gb} GB" for m in models)
            return f"{need} on a whole GPU; {sizes}"
        return (f"{need} on a whole GPU; all {holding} GPU{'s' if holding > 1 else ''} that could hold it"
                f"{where} are taken by replicas placed before it")
    holding = sum(n for (m, _), n in pool_counts.items()
                  if item.cands.get(m) or (item.isolation == "soft" and P.MODELS[m].memory_gb >= item.memory))
    if not holding:
        if item.isolation == "hard":
            parts = []
            for m in models:
                gpu_model = P.MODELS[m]
                largest = max(p.memory_gb for p in gpu_model.profiles)
                if largest < item.memory:
                    parts.append(f"the largest MIG instance of {m} is {largest} GB")
                else:
                    parts.append(f"no MIG profile of {m} has the memory and the compute slices together")
            return f"{need} in a MIG instance; {'; '.join(parts)}"
        sizes = ", ".join(f"one whole {m} has {P.MODELS[m].memory_gb} GB" for m in models)
        return f"{need}; {sizes}"
    kinds = "a MIG instance" if item.isolation == "hard" else "a MIG instance or a time-sliced share"
    return (f"{need} in {kinds}; no room left on the {holding} GPU{'s' if holding > 1 else ''}"
            f"{where} that could hold it once the replicas with more weight per GPU share were placed")


def _by_start(instance: tuple[str, int]) -> tuple[int, str]:
    return instance[1], instance[0]


def _diff(gpus: list[_Gpu], layouts: dict[int, tuple]) -> dict:
    destroyed, created, kept, mode_changes, ts_changes, changed = [], [], [], [], [], []
    for gpu in gpus:
        mig, ts, _ = layouts[gpu.i]
        before = set(gpu.cur_mig or ())
        after = set(mig or ())
        destroyed += [{"gpu": gpu.id, "profile": n, "start": s} for n, s in sorted(before - after, key=_by_start)]
        created += [{"gpu": gpu.id, "profile": n, "start": s} for n, s in sorted(after - before, key=_by_start)]
        kept += [{"gpu": gpu.id, "profile": n, "start": s} for n, s in sorted(before & after, key=_by_start)]
        if (gpu.cur_mig is not None) != (mig is not None):
            mode_changes.append({"gpu": gpu.id, "enabled": mig is not None})
        if gpu.cur_ts != ts:
            ts_changes.append({"gpu": gpu.id, "from": gpu.cur_ts, "to": ts})
        if before != after or (gpu.cur_mig is None) != (mig is None) or gpu.cur_ts != ts:
            changed.append(gpu.id)
    return {"destroyed": destroyed, "created": created, "kept": kept, "mig_mode_changes": mode_changes,
            "time_slicing_changes": ts_changes, "gpus_changed": changed}


def _size(item: _Item, gpus_models: set[str]) -> float:
    """The smallest share of a GPU the item can take on any model it may land on (for the ordering)."""
    best = math.inf
    for model_id in gpus_models:
        gpu_model = P.MODELS[model_id]
        if item.isolation == "exclusive":
            if item.memory <= gpu_model.memory_gb:
                best = min(best, 1.0)
            continue
        cands = item.cands.get(model_id) or ()
        if cands:
            best = min(best, max(cands[0].memory_slices / P.MEMORY_SLICES, cands[0].compute_slices / P.COMPUTE_SLICES))
        if item.isolation == "soft" and item.memory <= gpu_model.memory_gb:
            best = min(best, max(item.memory / gpu_model.memory_gb, item.compute / P.COMPUTE_SLICES))
    return best


ORDERINGS = ("density", "hard-first", "weight", "size")
RUN_BUDGET = 12_000   # replicas placed in all greedy passes together (about 0.03 s of CPU per 1,000 a pass)


_RANK = {"exclusive": 0, "hard": 1, "soft": 2}


def _keep_order(item: _Item, by: str, position: int) -> tuple:
    """The order replicas are offered the current layout in: exclusive, hard, soft; within each the
    largest first ("size"), or in the packing order (weight per GPU share, "density")."""
    if by == "size":
        return _RANK[item.isolation], -item.memory, -item.compute, item.order
    return _RANK[item.isolation], position


# ---------------------------------------------------------------------------------------------------
# The exact solver after the greedy search


OPTIONS = {"orderings", "policies", "all_runs", "solver", "time_limit"}
# Seconds the solver may take (building its program included) unless options.time_limit says otherwise,
# and at most what is left of PLAN_BUDGET after the greedy passes: a plan of 1,000 GPUs and 5,000 requests
# stays under a second (the rest is the result's making).
TIME_LIMIT = 0.6
PLAN_BUDGET = 0.75
# Served weight this close to the bound is the bound (weights are sums of floats).
TOLERANCE = 1e-6


def _close(served: float, bound: float) -> bool:
    return served >= bound - TOLERANCE * max(1.0, abs(bound))


def _geometry(gpu_model: P.GpuModel, name: str) -> tuple[int, int]:
    profile = gpu_model.profile(name)
    return profile.memory_slices, profile.compute_slices


def _from_solution(assignment: dict, states: list[tuple], checked_gpus: list[dict], layout_now: dict,
                   base_items: list[_Item]):
    """The solver's packing as the planner's GPUs ([_Gpu], {item id: _Gpu}), or None when it cannot be laid
    out. The solver tells GPUs apart by model, pool and what they are now (`states`, one per GPU); within
    such a class the first GPUs take its uses. A MIG GPU keeps the instances it has now where they serve
    or can stay (all of them when the solver kept its layout)."""
    run_gpus = [_Gpu(i, g, *layout_now[g["id"]]) for i, g in enumerate(checked_gpus)]
    by_class: dict[tuple, list[_Gpu]] = {}
    for gpu in reversed(run_gpus):   # popped from the end: the first GPUs first
        by_class.setdefault((gpu.model.id, gpu.pool, states[gpu.i]), []).append(gpu)
    where: dict[int, _Gpu] = {}
    for c, uses in assignment.items():
        for kind, what in uses:
            gpu = by_class.get(c, []).pop() if by_class.get(c) else None
            if gpu is None:
                return None
            if kind == "mig":
                items = [(name, base_items[i]) for name, i in what]
                current = sorted(gpu.cur_mig or ())
                matched: dict[tuple, _Item] = {}
                new: list[tuple[str, _Item]] = []
                for name, item in items:
                    # A current instance of the same geometry (1g.10gb+me serves as 1g.10gb does).
                    size = _geometry(gpu.model, name)
                    instance = next((inst for inst in current if _geometry(gpu.model, inst[0]) == size
                                     and inst not in matched), None)
                    if instance is None:
                        new.append((name, item))
                    else:
                        matched[instance] = item
                new_names = tuple(sorted(name for name, _ in new))
                for fixed in ({inst: matched.get(inst) for inst in current}, matched, None):
                    if fixed is None:   # nothing kept: every instance new
                        gpu.fixed, gpu.new = {}, items
                        break
                    if arrange(gpu.model, tuple(sorted(fixed)), new_names) is not None:
                        gpu.fixed, gpu.new = dict(fixed), new
                        break
                if arrange(gpu.model, tuple(sorted(gpu.fixed)), gpu.new_names()) is None:
                    return None
                gpu.mode = "mig"
                for _, item in items:
                    where[id(item)] = gpu
            elif kind == "ts":
                gpu.fixed, gpu.mode = {}, "ts"
                for i in what:
                    item = base_items[i]
                    gpu.ts_items.append(item)
                    gpu.ts_mem += item.memory
                    gpu.ts_compute += item.compute
                    where[id(item)] = gpu
            else:
                gpu.fixed, gpu.mode, gpu.whole = {}, "whole", base_items[what]
                where[id(base_items[what])] = gpu
    return run_gpus, where


def plan_errors(run_gpus: list[_Gpu], layouts: dict, where: dict, items: list[_Item]) -> list[str]:
    """The rules of the module text that a packing breaks ([] when none): checked on the solver's plan
    before it may replace the greedy one."""
    errors = []
    on: dict[int, list[_Item]] = {}
    for item in items:
        gpu = where.get(id(item))
        if gpu is not None:
            on.setdefault(gpu.i, []).append(item)
    for gpu in run_gpus:
        mig, ts, instance_of = layouts[gpu.i]
        placed = on.get(gpu.i, [])
        name = f"GPU {gpu.id}"
        if mig is not None:
            errors += [f"{name}: {e}" for e in P.layout_errors(gpu.model, list(mig))]
        for item in placed:
            if item.pool is not None and item.pool != gpu.pool:
                errors.append(f"{name}: {item.request['name']} asks for pool {item.pool}")
        if gpu.mode == "mig":
            seen = set()
            for item in placed:
                instance = instance_of.get(id(item))
                if item.isolation == "exclusive" or instance is None or instance not in set(mig or ()):
                    errors.append(f"{name}: {item.request['name']}#{item.replica} has no MIG instance of it")
                    continue
                profile = gpu.model.profile(instance[0])
                if profile.memory_gb + 1e-9 < item.memory or profile.compute_slices < item.compute:
                    errors.append(f"{name}: {item.request['name']}#{item.replica} does not fit {instance[0]}")
                if instance in seen:
                    errors.append(f"{name}: two replicas in {instance[0]}@{instance[1]}")
                seen.add(instance)
        elif gpu.mode == "ts":
            if any(item.isolation != "soft" for item in placed):
                errors.append(f"{name}: a replica that is not soft is time-sliced")
            if sum(item.memory for item in placed) > gpu.model.memory_gb + 1e-9 or \
                    sum(item.compute for item in placed) > P.COMPUTE_SLICES or ts != len(placed):
                errors.append(f"{name}: the time-sliced replicas need more than the GPU has")
        elif gpu.mode == "whole":
            if len(placed) != 1 or placed[0].isolation != "exclusive" or placed[0].memory > gpu.model.memory_gb:
                errors.append(f"{name}: a whole GPU holds one exclusive replica that fits it")
        elif placed:
            errors.append(f"{name}: replicas on a GPU with nothing planned")
    return errors


def _exact(best, checked_gpus, layout_now, base_items, placeable, *, use_solver: bool, time_limit: float):
    """The greedy plan `best`, or the solver's when it serves more weight; and what is known of its
    optimality: {status: optimal | within_bound, gap_percent, bound_weight, plan_from: greedy | solver,
    solver: "HiGHS x.y.z" | None, solver_status, note}."""
    served = -best[0][0]
    # The first bound: every replica that fits some GPU at all.
    bound = round(sum(item.weight for item in placeable), 9)
    plan_from = "greedy"
    version = solver.version()
    solver_status = None
    laid_out = any(mig is not None or ts is not None for mig, ts in layout_now.values())
    if _close(served, bound) and (best[0][1] == 0 or not laid_out):
        # Optimal, and no GPU with a layout now changes (or none has one): nothing for the solver to better.
        note = "the greedy plan places every replica that fits some GPU"
        solver_status = "not needed"
    elif not use_solver:
        note = "the solver was not asked for (options.solver false): the greedy plan"
        solver_status = "off"
    else:
        multisets = {m: list(valid_layouts(P.MODELS[m])) for m in {g["model"].id for g in checked_gpus}}
        gpus = []
        for i, g in enumerate(checked_gpus):
            mig, ts = layout_now[g["id"]]
            gpus.append(solver.Gpu(i, g["model"], g["pool"], tuple(n for n, _ in mig) if mig is not None else None, ts))
        position = {id(item): n for n, item in enumerate(base_items)}
        items = [solver.Item(position[id(item)], item.isolation, item.memory, item.compute, item.weight, item.pool)
                 for item in placeable]
        try:
            solution = solver.solve(gpus, items, multisets=multisets, time_limit=time_limit)
        except Exception as exc:   # whatever the solver does, the greedy plan is there
            solution = solver.Solution("error", note=f"{type(exc).__name__}: {exc}")
        solver_status = solution.status
        refused_bound = None
        if solution.bound is not None and solution.bound < served - TOLERANCE * max(1.0, served):
            # Below what the greedy plan serves: not a bound. Kept out, and said.
            refused_bound, solution.bound = solution.bound, None
        if solution.bound is not None and solution.bound < bound:
            bound = solution.bound
        note = {
            "optimal": "HiGHS solved the program",
            "feasible": f"HiGHS reached its time limit ({time_limit:g} s) before it proved its best plan optimal",
            "bound": solution.note,
            "time_limit": f"HiGHS reached its time limit ({time_limit:g} s) with no bound: the simple bound "
                          f"(every replica that fits some GPU)",
            "too_large": f"the solver was not run: {solution.note}; the simple bound (every replica that "
                         f"fits some GPU)",
            "unavailable": f"the solver is unavailable ({solution.note}): the greedy plan and the simple bound "
                           f"(every replica that fits some GPU)",
            "error": f"the solver failed ({solution.note}): the greedy plan and the simple bound",
        }[solution.status]
        if refused_bound is not None:
            note += f"; its bound {refused_bound:g} is below the greedy plan's weight and was not used"
        if solution.status == "optimal" and not solution.exact:
            note += " with the time-sliced GPUs of a class pooled (a bound); its time-sliced replicas were then " \
                    "packed GPU by GPU"
        # The solver's plan when it serves more, or as much with fewer GPUs changed (the scores say).
        if solution.assignment is not None and solution.weight >= served - TOLERANCE * max(1.0, served):
            built = _from_solution(solution.assignment, [g.state() for g in gpus], checked_gpus, layout_now,
                                   base_items)
            if built is None:
                note += "; its plan could not be laid out on the GPUs, the greedy plan is kept"
            else:
                run_gpus, where = built
                layouts = {g.i: _layout_of(g) for g in run_gpus}
                errors = plan_errors(run_gpus, layouts, where, base_items)
                if errors:
                    note += f"; its plan broke a rule ({errors[0]}), the greedy plan is kept"
                else:
                    weight = sum(item.weight for item in base_items if id(item) in where)
                    score = (-round(weight, 9), *_score(run_gpus, layouts))
                    if score < best[0]:
                        best = (score, run_gpus, layouts, {id(item): g for item in base_items
                                                           if (g := where.get(id(item))) is not None})
                        served = weight
                        plan_from = "solver"
        if plan_from == "greedy" and solution.assignment is not None and "greedy plan is kept" not in note:
            note += "; the greedy plan serves as much" if solution.weight >= served - TOLERANCE * max(1.0, served) \
                else "; the greedy plan serves more"
    optimal = _close(served, bound)
    if optimal:
        bound = served   # within the tolerance: the bound's last digits are the solver's arithmetic
    gap = 0.0 if optimal or bound <= 0 else round(100 * (bound - served) / bound, 2)
    return best, {"status": "optimal" if optimal else "within_bound", "gap_percent": gap,
                  "bound_weight": round(bound, 6), "plan_from": plan_from, "solver": version,
                  "solver_status": solver_status, "note": note}


def plan(gpus, requests, current=None, *, options=None) -> dict:
    """Plan MIG layouts and time-slicing for `gpus` so that `requests` are served (see the module text and
    the contract for the shapes). Raises PlanInputError for bad input."""
    options = dict(options or {})
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise PlanInputError(f"options: unknown option {unknown[0]!r} (options: {', '.join(sorted(OPTIONS))})")
    use_solver = options.get("solver", True)
    if not isinstance(use_solver, bool):
        raise PlanInputError("options.solver: true (the exact solver after the greedy search) or false")
    started = time.perf_counter()
    time_limit = options.get("time_limit")
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
                                   or not 0 <= time_limit <= 60):
        raise PlanInputError("options.time_limit: seconds for the exact solver, from 0 to 60")
    orderings = options.get("orderings", ORDERINGS)
    policies = options.get("policies", (False, True))
    if not isinstance(orderings, (list, tuple)) or not orderings or any(o not in ORDERINGS for o in orderings):
        raise PlanInputError(f"options.orderings: a list of {', '.join(ORDERINGS)}")
    if not isinstance(policies, (list, tuple)) or not policies or any(not isinstance(p, bool) for p in policies):
        raise PlanInputError("options.policies: a list of true (soft requests time-sliced first) or false")
    checked_gpus = check_gpus(gpus)
    checked_requests = check_requests(requests)
    layout_now = check_current(current, checked_gpus)
    were_placed = check_placed(current, checked_gpus)

    models_by_pool: dict = {}
    for gpu in checked_gpus:
        models_by_pool.setdefault(gpu["pool"], set()).add(gpu["model"].id)
    all_models = {g["model"].id for g in checked_gpus}
    # Items whose memory falls between the same two profile sizes fit the same profiles.
    memory_classes = sorted({p.memory_gb for m in all_models for p in P.MODELS[m].profiles})
    cand_cache: dict[tuple, tuple] = {}
    size_cache: dict[tuple, float] = {}
    base_items: list[_Item] = []
    for request in checked_requests:
        for replica in range(request["replicas"]):
            item = _Item(request, replica)
            key = (bisect_left(memory_classes, item.memory), item.compute, item.isolation)
            if key not in cand_cache:
                exclusive = item.isolation == "exclusive"
                cands = {m: (_mig_candidates(item, P.MODELS[m]) if not exclusive else ()) for m in all_models}
                fixed = {m: (_mig_candidates(item, P.MODELS[m], media=True) if not exclusive else ())
                         for m in all_models}
                cands_key = tuple(sorted((m, tuple(p.name for p in c)) for m, c in cands.items()))
                cand_cache[key] = (cands, fixed, cands_key)
            item.cands, item.fixed_cands, item.cands_key = cand_cache[key]
            models = models_by_pool.get(item.pool, set()) if item.pool is not None else all_models
            size_key = (item.memory, item.compute, item.isolation, item.pool)
            if size_key not in size_cache:
                size_cache[size_key] = _size(item, models)
            item.size = size_cache[size_key]
            item.order = len(base_items)
            base_items.append(item)

    placeable = [item for item in base_items if item.size < math.inf]
    sorts = {
        "density": lambda it: (-it.weight / it.size, -it.size, it.order),
        "hard-first": lambda it: (it.isolation != "hard", -it.weight / it.size, -it.size, it.order),
        "weight": lambda it: (-it.weight, -it.size, it.order),
        "size": lambda it: (-it.size, -it.weight, it.order),
    }
    # Every ordering and policy on small inputs; on large ones the two that serve most there (density
    # order, soft requests on time-slicing first or on MIG first), so that planning stays under a second.
    runs = [(ordering, ts_first, False) for ordering in orderings for ts_first in sorted(policies, reverse=True)]
    all_runs = bool(options.get("all_runs"))
    budget = max(2, RUN_BUDGET // max(1, len(placeable)))
    # The passes a plan without a current layout makes, exactly: run again from scratch, then scored
    # against the current layout, they give back a layout the same requests were planned into, so
    # pressing "plan" twice changes nothing unless another pass serves more weight.
    from_scratch = [(*run, True) for run in (runs if all_runs else runs[:budget])]
    # With a current layout, a pass that first gives each replica what the layout already has (exclusive
    # requests, then hard, then soft, the largest first), then packs the rest by density: requests that
    # changed a little keep most of the layout.
    if any(mig is not None or ts is not None for mig, ts in layout_now.values()):
        runs = [("density", True, "density"), ("density", True, "size"), ("density", False, "density"),
                ("density", False, "size")] + runs
        # Within the budget of replicas placed (the passes from scratch first), at least one such pass.
        if not all_runs:
            runs = runs[:max(1, budget - len(from_scratch))]
        runs = [(*run, False) for run in runs] + from_scratch
        # Given where the current plan put each replica (its placed list), a pass that first puts them
        # back there: the layout a plan made, however it was made, is kept while it serves as much.
        if were_placed:
            runs = [("density", True, "placed", False)] + runs
    else:
        runs = from_scratch
    index_of = {g["id"]: i for i, g in enumerate(checked_gpus)}
    best = None
    for ordering, soft_ts_first, keep, scratch in runs:
        ordered = sorted(placeable, key=sorts[ordering])
        run_gpus = [_Gpu(i, g, *((None, None) if scratch else layout_now[g["id"]]))
                    for i, g in enumerate(checked_gpus)]
        packer = _Packer(run_gpus, ordered, soft_ts_first=soft_ts_first)
        keep_first = were = None
        if keep == "placed":
            were = []
            for n, item in enumerate(ordered):
                hint = were_placed.get((item.request["name"], item.replica))
                if hint is not None:
                    were.append((n, index_of[hint[0]], hint[1], hint[2]))
            keep_first = sorted(range(len(ordered)), key=lambda n: _keep_order(ordered[n], "density", n))
        elif keep:
            keep_first = sorted(range(len(ordered)), key=lambda n: _keep_order(ordered[n], keep, n))
        where = packer.run(keep_first, were)
        if scratch:
            # Packed as though every GPU were bare; a GPU it leaves unused keeps its current layout, and
            # the disruption is counted against the layout now.
            for gpu in run_gpus:
                gpu.cur_mig, gpu.cur_ts = layout_now[gpu.id]
        served = sum(ordered[n].weight for n in where)
        layouts = {g.i: _layout_of(g) for g in run_gpus}
        score = (-round(served, 9), *_score(run_gpus, layouts))
        if best is None or score < best[0]:
            best = (score, run_gpus, layouts, {id(ordered[n]): g for n, g in where.items()})
    best, optimality = _exact(best, checked_gpus, layout_now, base_items, placeable,
                              use_solver=use_solver,
                              time_limit=time_limit if time_limit is not None else
                              max(0.0, min(TIME_LIMIT, PLAN_BUDGET - (time.perf_counter() - started))))
    _, run_gpus, layouts, where = best

    placed, unplaced = [], []
    served = 0.0
    counts: dict[tuple, int] = {}
    for gpu in run_gpus:
        counts[(gpu.model.id, gpu.pool)] = counts.get((gpu.model.id, gpu.pool), 0) + 1
    reasons: dict[tuple, str] = {}
    for item in base_items:
        gpu = where.get(id(item))
        if gpu is None:
            key = (item.memory, item.compute, item.isolation, item.pool)
            if key not in reasons:
                reasons[key] = _unplaced_reason(item, counts)
            unplaced.append({"request": item.request["name"], "replica": item.replica,
                             "reason": reasons[key]})
            continue
        served += item.weight
        if gpu.mode == "mig":
            profile, start = layouts[gpu.i][2][id(item)]
            placed.append({"request": item.request["name"], "replica": item.replica, "gpu": gpu.id,
                           "profile": profile, "start": start, "kind": "mig"})
        else:
            placed.append({"request": item.request["name"], "replica": item.replica, "gpu": gpu.id,
                           "profile": None, "start": None, "kind": "time_slicing" if gpu.mode == "ts" else "whole"})
    out_gpus = []
    for gpu in run_gpus:
        mig, ts, _ = layouts[gpu.i]
        errors = P.layout_errors(gpu.model, list(mig or ()))
        assert not errors, (gpu.id, errors)
        out_gpus.append({"id": gpu.id, "model": gpu.model.id,
                         "mig": [{"profile": n, "start": s} for n, s in sorted(mig, key=lambda x: (x[1], x[0]))]
                         if mig is not None else None,
                         "time_slicing": {"replicas": ts} if ts is not None else None})
    total = sum(item.weight for item in base_items)
    return {"gpus": out_gpus, "placed": placed, "unplaced": unplaced, "served_weight": round(served, 6),
            "total_weight": round(float(total), 6), "disruption": _diff(run_gpus, layouts),
            "optimality": optimality}
