"""The acceptance report page, its HTML and JSON exports through the portal and the API: every check of
the latest report per node with expected, measured, result and source; filters; an audit record per
export; access by role."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.provisioning.models import AcceptanceCheck, AcceptanceReport, Run
from tests.access import AccessMatrix, Endpoint


def acceptance_run(appliance, checks):
    """A finished run with an acceptance report of `checks`: (host, name, expected, measured, passed)."""
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["acceptance"], state="succeeded")
    report = AcceptanceReport.objects.create(run=run)
    for host, name, expected, measured, passed in checks:
        AcceptanceCheck.objects.create(report=report, host=host, name=name, expected=expected, measured=measured,
                                       passed=passed, source="firmware/platforms/hgx-h100-8gpu.yaml:71",
                                       message="" if passed else f"{name}: below the gate")
    return run


@pytest.fixture
def reports(appliance):
    older = acceptance_run(appliance, [
        ("gpu01", "nccl.all_reduce_busbw", ">= 460 GB/s", 300.0, False),
        ("gpu02", "nccl.all_reduce_busbw", ">= 460 GB/s", 471.5, True),
        ("gpu02", "gpu.count", 8, 8, True),
    ])
    newer = acceptance_run(appliance, [  # gpu01 measured again, alone
        ("gpu01", "nccl.all_reduce_busbw", ">= 460 GB/s", 470.2, True),
        ("gpu01", "ib_write_bw.mlx5_0", ">= 380 Gb/s", 200.0, False),
    ])
    return older, newer


def exports():
    return list(AuditRecord.objects.filter(event="provisioning.acceptance.export").order_by("sequence"))


def test_the_page_lists_the_latest_checks_per_node_and_filters(reports, client_for):
    older, newer = reports
    page = client_for(Role.VIEWER).get(reverse("provisioning:acceptance")).content.decode()
    assert page.count('data-testid="check-row"') == 4  # gpu01 from the newer run, gpu02 from the older
    # Measured numbers carry the unit of their bound.
    assert "470.2 GB/s" in page and "300 GB/s" not in page
    assert "firmware/platforms/hgx-h100-8gpu.yaml:71" in page and "200 Gb/s" in page and "&gt;= 380 Gb/s" in page
    assert 'data-testid="verdict">FAILED' in page
    failed = client_for(Role.VIEWER).get(reverse("provisioning:acceptance"), {"result": "failed"}).content.decode()
    assert failed.count('data-testid="check-row"') == 1 and "ib_write_bw.mlx5_0" in failed
    gpu02 = client_for(Role.VIEWER).get(reverse("provisioning:acceptance"), {"node": "gpu02"}).content.decode()
    assert gpu02.count('data-testid="check-row"') == 2 and 'data-testid="acceptance-node-gpu01"' not in gpu02
    unknown = client_for(Role.VIEWER).get(reverse("provisioning:acceptance"), {"node": "nowhere"}, follow=True)
    assert "node: &#x27;nowhere&#x27; has no acceptance report" in unknown.content.decode()
    assert not exports(), "viewing the page is not an export"


def test_portal_exports_html_and_json_each_audited(reports, client_for, appliance):
    client = client_for(Role.AUDITOR)
    html = client.get(reverse("provisioning:acceptance-export", args=["html"]), {"result": "failed"})
    assert html.status_code == 200 and html["Content-Type"].startswith("text/html")
    text = html.content.decode()
    assert text.startswith("<!doctype html>") and "appliance.css" not in text  # standalone, printable
    assert 'id="verdict">FAILED' in text and "ib_write_bw.mlx5_0" in text and "gpu.count" not in text
    assert "Accepted for the customer" in text
    data = client.get(reverse("provisioning:acceptance-export", args=["json"])).json()
    assert data["appliance"] == appliance.name and data["passed"] is False and data["checks_total"] == 4
    gpu01 = next(node for node in data["nodes"] if node["node"] == "gpu01")
    assert gpu01["run"] == reports[1].pk
    assert {"node": "gpu01", "check": "ib_write_bw.mlx5_0", "expected": ">= 380 Gb/s", "measured": 200.0,
            "passed": False, "source": "firmware/platforms/hgx-h100-8gpu.yaml:71",
            "message": "ib_write_bw.mlx5_0: below the gate", "run": reports[1].pk} in gpu01["checks"]
    first, second = exports()
    assert (first.details["format"], first.details["result"], first.details["checks"]) == ("html", "failed", 1)
    assert (second.details["format"], second.details["checks"], second.details["failed"]) == ("json", 4, 1)
    assert first.actor_username == "auditor-user" and first.target_id == str(appliance.pk)
    bad = client.get(reverse("provisioning:acceptance-export", args=["pdf"]), follow=True)
    assert "format: &#x27;pdf&#x27; is not one of html, json" in bad.content.decode()
    assert len(exports()) == 2


def test_api_exports_json_and_html_each_audited(reports, users):
    api = APIClient()
    api.force_authenticate(users[Role.OPERATOR])
    body = api.get("/api/v1/provisioning/acceptance/", {"node": "gpu02"}).json()
    assert [n["node"] for n in body["nodes"]] == ["gpu02"] and body["passed"] is True
    html = api.get("/api/v1/provisioning/acceptance/html/")
    assert html.status_code == 200 and b"Acceptance report" in html.content
    assert 'attachment; filename="acceptance-lab-' in html["Content-Disposition"]
    assert [(r.details["format"], r.channel) for r in exports()] == [("json", "api"), ("html", "api")]
    error = api.get("/api/v1/provisioning/acceptance/", {"result": "maybe"})
    assert error.status_code == 400 and "result: 'maybe' is not one of passed, failed" in error.json()["error"]["message"]


class TestAcceptanceAccess(AccessMatrix):
    endpoints = [
        Endpoint("/provisioning/acceptance/", "provisioning.view"),
        Endpoint("/provisioning/acceptance/export.html", "provisioning.view"),
        Endpoint("/provisioning/acceptance/export.json", "provisioning.view"),
        Endpoint("/api/v1/provisioning/acceptance/", "provisioning.view"),
        Endpoint("/api/v1/provisioning/acceptance/html/", "provisioning.view"),
    ]

    @pytest.fixture(autouse=True)
    def with_reports(self, reports):
        return reports
