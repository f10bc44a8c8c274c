"""Auto-profiling: suggested settings for a job or service from what it measured.

Each suggestion names the figure it rests on. From the job's GPU rollups (utilization, memory used of the
GPU's total) and its nodes' rollups (CPU busy and iowait) over a window:
- data-loader workers: input stalls with CPUs to spare (busy under CPU_SPARE) or high iowait -> more
  workers, up to the node's cores per GPU; CPUs saturated -> more workers cannot help.
- batch size: memory used well under the GPU's (under BATCH_FILL_BELOW at its peak) -> a larger batch,
  scaled to fill BATCH_TARGET_FILL of the memory.
- MIG slice or time-slicing replicas (a GPU used little): the smallest MIG profile whose memory holds the
  peak use with MIG_HEADROOM; or, without MIG, replicas = how many such users fit in memory and compute.
- TP/PP layout: the memory the job needs in all (peak used summed over its GPUs) against one GPU's usable
  memory: tensor parallel within the NVLink domain (the GPUs of one node), pipeline stages across nodes.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.utils.translation import gettext as _

# MIG profiles of the 80 GB (A100/H100) and 141 GB (H200) GPUs: name, compute slices of 7, memory GiB.
MIG_PROFILES = {
    80: [("1g.10gb", 1, 10), ("1g.20gb", 1, 20), ("2g.20gb", 2, 20), ("3g.40gb", 3, 40), ("4g.40gb", 4, 40),
         ("7g.80gb", 7, 80)],
    141: [("1g.18gb", 1, 18), ("1g.35gb", 1, 35), ("2g.35gb", 2, 35), ("3g.71gb", 3, 71), ("4g.71gb", 4, 71),
          ("7g.141gb", 7, 141)],
}
COMPUTE_SLICES = 7
MIG_HEADROOM = 1.10          # room above the peak memory used for a slice to be called a fit
CPU_SPARE = 0.70             # node CPUs busy under this: there are cores for more data-loader workers
CPU_SATURATED = 0.90
IOWAIT_HIGH = 0.20
INPUT_STALL_UTIL = 75.0      # mean utilization under this (%) with CPU or iowait figures: the input may lag
BATCH_FILL_BELOW = 0.60      # peak memory used under this share of the GPU's: room for a larger batch
BATCH_TARGET_FILL = 0.90
SMALL_USER_UTIL = 30.0       # mean utilization under this (%): a candidate for a slice or time-slicing
USABLE_MEMORY = 0.90         # share of a GPU's memory a layout plans to fill
MIB_PER_GIB = 1024


class ProfileError(ValueError):
    """Nothing to profile; the message names the job."""


def mig_fit(used_mib: float, gpu_mib: float) -> dict | None:
    """The smallest MIG profile of this GPU whose memory holds `used_mib` with MIG_HEADROOM, the slices it
    takes and the compute slices it leaves free; None when no slice smaller than the whole GPU fits."""
    size = min(MIG_PROFILES, key=lambda gib: abs(gib * MIB_PER_GIB - gpu_mib))
    if gpu_mib and abs(size * MIB_PER_GIB - gpu_mib) / gpu_mib > 0.15:
        return None  # a GPU without a MIG table here (not an 80 or 141 GB part)
    need_gib = used_mib * MIG_HEADROOM / MIB_PER_GIB
    for name, compute, memory in MIG_PROFILES[size][:-1]:
        if memory >= need_gib:
            return {"profile": name, "compute_slices": compute, "memory_gib": memory,
                    "freed_slices": COMPUTE_SLICES - compute, "fits_per_gpu": COMPUTE_SLICES // compute,
                    "need_gib": round(need_gib, 1)}
    return None


def _job_figures(job: str, since: datetime, until: datetime) -> dict:
    from appliance.telemetry.models import GpuRollup, NodeRollup

    rows = list(GpuRollup.objects.filter(job=job, start__gte=since, start__lt=until)
                .values("node_id", "node__name", "node__facts", "node__platform__gpu_count", "gpu", "instance",
                        "step", "util", "fb_used_mib", "fb_used_max_mib", "fb_total_mib"))
    if not rows:
        raise ProfileError(_("job %(job)s: no GPU measurements between %(since)s and %(until)s") % {
            "job": job, "since": since.isoformat(), "until": until.isoformat()})
    step = 60 if any(r["step"] == 60 for r in rows) else 3600
    rows = [r for r in rows if r["step"] == step]
    gpus = {(r["node_id"], r["gpu"], r["instance"]) for r in rows}
    node_ids = {r["node_id"] for r in rows}
    utils = [r["util"] for r in rows if r["util"] is not None]
    peak_by_gpu: dict[tuple, float] = {}
    for r in rows:
        used = r["fb_used_max_mib"] if r["fb_used_max_mib"] is not None else r["fb_used_mib"]
        key = (r["node_id"], r["gpu"], r["instance"])
        peak_by_gpu[key] = max(peak_by_gpu.get(key, 0.0), float(used or 0.0))
    totals = [r["fb_total_mib"] for r in rows if r["fb_total_mib"]]
    node_rows = list(NodeRollup.objects.filter(node_id__in=node_ids, step=step, start__gte=since, start__lt=until)
                     .values("cpu_busy", "cpu_iowait"))
    busy = [r["cpu_busy"] for r in node_rows if r["cpu_busy"] is not None]
    iowait = [r["cpu_iowait"] for r in node_rows if r["cpu_iowait"] is not None]
    facts = next((r["node__facts"] for r in rows if r["node__facts"]), {}) or {}
    cpus = facts.get("cpus") or facts.get("ansible_processor_vcpus")
    per_node = max((r["node__platform__gpu_count"] or 0) for r in rows) or 8
    return {"job": job, "gpus": len(gpus), "nodes": sorted({r["node__name"] for r in rows}),
            "util_mean": round(sum(utils) / len(utils), 1) if utils else None,
            "memory_peak_mib": round(max(peak_by_gpu.values())) if peak_by_gpu else 0,
            "memory_need_mib": round(sum(peak_by_gpu.values())),
            "gpu_memory_mib": round(max(totals)) if totals else 0,
            "cpu_busy": round(sum(busy) / len(busy), 3) if busy else None,
            "cpu_iowait": round(sum(iowait) / len(iowait), 3) if iowait else None,
            "cpus": int(cpus) if isinstance(cpus, int | float) and cpus > 0 else None, "gpus_per_node": per_node}


def suggest_from(figures: dict) -> list[dict]:
    """Suggestions from a job's figures (see _job_figures for their names): each {setting, value, because}."""
    result = []
    util, busy, wait = figures.get("util_mean"), figures.get("cpu_busy"), figures.get("cpu_iowait")
    peak, total = figures.get("memory_peak_mib") or 0, figures.get("gpu_memory_mib") or 0
    per_node = figures.get("gpus_per_node") or 8
    cores_per_gpu = (figures["cpus"] // per_node) if figures.get("cpus") else None

    if util is not None and util < INPUT_STALL_UTIL and busy is not None:
        if busy >= CPU_SATURATED:
            result.append({"setting": "data_loader_workers", "value": None, "because": _(
                "GPUs at %(util)s%% while the CPUs are %(busy)s%% busy: more workers cannot help; move preprocessing "
                "to the GPU (e.g. DALI) or pre-process the dataset once") % {"util": util, "busy": round(busy * 100)}})
        elif busy < CPU_SPARE or (wait is not None and wait >= IOWAIT_HIGH):
            value = cores_per_gpu or 8
            result.append({"setting": "data_loader_workers", "value": value, "because": _(
                "GPUs at %(util)s%% with CPUs %(busy)s%% busy and iowait %(wait)s%%: up to %(value)s workers per GPU "
                "(the node's cores per GPU), with prefetching") % {
                "util": util, "busy": round(busy * 100), "wait": round((wait or 0) * 100), "value": value}})
    if total and peak and peak / total < BATCH_FILL_BELOW and (util is None or util >= SMALL_USER_UTIL):
        factor = max(1, int(BATCH_TARGET_FILL * total // peak))
        result.append({"setting": "batch_size_factor", "value": factor, "because": _(
            "peak memory %(peak)s GiB of %(total)s GiB (%(share)s%%): a batch about %(factor)s times larger fills "
            "%(target)s%%") % {"peak": round(peak / MIB_PER_GIB, 1), "total": round(total / MIB_PER_GIB),
                               "share": round(peak / total * 100), "factor": factor,
                               "target": round(BATCH_TARGET_FILL * 100)}})
    if util is not None and util < SMALL_USER_UTIL and total and peak:
        fit = mig_fit(peak, total)
        if fit:
            result.append({"setting": "mig_profile", "value": fit["profile"], "because": _(
                "peak memory %(peak)s GiB (+%(room)s%% room) fits a %(profile)s slice; utilization %(util)s%% of a "
                "whole GPU; %(freed)s compute slices freed per GPU") % {
                "peak": round(peak / MIB_PER_GIB, 1), "room": round((MIG_HEADROOM - 1) * 100),
                "profile": fit["profile"], "util": util, "freed": fit["freed_slices"]}})
        replicas = max(1, min(int(total * USABLE_MEMORY // peak), int(100 // max(util, 1.0))))
        if replicas > 1:
            result.append({"setting": "time_slicing_replicas", "value": replicas, "because": _(
                "%(replicas)s replicas of a GPU: by memory %(peak)s of %(total)s GiB and by utilization "
                "%(util)s%%") % {"replicas": replicas, "peak": round(peak / MIB_PER_GIB, 1),
                                 "total": round(total / MIB_PER_GIB), "util": util}})
    need = figures.get("memory_need_mib") or 0
    if total and need:
        usable = total * USABLE_MEMORY
        shards = max(1, math.ceil(need / usable))
        tensor = 1
        while tensor < min(shards, per_node):
            tensor *= 2
        tensor = min(tensor, per_node)
        pipeline = max(1, math.ceil(shards / tensor))
        result.append({"setting": "parallel_layout", "value": {"tensor_parallel": tensor, "pipeline_parallel": pipeline},
                       "because": _(
            "memory need %(need)s GiB (peak used, all its GPUs) against %(usable)s GiB usable per GPU: tensor "
            "parallel %(tp)s within the NVLink domain of %(domain)s GPUs, %(pp)s pipeline stage(s) across "
            "nodes") % {"need": round(need / MIB_PER_GIB, 1), "usable": round(usable / MIB_PER_GIB),
                         "tp": tensor, "domain": per_node, "pp": pipeline}})
    return result


def suggest(job: str, since: datetime, until: datetime) -> dict:
    """The job's figures over the window and the settings they suggest."""
    figures = _job_figures(job, since, until)
    return {"job": job, "since": since.isoformat(), "until": until.isoformat(), "figures": figures,
            "suggestions": suggest_from(figures)}
