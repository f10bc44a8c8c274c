"""Partition plans: what the planner proposed for an appliance's GPUs, and which plan a partitioning run
applied. The layout the GPUs have now is not stored here: it is what NVML reported, kept by the
partitioning stage in each node's facts (`mig_instances`, `time_slicing`), read by layout.py.
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.audit.tracking import AuditedModel
from appliance.core.models import TimestampedModel
from appliance.inventory.models import Appliance


class Plan(AuditedModel, TimestampedModel):
    class State(models.TextChoices):
        DRAFT = "draft", _("Draft")
        APPLYING = "applying", _("Applying")
        APPLIED = "applied", _("Applied")
        FAILED = "failed", _("Failed")
        SUPERSEDED = "superseded", _("Superseded")

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="partition_plans")
    number = models.PositiveIntegerField(help_text="1, 2, ... per appliance")
    description = models.CharField(max_length=200, blank=True)
    # The planner's input: the requests as given (list of dicts, see planner.py) and the GPUs planned
    # for ([{id, model, pool}]), and the layout it was planned against.
    requests = models.JSONField(default=list, blank=True)
    gpus = models.JSONField(default=list, blank=True)
    current = models.JSONField(default=list, blank=True)
    # The planner's output (gpus, placed, unplaced, served_weight, disruption).
    result = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=12, choices=State.choices, default=State.DRAFT)
    # The plan that was applied when this one was made: applying it again is the rollback.
    previous = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    run = models.ForeignKey("provisioning.Run", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="partition_plans")
    # Every run that carried this plan, dry runs included (the partitioning stage finds its plan here);
    # `run` above is the one that applied it.
    runs = models.ManyToManyField("provisioning.Run", blank=True, related_name="partition_plans_carried")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    applied_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["appliance", "-number"]
        constraints = [models.UniqueConstraint(fields=["appliance", "number"], name="partition_plan_unique_number")]

    def __str__(self):
        return f"partition plan {self.number} of {self.appliance}"
