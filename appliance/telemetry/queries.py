"""What the portal and the API read of the telemetry: rollups and hardware events, never raw points.

Every function here answers with a fixed number of queries whatever the size of the fleet: rows are
aggregated in the database (GROUP BY node and time bucket) and shaped in Python afterwards, never
fetched object by object. The functions return plain dicts and lists (JSON as they are): the API sends
them unchanged, the pages draw them in the browser.

Ranges: up to a day reads the per-minute rows; 7 and 30 days read the per-hour rows the appliance folds
(per-minute rows are kept for days only: settings.TELEMETRY_RETENTION).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Avg, Count, Func, IntegerField, Max, Min, Q, Sum
from django.utils import timezone

from appliance.inventory.models import GPU, Node

from .models import HOUR, MINUTE, WHOLE_GPU, GpuRollup, HardwareEvent, NodeCollector, NodeRollup


@dataclass(frozen=True)
class Range:
    name: str
    seconds: int
    step: int  # which rollups it reads


RANGES = {r.name: r for r in (Range("1h", 3600, MINUTE), Range("6h", 6 * 3600, MINUTE),
                              Range("24h", 24 * 3600, MINUTE), Range("7d", 7 * 24 * 3600, HOUR),
                              Range("30d", 30 * 24 * 3600, HOUR))}
DEFAULT_RANGE = "1h"
# A heatmap over time has at most this many columns: a day of minutes becomes 144 columns of 10 minutes,
# few enough to read on a screen and to send for a thousand nodes.
MAX_COLUMNS = 150
# A GPU's cell is "live" when its newest bucket started this recently (a bucket is sent when it closes,
# so the newest one is normally one to two minutes old); otherwise the cell says "no data" and how old
# its last bucket is.
LIVE_WINDOW_S = 180
ALERT_KINDS = (HardwareEvent.Kind.XID, HardwareEvent.Kind.ECC, HardwareEvent.Kind.LINK_DOWN,
               HardwareEvent.Kind.THROTTLING)
ALERT_STATES = ("open", "all")
JOB_MINUTES_S = 24 * 3600  # a job longer than this is shown from its per-hour rows
ALERTS_SHOWN = 200
JOB_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}"  # a Slurm job id (12345, 12345_7) or a service name
NODE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


class UnknownRange(ValueError):
    pass


class Epoch(Func):
    """Seconds since 1970 of a datetime column, on SQLite and PostgreSQL alike (Django has no such lookup)."""

    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        # julianday, not strftime('%s'): a % in the template would reach the driver as a placeholder.
        return self.as_sql(compiler, connection, template="CAST(ROUND((julianday(%(expressions)s) - 2440587.5) * 86400.0) AS INTEGER)",
                           **extra)

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="CAST(EXTRACT(EPOCH FROM %(expressions)s) AS BIGINT)",
                           **extra)


def range_of(name: str | None) -> Range:
    name = name or DEFAULT_RANGE
    if name not in RANGES:
        raise UnknownRange(f"range: {name!r} is not one of {', '.join(RANGES)}")
    return RANGES[name]


def column_width(span_s: int, step: int) -> int:
    """Seconds a heatmap column covers: a whole number of steps, at most MAX_COLUMNS columns in the span."""
    return max(1, math.ceil(span_s / step / MAX_COLUMNS)) * step


def _epoch(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment else None


def _age(moment: datetime | None, now: datetime) -> int | None:
    return int((now - moment).total_seconds()) if moment else None


def _round(value, digits=1):
    return None if value is None else round(value, digits)


def _window(rng: Range, now: datetime) -> tuple[datetime, datetime]:
    """The first and last bucket starts a range reads: the newest closed bucket (the one in progress is
    sent when it closes) and as many before it as the range holds."""
    last = datetime.fromtimestamp(now.timestamp() // rng.step * rng.step - rng.step, tz=UTC)
    return last - timedelta(seconds=rng.seconds - rng.step), last


def collector_state(collector: dict | None, now: datetime) -> dict:
    """How a node's collector looks from here: not deployed, silent (with since when) or live."""
    if collector is None:
        return {"state": "not deployed", "last_bucket": None, "age_s": None}
    last = collector["last_bucket"]
    live = last is not None and (now - last).total_seconds() <= LIVE_WINDOW_S
    return {"state": "live" if live else "silent", "last_bucket": last.isoformat() if last else None,
            "last_seen": collector["last_seen"].isoformat() if collector["last_seen"] else None,
            "age_s": _age(last, now)}


