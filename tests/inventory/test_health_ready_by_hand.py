"""Ready by hand: only an Administrator, only with a reason, and the node says "set by hand" on every page
that shows its state, until a run moves it again. Operators are refused, in the portal and the model."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Node
from appliance.inventory.states import NodeState, StateOverrideRefused


def _failed(node):
    node.transition(NodeState.PROVISIONING, "run #1")
    node.transition(NodeState.FAILED, "run #1 ended, but checks fail: GPU 5 (0000:68:00.0) missing")
    return Node.objects.get(pk=node.pk)


def _transitions():
    return AuditRecord.objects.filter(event="inventory.node.transition", details__to="ready")


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ML_ENGINEER, Role.AUDITOR, Role.VIEWER])
def test_only_an_administrator_may_set_a_failed_node_ready(client_for, inventory, role):
    _failed(inventory.gpu_node)
    client_for(role).post("/inventory/nodes/gpu-01/transition/", {"state": "ready", "reason": "GPU reseated"})
    node = Node.objects.get(pk=inventory.gpu_node.pk)
    assert (node.state, node.state_by_hand) == ("failed", False)
    assert not _transitions().exists()


def test_the_operator_is_told_why(client_for, inventory):
    _failed(inventory.gpu_node)
    response = client_for(Role.OPERATOR).post("/inventory/nodes/gpu-01/transition/",
                                              {"state": "ready", "reason": "GPU reseated"}, follow=True)
    assert ("node state failed to ready without a run is set by hand, which only an Administrator "
            "(nodes.override_state) may do") in response.content.decode()


def test_an_operator_sees_no_ready_button_and_an_administrator_a_form_that_needs_a_reason(client_for, inventory):
    _failed(inventory.gpu_node)
    operator = client_for(Role.OPERATOR).get("/inventory/nodes/gpu-01/").content.decode()
    assert 'data-transition="maintenance"' in operator
    assert 'value="ready"' not in operator and 'data-testid="by-hand"' not in operator
    admin = client_for(Role.ADMINISTRATOR).get("/inventory/nodes/gpu-01/").content.decode()
    assert 'data-by-hand="ready"' in admin
    assert '<input type="text" name="reason" id="id_by_hand_reason" maxlength="2000" required>' in admin


def test_a_reason_is_required(client_for, inventory):
    _failed(inventory.gpu_node)
    response = client_for(Role.ADMINISTRATOR).post("/inventory/nodes/gpu-01/transition/",
                                                   {"state": "ready", "reason": "   "}, follow=True)
    assert "reason: required to set a node ready by hand" in response.content.decode()
    assert Node.objects.get(pk=inventory.gpu_node.pk).state == "failed"
    assert not _transitions().exists()


def test_ready_by_hand_is_recorded_once_and_shown_everywhere(client_for, inventory, users):
    _failed(inventory.gpu_node)
    admin = client_for(Role.ADMINISTRATOR)
    admin.post("/inventory/nodes/gpu-01/transition/", {"state": "ready", "reason": "GPU 5 reseated, checked by hand"})
    node = Node.objects.get(pk=inventory.gpu_node.pk)
    assert (node.state, node.state_by_hand, node.state_set_by, node.state_reason) == (
        "ready", True, users[Role.ADMINISTRATOR].username, "GPU 5 reseated, checked by hand")
    record = _transitions().get()
    assert record.details == {"from": "failed", "to": "ready", "reason": "GPU 5 reseated, checked by hand",
                              "by_hand": True, "set_by": users[Role.ADMINISTRATOR].username}
    assert record.actor_username == users[Role.ADMINISTRATOR].username

    viewer = client_for(Role.VIEWER)
    detail = viewer.get("/inventory/nodes/gpu-01/").content.decode()
    assert '<span class="badge" data-testid="state-by-hand"' in detail and ">set by hand</span>" in detail
    assert "GPU 5 reseated, checked by hand" in detail
    listed = viewer.get("/inventory/nodes/").content.decode().split('data-node="gpu-01"')[1].split("</tr>")[0]
    assert ">set by hand</span>" in listed
    overview = viewer.get("/").content.decode()
    assert 'data-testid="overview-node-gpu-01"' in overview
    assert ">set by hand</span>" in overview.split('data-testid="overview-node-gpu-01"')[1].split("</tr>")[0]
    assert node.state_label == "Ready (set by hand)"


def test_the_next_run_ends_set_by_hand(inventory, users):
    node = _failed(inventory.gpu_node)
    node.transition(NodeState.READY, "reseated", by=users[Role.ADMINISTRATOR])
    node.transition(NodeState.PROVISIONING, "run #2")
    node = Node.objects.get(pk=node.pk)
    assert (node.state, node.state_by_hand, node.state_set_by) == ("provisioning", False, "")


def test_the_model_refuses_ready_without_a_run_from_anyone_without_the_capability(inventory, users):
    node = _failed(inventory.gpu_node)
    for who in (None, users[Role.OPERATOR]):
        with pytest.raises(StateOverrideRefused):
            node.transition(NodeState.READY, "trust me", by=who)
    assert Node.objects.get(pk=node.pk).state == "failed"
    # A run's own move from provisioning needs no one.
    node.transition(NodeState.PROVISIONING, "run #2")
    node.transition(NodeState.READY, "provisioned by run #2")
    assert Node.objects.get(pk=node.pk).state_by_hand is False
