import pytest

from appliance.core.roles import CAPABILITIES, Role, can


@pytest.mark.django_db
def test_auditor_reads_and_exports_audit_but_changes_nothing(make_user):
    auditor = make_user(Role.AUDITOR)
    assert can(auditor, "audit.view") and can(auditor, "audit.export")
    # accounts.self: one's own password and tokens, no data of the appliance.
    writes = [c for c in CAPABILITIES if not c.endswith(".view") and c not in ("audit.export", "accounts.self")]
    assert writes and not any(can(auditor, c) for c in writes)


@pytest.mark.django_db
def test_inactive_user_has_no_capability(make_user):
    admin = make_user(Role.ADMINISTRATOR)
    admin.is_active = False
    admin.save()
    assert not can(admin, "portal.view")


def test_unknown_capability_is_a_programming_error():
    with pytest.raises(KeyError):
        can(None, "inventory.fly")
