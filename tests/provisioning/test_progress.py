"""Live progress of a run, as the run page and the run API show it: running counts per host from the
events stored while a stage runs, task N of M and an ETA from the previous successful run of the stage,
a percentage, elapsed time and durations, readable task lines, a heartbeat in seconds; a page that puts
failed checks first and folds the passed ones; cancel only after a confirmation; no watchdog in a GET."""

import math
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.provisioning import progress, services
from appliance.provisioning.events import EventIngestor, Scrubber
from appliance.provisioning.models import AcceptanceCheck, AcceptanceReport, HostResult, Run, StageRun
from appliance.provisioning.progress import format_duration, run_progress
from appliance.provisioning.states import RunState, StageState

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def test_catalogue(settings, catalogue):
    settings.PROVISIONING_CATALOGUE = "tests.provisioning.catalogue:CATALOGUE"


def store_events(stage_run, events, first_counter=1):
    """Store events through the ingestor, shaped as ansible-runner hands them over:
    (event name, host, task, changed, failed)."""
    ingestor = EventIngestor(stage_run, Scrubber([]))
    for counter, (kind, host, task, changed, failed) in enumerate(events, start=first_counter):
        data = {"host": host, "task": task}
        if kind.startswith("runner_on"):
            data["res"] = {"changed": changed, **({"failed": True, "msg": "it broke"} if failed else {})}
        ingestor.handle({"counter": counter, "uuid": f"u{stage_run.pk}-{counter}", "event": kind,
                         "event_data": data, "stdout": "", "created": timezone.now().isoformat()})
    return ingestor.consume(lambda: False)


def task_starts(names):
    return [("playbook_on_task_start", "", name, False, False) for name in names]


def stage_run(run, stage, order, state, started=None, ended=None, hosts=("gpu01", "gpu02", "mgmt01")):
    return StageRun.objects.create(run=run, stage=stage, order=order, state=state, started=started, ended=ended,
                                   hosts=list(hosts))


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)

TASKS = ["Write the marker file", "Keep the BMC password where only this test looks", "Report discovered hardware",
         "Finish"]


@pytest.fixture
def previous_runs(appliance, now):
    """Run A succeeded earlier: stage first in 40 s (4 tasks), stage second in 20 s. A later dry run of
    stage first (5 s, 9 tasks) is not a measure of a real run and must not be used."""
    earlier = now - timedelta(hours=2)
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first", "second"],
                             state="succeeded", started=earlier, ended=earlier + timedelta(seconds=60))
    first = stage_run(run, "first", 1, "succeeded", earlier, earlier + timedelta(seconds=40))
    store_events(first, task_starts(TASKS))
    stage_run(run, "second", 2, "succeeded", earlier + timedelta(seconds=40), earlier + timedelta(seconds=60))
    dry = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], dry_run=True,
                             state="succeeded", started=now - timedelta(hours=1),
                             ended=now - timedelta(hours=1) + timedelta(seconds=5))
    dry_first = stage_run(dry, "first", 1, "succeeded", dry.started, dry.ended)
    store_events(dry_first, task_starts([f"t{i}" for i in range(9)]))
    return run


@pytest.fixture
def running(appliance, previous_runs, now):
    """Run B: stage first running for 10 s, two tasks started, results stored so far; second pending."""
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first", "second"],
                             state="running", started=now - timedelta(seconds=12),
                             heartbeat_at=now - timedelta(seconds=12), worker_host="elsewhere", worker_pid=1)
    first = stage_run(run, "first", 1, "running", now - timedelta(seconds=10))
    stage_run(run, "second", 2, "pending", hosts=())
    store_events(first, [
        ("playbook_on_task_start", "", TASKS[0], False, False),
        ("runner_on_start", "gpu01", TASKS[0], False, False),
        ("runner_on_ok", "gpu01", TASKS[0], True, False),
        ("runner_on_ok", "gpu02", TASKS[0], True, False),
        ("runner_on_skipped", "mgmt01", TASKS[0], False, False),
        ("playbook_on_task_start", "", TASKS[1], False, False),
        ("runner_on_ok", "gpu01", TASKS[1], False, False),
        ("runner_on_failed", "gpu02", TASKS[1], False, True),
    ])
    return run


