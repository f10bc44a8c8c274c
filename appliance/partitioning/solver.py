"""The partition planner's exact solver: packing request replicas into MIG layouts, time-sliced shares and
whole GPUs as a mixed-integer program, solved by HiGHS (the highspy package), with a time limit.

    solve(gpus, items, *, time_limit) -> Solution

Pure Python and highspy, no Django. The planner (planner.py) calls it after its greedy search; the greedy
plan stays the first solution and the fallback (see planner.plan).

The program. GPUs of one model in one pool are alike, so they form a class c of n_c GPUs; replicas alike
in isolation, pool, memory, compute share and weight form a type t of n_t replicas.
- MIG. The profiles a new instance may take (the media extensions aside) form a chain on every board of
  the profile table: 1g.10gb < 1g.20gb < 2g.20gb < 3g.40gb < 4g.40gb < 7g.80gb, growing in memory and in
  compute slices alike. A replica fits every profile from its smallest one on (its level), so replicas can
  be matched to a class's instances exactly when, for every level k, the replicas of level >= k are no
  more than the instances of level >= k (Hall's condition on nested sets). Variables: Y[c, L] GPUs of c
  laid out as L (one per valid layout, as profile counts per level, dominated layouts left out), X[t, c]
  replicas of t in MIG instances of c; rows: for every k, sum X over the types of level >= k <= sum of
  Y[c, L] times the instances of L of level >= k. Exact: the instances of one class are interchangeable.
- Time-slicing (soft replicas): the memory of the replicas on one GPU is at most the GPU's, their stated
  compute slices at most 7. Exact on small inputs: one knapsack per possible time-sliced GPU ("slot"),
  S[t, c, j] replicas of t on slot j of c, T[c, j] in {0, 1} (slots used in order). On larger inputs the
  knapsacks of a class are summed into one (S[t, c], T[c] GPUs): a relaxation; its time-sliced replicas
  are then packed onto T[c] GPUs first-fit decreasing, and what does not fit is left out.
- Whole GPUs (exclusive replicas): E[t, c] <= W[c].
- Every class: sum_L Y + W + T <= n_c; every type: its replicas placed <= n_t.
Maximise the weight placed; then, with that weight held, the GPUs whose layout stays as it is (a MIG layout
kept, a time-sliced GPU serving as many replicas as now, a bare GPU given a whole replica or nothing), so
that planning again against a plan keeps it. A program of more than MAX_MIP_COLUMNS variables gets its
linear relaxation only (a bound, no plan). The solver's dual bound is an upper bound of every plan's served weight (of
the true problem too where the time-slicing part is relaxed), so a plan is called optimal when it serves
the bound, and is otherwise "within N % of the bound".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from appliance.partitioning import profiles as P

try:  # the planner falls back to its greedy plan without it
    import highspy
    import numpy as np
except ImportError:  # pragma: no cover - depends on the installation
    highspy = None
    np = None

# Past these sizes the solver is not tried (the model alone would take most of a second to build):
# the plan is the greedy one, and its bound the simple one.
MAX_COLUMNS = 150_000
# The exact time-slicing knapsacks (slots x soft types) up to this many variables; past it, their sum.
MAX_SLOT_COLUMNS = 4_000
# Integer programs up to this many variables; past it, the linear relaxation for a bound only.
MAX_MIP_COLUMNS = 3_000
EPS = 1e-9


def _highs():
    # highspy.Highs (the Python class around the core) prints HiGHS's banner on standard output when the first
    # one is made, before output_flag can be set: the CLI's JSON output would not be JSON. The core class
    # prints nothing until it runs, and it runs silent.
    core = getattr(getattr(highspy, "_core", None), "_Highs", None)
    return core() if core is not None else highspy.Highs()


def available() -> bool:
    return highspy is not None


def version() -> str | None:
    if highspy is None:
        return None
    parts = [getattr(highspy, f"HIGHS_VERSION_{part}", None) for part in ("MAJOR", "MINOR", "PATCH")]
    return "HiGHS " + ".".join(map(str, parts)) if None not in parts else "HiGHS"


@dataclass
class Item:
    """One replica, as the solver sees it: index (the caller's), isolation, memory, compute, weight, pool."""

    index: int
    isolation: str
    memory: float
    compute: int
    weight: float
    pool: str | None


@dataclass
class Gpu:
    """One GPU; mig: the profile names of its MIG instances now (None: not MIG), ts: its time-slicing
    replicas now (None: not time-sliced)."""

    index: int
    model: P.GpuModel
    pool: str | None
    mig: tuple[str, ...] | None = None
    ts: int | None = None

    def state(self) -> tuple:
        """What the GPU is now, as the program tells GPUs apart: MIG with these instances (counts per
        level of the chain), time-sliced, or bare."""
        if self.mig is not None:
            profiles = chain(self.model)
            counts = [0] * len(profiles)
            for name in self.mig:
                geometry = self.model.profile(name)
                k = next(k for k, p in enumerate(profiles)
                         if (p.memory_slices, p.compute_slices) == (geometry.memory_slices, geometry.compute_slices))
                counts[k] += 1
            return ("mig", tuple(counts))
        if self.ts is not None:
            return ("ts", self.ts)
        return ("bare",)


@dataclass
class Solution:
    """What the solver found. status: "optimal" (proved), "feasible" (a solution, not proved), "bound"
    (a bound only), "time_limit" (nothing in time), "too_large", "unavailable", "error".
    bound: an upper bound of the weight any plan serves (None when there is none).
    assignment: {(model id, pool): [("mig", [(profile name, item index), ...]) | ("ts", [item index, ...])
    | ("whole", item index), one per GPU used]} - the solver's plan (None without one); weight: what it
    serves.
    exact: whether the program solved was the exact one (False: time-slicing relaxed)."""

    status: str
    bound: float | None = None
    assignment: dict | None = None
    weight: float = 0.0
    exact: bool = True
    columns: int = 0
    seconds: float = 0.0
    note: str = ""
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------
# Profiles as a chain, layouts as counts per level


_CHAIN: dict[str, tuple[P.Profile, ...] | None] = {}


def chain(gpu_model: P.GpuModel) -> tuple[P.Profile, ...] | None:
    """The creatable profiles of the model ordered by size, or None when they are not a chain (each
    larger in memory and compute alike; every board of the profile table is one)."""
    if gpu_model.id in _CHAIN:
        return _CHAIN[gpu_model.id]
    profiles = sorted((p for p in gpu_model.profiles if not p.media_extensions),
                      key=lambda p: (p.memory_slices, p.compute_slices, p.memory_gb))
    ok = all(a.memory_gb <= b.memory_gb and a.compute_slices <= b.compute_slices
             for a, b in zip(profiles, profiles[1:], strict=False))
    _CHAIN[gpu_model.id] = tuple(profiles) if ok else None
    return _CHAIN[gpu_model.id]


_LEVEL: dict[tuple, int | None] = {}


def level(gpu_model: P.GpuModel, memory: float, compute: int) -> int | None:
    """The index in the chain of the smallest profile a replica fits, or None."""
    key = (gpu_model.id, memory, compute)
    if key in _LEVEL:
        return _LEVEL[key]
    found = None
    for k, profile in enumerate(chain(gpu_model) or ()):
        if profile.memory_gb + EPS >= memory and profile.compute_slices >= compute:
            found = k
            break
    if len(_LEVEL) > 100_000:
        _LEVEL.clear()
    _LEVEL[key] = found
    return found


_LEVEL_LAYOUTS: dict[str, list[tuple[int, ...]]] = {}


def level_layouts(gpu_model: P.GpuModel, multisets) -> list[tuple[int, ...]]:
    """Every valid layout of creatable profiles as counts per level of the chain (`multisets`: the sorted
    profile names of valid layouts, planner.valid_layouts' keys), less those another one dominates (at
    least as many instances of level >= k, for every k)."""
    found = _LEVEL_LAYOUTS.get(gpu_model.id)
    if found is not None:
        return found
    profiles = chain(gpu_model)
    index = {p.name: k for k, p in enumerate(profiles)}
    counts = set()
    for names in multisets:
        if any(name not in index for name in names):
            continue
        vector = [0] * len(profiles)
        for name in names:
            vector[index[name]] += 1
        counts.add(tuple(vector))

    def cumulative(vector):
        return [sum(vector[k:]) for k in range(len(vector))]

    cums = {v: cumulative(v) for v in counts}
    kept = []
    for v in sorted(counts, reverse=True):
        if not any(w != v and all(a >= b for a, b in zip(cums[w], cums[v], strict=True)) for w in counts):
            kept.append(v)
    _LEVEL_LAYOUTS[gpu_model.id] = kept
    return kept


# ---------------------------------------------------------------------------------------------------
# The program


class _Model:
    """Columns and rows of a maximisation; entries gathered row by row."""

    def __init__(self):
        self.cost: list[float] = []
        self.change: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def column(self, cost: float, upper: float, *, change: float = 0.0, integer: bool = True) -> int:
        """cost: the weight a unit serves; change: -1 for each GPU whose layout changes, +1 for each kept
        that would otherwise count as changed (the second objective)."""
        self.cost.append(cost)
        self.change.append(change)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, low: float, high: float, cols: list[int], vals: list[float]) -> None:
        if cols:
            self.rows.append((low, high, cols, vals))

    def solve(self, time_limit: float, *, relax: bool, deadline: float):
        """Weight first; then, with the weight held at its best, the fewest GPUs changed (in the time left).
        Returns HiGHS (its status and bound those of the first solve) and the values of the columns."""
        h = _highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", max(0.0, float(time_limit)))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 1e-7)
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        lp = highspy.HighsLp()
        n = len(self.cost)
        lp.num_col_ = n
        lp.num_row_ = len(self.rows)
        lp.col_cost_ = np.array(self.cost, dtype=float)
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.array(self.upper, dtype=float)
        lp.row_lower_ = np.array([r[0] for r in self.rows], dtype=float)
        lp.row_upper_ = np.array([r[1] for r in self.rows], dtype=float)
        starts = [0]
        index: list[int] = []
        value: list[float] = []
        for _, _, cols, vals in self.rows:
            index += cols
            value += vals
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.num_col_ = n
        lp.a_matrix_.num_row_ = len(self.rows)
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value, dtype=float)
        lp.sense_ = highspy.ObjSense.kMaximize
        if relax:
            # The relaxation of a large program: HiGHS's presolve takes longer than it saves here (measured
            # on 1,000 GPUs and 5,000 requests: 0.4 s with it, 0.2 s without).
            h.setOptionValue("presolve", "off")
        else:
            lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                               for i in self.integer]
        began = time.perf_counter()
        lp_bound = math.inf
        if not relax:
            # The linear relaxation first (milliseconds at this size): a bound even when the integer
            # program runs out of time before its own.
            first = _highs()
            first.setOptionValue("output_flag", False)
            first.setOptionValue("threads", 1)
            first.setOptionValue("time_limit", max(0.0, float(time_limit)))
            first.setOptionValue("solve_relaxation", True)
            first.passModel(lp)
            first.run()
            if first.getModelStatus() == highspy.HighsModelStatus.kOptimal:
                lp_bound = float(first.getInfo().objective_function_value)
            h.setOptionValue("time_limit", max(0.0, deadline - time.perf_counter()))
        h.passModel(lp)
        h.run()
        info = h.getInfo()
        dual_bound = float(info.mip_dual_bound)
        result = _Result(h.getModelStatus(), h.modelStatusToString(h.getModelStatus()),
                         float(info.objective_function_value),
                         min(dual_bound, lp_bound) if math.isfinite(dual_bound) else lp_bound,
                         info.primal_solution_status == highspy.kSolutionStatusFeasible)
        if relax or not result.has_solution:
            return result, None
        first = h.getSolution()
        value = list(first.col_value)
        left = deadline - time.perf_counter()
        # The second solve gets a few times the first's time at most: on bare GPUs it only packs them
        # tighter (a bin-packing proof that could take all the time left), and keeping a layout, what it
        # is for, is found early.
        left = min(left, max(0.2, 4 * (time.perf_counter() - began)))
        if left > 0 and any(self.change):
            served = result.objective
            weighted = [i for i, c in enumerate(self.cost) if c]
            h.addRow(served - 1e-9 * max(1.0, abs(served)), highspy.kHighsInf, len(weighted),
                     np.array(weighted, dtype=np.int32), np.array([self.cost[i] for i in weighted], dtype=float))
            h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.change, dtype=float))
            h.setSolution(first)
            h.setOptionValue("time_limit", left)
            h.run()
            if h.getInfo().primal_solution_status == highspy.kSolutionStatusFeasible:
                value = list(h.getSolution().col_value)
        return result, value


