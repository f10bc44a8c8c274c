"""The portal's lending policy form: an Operator (analytics.change) creates and edits a pool's policy, audited
with its diff; automatic approval stays with the roles that approve plans (pools.approve): an Operator's
form shows it disabled and a forged POST cannot turn it on; bad values name their field and change nothing."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Pool
from appliance.lending.models import LendingPolicy

VALID = {"may_lend": "on", "minimum_nodes": "1", "window_days": ["0", "4"], "window_start_hour": "22",
         "window_end_hour": "7", "reclaim_minutes": "15"}


@pytest.fixture
def pools(db):
    appliance = Appliance.objects.create(name="lab", simulated=True)
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    return training, inference


def policy_records(pool):
    return AuditRecord.objects.filter(event__startswith="lending.lendingpolicy")


def test_an_operator_creates_and_edits_a_policy_audited(pools, client_for):
    training, _ = pools
    operator = client_for(Role.OPERATOR)
    listing = operator.get("/lending/").content.decode()
    assert f'href="/lending/policies/{training.pk}/"' in listing and 'data-testid="set-policy-training"' in listing
    page = operator.get(f"/lending/policies/{training.pk}/")
    assert page.status_code == 200 and b'data-testid="new-policy"' in page.content
    response = operator.post(f"/lending/policies/{training.pk}/", VALID | {"automatic_approval": "on"})
    assert response.status_code == 302 and response["Location"] == "/lending/"
    policy = LendingPolicy.objects.get(pool=training)
    assert (policy.may_lend, policy.minimum_nodes, policy.window_days, policy.window_start_hour,
            policy.window_end_hour, policy.reclaim_minutes, policy.automatic_approval) == (
        True, 1, [0, 4], 22, 7, 15, False)  # automatic approval: not the Operator's to give
    created = AuditRecord.objects.filter(target_type="lending.lendingpolicy").order_by("pk")
    assert [(r.action, r.actor_username) for r in created] == [("create", "operator-user")]
    operator.post(f"/lending/policies/{training.pk}/", VALID | {"minimum_nodes": "2", "window_days": []})
    policy.refresh_from_db()
    assert (policy.minimum_nodes, policy.window_days) == (2, [])
    update = created.last()
    assert (update.action, update.actor_username) == ("update", "operator-user")
    assert update.details["changes"] == {"minimum_nodes": [1, 2], "window_days": [[0, 4], []]}
    assert 'data-testid="edit-policy-training"' in operator.get("/lending/").content.decode()


def test_only_an_approver_sets_automatic_approval(pools, client_for):
    training, _ = pools
    LendingPolicy.objects.create(pool=training, may_lend=True, automatic_approval=True)
    operator = client_for(Role.OPERATOR)
    form = operator.get(f"/lending/policies/{training.pk}/").content.decode()
    assert 'name="automatic_approval"' in form and "disabled" in form.split('name="automatic_approval"')[1][:80]
    operator.post(f"/lending/policies/{training.pk}/", VALID)  # the box unticked: still not the Operator's
    assert LendingPolicy.objects.get(pool=training).automatic_approval is True
    administrator = client_for(Role.ADMINISTRATOR)
    administrator.post(f"/lending/policies/{training.pk}/", VALID)
    assert LendingPolicy.objects.get(pool=training).automatic_approval is False


@pytest.mark.parametrize(("field", "value"), [
    ("window_start_hour", "24"), ("window_end_hour", "0"), ("minimum_nodes", "-1"), ("reclaim_minutes", "0"),
    ("reclaim_minutes", "10081"), ("window_days", ["7"]), ("window_start_hour", "1; rm -rf /"),
])
def test_bad_values_name_their_field_and_change_nothing(pools, client_for, field, value):
    training, _ = pools
    response = client_for(Role.OPERATOR).post(f"/lending/policies/{training.pk}/", VALID | {field: value})
    assert response.status_code == 400
    assert list(response.context["form"].errors) == [field]
    assert not LendingPolicy.objects.exists()
    assert not AuditRecord.objects.filter(target_type="lending.lendingpolicy").exists()


def test_viewer_and_anonymous_cannot_edit(pools, client_for, client):
    training, _ = pools
    viewer = client_for(Role.VIEWER)
    assert viewer.get(f"/lending/policies/{training.pk}/").status_code == 403
    assert viewer.post(f"/lending/policies/{training.pk}/", VALID).status_code == 403
    assert 'data-testid="set-policy-training"' not in viewer.get("/lending/").content.decode()
    assert client.post(f"/lending/policies/{training.pk}/", VALID).status_code in (302, 403)
    assert client_for(Role.OPERATOR).get("/lending/policies/999999/").status_code == 404
    assert not LendingPolicy.objects.exists()