def test_counts_move_while_a_stage_runs(running, now):
    shown = run_progress(running, now=now)
    first, second = shown.stages
    assert first.live and not second.live
    assert {host: counts.as_dict() for host, counts in first.hosts.items()} == {
        "gpu01": {"ok": 2, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 0},
        "gpu02": {"ok": 1, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 0},
        "mgmt01": {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 1},
    }
    assert shown.totals.as_dict() == {"ok": 3, "changed": 2, "failed": 1, "unreachable": 0, "skipped": 1}
    # Task 2 of the 4 the previous real run of the stage started (the dry run's 9 do not count).
    assert (first.tasks_started, first.tasks_expected, first.task_text) == (2, 4, "task 2 of 4")
    assert first.current_task == TASKS[1]
    assert first.previous_run_id == Run.objects.filter(dry_run=False, state="succeeded").get().pk
    # 40 s last time, 10 s spent: 30 s left; then stage second, 20 s last time.
    assert first.remaining == timedelta(seconds=30)
    assert shown.remaining == timedelta(seconds=50) and shown.remaining_text == "50 s"
    # 0 stages done + (2 - 0.5) / 4 of the first, out of 2 stages: 18 %.
    assert shown.percent == 18
    assert shown.elapsed_text == "12 s" and shown.heartbeat_text == "12 s ago"


def test_task_m_is_not_shown_when_no_previous_run_is_known(appliance, now):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], state="running",
                             started=now - timedelta(seconds=5))
    first = stage_run(run, "first", 1, "running", now - timedelta(seconds=5))
    store_events(first, task_starts(TASKS[:3]) + [("runner_on_ok", "gpu01", TASKS[2], False, False)])
    shown = run_progress(run, now=now)
    assert (shown.stages[0].tasks_started, shown.stages[0].tasks_expected) == (3, None)
    assert shown.stages[0].task_text == "task 3"
    assert shown.remaining is None and shown.percent == 0


def test_a_finished_stage_shows_ansibles_recap_and_its_duration(appliance, now):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], state="succeeded",
                             started=now - timedelta(seconds=100), ended=now - timedelta(seconds=35))
    first = stage_run(run, "first", 1, "succeeded", now - timedelta(seconds=95), now - timedelta(seconds=40))
    HostResult.objects.create(stage_run=first, host="gpu01", ok=21, changed=7)
    shown = run_progress(run, now=now)
    assert shown.stages[0].hosts["gpu01"].as_dict() == {"ok": 21, "changed": 7, "failed": 0, "unreachable": 0,
                                                        "skipped": 0}
    assert shown.stages[0].duration_text == "55 s" and shown.elapsed_text == "1 min 05 s"
    assert shown.percent == 100 and shown.heartbeat_text == ""


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (12, "12 s"), (59, "59 s"), (65, "1 min 05 s"),
                                               (3599, "59 min 59 s"), (3720, "1 h 02 min")])
def test_durations_read_in_seconds_minutes_and_hours(seconds, text):
    assert format_duration(timedelta(seconds=seconds)) == text


def page_text(content: bytes) -> str:
    text = re.sub(r"<[^>]+>", " ", content.decode())
    return re.sub(r"\s+", " ", text)