@dataclass
class _Result:
    """The first solve's status and figures (the second changes neither weight nor bound)."""

    status: object
    words: str
    objective: float
    dual_bound: float
    has_solution: bool


class _Type:
    """Replicas the program counts together: alike in isolation, pool, compute slices and the smallest
    profile they fit on every model; for time-slicing also in memory (exactly, or within a step of
    MEMORY_STEP in the pooled program); in weight (exactly, or within WEIGHT_STEP in the pooled program).
    memory: the least of theirs, weight: the most (so that a pooled type is a relaxation)."""

    __slots__ = ("isolation", "pool", "compute", "memory", "weight", "items")

    def __init__(self, item: Item):
        self.isolation, self.pool, self.compute = item.isolation, item.pool, item.compute
        self.memory, self.weight = item.memory, item.weight
        self.items: list[Item] = []

    def add(self, item: Item) -> None:
        self.items.append(item)
        self.memory = min(self.memory, item.memory)
        self.weight = max(self.weight, item.weight)


# The pooled program's steps (relative): time-sliced memory rounded down, weights rounded up.
MEMORY_STEP = 0.1
WEIGHT_STEP = 0.01


def _types(items: list[Item], models: list[P.GpuModel], *, pooled: bool) -> dict[tuple, _Type]:
    found: dict[tuple, _Type] = {}
    for item in items:
        if item.isolation == "exclusive":
            fit = tuple(m.memory_gb + EPS >= item.memory for m in models)
            memory = None
        else:
            fit = tuple(level(m, item.memory, item.compute) for m in models)
            memory = None if item.isolation == "hard" else \
                math.floor(math.log(item.memory) / math.log1p(MEMORY_STEP)) if pooled else item.memory
        weight = math.ceil(math.log(item.weight) / math.log1p(WEIGHT_STEP)) if pooled else item.weight
        key = (item.isolation, item.pool, item.compute, fit, memory, weight)
        group = found.get(key)
        if group is None:
            group = found[key] = _Type(item)
        group.add(item)
    return found


