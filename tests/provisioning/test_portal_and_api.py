"""Provisioning pages and API through Django's test client: roles, starting, cancelling, paging."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from appliance.core.roles import Role
from appliance.provisioning import services
from appliance.provisioning.models import AcceptanceCheck, AcceptanceReport, Run, TaskEvent
from appliance.provisioning.states import RunState


@pytest.fixture
def api_for(users):
    def make(role):
        client = APIClient()
        client.force_authenticate(users[role])
        return client
    return make


@pytest.fixture(autouse=True)
def test_catalogue(settings, catalogue):
    settings.PROVISIONING_CATALOGUE = "tests.provisioning.catalogue:CATALOGUE"


def finished_run(appliance, catalogue, events=250):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    run.transition(RunState.RUNNING)
    stage_run = run.stage_runs.get()
    stage_run.hosts = ["gpu01"]
    stage_run.save()
    stage_run.transition("running")
    from django.utils import timezone
    TaskEvent.objects.bulk_create([
        TaskEvent(stage_run=stage_run, counter=i, event="runner_on_ok", host="gpu01", task=f"task {i}",
                  stdout=f"ok: [gpu01] line {i}", created=timezone.now()) for i in range(1, events + 1)])
    stage_run.transition("succeeded")
    run.transition(RunState.SUCCEEDED)
    report = AcceptanceReport.objects.create(run=run, passed=True, checks_total=1)
    AcceptanceCheck.objects.create(report=report, host="gpu01", name="gpu_count", expected=8, measured=8,
                                   passed=True, source="platform")
    return run


def test_an_operator_starts_a_run_through_the_api_and_it_is_handed_to_a_worker(
        api_for, appliance, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {
            "appliance": "lab", "stages": ["first"], "nodes": ["gpu01"], "dry_run": True}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == "pending" and body["dry_run"] is True and body["node_names"] == ["gpu01"]
    assert body["requested_by"] == "operator-user"
    assert len(callbacks) == 1  # dispatched after commit, never run inside the request


def test_bad_input_is_one_clear_error(api_for, appliance):
    response = api_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {"stages": ["nope"]}, format="json")
    assert response.status_code == 400
    assert "unknown stage 'nope'" in response.json()["error"]["message"]
    response = api_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {"nodes": ["ghost"]}, format="json")
    assert "ghost not in appliance lab" in response.json()["error"]["message"]


def test_a_run_while_another_is_active_is_a_state_conflict_409_documented_in_the_schema(
        api_for, appliance, catalogue, django_capture_on_commit_callbacks):
    from drf_spectacular.generators import SchemaGenerator

    first = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    with django_capture_on_commit_callbacks(execute=False):
        response = api_for(Role.OPERATOR).post("/api/v1/provisioning/runs/", {
            "appliance": "lab", "stages": ["first"], "dry_run": True}, format="json")
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (409, "conflict")
    assert error["message"] == f"appliance lab: {first} is pending; cancel it or wait for it"
    operation = SchemaGenerator().get_schema(request=None, public=True)["paths"]["/api/v1/provisioning/runs/"]["post"]
    assert operation["responses"]["409"]["description"] == "a run of the appliance is already pending or running"


@pytest.mark.parametrize("role", [Role.VIEWER, Role.AUDITOR, Role.ML_ENGINEER])
def test_roles_without_provisioning_run_cannot_start_or_cancel(api_for, appliance, catalogue, role):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    assert api_for(role).post("/api/v1/provisioning/runs/", {}, format="json").status_code == 403
    assert api_for(role).post(f"/api/v1/provisioning/runs/{run.pk}/cancel/").status_code == 403


def test_viewers_read_runs_events_and_the_acceptance_report(api_for, appliance, catalogue):
    run = finished_run(appliance, catalogue)
    client = api_for(Role.VIEWER)
    assert client.get(f"/api/v1/provisioning/runs/{run.pk}/").json()["state"] == "succeeded"
    page = client.get(f"/api/v1/provisioning/events/?stage_run__run={run.pk}&page_size=100").json()
    assert page["count"] == 250 and len(page["results"]) == 100
    after = client.get(f"/api/v1/provisioning/events/?stage_run__run={run.pk}&after=240").json()
    assert [e["counter"] for e in after["results"]] == list(range(241, 251))
    report = client.get(f"/api/v1/provisioning/runs/{run.pk}/acceptance/").json()
    assert report["passed"] is True and report["checks"][0]["check"] == "gpu_count"
    stage_runs = client.get(f"/api/v1/provisioning/stage-runs/?run={run.pk}").json()
    assert stage_runs["results"][0]["stage"] == "first"


def test_cancel_through_the_api(api_for, appliance, catalogue):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    response = api_for(Role.ADMINISTRATOR).post(f"/api/v1/provisioning/runs/{run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    again = api_for(Role.ADMINISTRATOR).post(f"/api/v1/provisioning/runs/{run.pk}/cancel/")
    assert again.status_code == 409


def test_the_provisioning_page_shows_the_form_only_to_those_who_may_run(client_for, appliance):
    page = client_for(Role.OPERATOR).get(reverse("provisioning:index"))
    assert page.status_code == 200 and b'data-testid="start-run"' in page.content
    viewer = client_for(Role.VIEWER).get(reverse("provisioning:index"))
    assert viewer.status_code == 200 and b'data-testid="start-run"' not in viewer.content
    assert client_for(Role.ML_ENGINEER).get(reverse("provisioning:index")).status_code == 403


def test_starting_a_run_from_the_portal(client_for, appliance, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = client_for(Role.OPERATOR).post(reverse("provisioning:index"), {
            "appliance": appliance.pk, "stages": ["second"], "nodes": ["gpu02"], "dry_run": "on"})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("provisioning:run", args=[run.pk])
    assert (run.stages, run.node_names, run.dry_run) == (["second"], ["gpu02"], True)
    viewer = client_for(Role.VIEWER).post(reverse("provisioning:index"), {"appliance": appliance.pk})
    assert viewer.status_code == 403


def test_run_detail_live_part_and_paged_downloadable_output(client_for, appliance, catalogue):
    run = finished_run(appliance, catalogue)
    client = client_for(Role.VIEWER)
    page = client.get(reverse("provisioning:run", args=[run.pk]))
    assert b'data-testid="stage-grid"' in page.content and b"gpu_count" in page.content
    live = client.get(reverse("provisioning:run", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert b"<h1>" not in live.content and b'id="run-live"' in live.content
    assert b"hx-trigger" not in live.content  # finished: polling stops
    stage_run = run.stage_runs.get()
    output = client.get(reverse("provisioning:stage-output", args=[stage_run.pk]))
    assert output.content.count(b"ok: [gpu01] line") == 200
    second = client.get(reverse("provisioning:stage-output", args=[stage_run.pk]) + "?page=2")
    assert b"line 250" in second.content
    text = client.get(reverse("provisioning:stage-output", args=[stage_run.pk]) + "?format=text")
    assert text["Content-Type"].startswith("text/plain")
    assert "attachment" in text["Content-Disposition"]
    lines = b"".join(text.streaming_content if text.streaming else [text.content]).decode().splitlines()
    assert lines[0] == "ok: [gpu01] line 1" and len(lines) == 250