def test_the_run_page_and_the_api_show_the_same_progress(running, client_for, users, now):
    beat = timezone.now() - timedelta(seconds=12)
    Run.objects.filter(pk=running.pk).update(heartbeat_at=beat)
    live = client_for(Role.VIEWER).get(reverse("provisioning:run", args=[running.pk]), HTTP_HX_REQUEST="true")
    # The clock runs while the test does (seconds on a loaded machine): ages are checked against it.
    late = math.ceil((timezone.now() - beat).total_seconds())
    text = page_text(live.content)
    assert "3 ok · 2 changed · 1 failed · 0 unreachable · 1 skipped" in text
    assert "stage first , task 2 of 4: " + TASKS[1] in text
    heartbeat = re.search(r"heartbeat ([0-9]+) s ago", text)
    assert heartbeat and 12 <= int(heartbeat.group(1)) <= late, text
    assert "minutes ago" not in text
    # Readable task lines, newest first; no raw event names.
    assert "first · gpu02 · " + TASKS[1] + " · failed" in text
    assert "first · mgmt01 · " + TASKS[0] + " · skipped" in text
    assert "first · gpu01 · " + TASKS[0] + " · changed" in text
    assert "runner_on" not in text and "playbook_on" not in text
    # The grid's cell of gpu01 in the running stage counts its results so far.
    assert "gpu01 running 2 ok · 1 changed " in text
    assert "gpu02 failed 1 ok · 1 changed · 1 failed " in text
    assert "mgmt01 running 0 ok · 0 changed · 1 skipped " in text

    api = APIClient()
    api.force_authenticate(users[Role.VIEWER])
    body = api.get(f"/api/v1/provisioning/runs/{running.pk}/").json()
    shown = body["progress"]
    assert shown["counts"] == {"ok": 3, "changed": 2, "failed": 1, "unreachable": 0, "skipped": 1}
    assert (shown["current_stage"], shown["current_task"]) == ("first", TASKS[1])
    assert (shown["tasks_started"], shown["tasks_expected"], shown["stages_done"], shown["stages_total"]) == (2, 4, 0, 2)
    assert shown["stages"][0]["hosts"]["gpu02"] == {"ok": 1, "changed": 1, "failed": 1, "unreachable": 0,
                                                    "skipped": 0}
    assert shown["stages"][1]["state"] == "pending" and shown["stages"][1]["duration_seconds"] is None
    # The stage started 10 s and the run 12 s before `now`; both have run on since, as long as the test has.
    since = math.ceil((timezone.now() - now).total_seconds())
    assert 10 <= shown["stages"][0]["duration_seconds"] <= 10 + since
    assert 12 <= body["duration_seconds"] <= 12 + since
    listed = api.get("/api/v1/provisioning/runs/").json()["results"]
    assert "progress" not in listed[0] and "duration_seconds" in listed[0]
    events = api.get(f"/api/v1/provisioning/events/?run={running.pk}&event=runner_on_ok").json()["results"]
    assert [(e["host"], e["task"], e["outcome"]) for e in events] == [
        ("gpu01", TASKS[0], "changed"), ("gpu02", TASKS[0], "changed"), ("gpu01", TASKS[1], "ok")]


def grown_run(appliance, now, stages: int, hosts: list[str], events_per_host: int):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=[f"s{i}" for i in range(stages)],
                             state="running", started=now - timedelta(minutes=5), heartbeat_at=now)
    for order in range(1, stages + 1):
        state = "succeeded" if order < stages else "running"
        sr = stage_run(run, f"s{order}", order, state, now - timedelta(minutes=5),
                       now if state == "succeeded" else None, hosts=hosts)
        if state == "succeeded":
            HostResult.objects.bulk_create([HostResult(stage_run=sr, host=h, ok=3, changed=1, failed=int(h == hosts[0]),
                                                       failed_task="a task" if h == hosts[0] else "")
                                            for h in hosts])
        else:
            store_events(sr, [e for h in hosts for e in [("playbook_on_task_start", "", f"t {h}", False, False),
                                                          *[("runner_on_ok", h, f"t {h}", True, False)] * events_per_host]])
    report = AcceptanceReport.objects.create(run=run, passed=False, checks_total=len(hosts), checks_failed=1)
    AcceptanceCheck.objects.bulk_create([AcceptanceCheck(report=report, host=h, name="gpu.count", expected=8,
                                                         measured=8 if h != hosts[0] else 7, passed=h != hosts[0])
                                         for h in hosts])
    return run