def _collectors(nodes) -> dict[int, dict]:
    return {row["node"]: row for row in NodeCollector.objects.filter(node__in=nodes)
            .values("node", "last_bucket", "last_seen")}


def _series(rows, key: str, fields: tuple[str, ...], digits=1) -> dict:
    """Column-wise series ({"t": [...], field: [...]}) of rows sorted by `key` (a datetime)."""
    out = {"t": [_epoch(row[key]) for row in rows]}
    for field in fields:
        out[field] = [_round(row[field], digits) for row in rows]
    return out


# --- the fleet ---------------------------------------------------------------------------------------


def overview(appliance=None, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """Every GPU's latest utilization, memory and power (the live cells), a nodes x time heatmap of GPU
    utilization, and the fabric and filesystem throughput of the fleet over the range. Seven queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    nodes = Node.objects.filter(gpus__isnull=False).distinct()
    if appliance is not None:
        nodes = nodes.filter(appliance=appliance)
    node_rows = list(nodes.order_by("name").values("id", "name"))
    gpu_rows = list(GPU.objects.filter(node__in=nodes).order_by("node__name", "index")
                    .values("node", "index", "memory_mib"))
    collectors = _collectors(nodes)

    live_since = now - timedelta(seconds=LIVE_WINDOW_S)
    latest: dict[tuple[int, int], dict] = {}
    # Ascending: the newest bucket of each GPU is the last one kept.
    for row in (GpuRollup.objects.filter(node__in=nodes, step=MINUTE, instance=WHOLE_GPU, start__gte=live_since)
                .order_by("start").values("node", "gpu", "start", "util", "fb_used_mib", "fb_total_mib",
                                           "power_w", "temp_c", "job")):
        latest[(row["node"], row["gpu"])] = row

    by_node: dict[int, list] = {}
    for gpu in gpu_rows:
        row = latest.get((gpu["node"], gpu["index"]))
        cell = {"index": gpu["index"]}
        if row:
            cell.update(state="live", util=_round(row["util"]), fb_used_mib=_round(row["fb_used_mib"], 0),
                        fb_total_mib=_round(row["fb_total_mib"] or gpu["memory_mib"], 0),
                        power_w=_round(row["power_w"]), temp_c=_round(row["temp_c"]), job=row["job"],
                        start=row["start"].isoformat(), age_s=_age(row["start"], now))
        else:
            cell.update(state="no data")
        by_node.setdefault(gpu["node"], []).append(cell)

    width = column_width(rng.seconds, rng.step)
    columns = list(range_steps(first, last, width))
    column_index = {start: i for i, start in enumerate(columns)}
    heat = {n["id"]: [None] * len(columns) for n in node_rows}
    rows = NodeRollup.objects.filter(node__in=nodes, step=rng.step, start__gte=first, start__lte=last).order_by()
    if width == rng.step:  # a column is a bucket: the rows as they are, no grouping (the hour view)
        cells = rows.annotate(column=Epoch("start")).values_list("node", "column", "gpu_util")
    else:
        cells = (rows.annotate(column=Epoch("start") / width * width).values("node", "column")
                 .annotate(util=Avg("gpu_util")).values_list("node", "column", "util"))
    for node_id, column, util in cells:
        i = column_index.get(column)
        if i is not None and node_id in heat:
            heat[node_id][i] = None if util is None else round(util, 1)

    totals = list(NodeRollup.objects.filter(node__in=nodes, step=rng.step, start__gte=first, start__lte=last)
                  .values("start").annotate(ib_tx_bps=Sum("ib_tx_bps"), ib_rx_bps=Sum("ib_rx_bps"),
                                            fs_read_bps=Sum("fs_read_bps"), fs_write_bps=Sum("fs_write_bps"),
                                            gpu_util=Avg("gpu_util"), gpu_power_w=Sum("gpu_power_w"),
                                            nodes=Count("node"))
                  .order_by("start"))

    live_cells = [c for cells in by_node.values() for c in cells if c["state"] == "live"]
    out_nodes = []
    for node in node_rows:
        out_nodes.append({"name": node["name"], "collector": collector_state(collectors.get(node["id"]), now),
                          "gpus": by_node.get(node["id"], [])})
    return {
        "range": rng.name, "step": rng.step, "now": now.isoformat(),
        "summary": _summary(live_cells, len(gpu_rows), len(node_rows), collectors, now),
        "nodes": out_nodes,
        "heatmap": {"width_s": width, "columns": columns,
                    "nodes": [n["name"] for n in node_rows], "values": [heat[n["id"]] for n in node_rows]},
        "fabric": _series(totals, "start", ("ib_tx_bps", "ib_rx_bps"), 0),
        "filesystem": _series(totals, "start", ("fs_read_bps", "fs_write_bps"), 0),
        "gpu": _series(totals, "start", ("gpu_util", "gpu_power_w")),
    }


def range_steps(first: datetime, last: datetime, width: int):
    """Column starts (epoch-aligned to `width`) from the column holding `first` to the one holding `last`."""
    start = int(first.timestamp()) // width * width
    end = int(last.timestamp()) // width * width
    return range(start, end + 1, width)


def _summary(live_cells: list[dict], gpus: int, nodes: int, collectors: dict, now: datetime) -> dict:
    utils = [c["util"] for c in live_cells if c["util"] is not None]
    live_collectors = sum(1 for c in collectors.values() if collector_state(c, now)["state"] == "live")
    newest = max((c["last_bucket"] for c in collectors.values() if c["last_bucket"]), default=None)
    return {
        "nodes": nodes, "gpus": gpus, "gpus_live": len(live_cells),
        "collectors": len(collectors), "collectors_live": live_collectors,
        "util_mean": _round(sum(utils) / len(utils)) if utils else None,
        "gpus_busy": sum(1 for u in utils if u >= 50),
        "gpus_idle": sum(1 for u in utils if u < 5),
        "power_w": _round(sum(c["power_w"] or 0 for c in live_cells)) if live_cells else None,
        "fb_used_mib": _round(sum(c["fb_used_mib"] or 0 for c in live_cells), 0) if live_cells else None,
        "fb_total_mib": _round(sum(c["fb_total_mib"] or 0 for c in live_cells), 0) if live_cells else None,
        "newest_bucket": newest.isoformat() if newest else None, "newest_age_s": _age(newest, now),
    }


def live_summary(now: datetime | None = None) -> dict:
    """The Overview's GPU panel: the fleet's live GPU use in a few numbers (four queries, no per-GPU rows
    leave the database)."""
    now = now or timezone.now()
    gpus = GPU.objects.count()
    collectors = {row["node"]: row for row in NodeCollector.objects.values("node", "last_bucket", "last_seen")}
    newest = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU,
                                       start__gte=now - timedelta(seconds=LIVE_WINDOW_S))
              .aggregate(newest=Max("start"))["newest"])
    figures = {}
    if newest is not None:
        # The newest complete minute across the fleet: a node a minute behind shows in the next one.
        figures = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU, start=newest)
                   .aggregate(gpus_live=Count("id"), util_mean=Avg("util"), power_w=Sum("power_w"),
                              fb_used_mib=Sum("fb_used_mib"), fb_total_mib=Sum("fb_total_mib"),
                              gpus_busy=Count("id", filter=Q(util__gte=50)),
                              gpus_idle=Count("id", filter=Q(util__lt=5))))
    live_collectors = sum(1 for c in collectors.values() if collector_state(c, now)["state"] == "live")
    last_bucket = max((c["last_bucket"] for c in collectors.values() if c["last_bucket"]), default=None)
    return {
        "gpus": gpus, "collectors": len(collectors), "collectors_live": live_collectors,
        "bucket": newest.isoformat() if newest else None, "bucket_age_s": _age(newest, now),
        "last_bucket": last_bucket.isoformat() if last_bucket else None, "last_bucket_age_s": _age(last_bucket, now),
        "gpus_live": figures.get("gpus_live", 0), "gpus_busy": figures.get("gpus_busy", 0),
        "gpus_idle": figures.get("gpus_idle", 0), "util_mean": _round(figures.get("util_mean")),
        "power_w": _round(figures.get("power_w")), "fb_used_mib": _round(figures.get("fb_used_mib"), 0),
        "fb_total_mib": _round(figures.get("fb_total_mib"), 0),
    }


# --- one node, one GPU -------------------------------------------------------------------------------

NODE_FIELDS = ("gpu_util", "gpu_util_max", "gpu_fb_used_mib", "gpu_power_w", "ib_tx_bps", "ib_rx_bps",
               "ib_line_bps", "ib_xmit_wait", "fs_read_bps", "fs_write_bps", "disk_read_bps", "disk_write_bps",
               "cpu_busy", "cpu_iowait")
GPU_FIELDS = ("util", "util_max", "sm_active", "tensor_active", "dram_active", "fb_used_mib", "fb_used_max_mib",
              "fb_total_mib", "power_w", "power_max_w", "energy_j", "temp_c", "temp_max_c", "sm_clock_mhz",
              "throttled_share", "pcie_tx_bps", "pcie_rx_bps", "nvlink_bps")
RATIOS = ("cpu_busy", "cpu_iowait", "sm_active", "tensor_active", "dram_active", "throttled_share")


def _digits(field: str) -> int:
    return 3 if field in RATIOS else 1


def _columns(rows: list[dict], fields: tuple[str, ...]) -> dict:
    out = {"t": [_epoch(row["start"]) for row in rows]}
    for field in fields:
        out[field] = [_round(row[field], _digits(field)) for row in rows]
    return out


def node_series(node: Node, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """A node over the range: its GPUs together, fabric, filesystems (per mount), disks, CPU, and each
    GPU's utilization and memory. Four queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    rows = list(NodeRollup.objects.filter(node=node, step=rng.step, start__gte=first, start__lte=last)
                .order_by("start").values("start", "mounts", "ib_errors", *NODE_FIELDS))
    mounts: dict[str, dict] = {}
    for i, row in enumerate(rows):
        for path, values in (row["mounts"] or {}).items():
            mount = mounts.setdefault(path, {"fstype": values.get("fstype", ""), "read_bps": [None] * len(rows),
                                             "write_bps": [None] * len(rows)})
            mount["read_bps"][i] = _round(values.get("read_bps"), 0)
            mount["write_bps"][i] = _round(values.get("write_bps"), 0)
    gpus: dict[int, dict] = {}
    times = [_epoch(row["start"]) for row in rows]
    position = {t: i for i, t in enumerate(times)}
    for row in (GpuRollup.objects.filter(node=node, step=rng.step, instance=WHOLE_GPU, start__gte=first,
                                         start__lte=last)
                .order_by("gpu", "start").values("gpu", "start", "util", "fb_used_mib", "power_w", "job")):
        gpu = gpus.setdefault(row["gpu"], {"util": [None] * len(rows), "fb_used_mib": [None] * len(rows),
                                           "power_w": [None] * len(rows), "jobs": set()})
        i = position.get(_epoch(row["start"]))
        if i is None:  # a GPU row without its node's row: kept out of the shared time axis
            continue
        gpu["util"][i] = _round(row["util"])
        gpu["fb_used_mib"][i] = _round(row["fb_used_mib"], 0)
        gpu["power_w"][i] = _round(row["power_w"])
        if row["job"]:
            gpu["jobs"].add(row["job"])
    collector = NodeCollector.objects.filter(node=node).values("node", "last_bucket", "last_seen").first()
    indexes = list(node.gpus.order_by("index").values_list("index", flat=True))
    return {
        "node": node.name, "range": rng.name, "step": rng.step, "now": now.isoformat(),
        "collector": collector_state(collector, now),
        "series": _columns(rows, NODE_FIELDS) | {"ib_errors": [row["ib_errors"] for row in rows]},
        "mounts": mounts,
        "gpus": [{"index": index, **{k: v for k, v in gpus.get(index, {}).items() if k != "jobs"},
                  "jobs": sorted(gpus.get(index, {}).get("jobs", ()))} for index in sorted(set(indexes) | set(gpus))],
    }


