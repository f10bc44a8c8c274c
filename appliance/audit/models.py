"""The audit tables. Records, checkpoints and tombstones are only ever inserted: database triggers
reject UPDATE and DELETE (see triggers.py); the one DELETE they let through is archiving a range
that a signed tombstone already covers."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from . import chain
from .tracking import AuditedModel


class Outcome(models.TextChoices):
    # The values are what records, exports and the API say; the labels are the portal's.
    SUCCESS = "success", _("Success")
    FAILURE = "failure", _("Failure")
    DENIED = "denied", _("Denied")


class Channel(models.TextChoices):
    WEB = "web", _("Web")
    API = "api", "API"
    CLI = "cli", _("CLI")
    TASK = "task", _("Task")
    SYSTEM = "system", _("System")


class AuditRecord(models.Model):
    """One record of the log. Every index costs every append, so there are few, each serving a
    filter of the audit pages: the filters read newest first, so each index ends in the sequence
    and a page is a short ordered scan. Channel and outcome (a handful of values) get no index of
    their own; the rare outcomes (denied, failure) get a partial one. The UUID and the hash are
    unique by construction (UUID4; SHA-256 over content that includes the sequence) and are not
    looked up, so no unique index maintains them on every append."""

    sequence = models.BigIntegerField(primary_key=True)
    uuid = models.UUIDField(default=uuid.uuid4, editable=False)
    timestamp = models.DateTimeField()
    event = models.CharField(max_length=100)
    category = models.CharField(max_length=50)
    severity = models.CharField(max_length=20)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_username = models.CharField(max_length=150, blank=True)
    actor_roles = models.JSONField(default=list)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    source_address = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)
    request_id = models.CharField(max_length=128, blank=True)
    action = models.CharField(max_length=30)
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_name = models.CharField(max_length=255, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["sequence"]
        indexes = [
            # Time windows (since/until, exports, retention): the log is appended in time order.
            models.Index(fields=["timestamp"], name="audit_record_time"),
            models.Index(fields=["event", "sequence"], name="audit_record_event"),
            models.Index(fields=["actor_username", "sequence"], name="audit_record_actor"),
            models.Index(fields=["actor_id", "sequence"], name="audit_record_actor_id"),
            models.Index(fields=["target_type", "target_id", "sequence"], name="audit_record_target"),
            models.Index(fields=["request_id"], name="audit_record_request"),
            models.Index(fields=["outcome", "sequence"], condition=~models.Q(outcome="success"),
                         name="audit_record_not_success"),
        ]

    def __str__(self):
        return f"#{self.sequence} {self.event} {self.outcome}"

    def payload(self) -> dict:
        return payload_from_values(tuple(getattr(self, name) for name in PAYLOAD_COLUMNS))


# The columns a record's payload is built from, in this order (a values_list() over them feeds
# payload_from_values without building model instances: exports and verification read millions).
PAYLOAD_COLUMNS = (
    "sequence", "uuid", "timestamp", "event", "category", "severity", "actor_id", "actor_username",
    "actor_roles", "channel", "source_address", "user_agent", "request_id", "action", "target_type",
    "target_id", "target_name", "outcome", "reason", "details", "prev_hash",
)


def payload_from_values(values: tuple) -> dict:
    (sequence, record_uuid, timestamp, event, category, severity, actor_id, actor_username, actor_roles,
     channel, source_address, user_agent, request_id, action, target_type, target_id, target_name,
     outcome, reason, details, prev_hash) = values
    return {
        "sequence": sequence,
        "uuid": str(record_uuid),
        "timestamp": chain.format_timestamp(timestamp),
        "event": event,
        "category": category,
        "severity": severity,
        "actor": {"id": actor_id, "username": actor_username, "roles": list(actor_roles)},
        "channel": channel,
        "source_address": source_address,
        "user_agent": user_agent,
        "request_id": request_id,
        "action": action,
        "target": {"type": target_type, "id": target_id, "name": target_name},
        "outcome": outcome,
        "reason": reason,
        "details": details,
        "prev_hash": prev_hash,
    }


class ChainHead(models.Model):
    """The chain's tip, one small row: every append moves it in the same statement as its insert,
    on condition that it still names the record the writer chained to (compare and swap), so the
    chain stays strictly linear and a record written around `record()` lies past the head.

    A cache of the last record, not evidence: verification recomputes everything from records.
    It is kept small on purpose: it is rewritten once per record, and a wide row (it once carried
    the Merkle frontier) made that rewrite the most expensive part of an append. Checkpoints get
    their frontier from the previous checkpoint plus the records since (see checkpoints.py), and
    their cadence from the settings and the last checkpoint, never from this row. A trigger lets
    the row move only forward, onto the records it names (triggers.py).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    sequence = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=chain.GENESIS_HASH)

    def __str__(self):
        return f"chain head at #{self.sequence}"