def queries_of_the_run_page(client, run):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("provisioning:run", args=[run.pk]))
    assert response.status_code == 200
    return len(queries)


def test_the_run_page_issues_a_constant_number_of_queries(appliance, client_for, now):
    client = client_for(Role.VIEWER)
    small = grown_run(appliance, now, 2, ["gpu01", "gpu02"], 2)
    few = queries_of_the_run_page(client, small)
    Run.objects.filter(pk=small.pk).update(state="succeeded")
    large = grown_run(appliance, now, 9, [f"node{i:02d}" for i in range(70)], 6)
    assert queries_of_the_run_page(client, large) == few


def test_the_hosts_grid_is_paged_with_failed_hosts_first(appliance, client_for, now):
    hosts = [f"node{i:02d}" for i in range(60)]
    run = grown_run(appliance, now, 2, hosts, 1)
    Run.objects.filter(pk=run.pk).update(node_names=hosts)
    HostResult.objects.filter(host="node00").update(failed=0, failed_task="")
    HostResult.objects.filter(host="node42").update(failed=1, failed_task="Check the GPUs")
    client = client_for(Role.VIEWER)
    first = page_text(client.get(reverse("provisioning:run", args=[run.pk])).content)
    grid = first[first.index("Hosts × stages"):first.index("Latest task results")]
    assert re.findall(r"node\d\d", grid)[:3] == ["node42", "node00", "node01"]
    assert len(re.findall(r"node\d\d", grid)) == 50
    assert "hosts 1–50 of 60 (those with a failure first)" in grid
    second = page_text(client.get(reverse("provisioning:run", args=[run.pk]) + "?hosts_page=2").content)
    grid = second[second.index("Hosts × stages"):second.index("Latest task results")]
    assert re.findall(r"node\d\d", grid) == [f"node{i}" for i in range(50, 60)]


def finished_failed_run(appliance, now):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], state="failed",
                             started=now - timedelta(seconds=30), ended=now,
                             reason="stage first, host gpu02, task 'Probe': the probe failed on gpu02")
    first = stage_run(run, "first", 1, "failed", now - timedelta(seconds=30), now)
    StageRun.objects.filter(pk=first.pk).update(reason=run.reason)
    HostResult.objects.create(stage_run=first, host="gpu02", ok=1, failed=1, failed_task="Probe",
                              message="the probe failed on gpu02")
    report = AcceptanceReport.objects.create(run=run, passed=False, checks_total=4, checks_failed=1)
    for host, name, expected, measured, passed in [
        ("gpu01", "gpu.count", 8, 8, True), ("gpu01", "ib_write_bw.mlx5_0", ">= 380 Gb/s", 392.6, True),
        ("gpu02", "gpu.count", 8, 8, True), ("gpu02", "ib_write_bw.mlx5_3", ">= 380 Gb/s", None, False),
    ]:
        AcceptanceCheck.objects.create(report=report, host=host, name=name, expected=expected, measured=measured,
                                       passed=passed, source="firmware/platforms/hgx-h100-8gpu.yaml",
                                       message="" if passed else "port mlx5_3 is down: nothing measured")
    return run


