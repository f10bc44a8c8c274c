"""What analytics keeps: the attributed GPU-seconds per hour (the Efficiency page, the reports and the API
read these, never the per-minute verdicts again), how far attribution has come, and the findings
(recommendations) it made.

`CauseHour` is the ledger of "where did the GPU-hours go": one row per hour, GPU (or MIG instance) and the
job that held it (blank: none), with the GPU-seconds of each cause (rules.LABELS, and "no data": a minute
of a listed GPU with no line) weighted by the share of the GPU the row measures (a 1g.10gb instance counts
1/7); gpu_seconds includes the seconds with no data, so the causes add up to it. Pool and user are copied in when the row is
written, so a node lent to another pool later does not rewrite history. Attribution is incremental
(`AttributionCursor`): each run judges the minutes after the last one it finished and adds them in.

Rows are derived measurements, not actions; they are not audited one by one (attribution runs, findings
and what a person did with them are).
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.inventory.models import Node

CAUSE_FIELDS = {
    "busy": "busy_s",
    "idle-unallocated": "idle_unallocated_s",
    "allocated-idle": "allocated_idle_s",
    "input-bound": "input_bound_s",
    "communication-bound": "communication_bound_s",
    "straggler": "straggler_s",
    "throttled": "throttled_s",
    "memory-only": "memory_only_s",
    "no-data": "no_data_s",
}
# "no data" is a cause of the ledger, not of the rules: a minute of a GPU the inventory lists for which no
# line came (the collector silent, the line lost). With it every GPU-second of the range has one cause.
NO_DATA = "no-data"


class CauseHour(models.Model):
    """GPU-seconds of one GPU (or MIG instance) in one hour, by cause, for one holder (job or none)."""

    hour = models.DateTimeField(help_text="start of the hour (UTC)")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="cause_hours")
    gpu = models.PositiveSmallIntegerField()
    instance = models.SmallIntegerField(default=-1, help_text="MIG GPU instance id; -1: the whole GPU")
    job = models.CharField(max_length=100, blank=True, help_text="Slurm job id or inference service; blank: none")
    pool = models.CharField(max_length=64, blank=True, help_text="the node's pool when the hour was attributed")
    user = models.CharField(max_length=150, blank=True, help_text="the job's owner, where the scheduler said")
    gpu_seconds = models.FloatField(default=0.0, help_text="seconds measured, weighted by the GPU share")
    used_seconds = models.FloatField(default=0.0, help_text="gpu_seconds weighted by utilization")
    busy_s = models.FloatField(default=0.0)
    idle_unallocated_s = models.FloatField(default=0.0)
    allocated_idle_s = models.FloatField(default=0.0)
    input_bound_s = models.FloatField(default=0.0)
    communication_bound_s = models.FloatField(default=0.0)
    straggler_s = models.FloatField(default=0.0)
    throttled_s = models.FloatField(default=0.0)
    memory_only_s = models.FloatField(default=0.0)
    no_data_s = models.FloatField(default=0.0, help_text="seconds of a listed GPU with no line (no data)")
    memory_held_mib_s = models.FloatField(default=0.0, help_text="GPU memory of the holder, MiB x seconds")
    memory_used_mib_s = models.FloatField(default=0.0, help_text="GPU memory it filled, MiB x seconds")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hour", "node", "gpu", "instance", "job"],
                                               name="analytics_cause_hour_key")]
        indexes = [models.Index(fields=["hour"], name="analytics_cause_hour"),
                   models.Index(fields=["job", "hour"], name="analytics_cause_job"),
                   models.Index(fields=["pool", "hour"], name="analytics_cause_pool")]

    def __str__(self):
        return f"{self.node_id}/{self.gpu}:{self.instance} {self.hour:%Y-%m-%d %H}:00 {self.job or '-'}"


class AttributionCursor(models.Model):
    """How far attribution has come: every minute bucket before `attributed_until` is in CauseHour."""

    name = models.CharField(max_length=32, unique=True, default="rollups")
    attributed_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_run_seconds = models.FloatField(default=0.0)
    last_run_buckets = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"{self.name}: until {self.attributed_until}"


class Finding(models.Model):
    """One recommendation: what analytics found (kind, subject, evidence) and what it proposes, and what a
    person did with it. A finding that is found again while open is updated, not duplicated (`key`)."""

    class Kind(models.TextChoices):
        INPUT_BOUND = "input-bound", _("Input-bound job")
        COMMUNICATION_BOUND = "communication-bound", _("Communication-bound job")
        STRAGGLER = "straggler", _("Straggler GPU or node")
        ALLOCATED_IDLE = "allocated-idle", _("Allocated but idle")
        MEMORY_ONLY = "memory-only", _("Memory held, compute idle")
        THROTTLED = "throttled", _("Throttled GPU")
        POOL_IDLE = "pool-idle", _("Idle pool capacity to lend")
        PROFILE = "profile", _("Suggested settings")

    class State(models.TextChoices):
        OPEN = "open", _("Open")
        ACCEPTED = "accepted", _("Accepted")
        DISMISSED = "dismissed", _("Dismissed")
        RESOLVED = "resolved", _("Resolved")

    key = models.CharField(max_length=200, unique=True, help_text="kind and subject: one finding per subject")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    subject = models.CharField(max_length=200, help_text="what it is about: a job, a service, a GPU, a pool")
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="findings")
    job = models.CharField(max_length=100, blank=True)
    pool = models.CharField(max_length=64, blank=True)
    severity = models.FloatField(default=0.0, help_text="GPU-hours at stake in the window")
    summary = models.TextField(help_text="one sentence with the figures")
    proposal = models.TextField(help_text="what to do")
    evidence = models.JSONField(default=dict, blank=True)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="why it was dismissed (required), or a note on accepting")

    class Meta:
        indexes = [models.Index(fields=["state", "-severity"], name="analytics_finding_open")]
        ordering = ["-severity", "-last_seen"]

    def __str__(self):
        return f"{self.kind}: {self.subject}"


class _Sums(models.Model):
    """The sums of CauseHour's figures over a group of its rows (the Efficiency page reads these)."""

    gpu_seconds = models.FloatField(default=0.0)
    allocated_seconds = models.FloatField(default=0.0, help_text="gpu_seconds of the rows a job held")
    used_seconds = models.FloatField(default=0.0)
    busy_s = models.FloatField(default=0.0)
    idle_unallocated_s = models.FloatField(default=0.0)
    allocated_idle_s = models.FloatField(default=0.0)
    input_bound_s = models.FloatField(default=0.0)
    communication_bound_s = models.FloatField(default=0.0)
    straggler_s = models.FloatField(default=0.0)
    throttled_s = models.FloatField(default=0.0)
    memory_only_s = models.FloatField(default=0.0)
    no_data_s = models.FloatField(default=0.0)
    memory_held_mib_s = models.FloatField(default=0.0)
    memory_used_mib_s = models.FloatField(default=0.0)

    class Meta:
        abstract = True


