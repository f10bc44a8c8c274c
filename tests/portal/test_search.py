"""The frame's global search: what each role finds, the bounds on a query, bad input."""

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.provisioning.models import Run

pytestmark = pytest.mark.django_db


def hits(response, section: str) -> list[str]:
    found = response.context["sections"]
    by_key = {s.key: s for s in found}
    return [hit.label for hit in by_key[section].hits] if section in by_key else None


def sections(response) -> set[str]:
    return {s.key for s in response.context["sections"]}


def test_nodes_by_name_and_gpus_by_uuid_or_pci_address(client_for, inventory):
    client = client_for(Role.VIEWER)
    response = client.get("/search/", {"q": "gpu-0"})
    assert response.status_code == 200
    assert hits(response, "nodes") == ["gpu-01", "gpu-02"]
    by_uuid = client.get("/search/", {"q": "GPU-gpu-02-0003"})
    assert hits(by_uuid, "gpus") == ["gpu-02 GPU 3"]
    # 0000:18:00.0 + 0x10 per index: index 2 is 0000:38:00.0; upper case is found too
    by_pci = client.get("/search/", {"q": "0000:38:00.0"})
    assert hits(by_pci, "gpus") == ["gpu-01 GPU 2", "gpu-02 GPU 2"]
    html = by_uuid.content.decode()
    assert '<a href="/inventory/nodes/gpu-02/">gpu-02 GPU 3</a>' in html
    assert 'action="/search/"' in html  # the box is in the frame


def test_runs_by_number_or_kind(client_for, inventory):
    first = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["os"])
    second = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.BOOTSTRAP, stages=["os"])
    client = client_for(Role.OPERATOR)
    assert hits(client.get("/search/", {"q": f"#{first.pk}"}), "runs") == [f"#{first.pk} Some stages"]
    assert hits(client.get("/search/", {"q": "bootstrap"}), "runs") == [f"#{second.pk} Bootstrap"]


def test_viewer_finds_no_audit_records_and_no_users(client_for, inventory, users):
    response = client_for(Role.VIEWER).get("/search/", {"q": "operator"})
    assert sections(response) == {"nodes", "gpus", "runs"}
    assert "operator-user" not in response.content.decode().split('id="main"', 1)[1]


def test_auditor_finds_audit_records_but_not_users(client_for, inventory, users):
    record = AuditRecord.objects.order_by("-sequence").first()
    client = client_for(Role.AUDITOR)
    response = client.get("/search/", {"q": f"#{record.sequence}"})
    assert sections(response) == {"nodes", "gpus", "runs", "audit"}
    assert hits(response, "audit") == [f"#{record.sequence} {record.event}"]
    # ML engineers see no runs either (they do not hold provisioning.view)
    assert sections(client_for(Role.ML_ENGINEER).get("/search/", {"q": "x"})) == {"nodes", "gpus"}


def test_administrator_finds_users_and_records_by_actor(client_for, users):
    client = client_for(Role.ADMINISTRATOR)
    response = client.get("/search/", {"q": "auditor"})
    assert hits(response, "users") == ["auditor-user"]
    assert sections(response) == {"nodes", "gpus", "runs", "audit", "users"}


def test_results_are_bounded(client_for, inventory):
    response = client_for(Role.VIEWER).get("/search/", {"q": "GPU-gpu"})  # 16 GPUs match
    section = {s.key: s for s in response.context["sections"]}["gpus"]
    assert len(section.hits) == 10 and section.more is True
    assert "Only the first 10 are shown" in response.content.decode()


@pytest.mark.parametrize("query", ["<script>", "a" * 101, "x;drop table"])
def test_bad_input_is_one_clear_error(client_for, query):
    response = client_for(Role.VIEWER).get("/search/", {"q": query})
    assert response.status_code == 400
    assert response.context["error"].startswith("Search (q): ")
    assert 'data-testid="search-error"' in response.content.decode()


def test_empty_query_shows_the_form_only(client_for):
    response = client_for(Role.VIEWER).get("/search/", {"q": "  "})
    assert response.status_code == 200 and response.context["sections"] == []


def test_anonymous_is_sent_to_the_login_page():
    response = Client().get("/search/", {"q": "gpu"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_one_query_per_kind_whatever_the_inventory(client_for, inventory, django_assert_max_num_queries):
    client = client_for(Role.ADMINISTRATOR)
    client.get("/search/", {"q": "gpu"})  # warm the session
    # session + user, one bounded query for each of the five kinds, the session's idle-timeout update (3)
    with django_assert_max_num_queries(10):
        response = client.get("/search/", {"q": "gpu"})
    assert response.status_code == 200