def test_failed_checks_come_first_and_the_passed_ones_are_folded(appliance, client_for, now):
    run = finished_failed_run(appliance, now)
    page = client_for(Role.VIEWER).get(reverse("provisioning:run", args=[run.pk])).content.decode()
    failed_at, folded_at = page.index('data-testid="failed-checks"'), page.index('<details data-testid="passed-checks"')
    assert failed_at < folded_at
    failed_table = page[failed_at:folded_at]
    assert "ib_write_bw.mlx5_3" in failed_table and "gpu.count" not in failed_table
    assert page[folded_at:].count('data-testid="check-passed"') == 3
    assert "3 passed checks" in page
    text = page_text(page.encode())
    assert "None" not in text
    assert "— not measured" in text
    # A measured number carries the unit of its bound.
    assert "392.6 Gb/s" in text
    # The failure is printed once (the run's reason is its failed stage's).
    assert text.count("the probe failed on gpu02") == 1
    # An ended run says how its stages ended, not a full progress bar.
    assert "Stages: 1 failed " in text and "<progress" not in page


def test_the_run_page_names_the_nodes_its_acceptance_did_not_check(appliance, client_for, now):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.BOOTSTRAP, stages=["gpu", "acceptance"],
                             state=RunState.FAILED, started=now, ended=now)
    stage_run(run, "gpu", 0, StageState.FAILED, now, now, hosts=("gpu01", "gpu02"))
    stage_run(run, "acceptance", 1, StageState.SUCCEEDED, now, now, hosts=("gpu01",))
    report = AcceptanceReport.objects.create(run=run, passed=True, checks_total=1)
    AcceptanceCheck.objects.create(report=report, host="gpu01", name="gpu.count", expected=8, measured=8, passed=True)

    text = page_text(client_for(Role.VIEWER).get(reverse("provisioning:run", args=[run.pk])).content)
    assert "Acceptance: incomplete" in text
    assert "Not checked: gpu02, which failed an earlier stage of this run." in text


def test_a_fleet_sized_report_shows_a_bounded_number_of_checks(appliance, client_for, now, monkeypatch):
    from appliance.provisioning import views

    monkeypatch.setattr(views, "CHECKS_SHOWN", 2)
    run = finished_failed_run(appliance, now)
    page = client_for(Role.VIEWER).get(reverse("provisioning:run", args=[run.pk])).content.decode()
    assert page.count('data-testid="check-passed"') == 2
    assert "3 passed checks" in page and "The first 2 of 3: the acceptance report has every one." in page


def test_cancel_asks_for_confirmation_and_only_the_post_cancels(appliance, catalogue, client_for):
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["first"], catalogue=catalogue)
    operator = client_for(Role.OPERATOR)
    run_page = operator.get(reverse("provisioning:run", args=[run.pk])).content.decode()
    assert f'action="{reverse("provisioning:run-cancel", args=[run.pk])}"' in run_page
    assert re.search(r'<form method="get" action="[^"]+cancel/"><button[^>]*>Cancel run…', run_page)

    confirm = operator.get(reverse("provisioning:run-cancel", args=[run.pk]))
    assert confirm.status_code == 200
    assert f"Cancel run #{run.pk}?" in confirm.content.decode()
    assert '<form method="post"' in confirm.content.decode()
    run.refresh_from_db()
    assert not run.cancel_requested and run.state == "pending"
    assert not AuditRecord.objects.filter(event="provisioning.run.cancel").exists()

    assert client_for(Role.VIEWER).get(reverse("provisioning:run-cancel", args=[run.pk])).status_code == 403

    done = operator.post(reverse("provisioning:run-cancel", args=[run.pk]))
    assert done.status_code == 302
    run.refresh_from_db()
    assert run.cancel_requested and run.state == "cancelled"
    assert AuditRecord.objects.filter(event="provisioning.run.cancel").count() == 1
    # A run being cancelled, or a finished one, has nothing to confirm: back to its page.
    other = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["second"], catalogue=catalogue)
    Run.objects.filter(pk=other.pk).update(state="running", cancel_requested=True)
    asked = operator.get(reverse("provisioning:run-cancel", args=[other.pk]))
    assert asked.status_code == 302 and asked["Location"] == reverse("provisioning:run", args=[other.pk])
    again = operator.get(reverse("provisioning:run-cancel", args=[run.pk]))
    assert again.status_code == 302 and again["Location"] == reverse("provisioning:run", args=[run.pk])


