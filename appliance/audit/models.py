"""The audit tables. Rows are only ever inserted: database triggers reject UPDATE and DELETE."""

import uuid

from django.db import models

from . import chain


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    DENIED = "denied", "Denied"


class Channel(models.TextChoices):
    WEB = "web", "Web"
    API = "api", "API"
    CLI = "cli", "CLI"
    TASK = "task", "Task"
    SYSTEM = "system", "System"


class AuditRecord(models.Model):
    sequence = models.BigIntegerField(primary_key=True)
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    timestamp = models.DateTimeField(db_index=True)
    event = models.CharField(max_length=100, db_index=True)
    category = models.CharField(max_length=50)
    severity = models.CharField(max_length=20)
    actor_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    actor_username = models.CharField(max_length=150, blank=True, db_index=True)
    actor_roles = models.JSONField(default=list)
    channel = models.CharField(max_length=10, choices=Channel.choices, db_index=True)
    source_address = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)
    request_id = models.CharField(max_length=128, blank=True, db_index=True)
    action = models.CharField(max_length=30)
    target_type = models.CharField(max_length=100, blank=True, db_index=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_name = models.CharField(max_length=255, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, db_index=True)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["sequence"]

    def __str__(self):
        return f"#{self.sequence} {self.event} {self.outcome}"

    def payload(self) -> dict:
        return {
            "sequence": self.sequence,
            "uuid": str(self.uuid),
            "timestamp": chain.format_timestamp(self.timestamp),
            "event": self.event,
            "category": self.category,
            "severity": self.severity,
            "actor": {"id": self.actor_id, "username": self.actor_username, "roles": list(self.actor_roles)},
            "channel": self.channel,
            "source_address": self.source_address,
            "user_agent": self.user_agent,
            "request_id": self.request_id,
            "action": self.action,
            "target": {"type": self.target_type, "id": self.target_id, "name": self.target_name},
            "outcome": self.outcome,
            "reason": self.reason,
            "details": self.details,
            "prev_hash": self.prev_hash,
        }


class ChainHead(models.Model):
    """The chain's tip, one row: locked by every writer so the chain stays strictly linear.

    A cache of the last record, not evidence: verification recomputes everything from records.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    sequence = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=chain.GENESIS_HASH)
    # Roots of the perfect subtrees of the Merkle tree over records 1..sequence (RFC 6962),
    # largest first, so a checkpoint's root costs O(log n) and not a pass over the log.
    merkle_frontier = models.JSONField(default=list)
    last_checkpoint_sequence = models.BigIntegerField(default=0)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"chain head at #{self.sequence}"
