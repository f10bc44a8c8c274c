"""Lending whole nodes between pools for a time: each pool's policy, the plans, and every step a plan took.

A plan's states and the transitions allowed between them are one table (TRANSITIONS), as a node's are in
inventory: nothing moves a plan except `LendingPlan.transition`, which refuses any other move.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from appliance.audit.tracking import AuditedModel
from appliance.core.models import TimestampedModel
from appliance.inventory.models import Appliance, Pool


class LendingPolicy(AuditedModel, TimestampedModel):
    """What a pool may lend, when, and how fast it must get its nodes back. A pool without a policy lends
    nothing."""

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="lending_policy")
    may_lend = models.BooleanField(default=False, help_text="nodes of this pool may be lent to another pool")
    minimum_nodes = models.PositiveIntegerField(default=1, help_text="nodes the pool keeps whatever is lent")
    # Weekdays as Python numbers them (0 Monday .. 6 Sunday); empty: every day.
    window_days = models.JSONField(default=list, blank=True, help_text="weekdays a window may start (0=Monday)")
    window_start_hour = models.PositiveSmallIntegerField(default=0, help_text="0-23, local time")
    window_end_hour = models.PositiveSmallIntegerField(default=24, help_text="1-24; below the start: the next day")
    reclaim_minutes = models.PositiveIntegerField(
        default=30, help_text="how long a drain or a reclaim may wait for running work before requeueing it")
    automatic_approval = models.BooleanField(
        default=False, help_text="plans lending this pool's nodes are approved by the policy itself")

    class Meta:
        verbose_name = _("lending policy")
        verbose_name_plural = _("lending policies")

    def __str__(self):
        return f"lending policy of {self.pool}"

    @property
    def any_time(self) -> bool:
        return self.window_start_hour == 0 and self.window_end_hour == 24 and set(self.window_days or range(7)) == set(range(7))


class PlanState(models.TextChoices):
    PROPOSED = "proposed", _("Proposed")
    APPROVED = "approved", _("Approved")
    DRAINING = "draining", _("Draining")
    MOVED = "moved", _("Moved")
    ACTIVE = "active", _("Active (lent)")
    RECLAIMING = "reclaiming", _("Reclaiming")
    RETURNED = "returned", _("Returned")
    REJECTED = "rejected", _("Rejected")
    ROLLED_BACK = "rolled-back", _("Rolled back")
    FAILED = "failed", _("Failed")


S = PlanState
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PROPOSED: frozenset({S.APPROVED, S.REJECTED}),
    S.APPROVED: frozenset({S.DRAINING, S.ROLLED_BACK, S.FAILED}),
    S.DRAINING: frozenset({S.MOVED, S.ROLLED_BACK, S.FAILED}),
    S.MOVED: frozenset({S.ACTIVE, S.RECLAIMING, S.ROLLED_BACK, S.FAILED}),
    S.ACTIVE: frozenset({S.RECLAIMING, S.ROLLED_BACK, S.FAILED}),
    S.RECLAIMING: frozenset({S.RETURNED, S.ROLLED_BACK, S.FAILED}),
    S.FAILED: frozenset({S.ROLLED_BACK}),
    S.RETURNED: frozenset(),
    S.REJECTED: frozenset(),
    S.ROLLED_BACK: frozenset(),
}
# A node is in one plan at a time: any plan in these states holds its nodes.
HOLDING = frozenset({S.PROPOSED, S.APPROVED, S.DRAINING, S.MOVED, S.ACTIVE, S.RECLAIMING, S.FAILED})
FINISHED = frozenset({S.RETURNED, S.REJECTED, S.ROLLED_BACK})


class LendingPlan(models.Model):
    """Nodes of one pool lent to another for a window. Not an AuditedModel: each change of state is one
    explicit audit event (lending.plan.*), not a field diff."""

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="lending_plans")
    from_pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="plans_lending")
    to_pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="plans_borrowing")
    nodes = models.JSONField(default=list, help_text="node names, sorted")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    reason = models.TextField()
    state = models.CharField(max_length=16, choices=PlanState.choices, default=PlanState.PROPOSED)
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="lending_plans_proposed")
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="lending_plans_approved")
    approved_automatically = models.BooleanField(default=False)
    finding = models.ForeignKey("analytics.Finding", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="lending_plans")
    # When the current wait (drain, reclaim) gives up waiting for running work and requeues it.
    deadline = models.DateTimeField(null=True, blank=True)
    # The provisioning run (workloads stage on the plan's nodes) the plan waits for, if any.
    run_id = models.PositiveIntegerField(null=True, blank=True)
    reclaim_requested = models.BooleanField(default=False)
    message = models.TextField(blank=True, help_text="the last step's outcome, or why the plan failed")
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self):
        return f"lending plan #{self.pk}"

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class PlanStep(models.Model):
    """One thing a plan did (or tried): what, when, with what outcome and what it found."""

    class Outcome(models.TextChoices):
        SUCCESS = "success", _("Success")
        FAILURE = "failure", _("Failure")
        SKIPPED = "skipped", _("Skipped")
        WAITING = "waiting", _("Waiting")

    plan = models.ForeignKey(LendingPlan, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=PlanState.choices, help_text="the plan's state after the step")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self):
        return f"{self.plan} {self.name}: {self.outcome}"
