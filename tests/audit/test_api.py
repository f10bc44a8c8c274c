"""REST API of the audit log: read-only records with filters and cursor paging, per-record
verification, the catalogue, exports; and that nobody, an Administrator included, can change or
delete a record through the API or the Django admin."""

import io
import zipfile

import pytest
from django.test import Client

from appliance import audit
from appliance.audit import catalogue
from appliance.audit.models import AuditRecord
from appliance.core import context
from appliance.core.roles import Role
from appliance.inventory.models import Appliance

pytestmark = pytest.mark.django_db


def api_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_list_is_newest_first_in_the_hashed_shape(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="api", request_id="req-api-list-1"):
        item = Appliance.objects.create(name="listed")
    response = client_for(Role.AUDITOR).get("/api/v1/audit/records/", {"request_id": "req-api-list-1"})
    assert response.status_code == 200
    [row] = response.json()["results"]
    record = AuditRecord.objects.get(request_id="req-api-list-1")
    assert row["sequence"] == record.sequence and row["hash"] == record.hash and row["prev_hash"] == record.prev_hash
    assert row["actor"] == {"id": users[Role.OPERATOR].pk, "username": "operator-user", "roles": [Role.OPERATOR]}
    assert row["target"] == {"type": "inventory.appliance", "id": str(item.pk), "name": "listed"}
    assert row["event"] == "inventory.appliance.create" and row["channel"] == "api"
    assert row["details"]["after"]["name"] == "listed"
    search = AuditRecord.objects.filter(event="audit.search").latest("sequence")
    assert search.details == {"view": "api.records", "filters": {"request_id": "req-api-list-1"}}
    assert search.actor_username == "auditor-user" and search.channel == "api"


def test_filters_match_the_portal(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="op-made")
    audit.record("access.denied", outcome="denied", reason="no", target_type="url", target_name="/x/")
    client = client_for(Role.ADMINISTRATOR)
    denied = client.get("/api/v1/audit/records/", {"outcome": "denied", "event": "access."}).json()["results"]
    assert denied and all(r["outcome"] == "denied" and r["event"].startswith("access.") for r in denied)
    by_actor = client.get("/api/v1/audit/records/", {"actor": "operator-user", "target_type": "inventory.appliance"})
    assert [r["target"]["name"] for r in by_actor.json()["results"]] == ["op-made"]


