"""Web and API requests: state-changing requests and every 401/403 leave records with the
request's id, actor, source address and user agent."""

import re
import time

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role

pytestmark = pytest.mark.django_db

AGENT = "audit-test-agent/1.0"


def records(event, **filters):
    return list(AuditRecord.objects.filter(event=event, **filters).order_by("sequence"))


def test_state_changing_request_is_recorded_with_its_context(users):
    client = Client(headers={"User-Agent": AGENT})
    client.force_login(users[Role.OPERATOR])
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    request_id = response["X-Request-ID"]
    [rec] = records("api.request", request_id=request_id)
    assert rec.outcome == "success"
    assert rec.details == {"method": "POST", "path": "/accounts/logout/", "status": 302,
                           "view": "accounts:logout"}
    assert rec.actor_username == users[Role.OPERATOR].username
    assert rec.channel == "web"
    assert rec.source_address == "127.0.0.1"
    assert rec.user_agent == AGENT
    # The logout itself is recorded too, linked by the same request id.
    [logout] = records("auth.logout", request_id=request_id)
    assert logout.actor_username == users[Role.OPERATOR].username


def test_failed_state_changing_request_is_a_failure(client_for):
    client = client_for(Role.AUDITOR)
    response = client.post("/api/v1/audit/exports/", {"format": "no-such-format"}, content_type="application/json")
    assert response.status_code == 400
    [rec] = records("api.request", request_id=response["X-Request-ID"])
    assert rec.outcome == "failure"
    assert rec.channel == "api"
    assert rec.details["status"] == 400
    assert "format" in rec.reason
    assert rec.actor_username == "auditor-user"


def test_api_403_is_recorded_as_denied_with_the_reason(client_for):
    client = client_for(Role.VIEWER)
    response = client.get("/api/v1/audit/records/", headers={"User-Agent": AGENT})
    assert response.status_code == 403
    [rec] = records("access.denied", request_id=response["X-Request-ID"])
    assert rec.outcome == "denied"
    assert rec.reason == "Your role does not allow this."
    assert rec.actor_username == "viewer-user" and rec.actor_roles == [Role.VIEWER]
    assert rec.channel == "api" and rec.user_agent == AGENT and rec.source_address == "127.0.0.1"
    assert rec.details["method"] == "GET" and rec.details["status"] == 403
    assert rec.target_name == "/api/v1/audit/records/"
    assert not records("api.request", request_id=response["X-Request-ID"])


def flush_finished_minutes():
    """Write the counts of refused anonymous requests as if their minutes were over."""
    from appliance.audit.capture import refusals

    return refusals.flush(now=time.time() + 120)


def test_api_401_of_an_anonymous_caller_is_counted_then_recorded_for_its_source():
    response = Client().delete("/api/v1/audit/records/1/")
    assert response.status_code == 401
    assert not records("access.denied")  # not one record per refusal
    assert flush_finished_minutes() == 1
    [rec] = records("access.anonymous.denied", request_id=response["X-Request-ID"])
    assert rec.outcome == "denied"
    assert rec.actor_id is None and rec.actor_username == ""
    assert rec.source_address == "127.0.0.1"
    assert rec.reason.startswith("1 anonymous request(s) refused from 127.0.0.1 in the minute from ")
    assert rec.reason.endswith("; the first: Authentication credentials were not provided.")
    assert rec.details["count"] == 1 and rec.details["statuses"] == {"401": 1}
    assert rec.details["first"]["method"] == "DELETE" and rec.details["first"]["path"] == "/api/v1/audit/records/1/"


def test_invalid_token_is_counted_as_an_anonymous_refusal():
    response = Client().get("/api/v1/audit/records/", headers={"Authorization": "Token not-a-real-token"})
    assert response.status_code == 401
    flush_finished_minutes()
    [rec] = records("access.anonymous.denied", request_id=response["X-Request-ID"])
    assert rec.details["first"]["reason"] == "Invalid token."


def test_portal_403_keeps_the_permission_denied_message(client_for):
    response = client_for(Role.OPERATOR).get("/audit/")
    assert response.status_code == 403
    [rec] = records("access.denied", request_id=response["X-Request-ID"])
    assert rec.reason == "Your role does not allow this."
    assert rec.channel == "web" and rec.actor_username == "operator-user"
    assert rec.details["view"] == "audit:log"


def test_reads_other_than_the_audit_log_are_not_recorded(client_for):
    client = client_for(Role.OPERATOR)
    before = AuditRecord.objects.count()
    response = client.get("/health/")
    assert response.status_code == 200
    assert AuditRecord.objects.count() == before


