"""Portal pages of the audit log: who may see them, filters and paging, the timeline, the record
detail, the catalogue, and that reading the log is itself recorded."""

from datetime import timedelta

import pytest
from django.test import Client

from appliance import audit
from appliance.audit import catalogue
from appliance.audit.models import AuditRecord
from appliance.core import context
from appliance.core.roles import Role
from appliance.inventory.models import Appliance

pytestmark = pytest.mark.django_db

PAGES = ["/audit/", "/audit/catalogue/", "/audit/users/operator-user/", "/audit/export/"]


@pytest.mark.parametrize("role", [Role.AUDITOR, Role.ADMINISTRATOR])
def test_auditors_and_administrators_see_every_page(client_for, role):
    client = client_for(role)
    record = AuditRecord.objects.order_by("sequence").first()
    for url in [*PAGES, f"/audit/records/{record.sequence}/"]:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ML_ENGINEER, Role.VIEWER])
def test_other_roles_are_refused(client_for, role):
    client = client_for(role)
    for url in [*PAGES, "/audit/records/1/", "/audit/records/1/verify/"]:
        assert client.get(url).status_code == 403, url


def test_anonymous_is_sent_to_the_login_page(db):
    response = Client().get("/audit/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_navigation_offers_the_audit_pages_to_auditors_only(client_for):
    auditor_page = client_for(Role.AUDITOR).get("/").content.decode()
    assert 'data-nav="audit:log"' in auditor_page and 'data-nav="audit:catalogue"' in auditor_page
    operator_page = client_for(Role.OPERATOR).get("/").content.decode()
    assert 'data-nav="audit:log"' not in operator_page


def test_log_page_lists_records_and_records_the_view(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="rack-a")
    response = client_for(Role.AUDITOR).get("/audit/")
    body = response.content.decode()
    assert "inventory.appliance.create" in body and "rack-a" in body
    view = AuditRecord.objects.filter(event="audit.view").latest("sequence")
    assert view.actor_username == "auditor-user" and view.details == {"view": "portal.log"}
    assert view.request_id == response["X-Request-ID"]


def test_filters_narrow_the_log_and_are_recorded_as_a_search(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="by-operator")
    with context.acting_as(users[Role.ADMINISTRATOR], channel="api"):
        Appliance.objects.create(name="by-admin")
    client = client_for(Role.AUDITOR)
    response = client.get("/audit/", {"actor": "operator-user", "event": "inventory.*", "channel": "web",
                                      "outcome": "success"})
    records = response.context["page"].records
    assert [r.target_name for r in records] == ["by-operator"]
    search = AuditRecord.objects.filter(event="audit.search").latest("sequence")
    assert search.details["filters"] == {"actor": "operator-user", "event": "inventory.*", "channel": "web",
                                         "outcome": "success"}

    response = client.get("/audit/", {"target": "by-ad", "event": "inventory.appliance.create"})
    assert [r.target_name for r in response.context["page"].records] == ["by-admin"]


def test_time_range_filter(client_for, users):
    first = audit.record("task.run", target_type="task", target_name="early")
    client = client_for(Role.AUDITOR)
    since = first.timestamp.strftime("%Y-%m-%dT%H:%M:%S.%f")
    # A half-open window, as every export reads it: since <= timestamp < until.
    until = (first.timestamp + timedelta(microseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%f")
    response = client.get("/audit/", {"since": since, "until": until, "event": "task.run"})
    assert [r.sequence for r in response.context["page"].records] == [first.sequence]
    response = client.get("/audit/", {"since": since, "until": since, "event": "task.run"})
    assert response.context["page"].records == []


def test_bad_filter_shows_an_error_and_no_records(client_for):
    response = client_for(Role.AUDITOR).get("/audit/", {"since": "yesterday-ish"})
    assert response.status_code == 200
    assert response.context["page"] is None
    assert "since" in response.context["form"].errors
    assert 'role="alert"' in response.content.decode()


def test_keyset_paging_walks_the_whole_filtered_log(client_for):
    created = [audit.record("task.run", target_type="task", target_name=f"t{i}").sequence for i in range(120)]
    client = client_for(Role.AUDITOR)
    seen, params = [], {"event": "task.run"}
    while True:
        page = client.get("/audit/", params).context["page"]
        seen.extend(r.sequence for r in page.records)
        if page.older_than is None:
            break
        params = {"event": "task.run", "before": page.older_than}
    assert seen == sorted(created, reverse=True)
    assert page.total == 120 and not page.total_is_capped
    # and back up again from the last page
    newer = client.get("/audit/", {"event": "task.run", "after": seen[-1]}).context["page"]
    assert [r.sequence for r in newer.records] == seen[-51:-1]


def test_timeline_shows_one_users_activity(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        Appliance.objects.create(name="mine")
    with context.acting_as(users[Role.ADMINISTRATOR], channel="web"):
        Appliance.objects.create(name="not-mine")
    response = client_for(Role.AUDITOR).get("/audit/users/operator-user/")
    names = [r.target_name for r in response.context["page"].records]
    assert "mine" in names and "not-mine" not in names
    assert all(r.actor_username == "operator-user" for r in response.context["page"].records)
    view = AuditRecord.objects.filter(event="audit.view").latest("sequence")
    assert view.details == {"view": "portal.timeline", "username": "operator-user"}


def test_record_detail_shows_every_field_the_diff_and_the_chain(client_for, users):
    with context.acting_as(users[Role.OPERATOR], channel="web", request_id="req-detail-01"):
        item = Appliance.objects.create(name="detail", description="old text")
        item.description = "new text"
        item.save()
    record = AuditRecord.objects.get(event="inventory.appliance.update", target_id=str(item.pk))
    response = client_for(Role.AUDITOR).get(f"/audit/records/{record.sequence}/")
    body = response.content.decode()
    for value in (record.event, record.hash, record.prev_hash, str(record.uuid), "req-detail-01",
                  "operator-user", "old text", "new text", "matches the content"):
        assert value in body, value
    assert response.context["details"]["changes"] == [("description", "old text", "new text")]
    assert response.context["previous_link"] is True
    assert f'hx-get="/audit/records/{record.sequence}/verify/"' in body
    viewed = AuditRecord.objects.filter(event="audit.view").latest("sequence")
    assert viewed.target_type == "audit.auditrecord" and viewed.target_id == str(record.sequence)


def test_missing_record_is_404(client_for):
    assert client_for(Role.AUDITOR).get("/audit/records/999999/").status_code == 404


def test_catalogue_is_a_coverage_matrix(client_for):
    response = client_for(Role.AUDITOR).get("/audit/catalogue/")
    body = response.content.decode()
    matrix = response.context["matrix"]
    assert matrix["standards"] == list(catalogue.STANDARDS)
    assert {row["name"] for row in matrix["rows"]} == set(catalogue.CATALOGUE)
    for standard in catalogue.STANDARDS:
        assert f"<th>{standard}</th>" in body
    login = next(row for row in matrix["rows"] if row["name"] == "auth.login.failure")
    assert login["ocsf_class"] == 3002 and "AC-7" in login["controls"][0]
    nist = next(s for s in matrix["coverage"] if s["name"] == "NIST SP 800-53")
    ac7 = dict(nist["controls"])["AC-7"]
    assert "auth.login.failure" in ac7 and "auth.lockout" in ac7
    assert 'data-event="inventory.appliance.update"' in body  # model events are in the matrix too


@pytest.mark.parametrize("role", [Role.AUDITOR, Role.ADMINISTRATOR])
def test_no_portal_page_changes_a_record(client_for, role):
    client = client_for(role)
    before = list(AuditRecord.objects.order_by("sequence").values_list("sequence", "hash"))
    sequence = before[0][0]
    for url in ["/audit/", f"/audit/records/{sequence}/", f"/audit/records/{sequence}/verify/",
                "/audit/users/operator-user/", "/audit/catalogue/"]:
        for method in ("post", "put", "patch", "delete"):
            response = getattr(client, method)(url)
            assert response.status_code in (403, 405), (method, url, response.status_code)
    after = dict(AuditRecord.objects.values_list("sequence", "hash"))
    assert all(after[seq] == digest for seq, digest in before)
