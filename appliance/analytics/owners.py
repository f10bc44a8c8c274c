"""Who ran a job: the ledger's `user`, from the scheduler.

The collectors report the job that holds a GPU (a Slurm job id, or an inference service's name), not its
owner. For each Slurm job id the ledger meets, `users_of` asks the training pool's Slurm once (squeue, then
sacct where accounting is kept: lending.slurmctl.job_users, the same client the lending plans use) and
keeps the answer in JobOwner; the ledger copies it into every row of the job. A job Slurm no longer knows
when asked is kept with a blank user and not asked again; when Slurm cannot be reached the jobs stay
unknown and are asked again, at most every RETRY_AFTER_S (so a controller that is down does not cost each
attribution run its timeout). An inference service has no Slurm owner: its user stays blank.

A user found after the job's rows were written (Slurm was down at first) is copied into those rows too,
and the Efficiency summaries are summed again from the first hour changed.
"""

from __future__ import annotations

import logging
import re
import time

from django.db import transaction
from django.db.models import Min

from .models import CauseHour, JobOwner

log = logging.getLogger(__name__)

# A Slurm job id as squeue prints it: digits, an array task's _index, a heterogeneous job's +offset.
SLURM_JOB = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,9}|\+[0-9]{1,4})?$")
RETRY_AFTER_S = 300.0
_failed_at: dict[int, float] = {}


def _appliances(node_ids):
    from appliance.inventory.models import Appliance

    return list(Appliance.objects.filter(nodes__pk__in=list(node_ids)).distinct().order_by("pk"))


def users_of(jobs, node_ids) -> dict[str, str]:
    """{job: user} for the jobs named (those Slurm could name; others absent), asking Slurm about the Slurm
    job ids not asked before, on the appliances of the nodes given."""
    from appliance.lending import slurmctl

    jobs = {job for job in jobs if job and SLURM_JOB.fullmatch(job)}  # a service's name has no Slurm owner
    known = dict(JobOwner.objects.filter(job__in=sorted(jobs)).values_list("job", "user"))
    ask = sorted(jobs - set(known))
    if ask:
        found: dict[str, str] = {}
        answered = False
        for appliance in _appliances(node_ids):
            if time.monotonic() - _failed_at.get(appliance.pk, -RETRY_AFTER_S) < RETRY_AFTER_S:
                continue
            try:
                found |= slurmctl.job_users(appliance, ask)
                answered = True
            except slurmctl.SlurmCommandError as exc:
                _failed_at[appliance.pk] = time.monotonic()
                log.warning("job owners: Slurm of appliance %s did not answer: %s", appliance.name, exc)
        if answered:
            found = {job: user[:150] for job, user in found.items()}  # the column's length
            _remember(ask, found)
            known |= {job: found.get(job, "") for job in ask}
    return {job: user for job, user in known.items() if user}


def _remember(asked: list[str], found: dict[str, str]) -> None:
    from .models import SummaryState

    with transaction.atomic():
        JobOwner.objects.bulk_create(
            [JobOwner(job=job, user=found.get(job, ""), source="squeue/sacct" if job in found else "unknown")
             for job in asked], ignore_conflicts=True)
        first = None
        for job, user in found.items():
            rows = CauseHour.objects.filter(job=job, user="")
            hour = rows.aggregate(first=Min("hour"))["first"]
            if hour is not None:
                rows.update(user=user)
                first = hour if first is None else min(first, hour)
        if first is not None:  # the summaries read the user: sum them again from that hour
            SummaryState.objects.filter(ledger_until__gt=first).update(ledger_until=first)