def test_loading_a_page_does_not_run_the_watchdog(appliance, client_for, settings, now):
    """A run whose heartbeat is long gone is the watchdog's (on the beat): a page GET leaves it as it is."""
    stale = now - timedelta(seconds=settings.PROVISIONING_HEARTBEAT_TIMEOUT * 10)
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], state="running",
                             started=stale, heartbeat_at=stale, worker_host="another-host", worker_pid=4242)
    client = client_for(Role.OPERATOR)
    assert client.get(reverse("provisioning:index")).status_code == 200
    assert client.get(reverse("provisioning:run", args=[run.pk])).status_code == 200
    run.refresh_from_db()
    assert run.state == "running"
    assert services.watchdog() == [run]  # the watchdog itself would fail it


def test_the_api_and_the_portal_leave_the_kind_to_the_run_service(appliance, users, client_for,
                                                                   django_capture_on_commit_callbacks):
    """Every stage asked for (no list) is the resumable bootstrap, a list of stages a stages run: the same
    from the API and from the portal's form."""
    api = APIClient()
    api.force_authenticate(users[Role.OPERATOR])
    portal = client_for(Role.OPERATOR)
    kinds = []
    for start in (lambda: api.post("/api/v1/provisioning/runs/", {"appliance": "lab"}, format="json"),
                  lambda: api.post("/api/v1/provisioning/runs/", {"appliance": "lab", "stages": ["first"]},
                                   format="json"),
                  lambda: portal.post(reverse("provisioning:index"), {"appliance": appliance.pk}),
                  lambda: portal.post(reverse("provisioning:index"), {"appliance": appliance.pk,
                                                                      "stages": ["first"]})):
        with django_capture_on_commit_callbacks(execute=False):
            response = start()
        assert response.status_code in (202, 302), response.content
        run = Run.objects.order_by("-id").first()
        kinds.append(run.kind)
        Run.objects.filter(pk=run.pk).update(state="cancelled")  # out of the way of the next one
    assert kinds == ["bootstrap", "stages", "bootstrap", "stages"]


def test_a_run_started_through_the_api_answers_with_its_progress(appliance, users,
                                                                  django_capture_on_commit_callbacks):
    api = APIClient()
    api.force_authenticate(users[Role.OPERATOR])
    with django_capture_on_commit_callbacks(execute=False):
        response = api.post("/api/v1/provisioning/runs/", {"appliance": "lab", "stages": ["first", "second"]},
                            format="json")
    assert response.status_code == 202, response.content
    shown = response.json()["progress"]
    assert (shown["percent"], shown["stages_done"], shown["stages_total"]) == (0, 0, 2)
    assert shown["elapsed_seconds"] is None and shown["current_stage"] is None


def test_the_provisioning_page_shows_how_far_the_active_run_is(running, client_for):
    text = page_text(client_for(Role.VIEWER).get(reverse("provisioning:index")).content)
    assert re.search(r"Running now Run #\d+ · Some stages on lab · Running · 18 % · stage first, task 2 of 4 · "
                     r"running for 1\d s", text), text


def test_history_shows_durations(appliance, client_for, now):
    Run.objects.create(appliance=appliance, kind=Run.Kind.STAGES, stages=["first"], state="succeeded",
                       started=now - timedelta(seconds=200), ended=now - timedelta(seconds=75))
    page = client_for(Role.VIEWER).get(reverse("provisioning:index")).content.decode()
    assert re.search(r'data-testid="run-duration">2 min 05 s<', page)


def test_task_lines_read_as_host_task_outcome(running):
    lines = [str(line) for line in progress.task_lines(running, 3)]
    assert lines == [f"gpu02 · {TASKS[1]} · failed", f"gpu01 · {TASKS[1]} · ok", f"mgmt01 · {TASKS[0]} · skipped"]