def test_client_request_id_is_its_correlation_id_not_the_record_request_id(client_for):
    client = client_for(Role.VIEWER)
    response = client.get("/api/v1/audit/catalogue/", headers={"X-Request-ID": "trace-0123456789"})
    assert response.status_code == 403
    server_id = response["X-Request-ID"]
    assert server_id != "trace-0123456789"
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", server_id)
    assert not records("access.denied", request_id="trace-0123456789")
    [rec] = records("access.denied", request_id=server_id)
    assert rec.details["client_request_id"] == "trace-0123456789"


def test_two_requests_with_the_same_client_id_get_records_of_their_own(client_for):
    client = client_for(Role.VIEWER)
    first = client.get("/api/v1/audit/catalogue/", headers={"X-Request-ID": "same-id-every-time"})
    second = client.get("/api/v1/audit/catalogue/", headers={"X-Request-ID": "same-id-every-time"})
    assert first["X-Request-ID"] != second["X-Request-ID"]
    for response in (first, second):
        assert len(records("access.denied", request_id=response["X-Request-ID"])) == 1


def test_a_malformed_client_request_id_is_dropped(client_for):
    response = client_for(Role.VIEWER).get("/api/v1/audit/catalogue/", headers={"X-Request-ID": "bad id; forged"})
    [rec] = records("access.denied", request_id=response["X-Request-ID"])
    assert "client_request_id" not in rec.details


def test_inventory_edit_through_the_api_records_the_request_and_the_change(users):
    from appliance.accounts.tokens import issue_token
    from appliance.inventory.models import Appliance, Node

    node = Node.objects.create(appliance=Appliance.objects.create(name="api-edit"), name="gpu-77", role="gpu")
    _token, key = issue_token(users[Role.OPERATOR])
    client = Client(headers={"Authorization": f"Token {key}", "User-Agent": AGENT})
    response = client.post(f"/api/v1/inventory/nodes/{node.pk}/transition/", {"state": "maintenance", "reason": "fan"},
                           content_type="application/json")
    assert response.status_code == 200
    request_id = response["X-Request-ID"]
    change = AuditRecord.objects.get(event="inventory.node.transition", request_id=request_id)
    assert change.details == {"from": "new", "to": "maintenance", "reason": "fan"}
    [request_record] = records("api.request", request_id=request_id)
    for rec in (change, request_record):
        assert rec.actor_username == "operator-user" and rec.channel == "api"
        assert rec.source_address == "127.0.0.1" and rec.user_agent == AGENT
    assert request_record.details["status"] == 200 and request_record.outcome == "success"
    assert change.sequence < request_record.sequence

    refused = Client(headers={"Authorization": f"Token {issue_token(users[Role.VIEWER])[1]}"}).post(
        f"/api/v1/inventory/nodes/{node.pk}/transition/", {"state": "ready"}, content_type="application/json")
    assert refused.status_code == 403
    [denied] = records("access.denied", request_id=refused["X-Request-ID"])
    assert denied.actor_username == "viewer-user" and denied.details["method"] == "POST"
    assert not AuditRecord.objects.filter(event="inventory.node.transition", request_id=refused["X-Request-ID"])


def test_inventory_model_save_update_delete_are_recorded_with_the_actor(users):
    from appliance.core import context
    from appliance.inventory.models import BMC, Appliance, Credential, Node

    operator = users[Role.OPERATOR]
    with context.acting_as(operator, channel="web", request_id="req-inventory-edit"):
        node = Node.objects.create(appliance=Appliance.objects.create(name="edits"), name="gpu-88", role="gpu")
        credential = Credential.objects.create(name="edits-bmc", username="root", secret="Old-bmc-secret-1",
                                               endpoints=["https://127.0.0.1:9"])
        bmc = BMC.objects.create(node=node, url="https://127.0.0.1:9/redfish/v1/", credential=credential)
        Node.objects.filter(pk=node.pk).update(management_address="10.0.0.88")
        credential.secret = "New-bmc-secret-2"
        credential.save()
        bmc.url = "https://127.0.0.1:9"
        bmc.save()
        node.delete()
    edits = AuditRecord.objects.filter(request_id="req-inventory-edit")
    assert {r.channel for r in edits} == {"web"} and {r.actor_username for r in edits} == {"operator-user"}
    update = edits.get(event="inventory.node.update")
    assert update.details["changes"]["management_address"] == [None, "10.0.0.88"]
    assert edits.filter(event="inventory.node.delete", target_name="gpu-88").exists()
    assert edits.filter(event="inventory.bmc.delete").exists()  # the cascade is recorded too
    assert edits.filter(event="inventory.bmc.update").exists()
    assert edits.get(event="inventory.credential.update").details["changes"] == {"secret": "[redacted]"}
    dumped = str([r.payload() for r in edits])
    assert "Old-bmc-secret-1" not in dumped and "New-bmc-secret-2" not in dumped