class PoolUserHour(_Sums):
    """CauseHour summed per hour, pool and user (a few thousand rows a day where the ledger has 192,000 at
    1,000 nodes): derived, rewritten by services.refresh_summary for the hours the ledger changed."""

    hour = models.DateTimeField()
    pool = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=150, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hour", "pool", "user"], name="analytics_pooluserhour_key")]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H}:00 {self.pool or '-'} {self.user or '-'}"


class JobTotal(_Sums):
    """CauseHour summed per job over its whole life (the jobs that left the most idle), with its first and
    last hour; derived like PoolUserHour."""

    job = models.CharField(max_length=100, unique=True)
    pool = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=150, blank=True)
    first_hour = models.DateTimeField()
    last_hour = models.DateTimeField()
    idle_seconds = models.FloatField(default=0.0, help_text="gpu_seconds less busy_s")

    class Meta:
        indexes = [models.Index(fields=["last_hour"], name="analytics_jobtotal_last")]

    def __str__(self):
        return self.job


class SummaryState(models.Model):
    """How far the summaries are: the ledger's cursor and its highest row id when they were last written."""

    name = models.CharField(max_length=32, unique=True, default="efficiency")
    ledger_until = models.DateTimeField(null=True, blank=True)
    last_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.name}: ledger until {self.ledger_until}, row {self.last_id}"


class JobOwner(models.Model):
    """Who ran a Slurm job, as the scheduler said (squeue, or sacct where accounting is kept) when the
    ledger first met the job in the telemetry: the ledger's rows copy it. `user` blank: Slurm no longer
    knew the job when asked (it is not asked again)."""

    job = models.CharField(max_length=100, unique=True)
    user = models.CharField(max_length=150, blank=True)
    source = models.CharField(max_length=16, help_text="squeue/sacct, or unknown")
    asked_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.job}: {self.user or '-'}"
