"""Attribution: every GPU (and MIG instance) bucket gets one cause (rules.py), with the context its rules
need gathered from the rollups of the same bucket: its node's row and the rows of its job's other GPUs.

`attribute` is pure: it takes plain records (mappings with the rollup models' field names, `node` being
the node's name) and per-node references, so the benchmark grades it on records derived from the workload
model without a database. `from_database` is the thin layer that reads one window of rollups and the
inventory's references (smoke-test throughput per mount, the platform's NVLink bandwidth) in a constant
number of queries (and, for the nodes with a mount that has no measured rate, one more: that mount's
own history, which its ceiling is learned from).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from . import rules

MIB = 2**20


@dataclass
class NodeReferences:
    """What a node's measurements are compared with: the read throughput its storage smoke test measured
    per mount (bytes/s), its GPUs' maximum SM clock and NVLink bandwidth (nominal unless known), and
    whether its jobs are collectives (`collective`: False on an inference pool's node, whose services'
    replicas are not each other's peers)."""

    storage: dict[str, rules.Reference] = field(default_factory=dict)
    max_sm_clock: rules.Reference = rules.Context.max_sm_clock
    nvlink_line: rules.Reference = rules.Context.nvlink_line
    collective: bool = True
    ceilings_until: dict[str, object] = field(default_factory=dict)  # mount: the moment its ceiling was learned up to


@dataclass(frozen=True)
class Attributed:
    record: Mapping
    verdict: rules.Verdict

    @property
    def label(self) -> str:
        return self.verdict.label


def attribute(gpu_records: Iterable[Mapping], node_records: Iterable[Mapping] = (),
              references: Mapping[str, NodeReferences] | None = None,
              context_records: Iterable[Mapping] = ()) -> list[Attributed]:
    """One verdict per GPU record, in the records' order. Peers are the other records of the same job,
    step and bucket start (on any node, `context_records` included: rows read only to be peers, not
    judged); a record without a job has none."""
    gpu_records = list(gpu_records)
    judged = len(gpu_records)
    gpu_records += list(context_records)
    references = references or {}
    nodes = {(r["node"], r.get("step", 60), r["start"]): r for r in node_records}
    jobs: dict[tuple, list[int]] = defaultdict(list)
    for position, record in enumerate(gpu_records):
        if record.get("job"):
            jobs[(record["job"], record.get("step", 60), record["start"])].append(position)
    result = []
    default = NodeReferences()
    for position, record in enumerate(gpu_records[:judged]):
        key = (record.get("job"), record.get("step", 60), record["start"])
        peers = [gpu_records[i] for i in jobs.get(key, ()) if i != position] if record.get("job") else []
        refs = references.get(record["node"], default)
        ctx = rules.Context(gpu=record, node=nodes.get((record["node"], record.get("step", 60), record["start"])),
                            peers=peers, storage=refs.storage, max_sm_clock=refs.max_sm_clock,
                            nvlink_line=refs.nvlink_line, collective=refs.collective)
        result.append(Attributed(record, rules.classify(ctx)))
    return result


GPU_FIELDS = ("id", "node_id", "gpu", "instance", "step", "start", "samples", "job", "profile", "util", "util_max",
              "sm_active", "tensor_active", "dram_active", "fb_used_mib", "fb_used_max_mib", "fb_total_mib",
              "power_w", "power_max_w", "temp_c", "sm_clock_mhz", "throttle_reasons", "throttled_share",
              "pcie_tx_bps", "pcie_rx_bps", "nvlink_bps", "xid_count", "ecc_dbe", "holders")

# A minute that changed hands (a row with `holders`: the seconds each job held it, telemetry.holders) is
# judged as a part per holder and a part of the seconds nobody held. The collector sends one mean of the
# minute; nobody computes on a GPU nobody holds, so the unheld seconds are taken to have computed and kept
# nothing (the rules find them unallocated) and each holder's part carries the minute's figures below over
# the seconds held (the minute's mean times 60 over them), at most each one's full scale (a number, or the
# field that bounds it). A job that computed at 0.84 for 35 s of a minute reads 0.49 over the minute and
# 0.84 over its own seconds. Two holders of one minute share its figures alike. The ledger (ledger.py) splits
# its columns the same way.
HELD_FIGURES = {"util": 100.0, "sm_active": 1.0, "fb_used_mib": "fb_total_mib", "nvlink_bps": float("inf")}


def split_by_holders(records: Iterable[Mapping], step: int = 60) -> list[dict]:
    """The records with the `seconds` each stands for: a record with holders becomes a record per holder
    (its job, its seconds, the figures over its seconds) and one of the seconds nobody held (no job, the
    figures at zero); parts of no second are left out. Any other record is its job's (or nobody's) whole
    bucket."""
    # Deferred: telemetry.holders reads the telemetry app's queries (Django models); this module stays
    # importable without Django (the rules and benchmarks use it so).
    from appliance.telemetry import holders as minute_holders

    result = []
    for record in records:
        parts = minute_holders.parse(record.get("holders") or "", step)
        if not parts:
            result.append({**record, "seconds": float(record.get("step", step))})
            continue
        held = sum(seconds for _, seconds in parts)
        if held < step:
            unheld = {**record, "job": "", "holders": "", "seconds": float(step - held)}
            for name in HELD_FIGURES:
                if unheld.get(name) is not None:
                    unheld[name] = 0.0
            result.append(unheld)
        for job, seconds in parts:
            if not seconds:
                continue
            part = {**record, "job": job, "holders": "", "seconds": float(seconds)}
            for name, full in HELD_FIGURES.items():
                value = part.get(name)
                bound = part.get(full) if isinstance(full, str) else full
                if value is not None and value == value:
                    value = value * step / held
                    part[name] = min(value, bound) if bound is not None and bound == bound else value
            result.append(part)
    return result
NODE_FIELDS = ("node_id", "step", "start", "samples", "gpus", "gpu_util", "ib_tx_bps", "ib_rx_bps", "ib_line_bps",
               "ib_xmit_wait", "fs_read_bps", "fs_write_bps", "mounts", "cpu_busy", "cpu_iowait")


@dataclass
class NodeInfo:
    name: str
    pool: str
    references: NodeReferences


def node_references(facts: Mapping | None, platform_spec: Mapping | None) -> NodeReferences:
    """The references of one node from its facts (the storage stage's smoke-test results per mount, in
    MB/s) and its platform's description (NVLink bandwidth)."""
    refs = NodeReferences()
    results = ((facts or {}).get("storage") or {}).get("results") or []
    for entry in results if isinstance(results, list) else []:
        if isinstance(entry, Mapping) and entry.get("mount_point") and isinstance(entry.get("read_mbps"), int | float) \
                and entry["read_mbps"] > 0:
            refs.storage[str(entry["mount_point"])] = rules.Reference(
                float(entry["read_mbps"]) * 1e6, f"storage smoke test of this node: {entry['read_mbps']} MB/s")
    nvlink = (((platform_spec or {}).get("gpu") or {}).get("nvlink") or {}).get("bandwidth_gbs")
    if isinstance(nvlink, int | float) and nvlink > 0:
        refs.nvlink_line = rules.Reference(float(nvlink) * 1e9, f"NVLink bandwidth of the platform: {nvlink} GB/s")
    return refs


def learn_ceilings(references: Mapping[int, NodeReferences], mounts: Mapping[int, Iterable[str]], until) -> None:
    """Give the mounts named per node (node id: mount points) that have no measured rate their own ceiling
    (rules.CEILING_QUANTILE of their per-minute reads on that node over the rules.CEILING_LOOKBACK_S before
    `until`, where at least rules.CEILING_MIN_MINUTES were read), as a learned Reference in the node's
    `storage`; a mount with less history gets none. One query for every node that has such a mount; a
    mount learned up to `until` already is not read again."""
    from appliance.telemetry.models import NodeRollup

    wanted: dict[int, set[str]] = {}
    for pk, names in mounts.items():
        refs = references.get(pk)
        if refs is None:
            continue
        for name in names:
            current = refs.storage.get(name)
            if (current is None or current.learned) and refs.ceilings_until.get(name) != until:
                wanted.setdefault(pk, set()).add(name)
    if not wanted:
        return
    since = until - timedelta(seconds=rules.CEILING_LOOKBACK_S)
    reads: dict[tuple[int, str], list[float]] = defaultdict(list)
    rows = NodeRollup.objects.filter(step=60, start__gte=since, start__lt=until, node_id__in=sorted(wanted))
    for pk, figures in rows.values_list("node_id", "mounts").iterator(chunk_size=5000):
        for name in wanted[pk].intersection(figures or {}):
            value = (figures[name] or {}).get("read_bps") if isinstance(figures[name], Mapping) else None
            if isinstance(value, int | float) and value >= 0:
                reads[(pk, name)].append(float(value))
    hours = rules.CEILING_LOOKBACK_S / 3600
    for pk, names in wanted.items():
        refs = references[pk]
        for name in names:
            refs.ceilings_until[name] = until
            refs.storage.pop(name, None)
            values = reads.get((pk, name), [])
            if len(values) < rules.CEILING_MIN_MINUTES:
                continue
            ceiling = float(np.quantile(values, rules.CEILING_QUANTILE))
            if ceiling > 0:
                refs.storage[name] = rules.Reference(
                    ceiling, f"ceiling learned from this mount's own reads: {100 * rules.CEILING_QUANTILE:g}th "
                             f"percentile of {len(values)} minutes in the {hours:g} h before {until:%Y-%m-%d %H:%M}",
                    learned=True)


def nodes_info(node_ids: Iterable[int] | None = None) -> dict[int, NodeInfo]:
    """Name, pool and references of nodes, one query."""
    from appliance.inventory.models import Node

    query = Node.objects.all()
    if node_ids is not None:
        query = query.filter(pk__in=list(node_ids))
    from appliance.inventory.models import Platform

    rows = list(query.values_list("pk", "name", "pool_membership__pool__name", "facts__storage", "platform_id",
                                  "pool_membership__pool__kind"))
    # A platform's description is read once, not once per node (a fleet has a few platforms, large specs).
    specs = dict(Platform.objects.filter(pk__in={row[4] for row in rows if row[4] is not None})
                 .values_list("pk", "spec")) if rows else {}
    result = {}
    for pk, name, pool, storage, platform, kind in rows:
        references = node_references({"storage": storage}, specs.get(platform))
        references.collective = kind != "inference"
        result[pk] = NodeInfo(name, pool or "", references)
    return result


def from_database(since, until, *, step: int = 60, node_ids: Iterable[int] | None = None,
                  job: str | None = None) -> tuple[list[Attributed], dict[int, NodeInfo]]:
    """Attribute every GPU bucket of `step` starting in [since, until): four queries whatever the size
    (GPU rows, node rows, nodes, their platforms; a fifth for peers when filtered by node). A job's peers are read with it even on nodes outside `node_ids`."""
    from django.db.models import Q

    from appliance.telemetry.models import GpuRollup, NodeRollup

    gpu_query = GpuRollup.objects.filter(step=step, start__gte=since, start__lt=until)
    if job is not None:  # the minutes it held whole, and those it held a part of (holders.py: "job:seconds")
        gpu_query = gpu_query.filter(Q(job=job) | Q(holders__contains=f"{job}:"))
    elif node_ids is not None:
        node_ids = list(node_ids)
        gpu_query = gpu_query.filter(node_id__in=node_ids)
    gpu_rows = split_by_holders(gpu_query.order_by("node_id", "gpu", "instance", "start").values(*GPU_FIELDS), step)
    if job is not None:
        gpu_rows = [row for row in gpu_rows if row["job"] == job]
    peer_rows = []
    if job is None and node_ids is not None:
        # Jobs that span nodes: their GPUs elsewhere are peers of the judged ones.
        jobs = {row["job"] for row in gpu_rows if row["job"]}
        peer_rows = [row for row in split_by_holders(
            GpuRollup.objects.filter(step=step, start__gte=since, start__lt=until).filter(
                Q(job__in=jobs) | ~Q(holders="")).exclude(node_id__in=node_ids).values(*GPU_FIELDS), step)
            if row["job"] in jobs] if jobs else []
    wanted = {row["node_id"] for row in gpu_rows}
    node_rows = list(NodeRollup.objects.filter(step=step, start__gte=since, start__lt=until, node_id__in=wanted)
                     .values(*NODE_FIELDS))
    info = nodes_info(wanted)
    for row in gpu_rows + peer_rows:
        row["node"] = row["node_id"]
    for row in node_rows:
        row["node"] = row["node_id"]
    references = {pk: node.references for pk, node in info.items()}
    mounts: dict[int, set[str]] = defaultdict(set)
    for row in node_rows:
        mounts[row["node_id"]].update(row["mounts"] or {})
    learn_ceilings(references, mounts, until)
    return attribute(gpu_rows, node_rows, references, peer_rows), info