def solve(gpus: list[Gpu], items: list[Item], *, multisets: dict[str, list], time_limit: float) -> Solution:
    """The best packing of `items` on `gpus` that HiGHS finds in `time_limit` seconds (see the module
    text); multisets: {model id: the sorted profile names of every valid layout}."""
    started = time.perf_counter()
    if highspy is None:
        return Solution("unavailable", note="highspy is not installed")
    if any(chain(g.model) is None for g in gpus):
        return Solution("unavailable", note="a GPU model's profiles do not form a chain")

    # GPUs alike in model, pool and what they are now: what they are now matters only to the disruption
    # (a GPU that keeps its layout is not drained), which the program minimises second.
    classes: dict[tuple, list[Gpu]] = {}
    for gpu in gpus:
        classes.setdefault((gpu.model.id, gpu.pool, gpu.state()), []).append(gpu)
    class_keys = sorted(classes, key=lambda key: (key[0], str(key[1]), str(key[2])))

    models = sorted({g.model.id: g.model for g in gpus}.values(), key=lambda m: m.id)

    def uses_of(types):
        """type -> [(class, mig level | None, time-slicing ok, whole ok)]"""
        uses = {}
        for t, info in types.items():
            found = []
            for c in class_keys:
                if info.pool is not None and c[1] != info.pool:
                    continue
                gpu_model = classes[c][0].model
                lvl = level(gpu_model, info.memory, info.compute) if info.isolation != "exclusive" else None
                ts = info.isolation == "soft" and info.memory <= gpu_model.memory_gb + EPS
                whole = info.isolation == "exclusive" and info.memory <= gpu_model.memory_gb + EPS
                if lvl is not None or ts or whole:
                    found.append((c, lvl, ts, whole))
            uses[t] = found
        return uses

    types = _types(items, models, pooled=False)
    # Exact time-slicing (one knapsack per slot) while it stays small.
    soft = [info for info in types.values() if info.isolation == "soft"]
    soft_items = sum(len(info.items) for info in soft)
    slot_columns = len(soft) * min(len(gpus), soft_items)
    exact = slot_columns <= MAX_SLOT_COLUMNS
    if not exact and len(soft) * len(class_keys) <= 4 * MAX_SLOT_COLUMNS:
        slot_columns = 0
        for c in class_keys:
            capacity = classes[c][0].model.memory_gb + EPS
            eligible = [info for info in soft if (info.pool is None or info.pool == c[1]) and info.memory <= capacity]
            slot_columns += min(len(classes[c]), sum(len(info.items) for info in eligible)) * len(eligible)
        exact = slot_columns <= MAX_SLOT_COLUMNS
    if not exact:
        types = _types(items, models, pooled=True)
    uses = uses_of(types)
    type_keys = list(types)
    by_class: dict[tuple, list[tuple]] = {c: [] for c in class_keys}   # class -> [(type, level, ts, whole)]
    for t in type_keys:
        for c, lvl, ts, whole in uses[t]:
            by_class[c].append((t, lvl, ts, whole))
    soft_in = {c: [t for t, _, ts, _ in by_class[c] if ts] for c in class_keys}
    slots_items = {c: sum(len(types[t].items) for t in soft_in[c]) for c in class_keys}
    slots = {c: min(len(classes[c]), slots_items[c]) for c in class_keys}
    estimate = sum(len(u) * 2 for u in uses.values()) + (slot_columns if exact else 0) + \
        sum(len(level_layouts(classes[c][0].model, multisets[c[0]])) for c in class_keys)
    if estimate > MAX_COLUMNS:
        return Solution("too_large", columns=estimate, exact=exact, seconds=time.perf_counter() - started,
                        note=f"the program would have about {estimate:,} variables, more than {MAX_COLUMNS:,}")

    m = _Model()
    placed_of_type: dict[tuple, list[tuple[int, float]]] = {t: [] for t in type_keys}
    mig_cols: dict[tuple, list] = {c: [] for c in class_keys}     # c -> [(t, X)]
    ts_cols: dict[tuple, list] = {c: [] for c in class_keys}      # c -> [(t, slot j | None, S)]
    whole_cols: dict[tuple, list] = {c: [] for c in class_keys}   # c -> [(t, E)]
    layout_cols: dict[tuple, list[tuple[int, tuple]]] = {}
    slot_cols: dict[tuple, list[int]] = {}
    for c in class_keys:
        gpu_model = classes[c][0].model
        n_c = len(classes[c])
        layouts = list(level_layouts(gpu_model, multisets[c[0]]))
        state = c[2]
        if state[0] == "mig" and state[1] not in layouts:
            layouts.append(state[1])   # the layout now, dominated or not: keeping it changes nothing
        layout_cols[c] = [(m.column(0.0, n_c, change=0.0 if state == ("mig", v) else -1.0), v) for v in layouts]
        capacity_cols = [col for col, _ in layout_cols[c]]
        capacity_vals = [1.0] * len(capacity_cols)
        mig_by_level: dict[int, list[int]] = {}
        whole_items: list[int] = []
        any_whole = any(whole for _, _, _, whole in by_class[c])
        w_col = m.column(0.0, n_c, change=0.0 if state == ("bare",) else -1.0) if any_whole else None
        if w_col is not None:
            capacity_cols.append(w_col)
            capacity_vals.append(1.0)
        for t, lvl, _ts, whole in by_class[c]:
            weight = types[t].weight
            n_t = len(types[t].items)
            if lvl is not None:
                col = m.column(weight, n_t)
                mig_cols[c].append((t, col))
                mig_by_level.setdefault(lvl, []).append(col)
                placed_of_type[t].append((col, 1.0))
            if whole:
                col = m.column(weight, n_t)
                whole_cols[c].append((t, col))
                whole_items.append(col)
                placed_of_type[t].append((col, 1.0))
        # MIG: Hall's condition per level.
        depth = len(chain(gpu_model))
        for k in range(depth):
            cols = [col for lvl, group in mig_by_level.items() if lvl >= k for col in group]
            if not cols:
                continue
            vals = [1.0] * len(cols)
            for col, vector in layout_cols[c]:
                have = sum(vector[k:])
                if have:
                    cols.append(col)
                    vals.append(-float(have))
            m.row(-math.inf, 0.0, cols, vals)
        if w_col is not None:
            m.row(-math.inf, 0.0, whole_items + [w_col], [1.0] * len(whole_items) + [-1.0])
        # Time-slicing.
        soft = soft_in[c]
        if soft:
            compute_needed = any(types[t].compute for t in soft)
            if exact:
                slot_cols[c] = []
                for j in range(slots[c]):
                    used = m.column(0.0, 1.0, change=-1.0)
                    slot_cols[c].append(used)
                    capacity_cols.append(used)
                    capacity_vals.append(1.0)
                    cols = []
                    for t in soft:
                        col = m.column(types[t].weight, len(types[t].items))
                        ts_cols[c].append((t, j, col))
                        cols.append(col)
                        placed_of_type[t].append((col, 1.0))
                    m.row(-math.inf, 0.0, cols + [used], [types[t].memory for t in soft] + [-(gpu_model.memory_gb + EPS)])
                    if compute_needed:
                        m.row(-math.inf, 0.0, cols + [used], [float(types[t].compute) for t in soft] + [-float(P.COMPUTE_SLICES)])
                    if j:
                        m.row(-math.inf, 0.0, [used, slot_cols[c][j - 1]], [1.0, -1.0])
                    if state[0] == "ts":
                        # kept: the slot serves as many replicas as the GPU's time-slicing has now, and
                        # then its change is not counted.
                        r, big = state[1], float(slots_items[c])
                        kept = m.column(0.0, 1.0, change=1.0)
                        ones = [1.0] * len(cols)
                        m.row(0.0, math.inf, cols + [kept], ones + [-float(r)])
                        m.row(-math.inf, r + big, cols + [kept], ones + [big])
                        m.row(-math.inf, 0.0, [kept, used], [1.0, -1.0])
            else:
                used = m.column(0.0, n_c, change=0.0 if state[0] == "ts" else -1.0)
                slot_cols[c] = [used]
                capacity_cols.append(used)
                capacity_vals.append(1.0)
                cols = []
                for t in soft:
                    col = m.column(types[t].weight, len(types[t].items))
                    ts_cols[c].append((t, None, col))
                    cols.append(col)
                    placed_of_type[t].append((col, 1.0))
                m.row(-math.inf, 0.0, cols + [used], [types[t].memory for t in soft] + [-(gpu_model.memory_gb + EPS)])
                if compute_needed:
                    m.row(-math.inf, 0.0, cols + [used], [float(types[t].compute) for t in soft] + [-float(P.COMPUTE_SLICES)])
        m.row(-math.inf, float(n_c), capacity_cols, capacity_vals)
    for t in type_keys:
        entries = placed_of_type[t]
        if len(entries) > 1:
            m.row(-math.inf, float(len(types[t].items)), [c for c, _ in entries], [v for _, v in entries])

    built = time.perf_counter() - started
    left = time_limit - built
    if left <= 0:
        return Solution("time_limit", columns=len(m.cost), exact=exact, seconds=built,
                        note=f"building the program took the whole time limit ({time_limit:g} s)")
    # A large program gets its linear relaxation only: a bound in a fraction of the time the integer
    # program's presolve alone would take.
    relax = len(m.cost) > MAX_MIP_COLUMNS
    try:
        # No start from the greedy plan: HiGHS 1.16 given one (setSolution) reported as optimal an objective
        # above its own bound on a small case here, while its values were the start's.
        h, value = m.solve(left, relax=relax, deadline=started + time_limit)
    except Exception as exc:   # the planner must plan whatever the solver does
        return Solution("error", columns=len(m.cost), exact=exact, seconds=time.perf_counter() - started,
                        note=f"HiGHS failed: {exc}")
    model_status = h.status
    if relax:
        seconds = time.perf_counter() - started
        if model_status == highspy.HighsModelStatus.kOptimal:
            return Solution("bound", bound=h.objective, exact=False,
                            columns=len(m.cost), seconds=seconds, extra={"built": built},
                            note=f"the program has {len(m.cost):,} variables, more than the {MAX_MIP_COLUMNS:,} "
                                 f"solved as integers in time: its linear relaxation gives the bound")
        return Solution("time_limit", columns=len(m.cost), exact=False, seconds=seconds, extra={"built": built},
                        note=f"its linear relaxation ({len(m.cost):,} variables) was not solved in {time_limit:g} s")
    S = highspy.HighsModelStatus
    bound = h.dual_bound
    if model_status == S.kOptimal:
        bound = h.objective if not math.isfinite(bound) else bound
    bound = float(bound) if bound is not None and math.isfinite(bound) else None
    has_solution = h.has_solution
    seconds = time.perf_counter() - started
    if model_status == S.kOptimal:
        status = "optimal"
    elif model_status in (S.kTimeLimit, S.kInterrupt, S.kIterationLimit):
        status = "feasible" if has_solution else ("bound" if bound is not None else "time_limit")
    else:
        return Solution("error", columns=len(m.cost), exact=exact, seconds=seconds,
                        note=f"HiGHS ended with {h.words}")
    solution = Solution(status, bound=bound, exact=exact, columns=len(m.cost), seconds=seconds)
    if not has_solution:
        solution.note = f"HiGHS reached its time limit ({time_limit:g} s) with a bound and no plan of its own"
        return solution
    solution.assignment, solution.weight = _assign(
        classes, class_keys, types, value, layout_cols, mig_cols, ts_cols, whole_cols, slot_cols, exact)
    return solution


