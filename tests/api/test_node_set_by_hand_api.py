"""Ready without a run through the API: an Administrator with a reason, and the node says so."""

import json

import pytest
from django.test import Client

from appliance.core.roles import Role
from appliance.inventory.models import Node

pytestmark = pytest.mark.django_db


def post(client, node, body):
    return client.post(f"/api/v1/inventory/nodes/{node.pk}/transition/", data=json.dumps(body),
                       content_type="application/json")


@pytest.fixture
def failed(inventory):
    node = inventory.gpu_node
    node.state = "failed"
    node.save()
    return node


def login(users, role) -> Client:
    client = Client()
    client.force_login(users[role])
    return client


def test_an_administrator_sets_ready_by_hand_and_the_node_says_who(users, failed):
    admin = login(users, Role.ADMINISTRATOR)
    response = post(admin, failed, {"state": "ready", "reason": "GPU 5 reseated, nvidia-smi shows 8"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["state_by_hand"], body["state_set_by"]) == ("ready", True, "administrator-user")
    assert body["state_reason"] == "GPU 5 reseated, nvidia-smi shows 8"
    assert body["state_label"] == "Ready (set by hand)"
    listed = admin.get(f"/api/v1/inventory/nodes/?name={failed.name}").json()["results"][0]
    assert (listed["state_by_hand"], listed["state_set_by"]) == (True, "administrator-user")


def test_ready_by_hand_needs_a_reason_and_an_administrator(users, failed):
    response = post(login(users, Role.ADMINISTRATOR), failed, {"state": "ready"})
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"reason": ["reason: required to set a node ready by hand"]}
    response = post(login(users, Role.OPERATOR), failed, {"state": "ready", "reason": "looks fine"})
    assert response.status_code == 403 and response.json()["error"]["code"] == "set_by_hand_refused"
    assert Node.objects.get(pk=failed.pk).state == "failed"
