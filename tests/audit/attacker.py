"""The attacker of the tamper tests: the owner of the tables, with the triggers out of the way."""

from django.db import connection

from appliance.audit import chain
from appliance.audit.models import PAYLOAD_COLUMNS, AuditRecord, payload_from_values


def rewrite_log(*, delete=(), changes=None, drop_checkpoints_from=None):
    """What the owner of the tables can do with the triggers off: delete records and renumber the
    rest, change records, recompute the whole chain after the first change so it is internally
    consistent, delete the checkpoints that would disagree, and set the head to the new tip."""
    changes = changes or {}
    with connection.cursor() as cursor:
        if delete:
            cursor.execute(f"DELETE FROM audit_auditrecord WHERE sequence IN ({', '.join(['%s'] * len(delete))})",
                           list(delete))
        rows = list(AuditRecord.objects.order_by("sequence").values_list(*PAYLOAD_COLUMNS, "hash"))
        prev, first_changed = chain.GENESIS_HASH, None
        for new_sequence, row in enumerate(rows, start=1):
            payload = payload_from_values(row[:-1])
            old_sequence = payload["sequence"]
            payload.update(changes.get(old_sequence, {}))
            payload["sequence"], payload["prev_hash"] = new_sequence, prev
            digest = chain.record_hash(payload)
            if digest != row[-1] or new_sequence != old_sequence:
                first_changed = first_changed or new_sequence
                cursor.execute("UPDATE audit_auditrecord SET sequence = %s, prev_hash = %s, hash = %s, reason = %s, "
                               "outcome = %s WHERE sequence = %s",
                               [new_sequence, prev, digest, payload["reason"], payload["outcome"], old_sequence])
            prev = digest
        cut = drop_checkpoints_from if drop_checkpoints_from is not None else first_changed
        if cut is not None:
            cursor.execute("DELETE FROM audit_auditcheckpoint WHERE tree_size >= %s", [cut])
        cursor.execute("UPDATE audit_chainhead SET sequence = %s, hash = %s WHERE id = 1", [len(rows), prev])
    return len(rows)