# ---------------------------------------------------------------------------------------------------
# From the program's values to replicas on GPUs


def _count(value: list[float], col: int) -> int:
    return max(0, int(round(value[col])))


def _assign(classes, class_keys, types, value, layout_cols, mig_cols, ts_cols, whole_cols, slot_cols, exact):
    """{(model id, pool): [("mig", [(profile, item index), ...]) | ("ts", [item index, ...]) |
    ("whole", item index), one per GPU used]} and the weight it serves; the planner chooses which GPUs
    of the class take them (those whose current layout is nearest)."""
    # Within a pooled type, the heaviest replicas first, then the smallest.
    pools = {t: sorted(types[t].items, key=lambda it: (-it.weight, it.memory, it.index)) for t in types}
    by_index = {item.index: item for group in types.values() for item in group.items}
    taken = {t: 0 for t in types}

    def take(t, n):
        start = taken[t]
        n = min(n, len(pools[t]) - start)
        taken[t] += n
        return pools[t][start:start + n]

    out: dict[int, tuple] = {}
    weight = 0.0
    for c in class_keys:
        gpus = list(classes[c])
        gpu_model = gpus[0].model
        profiles = chain(gpu_model)
        # MIG: instances (level, gpu slot) from the layouts chosen; replicas highest level first, each on the
        # smallest instance of its level or above (Hall's condition makes this succeed).
        instances: list[tuple[int, int]] = []   # (level, layout number)
        layouts = 0
        for col, vector in layout_cols[c]:
            for _ in range(_count(value, col)):
                for k, count_k in enumerate(vector):
                    instances += [(k, layouts)] * count_k
                layouts += 1
        mig_items = []
        for t, col in mig_cols[c]:
            lvl = level(gpu_model, types[t].memory, types[t].compute)
            mig_items += [(lvl, item) for item in take(t, _count(value, col))]
        mig_items.sort(key=lambda pair: (-pair[0], pair[1].index))
        instances.sort()
        free = instances[:]
        on_layout: dict[int, list[tuple[str, int]]] = {}
        for lvl, item in mig_items:
            k = next((n for n, inst in enumerate(free) if inst[0] >= lvl), None)
            if k is None:
                continue   # cannot happen for a feasible solution; the replica is then left out
            inst = free.pop(k)
            on_layout.setdefault(inst[1], []).append((profiles[inst[0]].name, item.index))
            weight += item.weight
        ts_bins: list[list] = []
        if exact:
            for j, used in enumerate(slot_cols.get(c, ())):
                if _count(value, used):
                    bin_items = []
                    for t, j2, col in ts_cols[c]:
                        if j2 == j:
                            bin_items += take(t, _count(value, col))
                    ts_bins.append(bin_items)
        elif slot_cols.get(c):
            n_bins = _count(value, slot_cols[c][0])
            chosen = []
            for t, _, col in ts_cols[c]:
                chosen += take(t, _count(value, col))
        wholes = []
        for t, col in whole_cols[c]:
            wholes += take(t, _count(value, col))
        if not exact and slot_cols.get(c):
            # The pooled knapsack may not pack GPU by GPU: the GPUs of the class the program left unused
            # take what does not fit.
            spare = len(gpus) - len(on_layout) - n_bins - len(wholes)
            ts_bins = _first_fit(chosen, n_bins + max(0, spare), gpu_model.memory_gb)
        uses = [("mig", sorted(on_layout[n], key=lambda pair: pair[1])) for n in sorted(on_layout)]
        uses += [("ts", [item.index for item in bin_items]) for bin_items in ts_bins if bin_items]
        uses += [("whole", item.index) for item in wholes]
        uses = uses[:len(gpus)]   # the class row holds them to n_c; kept safe all the same
        for kind, what in uses:
            if kind == "ts":
                weight += sum(by_index[i].weight for i in what)
            elif kind == "whole":
                weight += by_index[what].weight
        out[c] = uses
    return out, weight


def _first_fit(items: list[Item], bins: int, capacity: float) -> list[list[Item]]:
    """The replicas time-sliced on `bins` GPUs, largest first, each on the first GPU with room for its
    memory and compute slices; those that fit nowhere are left out."""
    loads = [[0.0, 0, []] for _ in range(bins)]
    for item in sorted(items, key=lambda it: (-it.memory, -it.compute, it.index)):
        for load in loads:
            if load[0] + item.memory <= capacity + EPS and load[1] + item.compute <= P.COMPUTE_SLICES:
                load[0] += item.memory
                load[1] += item.compute
                load[2].append(item)
                break
    return [load[2] for load in loads]
