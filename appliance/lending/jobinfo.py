"""What the training pool's Slurm says about jobs, for the job pages (telemetry.jobinfo.SCHEDULER).

One `scontrol show job` (and sacct where accounting is kept) per appliance the jobs ran on, whatever the
number of jobs; Slurm's times (the client's local time, no zone) become aware datetimes the pages print in
the portal's zone. A job slurmctld has forgotten (it keeps an ended job for MinJobAge when no accounting
is kept) keeps the owner the ledger recorded. A Slurm that did not answer is not asked again for
RETRY_AFTER_S, so that a page does not wait for its timeout each time it is read.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from . import slurmctl

# A Slurm job id: digits, an array task's _index, a heterogeneous job's +offset (a service's name is not one).
SLURM_JOB = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,9}|\+[0-9]{1,4})?$")
RETRY_AFTER_S = 60.0
_failed: dict[int, tuple[float, str]] = {}


def _job_fields(line: str) -> dict[str, str]:
    """The key=value fields of one `scontrol --oneliner show job` line, the first of each key."""
    fields: dict[str, str] = {}
    for key, value in slurmctl.job_pairs(line):
        fields.setdefault(key, value)
    return fields


def _job_facts(job: str, fields: dict[str, str], nodes: list[str]) -> dict:
    gpus = slurmctl._gpu_count(fields.get("JOB_GRES", "")) or slurmctl._gpu_count(fields.get("TRES", ""))
    when = {key: (None if fields.get(key) in (None, "", "Unknown", "None") else fields[key])
            for key in ("SubmitTime", "StartTime", "EndTime")}
    state = fields.get("JobState", "")
    unfinished = state in slurmctl.UNFINISHED_STATES
    return {"job": job, "user": fields.get("UserId", "").split("(", 1)[0], "name": fields.get("JobName", ""),
            "partition": fields.get("Partition", ""), "nodes": nodes, "gpus": gpus, "gpu_indices": {},
            "submit": when["SubmitTime"], "start": when["StartTime"], "end": None if unfinished else when["EndTime"],
            "limit_end": when["EndTime"] if unfinished else None, "state": state,
            "exit_code": None if unfinished else fields.get("ExitCode") or None, "source": "scontrol"}


def jobs_known(appliance, job_ids: list[str]) -> dict[str, dict]:
    """{job id: what Slurm says about it} for the jobs named, in two commands whatever their number: one
    `scontrol --oneliner show job` (every job slurmctld knows: pending, running, and ended ones for
    MinJobAge), then sacct for the others where accounting is kept (an error there, as on a cluster without
    accounting storage, only leaves them out). Each entry has slurmctl.job_details' keys (but gpu_indices,
    and `nodes` is Slurm's host list expression) and submit and exit_code. The ids are checked by the caller."""
    wanted = set(job_ids)
    if not wanted:
        return {}
    found = {}
    for line in slurmctl._client(appliance, "scontrol", "--oneliner", "show", "job").splitlines():
        fields = _job_fields(line.strip())
        job = fields.get("JobId", "")
        if job in wanted:
            found[job] = _job_facts(job, fields, [fields["NodeList"]] if fields.get("NodeList") else [])
    missing = sorted(wanted - set(found))
    if missing:
        try:
            output = slurmctl._client(
                appliance, "sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={','.join(missing)}",
                "--format=JobID,User,JobName,Partition,NodeList,AllocTRES,Submit,Start,End,State,ExitCode")
        except slurmctl.SlurmCommandError:
            output = ""
        for row in output.splitlines():
            values = row.split("|")
            if len(values) == 11 and values[0] in wanted:
                state = values[9].split(" ", 1)[0]
                found.setdefault(values[0], {
                    "job": values[0], "user": values[1], "name": values[2], "partition": values[3],
                    "nodes": [values[4]] if values[4] and values[4] != "None assigned" else [],
                    "gpus": slurmctl._gpu_count(values[5]), "gpu_indices": {},
                    **{key: None if value in ("Unknown", "None", "") else value
                       for key, value in (("submit", values[6]), ("start", values[7]), ("end", values[8]))},
                    "limit_end": None, "state": state,
                    "exit_code": None if state in slurmctl.UNFINISHED_STATES else values[10] or None,
                    "source": "sacct"})
    return found


def _aware(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value).astimezone() if value else None
    except ValueError:
        return None


def exit_text(code: str | None) -> str:
    """Slurm's "status:signal" as read: "0", "1", "0, signal 9"."""
    if not code:
        return ""
    status, _, signal = code.partition(":")
    return status if signal in ("", "0") else f"{status}, signal {signal}"


def scheduler_facts(job_ids, node_names=(), user=None) -> dict:
    """{"jobs": {job id: facts}, "error": why Slurm could not be asked, or ""} for the Slurm job ids among
    `job_ids`, asked of the appliances of `node_names` (every appliance when none is named)."""
    from appliance.analytics.models import JobOwner
    from appliance.inventory.models import Appliance

    wanted = sorted({job for job in job_ids if job and SLURM_JOB.fullmatch(job)})
    if not wanted:
        return {"jobs": {}, "error": ""}
    appliances = Appliance.objects.order_by("pk")
    if node_names:
        appliances = appliances.filter(nodes__name__in=list(node_names)).distinct()
    found: dict[str, dict] = {}
    errors = []
    for appliance in appliances:
        missing = [job for job in wanted if job not in found]
        if not missing:
            break
        failed_at, error = _failed.get(appliance.pk, (-RETRY_AFTER_S, ""))
        if time.monotonic() - failed_at < RETRY_AFTER_S:
            errors.append(error)
            continue
        try:
            known = jobs_known(appliance, missing)
        except slurmctl.SlurmCommandError as exc:
            _failed[appliance.pk] = (time.monotonic(), f"{appliance.name}: {exc}")
            errors.append(_failed[appliance.pk][1])
            continue
        _failed.pop(appliance.pk, None)
        for job, facts in known.items():
            found[job] = facts | {key: _aware(facts.get(key)) for key in ("submit", "start", "end", "limit_end")} | {
                "exit": exit_text(facts.get("exit_code")), "known": True}
    owners = dict(JobOwner.objects.filter(job__in=[job for job in wanted if job not in found])
                  .exclude(user="").values_list("job", "user"))
    for job, owner in owners.items():
        found[job] = {"job": job, "user": owner, "known": False}
    return {"jobs": found, "error": "; ".join(errors)}