def gpu_series(node: Node, gpu: int, range: str | None = None, now: datetime | None = None) -> dict:  # noqa: A002
    """One GPU over the range, every field of its rollups, and its MIG instances' utilization and memory.
    Three queries."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    rows = list(GpuRollup.objects.filter(node=node, gpu=gpu, step=rng.step, start__gte=first, start__lte=last)
                .order_by("instance", "start")
                .values("instance", "profile", "start", "job", "uuid", "throttle_reasons", "xid_count", "ecc_dbe",
                        *GPU_FIELDS))
    whole = [row for row in rows if row["instance"] == WHOLE_GPU]
    instances: dict[int, dict] = {}
    for row in rows:
        if row["instance"] == WHOLE_GPU:
            continue
        entry = instances.setdefault(row["instance"], {"instance": row["instance"], "profile": row["profile"],
                                                       "t": [], "util": [], "fb_used_mib": [], "sm_active": []})
        entry["t"].append(_epoch(row["start"]))
        entry["util"].append(_round(row["util"]))
        entry["fb_used_mib"].append(_round(row["fb_used_mib"], 0))
        entry["sm_active"].append(_round(row["sm_active"], 3))
    inventory = GPU.objects.filter(node=node, index=gpu).values("uuid", "model", "memory_mib", "mig_mode").first()
    collector = NodeCollector.objects.filter(node=node).values("node", "last_bucket", "last_seen").first()
    series = _columns(whole, GPU_FIELDS)
    series.update(job=[row["job"] for row in whole], throttle_reasons=[row["throttle_reasons"] for row in whole],
                  xid_count=[row["xid_count"] for row in whole], ecc_dbe=[row["ecc_dbe"] for row in whole])
    return {
        "node": node.name, "gpu": gpu, "range": rng.name, "step": rng.step, "now": now.isoformat(),
        "inventory": inventory, "collector": collector_state(collector, now),
        "series": series, "instances": list(instances.values()),
        "jobs": sorted({row["job"] for row in whole if row["job"]}),
    }


# --- jobs ---------------------------------------------------------------------------------------------


def jobs(range: str | None = None, now: datetime | None = None) -> list[dict]:  # noqa: A002
    """Jobs (Slurm job ids, inference services) that held a GPU in the range, newest first. One query."""
    rng = range_of(range)
    now = now or timezone.now()
    first, last = _window(rng, now)
    per_gpu = (GpuRollup.objects.filter(step=rng.step, instance=WHOLE_GPU, start__gte=first, start__lte=last)
               .exclude(job="").values("job", "node__name", "gpu")
               .annotate(first=Min("start"), last=Max("start"), util=Avg("util"), samples=Sum("samples"))
               .order_by())
    found: dict[str, dict] = {}
    for row in per_gpu:
        job = found.setdefault(row["job"], {"job": row["job"], "nodes": set(), "gpus": 0, "first": row["first"],
                                            "last": row["last"], "util_sum": 0.0, "util_n": 0})
        job["nodes"].add(row["node__name"])
        job["gpus"] += 1
        job["first"], job["last"] = min(job["first"], row["first"]), max(job["last"], row["last"])
        if row["util"] is not None:
            job["util_sum"] += row["util"]
            job["util_n"] += 1
    out = []
    for job in sorted(found.values(), key=lambda j: (j["last"], j["job"]), reverse=True):
        out.append({"job": job["job"], "nodes": sorted(job["nodes"]), "gpus": job["gpus"],
                    "first": job["first"].isoformat(), "last": job["last"].isoformat(),
                    "util_mean": _round(job["util_sum"] / job["util_n"]) if job["util_n"] else None})
    return out


class UnknownJob(LookupError):
    pass


def job(job_id: str) -> dict:
    """A job's GPUs (from the rollups that name it), their use over the job's span, and the fabric and
    filesystem I/O of its nodes over that span. Per-minute rows for a job of a day or less while they are
    kept, per-hour rows otherwise. Four or five queries."""
    held = GpuRollup.objects.filter(job=job_id, instance=WHOLE_GPU)
    minutes = held.filter(step=MINUTE).aggregate(first=Min("start"), last=Max("start"))
    # Per-minute rows for a job of a day or less; a longer job reads its per-hour rows, so that a week on
    # 64 GPUs is 10 thousand rows, not 650 thousand (and the minutes pruned by then are not missed).
    long_job = minutes["first"] is None or (minutes["last"] - minutes["first"]).total_seconds() > JOB_MINUTES_S
    step = HOUR if long_job and held.filter(step=HOUR).exists() else MINUTE
    held = held.filter(step=step)
    per_gpu = list(held.values("node", "node__name", "gpu")
                   .annotate(first=Min("start"), last=Max("start"), buckets=Count("id"), util=Avg("util"),
                             util_max=Max("util_max"), sm_active=Avg("sm_active"), fb_used_mib=Avg("fb_used_mib"),
                             fb_used_max_mib=Max("fb_used_max_mib"), power_w=Avg("power_w"),
                             energy_j=Sum("energy_j"), throttled_share=Avg("throttled_share"))
                   .order_by("node__name", "gpu"))
    if not per_gpu:
        raise UnknownJob(f"no GPU rollup names the job {job_id!r}")
    first = min(row["first"] for row in per_gpu)
    last = max(row["last"] for row in per_gpu)
    gpu_rows = list(held.order_by("start").values("node__name", "gpu", "start", "util", "fb_used_mib"))
    node_ids = {row["node"] for row in per_gpu}
    node_rows = list(NodeRollup.objects.filter(node__in=node_ids, step=step, start__gte=first, start__lte=last)
                     .order_by("start").values("node__name", "start", "ib_tx_bps", "ib_rx_bps", "fs_read_bps",
                                               "fs_write_bps", "cpu_iowait", "gpu_util"))
    times = sorted({_epoch(row["start"]) for row in gpu_rows})
    position = {t: i for i, t in enumerate(times)}
    series: dict[str, dict] = {}
    for row in gpu_rows:
        key = f"{row['node__name']}/{row['gpu']}"
        entry = series.setdefault(key, {"util": [None] * len(times), "fb_used_mib": [None] * len(times)})
        i = position[_epoch(row["start"])]
        entry["util"][i] = _round(row["util"])
        entry["fb_used_mib"][i] = _round(row["fb_used_mib"], 0)
    nodes: dict[str, dict] = {}
    for row in node_rows:
        entry = nodes.setdefault(row["node__name"], {f: [None] * len(times) for f in
                                                     ("ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps",
                                                      "cpu_iowait")})
        i = position.get(_epoch(row["start"]))
        if i is None:
            continue
        for field in entry:
            entry[field][i] = _round(row[field], _digits(field) if field in RATIOS else 0)
    utils = [row["util"] for row in per_gpu if row["util"] is not None]
    return {
        "job": job_id, "step": step, "first": first.isoformat(), "last": last.isoformat(),
        "end": (last + timedelta(seconds=step)).isoformat(),
        "duration_s": int((last - first).total_seconds()) + step,
        "nodes": sorted({row["node__name"] for row in per_gpu}),
        "gpu_count": len(per_gpu),
        "util_mean": _round(sum(utils) / len(utils)) if utils else None,
        "energy_j": _round(sum(row["energy_j"] or 0 for row in per_gpu), 0),
        "gpus": [{"node": row["node__name"], "gpu": row["gpu"], "first": row["first"].isoformat(),
                  "last": row["last"].isoformat(), "buckets": row["buckets"], "util": _round(row["util"]),
                  "util_max": _round(row["util_max"]), "sm_active": _round(row["sm_active"], 3),
                  "fb_used_mib": _round(row["fb_used_mib"], 0), "fb_used_max_mib": _round(row["fb_used_max_mib"], 0),
                  "power_w": _round(row["power_w"]), "energy_j": _round(row["energy_j"], 0),
                  "throttled_share": _round(row["throttled_share"], 3)} for row in per_gpu],
        "t": times, "gpu_series": series, "node_series": nodes,
    }


# --- alerts -------------------------------------------------------------------------------------------


def alerts(state: str = "open", limit: int = ALERTS_SHOWN) -> dict:
    """Hardware alerts (XID, uncorrectable ECC, link down, throttling), newest first: the open ones
    (not acknowledged) or all. Two queries."""
    if state not in ALERT_STATES:
        raise ValueError(f"state: {state!r} is not one of {', '.join(ALERT_STATES)}")
    events = HardwareEvent.objects.filter(kind__in=ALERT_KINDS)
    counts = events.aggregate(open=Count("id", filter=Q(acknowledged_at__isnull=True)), all=Count("id"))
    if state == "open":
        events = events.filter(acknowledged_at__isnull=True)
    rows = events.order_by("-time", "-id").values("id", "node__name", "kind", "gpu", "device", "time", "message",
                                                  "detail", "acknowledged_at", "acknowledged_by")[:limit]
    return {
        "state": state, "open": counts["open"], "total": counts["all"],
        "alerts": [{"id": row["id"], "node": row["node__name"], "kind": row["kind"],
                    "kind_label": str(HardwareEvent.Kind(row["kind"]).label), "gpu": row["gpu"],
                    "device": row["device"], "time": row["time"].isoformat(), "message": row["message"],
                    "detail": row["detail"],
                    "acknowledged_at": row["acknowledged_at"].isoformat() if row["acknowledged_at"] else None,
                    "acknowledged_by": row["acknowledged_by"]} for row in rows],
    }

