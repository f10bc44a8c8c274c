"""Retention: archiving the oldest records, under dual control.

1. An Administrator asks for records older than a cut-off (itself older than the retention floor)
   to be archived, and shows a bundle exported of exactly that range, which must verify.
2. A different Administrator approves: one whose account existed, as an Administrator, before the
   request, and which the requester did not make (directly or through accounts they made), so that
   one person holding one Administrator account cannot be both.
3. Archiving re-verifies the bundle and the live log, signs a tombstone (range, count, Merkle root of
   the range, last hash, frontier of the tree) and removes the records, in one transaction: the one
   DELETE the database triggers let through, because the tombstone covering it now exists.
Each step records its audit event.

The retention floor (days records are kept at least) is the appliance's setting in its database
(core.ApplianceSetting), changed by an Administrator with `audit retention floor`, recorded; it is
never read from the environment of whoever calls, where anyone could lower it for one command.
"""

import hashlib
import json
from datetime import timedelta
from pathlib import Path

from django.db import connection, transaction
from django.utils import timezone

from appliance.accounts.services import ApproverNotIndependent, require_independent_approver
from appliance.core.conflicts import StateConflict
from appliance.core.models import ApplianceSetting
from appliance.core.roles import can

from . import chain, merkle, services, signing, triggers
from .checkpoints import prefix_frontier
from .models import AuditRecord, AuditTombstone, ChainHead, RetentionRequest, RetentionState
from .verify import MANIFEST_NAME, level_root, verify_bundle
from .verify_database import verify_database


class RetentionError(ValueError):
    pass


class RetentionNotIndependent(RetentionError, StateConflict):
    """The one four-eyes rule refuses the approver (accounts.services.require_independent_approver), as the
    lifecycle and lending refuse theirs (appliance.core.conflicts); `field` names the account at fault
    ("approver" or "requester"), as the message does first."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


FLOOR_SETTING = "audit.retention_days"
DEFAULT_FLOOR_DAYS = 3 * 365
MAX_FLOOR_DAYS = 100 * 365


def retention_floor_days() -> int:
    """Days a record is kept at least: the appliance's setting, or the default until one is set."""
    stored = ApplianceSetting.objects.filter(name=FLOOR_SETTING).values_list("value", flat=True).first()
    return DEFAULT_FLOOR_DAYS if stored is None else int(stored)


def set_retention_floor(days: int, user) -> int:
    """Set the retention floor (an Administrator; recorded with the old and new value)."""
    _require_administrator(user, "user")
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_FLOOR_DAYS:
        raise RetentionError(f"days: a whole number from 0 to {MAX_FLOOR_DAYS}, not {days!r}")
    with transaction.atomic():
        setting = ApplianceSetting.objects.select_for_update().filter(name=FLOOR_SETTING).first()
        old = DEFAULT_FLOOR_DAYS if setting is None else int(setting.value)
        ApplianceSetting.objects.update_or_create(name=FLOOR_SETTING, defaults={"value": days})
        services.record("audit.retention.floor", target_type="core.appliancesetting", target_id=FLOOR_SETTING,
                        target_name=FLOOR_SETTING, actor=user, details={"days": [old, days]})
    return days


def _require_administrator(user, role: str) -> None:
    if not can(user, "audit.retention"):
        raise RetentionError(f"{role}: {getattr(user, 'username', user)!r} is not an active Administrator")


def _first_remaining() -> int:
    tombstone = AuditTombstone.objects.order_by("-last_sequence").first()
    return tombstone.last_sequence + 1 if tombstone else 1


def _check_bundle(bundle: Path, first: int, last: int) -> str:
    """The bundle must verify and hold exactly records first..last as they are in the database.
    Returns the manifest's SHA-256."""
    result = verify_bundle(bundle)
    if not result.ok:
        raise RetentionError(f"bundle: {bundle} does not verify: {result.first}")
    if result.selection:
        raise RetentionError(f"bundle: {bundle} is a filtered export, not the whole range; archive only "
                             f"an export made without a filter")
    if (result.first_sequence, result.last_sequence) != (first, last):
        raise RetentionError(f"bundle: {bundle} holds records #{result.first_sequence}..#{result.last_sequence}, "
                             f"the range to archive is #{first}..#{last}")
    if result.key_id != signing.load_signing_key().key_id:
        raise RetentionError(f"bundle: {bundle} is signed with key {result.key_id}, not this appliance's key")
    manifest_bytes = (bundle / MANIFEST_NAME).read_bytes()
    manifest = json.loads(manifest_bytes)
    stored = dict(AuditRecord.objects.filter(sequence__in=(first, last)).values_list("sequence", "hash"))
    if manifest["range"]["first_hash"] != stored.get(first) or manifest["range"]["last_hash"] != stored.get(last):
        raise RetentionError(f"bundle: {bundle} does not match the records in the database")
    return hashlib.sha256(manifest_bytes).hexdigest()


