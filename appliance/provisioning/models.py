"""Provisioning runs: what was asked (stages, nodes, check mode), how each stage went on each host,
the task events Ansible emitted, and the acceptance report.

Run, StageRun, HostResult and the acceptance report are user-meaningful state and are audited like
every other model. TaskEvent is not: it is Ansible's machine output, written once and never changed,
thousands of rows per run; passing each row through the hash chain would make ingestion as slow as
the audit log and fill it with copies of Ansible's stdout. What an auditor needs from a run (who
started it, which stage ended how, which BIOS attribute changed from what to what, who cancelled)
is recorded explicitly by appliance.provisioning.services with audit.record.
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.audit.tracking import AuditedModel
from appliance.core.models import TimestampedModel
from appliance.inventory.models import Appliance, Node

from .states import RUN_FINISHED, RUN_MACHINE, STAGE_FINISHED, STAGE_MACHINE, RunState, StageState


class Run(AuditedModel, TimestampedModel):
    class Kind(models.TextChoices):
        BOOTSTRAP = "bootstrap", _("Bootstrap")
        STAGES = "stages", _("Some stages")
        NODE = "node", _("One stage on some nodes")

    # The heartbeat moves every few seconds; its history is not an action anyone took.
    audit_exclude = ("created", "updated", "heartbeat_at")

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    stages = models.JSONField(default=list, help_text="stage names, in catalogue order")
    node_names = models.JSONField(default=list, blank=True, help_text="nodes to act on; empty means every node")
    dry_run = models.BooleanField(default=False, help_text="check mode: report what would change, change nothing")
    force = models.BooleanField(default=False, help_text="rerun stages an unfinished bootstrap already completed")
    state = models.CharField(max_length=20, choices=RunState.choices, default=RunState.PENDING)
    reason = models.TextField(blank=True, help_text="why the run ended as it did")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="provisioning_runs")
    resumes = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="resumed_by",
                                help_text="the unfinished bootstrap this run continues")
    started = models.DateTimeField(null=True, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker_host = models.CharField(max_length=255, blank=True)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    nodes_before = models.JSONField(default=dict, blank=True,
                                    help_text="each node's state and reason when the run started: where a "
                                              "cancelled run returns the nodes it changed nothing on")
    cancel_requested = models.BooleanField(default=False)
    cancel_requested_by = models.CharField(max_length=150, blank=True)
    failed_stage = models.CharField(max_length=64, blank=True)
    failed_host = models.CharField(max_length=255, blank=True)
    failed_task = models.CharField(max_length=500, blank=True)
    ok_count = models.PositiveIntegerField(default=0)
    changed_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    unreachable_count = models.PositiveIntegerField(default=0)
    skipped_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["appliance", "kind", "-created"], name="run_appliance_kind")]

    def __str__(self):
        return f"run #{self.pk} ({self.get_kind_display()}{', dry run' if self.dry_run else ''})"

    @property
    def finished(self) -> bool:
        return self.state in RUN_FINISHED

    # Runs, stage runs and nodes all say `reason`; `message` is the name the API and older callers use.
    @property
    def message(self) -> str:
        return self.reason

    @message.setter
    def message(self, value: str) -> None:
        self.reason = value

    def transition(self, target: str, reason: str = "", *, also: tuple[str, ...] = (),
                   details: dict | None = None) -> str:
        """Move to `target` if the table allows it (raises InvalidTransition otherwise); one audit record,
        provisioning.run.start or provisioning.run.end. `also`: fields set on the run that are saved with
        the move. Returns the state it left."""
        if target == RunState.RUNNING:
            also = (*also, "worker_host", "worker_pid")
        return RUN_MACHINE.transition(self, target, reason, also=also, details=details)


class StageRun(AuditedModel, TimestampedModel):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stage_runs")
    stage = models.CharField(max_length=64)
    order = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=20, choices=StageState.choices, default=StageState.PENDING)
    hosts = models.JSONField(default=list, blank=True, help_text="inventory hosts the stage ran on")
    reason = models.TextField(blank=True, help_text="failure or skip reason")
    started = models.DateTimeField(null=True, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    carried_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                     help_text="the stage run of an unfinished bootstrap that already completed it")
    strategy = models.CharField(max_length=40, blank=True, help_text="Ansible strategy used")
    private_data_dir = models.CharField(max_length=500, blank=True)
    ansible_pid = models.PositiveIntegerField(null=True, blank=True)
    ok_count = models.PositiveIntegerField(default=0)
    changed_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    unreachable_count = models.PositiveIntegerField(default=0)
    skipped_count = models.PositiveIntegerField(default=0)
    failed_host = models.CharField(max_length=255, blank=True)
    failed_task = models.CharField(max_length=500, blank=True)
    events_emitted = models.PositiveIntegerField(default=0)
    events_stored = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["run", "order"]
        constraints = [models.UniqueConstraint(fields=["run", "stage"], name="stagerun_unique_stage")]

    def __str__(self):
        return f"{self.stage} of run #{self.run_id}"

    @property
    def finished(self) -> bool:
        return self.state in STAGE_FINISHED

    @property
    def message(self) -> str:
        return self.reason

    @message.setter
    def message(self, value: str) -> None:
        self.reason = value

    def transition(self, target: str, reason: str = "") -> str:
        """Move to `target` if the table allows it (raises InvalidTransition otherwise); one audit record,
        provisioning.stage.end when the stage ends. Returns the state it left."""
        return STAGE_MACHINE.transition(self, target, reason)


class HostResult(AuditedModel, TimestampedModel):
    """How one stage went on one host (Ansible's play recap plus the first failure)."""

    stage_run = models.ForeignKey(StageRun, on_delete=models.CASCADE, related_name="host_results")
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="host_results")
    host = models.CharField(max_length=255)
    ok = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    unreachable = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    failed_task = models.CharField(max_length=500, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["stage_run", "host"]
        constraints = [models.UniqueConstraint(fields=["stage_run", "host"], name="hostresult_unique_host")]

    def __str__(self):
        return f"{self.host} in {self.stage_run}"

    @property
    def succeeded(self) -> bool:
        return not (self.failed or self.unreachable)


class TaskEvent(models.Model):
    """One Ansible event, as ansible-runner emitted it (secrets removed). Not audited: see the module."""

    stage_run = models.ForeignKey(StageRun, on_delete=models.CASCADE, related_name="events")
    counter = models.PositiveIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    event = models.CharField(max_length=64)
    host = models.CharField(max_length=255, blank=True)
    play = models.CharField(max_length=500, blank=True)
    task = models.CharField(max_length=500, blank=True)
    role = models.CharField(max_length=255, blank=True)
    changed = models.BooleanField(default=False)
    failed = models.BooleanField(default=False)
    stdout = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField()

    class Meta:
        ordering = ["stage_run", "counter"]
        indexes = [models.Index(fields=["stage_run", "counter"], name="taskevent_stage_counter")]
        constraints = [models.UniqueConstraint(fields=["stage_run", "counter"], name="taskevent_unique_counter")]

    def __str__(self):
        return f"{self.event} #{self.counter}"


class AcceptanceReport(AuditedModel, TimestampedModel):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="acceptance_report")
    passed = models.BooleanField(default=False)
    checks_total = models.PositiveIntegerField(default=0)
    checks_failed = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"acceptance of run #{self.run_id}"


class AcceptanceCheck(AuditedModel, TimestampedModel):
    report = models.ForeignKey(AcceptanceReport, on_delete=models.CASCADE, related_name="checks")
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="acceptance_checks")
    host = models.CharField(max_length=255)
    name = models.CharField(max_length=100, help_text="what is checked, e.g. gpu_count")
    expected = models.JSONField(null=True, blank=True)
    measured = models.JSONField(null=True, blank=True)
    passed = models.BooleanField()
    source = models.TextField(blank=True, help_text="where the expectation comes from")
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["report", "host", "name"]
        constraints = [models.UniqueConstraint(fields=["report", "host", "name"], name="acceptancecheck_unique")]

    def __str__(self):
        return f"{self.name} on {self.host}"