class AuditCheckpoint(models.Model):
    """A signed tree head: the Merkle root and the chain's hash after `tree_size` records.

    The signature (Ed25519, key outside the database) covers `statement()`; the frontier is kept so
    exports and proofs start from the nearest checkpoint instead of the first record.
    """

    tree_size = models.BigIntegerField(unique=True)
    root_hash = models.CharField(max_length=64)
    last_hash = models.CharField(max_length=64)
    frontier = models.JSONField(default=list)
    timestamp = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=128)

    class Meta:
        ordering = ["tree_size"]

    def __str__(self):
        return f"checkpoint at #{self.tree_size} ({self.root_hash[:12]})"

    def statement(self) -> dict:
        return chain.checkpoint_statement(tree_size=self.tree_size, root_hash=self.root_hash,
                                          last_hash=self.last_hash,
                                          timestamp=chain.format_timestamp(self.timestamp), key_id=self.key_id)

    def signed(self) -> dict:
        """The statement with its signature: what exports carry and verifiers check."""
        return {**self.statement(), "signature": self.signature}


class AuditTombstone(models.Model):
    """What archiving left in place of records first_sequence..last_sequence: their count, the
    Merkle root of that range, the last hash (the next record's prev_hash) and the frontier of the
    whole tree at last_sequence, signed, so the remaining log still verifies end to end."""

    first_sequence = models.BigIntegerField(unique=True)
    last_sequence = models.BigIntegerField(unique=True)
    count = models.BigIntegerField()
    first_prev_hash = models.CharField(max_length=64)
    last_hash = models.CharField(max_length=64)
    range_root = models.CharField(max_length=64)
    tree_root = models.CharField(max_length=64)
    frontier = models.JSONField(default=list)
    export_manifest_sha256 = models.CharField(max_length=64)
    timestamp = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=128)

    class Meta:
        ordering = ["first_sequence"]

    def __str__(self):
        return f"tombstone #{self.first_sequence}..#{self.last_sequence}"

    def statement(self) -> dict:
        return chain.tombstone_statement(
            first_sequence=self.first_sequence, last_sequence=self.last_sequence, count=self.count,
            first_prev_hash=self.first_prev_hash, last_hash=self.last_hash, range_root=self.range_root,
            tree_root=self.tree_root, frontier=self.frontier, export_manifest_sha256=self.export_manifest_sha256,
            timestamp=chain.format_timestamp(self.timestamp), key_id=self.key_id)

    def signed(self) -> dict:
        return {**self.statement(), "signature": self.signature}


class AuditKeyRotation(models.Model):
    """The signing key changed after `tree_size` records: the statement names both keys (ids and
    public keys) and is signed by both, so a verifier who trusts either key trusts the other, and
    checkpoints signed before and after the change all verify. Append-only, like the records."""

    old_key_id = models.CharField(max_length=16)
    old_public_key = models.TextField()
    new_key_id = models.CharField(max_length=16, unique=True)
    new_public_key = models.TextField()
    tree_size = models.BigIntegerField()
    timestamp = models.DateTimeField()
    old_signature = models.CharField(max_length=128)
    new_signature = models.CharField(max_length=128)

    class Meta:
        ordering = ["timestamp", "id"]

    def __str__(self):
        return f"key rotation {self.old_key_id} -> {self.new_key_id} after #{self.tree_size}"

    def statement(self) -> dict:
        return chain.key_rotation_statement(
            old_key_id=self.old_key_id, old_public_key=self.old_public_key, new_key_id=self.new_key_id,
            new_public_key=self.new_public_key, tree_size=self.tree_size,
            timestamp=chain.format_timestamp(self.timestamp))

    def signed(self) -> dict:
        return {**self.statement(), "old_signature": self.old_signature, "new_signature": self.new_signature}


class RetentionState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    APPROVED = "approved", "Approved"
    ARCHIVED = "archived", "Archived"


class RetentionRequest(AuditedModel):
    """Archiving of the oldest records: asked by one Administrator with a verified export of exactly
    that range, approved by another, then carried out (records removed, tombstone left)."""

    state = models.CharField(max_length=10, choices=RetentionState.choices, default=RetentionState.REQUESTED)
    cutoff = models.DateTimeField()
    first_sequence = models.BigIntegerField()
    last_sequence = models.BigIntegerField()
    count = models.BigIntegerField()
    first_hash = models.CharField(max_length=64)
    last_hash = models.CharField(max_length=64)
    export_path = models.CharField(max_length=1024)
    export_manifest_sha256 = models.CharField(max_length=64)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    requested_by_username = models.CharField(max_length=150)
    requested_at = models.DateTimeField()
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    approved_by_username = models.CharField(max_length=150, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    tombstone = models.OneToOneField(AuditTombstone, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="request")

    class Meta:
        ordering = ["-requested_at"]

    def __str__(self):
        return f"retention #{self.pk} of records #{self.first_sequence}..#{self.last_sequence} ({self.state})"