def request_retention(user, cutoff, bundle) -> RetentionRequest:
    """Ask to archive every remaining record older than `cutoff`, showing their verified export."""
    _require_administrator(user, "requester")
    floor = retention_floor_days()
    limit = timezone.now() - timedelta(days=floor)
    if cutoff > limit:
        raise RetentionError(f"cutoff: records are kept {floor} days; the cut-off must "
                             f"be {chain.format_timestamp(limit)} or earlier")
    first = _first_remaining()
    last = (AuditRecord.objects.filter(sequence__gte=first, timestamp__lt=cutoff)
            .order_by("-sequence").values_list("sequence", flat=True).first())
    if last is None:
        raise RetentionError("cutoff: no remaining record is older than the cut-off")
    with transaction.atomic():
        open_request = RetentionRequest.objects.select_for_update().filter(
            state__in=(RetentionState.REQUESTED, RetentionState.APPROVED)).first()
        if open_request is not None:
            raise RetentionError(f"{open_request} is still open: archive it first")
        bundle = Path(bundle).resolve()
        manifest_sha256 = _check_bundle(bundle, first, last)
        hashes = dict(AuditRecord.objects.filter(sequence__in=(first, last)).values_list("sequence", "hash"))
        request = RetentionRequest.objects.create(
            state=RetentionState.REQUESTED, cutoff=cutoff, first_sequence=first, last_sequence=last,
            count=last - first + 1, first_hash=hashes[first], last_hash=hashes[last], export_path=str(bundle),
            export_manifest_sha256=manifest_sha256, requested_by=user, requested_by_username=user.get_username(),
            requested_at=timezone.now())
        services.record("audit.retention.request", target=request, actor=user, details={
            "first_sequence": first, "last_sequence": last, "count": request.count,
            "cutoff": chain.format_timestamp(cutoff), "bundle": str(bundle), "manifest_sha256": manifest_sha256})
    return request


def approve_retention(request_id: int, user) -> RetentionRequest:
    _require_administrator(user, "approver")
    try:
        with transaction.atomic():
            request = _locked(request_id)
            if request.state != RetentionState.REQUESTED:
                raise RetentionError(f"{request} is {request.state}, not awaiting approval")
            _require_independent_approver(request, user)
            request.state = RetentionState.APPROVED
            request.approved_by, request.approved_by_username = user, user.get_username()
            request.approved_at = timezone.now()
            request.save()
            services.record("audit.retention.approve", target=request, actor=user, details={
                "first_sequence": request.first_sequence, "last_sequence": request.last_sequence,
                "requested_by": request.requested_by_username})
    except RetentionNotIndependent as exc:
        # Recorded outside the refused transaction, which would take the record with it.
        services.record("audit.retention.approve", target=request, actor=user, outcome="failure", reason=str(exc),
                        details={"field": exc.field, "first_sequence": request.first_sequence,
                                 "last_sequence": request.last_sequence, "requested_by": request.requested_by_username})
        raise
    return request


def _require_independent_approver(request: RetentionRequest, user) -> None:
    """The one four-eyes rule (accounts.services): a second Administrator, independent of the requester."""
    try:
        require_independent_approver(user, request.requested_by, since=request.requested_at, what="archiving",
                                     second="a second Administrator")
    except ApproverNotIndependent as exc:
        raise RetentionNotIndependent(str(exc), exc.field) from None


def _locked(request_id: int) -> RetentionRequest:
    request = RetentionRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise RetentionError(f"retention request #{request_id} does not exist")
    return request


def archive_retention(request_id: int, user) -> AuditTombstone:
    """Remove the approved range, leaving a signed tombstone."""
    _require_administrator(user, "archiver")
    live = verify_database(record_event=False)
    if not live.ok:
        raise RetentionError(f"the live log does not verify ({live.first}): nothing is archived")
    with transaction.atomic():
        ChainHead.objects.select_for_update().filter(pk=1).first()
        request = _locked(request_id)
        if request.state != RetentionState.APPROVED:
            raise RetentionError(f"{request} is {request.state}, not approved")
        first, last = request.first_sequence, request.last_sequence
        if first != _first_remaining():
            raise RetentionError(f"{request} no longer starts at the oldest remaining record")
        bundle = Path(request.export_path)
        if _check_bundle(bundle, first, last) != request.export_manifest_sha256:
            raise RetentionError(f"bundle: {bundle} changed since the request")
        rows = list(AuditRecord.objects.filter(sequence__gte=first, sequence__lte=last)
                    .order_by("sequence").values_list("sequence", "prev_hash", "hash"))
        if len(rows) != request.count:
            raise RetentionError(f"records #{first}..#{last} are incomplete in the database")
        frontier = prefix_frontier(last)
        key = signing.load_signing_key()
        tombstone = AuditTombstone(
            first_sequence=first, last_sequence=last, count=len(rows), first_prev_hash=rows[0][1],
            last_hash=rows[-1][2], range_root=level_root([chain.merkle_leaf(r[2]) for r in rows]).hex(),
            tree_root=merkle.frontier_root(frontier).hex(), frontier=merkle.frontier_to_json(frontier),
            export_manifest_sha256=request.export_manifest_sha256, timestamp=timezone.now(), key_id=key.key_id)
        tombstone.signature = key.sign(chain.signed_statement(tombstone.statement()))
        tombstone.save(force_insert=True)
        with connection.cursor() as cursor:
            triggers.allow_archive(cursor, connection.vendor, tombstone.pk)
            cursor.execute("DELETE FROM audit_auditrecord WHERE sequence BETWEEN %s AND %s", [first, last])
            removed = cursor.rowcount
        if removed != request.count:
            raise RetentionError(f"expected to remove {request.count} records, removed {removed}: nothing archived")
        request.state = RetentionState.ARCHIVED
        request.archived_at = timezone.now()
        request.tombstone = tombstone
        request.save()
        services.record("audit.retention.archive", target=request, actor=user, details={
            "first_sequence": first, "last_sequence": last, "count": removed, "range_root": tombstone.range_root,
            "last_hash": tombstone.last_hash, "tombstone": tombstone.pk, "approved_by": request.approved_by_username})
    return tombstone


def list_requests():
    return RetentionRequest.objects.order_by("-requested_at")
