"""The rules of rules.py over columns: every GPU bucket of a window judged at once with numpy.

rules.py is the reference a user reads (thresholds, order, the evidence of one verdict); this module gives
the same label for every record, many thousands of times faster, so that a day of a 1,000-node fleet is
attributed in seconds. It reads the thresholds from rules.RULES, so a threshold changed there changes both.
tests/analytics/test_vector.py asserts label-for-label agreement with rules.classify on the benchmark's
generated records and on hand-written edge cases.

Input is a mapping of equal-length arrays, one entry per GPU (or MIG instance) bucket; a measurement that
is missing (None in a record) is NaN:
- `has_job` (bool), `group` (int: the same for the records of one job, step and bucket start; -1 none),
  `judged` (bool: False for rows read only to be peers), `collective` (bool, optional, True where absent:
  the row's job is a collective whose GPUs are peers, rules.Context.collective);
- the GPU's own figures: `util`, `sm_active`, `fb_used_mib`, `fb_total_mib`, `sm_clock_mhz`,
  `throttle_reasons` (int), `throttled_share`, `nvlink_bps`; its references `max_sm_clock`, `nvlink_line`;
- its node's row of the same bucket (NaN where there is none): `cpu_iowait`, `cpu_busy`, `ib_tx_bps`,
  `ib_rx_bps`, `ib_line_bps`, and `read_saturated` (bool: a mount's reads reached `read_share` of its
  measured rate; a mount with no measured rate never is; `read_saturation` computes it from a node record),
  `read_at_ceiling` (bool, optional: a mount without a measured rate read at `read_share` of its learned
  ceiling; it counts with the node's iowait).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from . import rules

RULE_NAMES = tuple(rule.name for rule in rules.RULES) + (rules.BUSY.name,)
LABEL_CODE = {label: code for code, label in enumerate(rules.LABELS)}
RULE_LABEL = np.array([LABEL_CODE[rule.label] for rule in rules.RULES] + [LABEL_CODE[rules.BUSY.label]], dtype=np.int8)
_T = {rule.name: rule.thresholds for rule in rules.RULES}
SLOWDOWN_MASK = sum(rules.SLOWDOWN_REASONS.values())

GPU_COLUMNS = ("util", "sm_active", "fb_used_mib", "fb_total_mib", "sm_clock_mhz", "throttled_share", "nvlink_bps")
NODE_COLUMNS = ("cpu_iowait", "cpu_busy", "ib_tx_bps", "ib_rx_bps", "ib_line_bps")


def read_saturation(node: Mapping | None, storage: Mapping[str, rules.Reference], learned: bool = False) -> bool:
    """What rules' input-bound check says of a node's reads alone: a mount with a measured rate read at
    `read_share` of it or more (`learned`: a mount without one, at `read_share` of its learned ceiling,
    which counts only with the node's iowait: the `read_at_ceiling` column)."""
    threshold = _T["waits-on-input"]["read_share"]
    mounts = (node or {}).get("mounts") or {}
    for mount, figures in mounts.items():
        read = rules._num(figures, "read_bps")
        reference = storage.get(mount)
        if read is not None and reference is not None and reference.learned == learned \
                and read / reference.value >= threshold:
            return True
    return False


DENSE_SPAN_FACTOR = 4  # unique(): a table over the values' span where it is at most this many times their count


def unique(values: np.ndarray, return_inverse: bool = False):
    """np.unique of integers, by a table over their span where it is small against their count (node ids,
    a node's mounts: no sort, 10 to 25 times quicker on an hour of a fleet's rows); else np.unique."""
    values = np.asarray(values)
    if not len(values) or values.dtype.kind not in "iu":
        return np.unique(values, return_inverse=return_inverse)
    low, high = int(values.min()), int(values.max())
    if high - low > DENSE_SPAN_FACTOR * len(values):
        return np.unique(values, return_inverse=return_inverse)
    present = np.zeros(high - low + 1, dtype=bool)
    offsets = values - low
    present[offsets] = True
    distinct = (np.flatnonzero(present) + low).astype(values.dtype)
    if not return_inverse:
        return distinct
    return distinct, (np.cumsum(present) - 1)[offsets]


def read_saturation_columns(node_ids: np.ndarray, fs_read_bps: np.ndarray,
                            mount_owner: np.ndarray, mount_code: np.ndarray, mount_names: np.ndarray,
                            mount_read_bps: np.ndarray, storage_of, learned: bool = False) -> np.ndarray:
    """`read_saturation` of many node rows at once: a node row each (its node id and fs_read_bps; a node
    with no row is one with neither mounts nor fs_read_bps, NaN), and its mounts end to end (`mount_owner`: the index of the node row; `mount_code`: the
    index of the mount's name in `mount_names`; its read_bps, NaN where not sent). `storage_of(node id)`
    gives the node's storage references (rules.Reference by mount), read once a node and mount; a mount
    without one (no measured rate) is not saturated, nor a node row without mounts. `learned`: the
    mounts compared with their learned ceilings instead of their measured rates (read_saturation's)."""
    threshold = _T["waits-on-input"]["read_share"]
    count = len(node_ids)
    saturated = np.zeros(count, dtype=bool)
    if len(mount_owner):
        names = len(mount_names)
        pair = node_ids[mount_owner] * names + mount_code
        distinct, inverse = np.unique(pair, return_inverse=True)
        found = [storage_of(int(key // names)).get(str(mount_names[key % names])) for key in distinct.tolist()]
        references = np.array([reference.value if reference is not None and reference.learned == learned
                               else np.nan for reference in found], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            hit = _ge(mount_read_bps / references[inverse], threshold)
        saturated = np.bincount(mount_owner, hit, count) > 0
    return saturated


def _peer_stats(values: np.ndarray, valid: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, ...]:
    """For each row whose value is valid: how many other valid rows share its group, the median of their
    values (statistics.median: the middle one, or the mean of the two middle ones) and their maximum; and
    of its group's busiest row (the last in value order), the median of the others' values and their
    maximum (NaN where the group has one row)."""
    n = len(values)
    count = np.zeros(n, dtype=np.int64)
    median = np.full(n, np.nan)
    busiest = np.full(n, np.nan)
    lead_median = np.full(n, np.nan)
    lead_next = np.full(n, np.nan)
    rows = np.flatnonzero(valid & (group >= 0))
    if not len(rows):
        return count, median, busiest, lead_median, lead_next
    order = rows[np.lexsort((values[rows], group[rows]))]
    g, v = group[order], values[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    first = np.repeat(starts, sizes)
    m = np.repeat(sizes, sizes)
    rank = np.arange(len(order)) - first
    k = m - 1  # peers
    has = k > 0

    def middle(skip):  # the median of the group's values but the one of rank `skip`

        def other(i):  # the i-th smallest of the others
            i = np.where(i < skip, i, i + 1)
            return v[np.clip(first + i, 0, len(v) - 1)]

        half = k // 2
        return np.where(k % 2 == 1, other(half), (other(np.maximum(half - 1, 0)) + other(half)) / 2)

    last = first + m - 1
    top = np.where(rank == m - 1, v[np.maximum(last - 1, first)], v[last])
    count[order] = k
    median[order] = np.where(has, middle(rank), np.nan)
    busiest[order] = np.where(has, top, np.nan)
    lead_median[order] = np.where(has, middle(m - 1), np.nan)
    lead_next[order] = np.where(has, v[np.maximum(last - 1, first)], np.nan)
    return count, median, busiest, lead_median, lead_next


def _ge(a, b):
    with np.errstate(invalid="ignore"):
        return np.greater_equal(a, b)


def _lt(a, b):
    with np.errstate(invalid="ignore"):
        return np.less(a, b)


def _le(a, b):
    with np.errstate(invalid="ignore"):
        return np.less_equal(a, b)


def classify(c: Mapping[str, np.ndarray]) -> np.ndarray:
    """The index in RULE_NAMES of the rule that gives each row its cause (RULE_LABEL maps it to the index of
    the label in rules.LABELS); rows whose `judged` is False come back as -1."""
    util = np.asarray(c["util"], dtype=np.float64)
    sm = np.asarray(c["sm_active"], dtype=np.float64)
    n = len(util)
    has_job = np.asarray(c["has_job"], dtype=bool)
    group = np.asarray(c["group"], dtype=np.int64)
    collective = np.asarray(c["collective"], dtype=bool) if "collective" in c else np.ones(n, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        uses_sm = ~np.isnan(sm)
        activity = np.where(uses_sm, sm, util / 100)

        def below(t):  # rules._below: SM activity where the GPU has it, else utilization
            return np.where(uses_sm, _lt(sm, t["stalled_sm_active" if "stalled_util" in t else "sm_active"]),
                            _lt(util, t["stalled_util" if "stalled_util" in t else "util"]))

        # Peers' values in each metric: the GPU's own metric decides which one its peers are read in.
        peer_rows = has_job
        sm_n, sm_med, sm_top, sm_lead_med, sm_lead_next = _peer_stats(sm, uses_sm & peer_rows, group)
        # Utilization peers only matter in the groups of a GPU that has no SM activity (most have it): the
        # others are left out of that sort.
        reads_util = peer_rows & ~uses_sm
        in_util_groups = np.isin(group, np.unique(group[reads_util])) if reads_util.any() else reads_util
        ut_n, ut_med, ut_top, ut_lead_med, ut_lead_next = _peer_stats(
            util / 100, ~np.isnan(util) & peer_rows & in_util_groups, group)
        peers = np.where(collective, np.where(uses_sm, sm_n, ut_n), 0)  # a service's replicas have none
        median = np.where(uses_sm, sm_med, ut_med)
        top = np.where(uses_sm, sm_top, ut_top)
        lead_median = np.where(uses_sm, sm_lead_med, ut_lead_med)
        lead_next = np.where(uses_sm, sm_lead_next, ut_lead_next)

        t = _T["no-holder"]
        unallocated = ~has_job & (np.isnan(activity) | below(t))

        t = _T["clocks-slowed"]
        reasons = np.asarray(c["throttle_reasons"], dtype=np.int64)
        throttled = (_ge(c["throttled_share"], t["throttled_share"]) & ((reasons & SLOWDOWN_MASK) != 0)
                     & _le(np.asarray(c["sm_clock_mhz"], dtype=np.float64) / c["max_sm_clock"], t["clock_ratio"]))

        t = _T["memory-held-no-compute"]
        near_zero = has_job & below(t)
        total = np.asarray(c["fb_total_mib"], dtype=np.float64)
        share = np.where(np.isnan(total) | (total == 0), np.nan, np.asarray(c["fb_used_mib"], dtype=np.float64) / total)
        memory_only = near_zero & _ge(share, t["memory_share"])
        t = _T["held-no-compute"]
        idle = has_job & below(t)

        t = _T["waits-on-input"]
        stalled = below(t)
        at_ceiling = np.asarray(c["read_at_ceiling"], dtype=bool) if "read_at_ceiling" in c else np.zeros(n, bool)
        waiting = (np.asarray(c["read_saturated"], dtype=bool) | _ge(c["cpu_iowait"], t["cpu_iowait"])
                   | (at_ceiling & _ge(c["cpu_iowait"], t["ceiling_iowait"])) | _ge(c["cpu_busy"], t["cpu_busy"]))
        input_bound = stalled & waiting

        t = _T["holds-back-its-job"]
        straggler = ((peers >= t["peers"]) & (peers > 0) & _ge(activity, t["activity"])
                     & _ge(np.where(median == 0, np.nan, activity / median), t["ratio_to_peers"])
                     & _ge(np.where(top == 0, np.nan, activity / top), t["ratio_to_next"]))
        # the busiest peer of a row is its group's busiest row unless the row is that one itself
        lead_straggles = (_ge(top, t["activity"]) & _ge(np.where(lead_median == 0, np.nan, top / lead_median),
                                                        t["ratio_to_peers"])
                          & _ge(np.where(lead_next == 0, np.nan, top / lead_next), t["ratio_to_next"]))

        t = _T["waits-on-peers-or-fabric"]
        stalled = below(t)
        to_top = np.where(top == 0, np.nan, activity / top)
        behind = (peers > 0) & lead_straggles & (activity < top) & _le(to_top, t["ratio_to_busiest_peer"])
        far_behind = (peers > 0) & _le(to_top, t["ratio_to_far_peer"])
        line = np.asarray(c["ib_line_bps"], dtype=np.float64)
        ib = np.maximum(np.nan_to_num(np.asarray(c["ib_tx_bps"], dtype=np.float64), nan=0.0),
                        np.nan_to_num(np.asarray(c["ib_rx_bps"], dtype=np.float64), nan=0.0))
        ib_full = _ge(np.where(np.isnan(line) | (line == 0), np.nan, ib / line), t["line_share"])
        nvlink_full = _ge(np.asarray(c["nvlink_bps"], dtype=np.float64) / c["nvlink_line"], t["line_share"])
        communication = behind | (stalled & (far_behind | ib_full | nvlink_full))

        t = _T["held-little-use"]
        low_use = has_job & below(t)

    held = (unallocated, throttled, memory_only, idle, input_bound, straggler, communication, low_use)
    result = np.select(held, np.arange(len(held)), default=len(held)).astype(np.int8)
    judged = c.get("judged")
    if judged is not None:
        result[~np.asarray(judged, dtype=bool)] = -1
    assert len(result) == n
    return result


def stalled_for_input(c: Mapping[str, np.ndarray]) -> np.ndarray:
    """The input-bound rule's own GPU condition (utilization and activity low): a row judged by a later rule
    that meets it would be input-bound if its node's reads were saturated."""
    t = _T["waits-on-input"]
    util = np.asarray(c["util"], dtype=np.float64)
    sm = np.asarray(c["sm_active"], dtype=np.float64)
    return np.where(np.isnan(sm), _lt(util, t["stalled_util"]), _lt(sm, t["stalled_sm_active"]))


def labels(rule_codes: np.ndarray) -> list[str]:
    return [rules.LABELS[RULE_LABEL[code]] for code in rule_codes]


def _float(value) -> float:
    return np.nan if value is None else float(value)


def columns(gpu_records: Iterable[Mapping], node_records: Iterable[Mapping] = (),
            references: Mapping | None = None, context_records: Iterable[Mapping] = ()) -> dict[str, np.ndarray]:
    """Columns from records, with the arguments and meaning of attribution.attribute (the records of
    `context_records` are peers only, not judged)."""
    from .attribution import NodeReferences

    gpu_records = list(gpu_records)
    judged = [True] * len(gpu_records) + [False] * len(context_records := list(context_records))
    gpu_records += context_records
    references = references or {}
    default = NodeReferences()
    nodes = {(r["node"], r.get("step", 60), r["start"]): r for r in node_records}
    groups: dict[tuple, int] = {}
    result: dict[str, list] = {name: [] for name in (*GPU_COLUMNS, *NODE_COLUMNS, "has_job", "group",
                                                     "throttle_reasons", "read_saturated", "read_at_ceiling",
                                                     "max_sm_clock",
                                                     "nvlink_line", "collective")}
    saturated: dict[tuple, bool] = {}
    for record in gpu_records:
        job = record.get("job")
        result["has_job"].append(bool(job))
        result["group"].append(groups.setdefault((job, record.get("step", 60), record["start"]), len(groups))
                               if job else -1)
        for name in GPU_COLUMNS:
            result[name].append(_float(record.get(name)))
        result["throttle_reasons"].append(int(record.get("throttle_reasons") or 0))
        refs = references.get(record["node"], default)
        result["max_sm_clock"].append(refs.max_sm_clock.value)
        result["nvlink_line"].append(refs.nvlink_line.value)
        result["collective"].append(refs.collective)
        key = (record["node"], record.get("step", 60), record["start"])
        node = nodes.get(key)
        for name in NODE_COLUMNS:
            result[name].append(_float((node or {}).get(name)))
        if key not in saturated:
            saturated[key] = (read_saturation(node, refs.storage), read_saturation(node, refs.storage, learned=True))
        result["read_saturated"].append(saturated[key][0])
        result["read_at_ceiling"].append(saturated[key][1])
    arrays = {name: np.array(values) for name, values in result.items()}
    arrays["has_job"] = arrays["has_job"].astype(bool)
    arrays["read_saturated"] = arrays["read_saturated"].astype(bool)
    arrays["read_at_ceiling"] = arrays["read_at_ceiling"].astype(bool)
    arrays["collective"] = arrays["collective"].astype(bool)
    arrays["group"] = arrays["group"].astype(np.int64)
    arrays["throttle_reasons"] = arrays["throttle_reasons"].astype(np.int64)
    arrays["judged"] = np.array(judged, dtype=bool)
    for name in (*GPU_COLUMNS, *NODE_COLUMNS, "max_sm_clock", "nvlink_line"):
        arrays[name] = arrays[name].astype(np.float64)
    return arrays


def attribute_labels(gpu_records, node_records=(), references=None, context_records=()) -> list[str]:
    """The label of every judged record, as attribution.attribute would give it."""
    codes = classify(columns(gpu_records, node_records, references, context_records))
    return [rules.LABELS[RULE_LABEL[code]] for code in codes if code >= 0]