def test_bad_filter_is_a_400_naming_the_field(client_for):
    response = client_for(Role.AUDITOR).get("/api/v1/audit/records/", {"until": "not a date"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["status"] == 400 and "until" in body["error"]["fields"]


def test_cursor_paging_covers_every_record_once(client_for):
    created = {audit.record("task.run", target_type="task", target_name=f"p{i}").sequence for i in range(30)}
    client = client_for(Role.AUDITOR)
    url, seen = "/api/v1/audit/records/?event=task.run&page_size=7", []
    while url:
        body = client.get(url).json()
        seen.extend(r["sequence"] for r in body["results"])
        url = body["next"]
    assert seen == sorted(created, reverse=True)


def test_detail_and_404(client_for):
    record = AuditRecord.objects.order_by("sequence").first()
    client = client_for(Role.AUDITOR)
    body = client.get(f"/api/v1/audit/records/{record.sequence}/").json()
    assert body["uuid"] == str(record.uuid) and body["hash"] == record.hash
    viewed = AuditRecord.objects.filter(event="audit.view").latest("sequence")
    assert viewed.details == {"view": "api.record"} and viewed.target_id == str(record.sequence)
    assert client.get("/api/v1/audit/records/99999999/").status_code == 404


def test_verify_endpoint_checks_the_inclusion_proof_against_a_signed_checkpoint(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="to-verify")
    record = AuditRecord.objects.get(event="inventory.appliance.create", target_name="to-verify")
    response = client_for(Role.AUDITOR).get(f"/api/v1/audit/records/{record.sequence}/verify/")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["sequence"] == record.sequence
    assert body["checkpoint"]["tree_size"] >= record.sequence and body["checkpoint"]["signature"]
    assert body["proof"]["leaf_index"] == record.sequence - 1
    assert body["proof"]["root_hash"] == body["checkpoint"]["root_hash"]
    verified = AuditRecord.objects.filter(event="audit.verify").latest("sequence")
    assert verified.actor_username == "auditor-user" and verified.outcome == "success"


def test_portal_verify_button_fragment(client_for):
    record = AuditRecord.objects.order_by("sequence").first()
    response = client_for(Role.ADMINISTRATOR).get(f"/audit/records/{record.sequence}/verify/",
                                                  headers={"HX-Request": "true"})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-ok="true"' in body and "intact" in body and "audit_path" in body


def test_catalogue_endpoint(client_for):
    body = client_for(Role.AUDITOR).get("/api/v1/audit/catalogue/").json()
    assert body["standards"] == list(catalogue.STANDARDS)
    events = {e["name"]: e for e in body["events"]}
    assert set(events) == set(catalogue.CATALOGUE)
    assert events["auth.lockout"]["ocsf_class"] == 3002
    assert "PCI DSS 4.0" in events["auth.lockout"]["controls"]


@pytest.mark.parametrize("role", [Role.AUDITOR, Role.ADMINISTRATOR])
def test_export_downloads_a_bundle_and_is_recorded(client_for, users, role):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="exported")
    response = client_for(role).post("/api/v1/audit/exports/", {"format": "jsonl"}, content_type="application/json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-jsonl-')
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    names = archive.namelist()
    assert any(n.endswith("manifest.json") for n in names)
    assert any(b"exported" in archive.read(n) for n in names if not n.endswith("manifest.json"))
    exported = AuditRecord.objects.filter(event="audit.export").latest("sequence")
    assert exported.actor_username == users[role].username and exported.channel == "api"
    assert exported.request_id == response["X-Request-ID"]
    download = response["Content-Disposition"].split('filename="')[1].rstrip('"')
    assert exported.target_name == f"download {download}"  # not the temporary folder it was packed in


def test_portal_export_page_downloads_a_bundle(client_for):
    response = client_for(Role.AUDITOR).post("/audit/export/", {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert any(n.endswith(".csv") for n in archive.namelist())
    assert AuditRecord.objects.filter(event="audit.export", channel="web").exists()


def test_export_rejects_a_bad_range(client_for):
    response = client_for(Role.AUDITOR).post(
        "/api/v1/audit/exports/", {"format": "jsonl", "since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"},
        content_type="application/json")
    assert response.status_code == 400 and "until" in response.json()["error"]["fields"]
    page = client_for(Role.AUDITOR).post("/audit/export/", {"format": "jsonl", "since": "2030-01-02T00:00",
                                                            "until": "2030-01-01T00:00"})
    assert page.status_code == 400 and "must be later than" in page.content.decode()


def test_export_of_an_empty_range_is_refused_with_the_reason(client_for):
    response = client_for(Role.AUDITOR).post(
        "/api/v1/audit/exports/", {"format": "cef", "since": "2001-01-01T00:00:00Z", "until": "2001-01-02T00:00:00Z"},
        content_type="application/json")
    assert response.status_code == 400
    assert "no records in that time range" in response.json()["error"]["message"]
    page = client_for(Role.AUDITOR).post("/audit/export/", {"format": "cef", "since": "2001-01-01T00:00",
                                                            "until": "2001-01-02T00:00"})
    assert page.status_code == 400 and "no records in that time range" in page.content.decode()
    failed = AuditRecord.objects.filter(event="api.request", request_id=page["X-Request-ID"]).get()
    assert failed.outcome == "failure"


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ML_ENGINEER, Role.VIEWER])
def test_other_roles_cannot_read_or_export(client_for, role):
    client = client_for(role)
    assert client.get("/api/v1/audit/records/").status_code == 403
    assert client.get("/api/v1/audit/catalogue/").status_code == 403
    assert client.post("/api/v1/audit/exports/", {"format": "jsonl"}, content_type="application/json").status_code == 403


def test_anonymous_gets_401(db):
    assert Client().get("/api/v1/audit/records/").status_code == 401


@pytest.mark.parametrize("role", [Role.AUDITOR, Role.ADMINISTRATOR])
def test_no_api_route_changes_or_deletes_a_record(client_for, role):
    client = client_for(role)
    record = AuditRecord.objects.order_by("sequence").first()
    before = list(AuditRecord.objects.order_by("sequence").values_list("sequence", "hash"))
    body = {"outcome": "success", "reason": "", "details": {}, "event": "auth.login.success"}
    detail = f"/api/v1/audit/records/{record.sequence}/"
    attempts = [("post", "/api/v1/audit/records/"), ("put", detail), ("patch", detail), ("delete", detail),
                ("post", detail), ("post", f"{detail}verify/"), ("delete", f"{detail}verify/"),
                ("put", "/api/v1/audit/catalogue/"), ("post", "/api/v1/audit/catalogue/"),
                ("delete", "/api/v1/audit/catalogue/"), ("put", "/api/v1/audit/exports/"),
                ("delete", "/api/v1/audit/exports/")]
    for method, url in attempts:
        response = getattr(client, method)(url, body, content_type="application/json")
        assert response.status_code in (403, 405), (method, url, response.status_code)
    after = dict(AuditRecord.objects.values_list("sequence", "hash"))
    assert all(after.get(seq) == digest for seq, digest in before)
    assert AuditRecord.objects.get(sequence=record.sequence).payload() == record.payload()


def test_django_admin_offers_no_way_to_change_or_delete(client_for):
    client = client_for(Role.ADMINISTRATOR)
    record = AuditRecord.objects.order_by("sequence").first()
    base = "/django-admin/audit/auditrecord/"
    assert client.get(base, {"outcome__exact": "success"}).status_code == 200  # readable, and the read recorded
    search = AuditRecord.objects.filter(event="audit.search").latest("sequence")
    assert search.details == {"view": "admin.changelist", "filters": {"outcome__exact": "success"}}
    assert client.get(f"{base}{record.sequence}/change/").status_code == 200
    viewed = AuditRecord.objects.filter(event="audit.view").latest("sequence")
    assert viewed.details == {"view": "admin.record"} and viewed.target_id == str(record.sequence)
    assert client.get(f"{base}add/").status_code == 403
    assert client.post(f"{base}add/", {"event": "auth.login.success"}).status_code == 403
    assert client.post(f"{base}{record.sequence}/change/", {"reason": "edited"}).status_code == 403
    assert client.get(f"{base}{record.sequence}/delete/").status_code == 403
    assert client.post(f"{base}{record.sequence}/delete/", {"post": "yes"}).status_code == 403
    changelist = client.get(base).content.decode()
    assert "delete_selected" not in changelist
    response = client.post(base, {"action": "delete_selected", "_selected_action": [record.sequence], "post": "yes"})
    assert response.status_code in (200, 302, 403)
    assert AuditRecord.objects.get(sequence=record.sequence).payload() == record.payload()
