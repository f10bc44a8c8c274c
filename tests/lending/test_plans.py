"""Lending plans without Slurm: the policy's refusals, who may propose, approve, reject and roll back, the
API and the portal pages. (tests/lending/test_slurm_lending.py drives a plan through the real Slurm.)"""

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from appliance.accounts.services import create_user
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from appliance.lending import services
from appliance.lending.models import LendingPlan, LendingPolicy, PlanState
from tests.accounts.settled import settle
from tests.conftest import PASSWORD

# A Tuesday, 23:00 in the appliance's time zone.
TUESDAY_NIGHT = datetime(2026, 12, 1, 23, 0)


@pytest.fixture
def pools(db):
    appliance = Appliance.objects.create(name="lab", simulated=True)
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    for name, pool in (("gpu01", training), ("gpu02", training), ("gpu03", training), ("gpu04", inference)):
        PoolMembership.objects.create(pool=pool, node=Node.objects.create(appliance=appliance, name=name, role="gpu"))
    policy = LendingPolicy.objects.create(pool=training, may_lend=True, minimum_nodes=1, window_start_hour=22,
                                          window_end_hour=7, window_days=[0, 1, 2, 3, 4], reclaim_minutes=15)
    return training, inference, policy


def night(hours=0.0):
    return timezone.make_aware(TUESDAY_NIGHT) + timedelta(hours=hours)


def plan_of(actor, nodes=("gpu03",), start=None, end=None, **changes):
    arguments = {"nodes": list(nodes), "from_pool": "training", "to_pool": "inference",
                 "window_start": start or night(), "window_end": end or night(7), "reason": "idle at night",
                 "actor": actor, "now": night(-1), **changes}
    return services.propose(**arguments)


@pytest.mark.parametrize(("changes", "message"), [
    ({"nodes": []}, "nodes: at least one node name is required"),
    ({"nodes": ["gpu03", "gpu03"]}, "nodes: a node is named twice"),
    ({"nodes": ["../etc"]}, "nodes: '../etc' is not a node name"),
    ({"nodes": ["gpu04"]}, "nodes: gpu04 not in pool training"),
    ({"nodes": ["gpu01", "gpu02", "gpu03"]}, "nodes: pool training keeps at least 1 node(s); lending 3 would leave 0"),
    ({"from_pool": "batch"}, "from_pool: no pool named 'batch'"),
    ({"to_pool": "training"}, "to_pool: a pool cannot lend to itself"),
    ({"reason": "  "}, "reason: say why the nodes are lent"),
    ({"window_end": "tomorrow"}, "window_end: 'tomorrow' is not a date and time (ISO 8601)"),
    ({"window_end": night(-0.5)}, "window_end: must be after window_start"),
    ({"window_start": night(-3), "window_end": night(2)},
     "window_start: the policy of pool training allows lending from 22:00 to 07:00 on Mon, Tue, Wed, Thu, Fri; "
     "Tue 2026-12-01 20:00 is outside"),
    ({"window_end": night(9)}, "window_end: the policy of pool training allows lending until 2026-12-02 07:00 in "
                               "this window; 2026-12-02 08:00 is later"),
    ({"window_start": night(96), "window_end": night(98)},  # Friday night 23:00 is in, Saturday's is not
     "window_start: the policy of pool training allows lending from 22:00 to 07:00 on Mon, Tue, Wed, Thu, Fri; "
     "Sat 2026-12-05 23:00 is outside"),
])
def test_the_policy_refuses_with_one_message_naming_the_field(pools, make_user, changes, message, settings):
    settings.TIME_ZONE = "UTC"
    with pytest.raises(services.LendingError) as refused:
        plan_of(make_user(Role.OPERATOR), **changes)
    assert str(refused.value) == message
    assert not LendingPlan.objects.exists()


def test_a_window_opened_on_a_listed_day_runs_past_midnight(pools, make_user):
    # 2026-12-04 is a Friday (4), which the policy lists: its window runs to Saturday 07:00.
    assert night(72).weekday() == 4
    assert plan_of(make_user(Role.OPERATOR), start=night(73), end=night(74), now=night(72)).state == PlanState.PROPOSED


def test_a_pool_without_a_lending_policy_lends_nothing(pools, make_user):
    training, inference, policy = pools
    policy.may_lend = False
    policy.save()
    operator = make_user(Role.OPERATOR)
    with pytest.raises(services.LendingError, match=r"^from_pool: the policy of pool training does not allow lending"):
        plan_of(operator)
    with pytest.raises(services.LendingError, match=r"^from_pool: the policy of pool inference does not allow lending"):
        plan_of(operator, nodes=["gpu04"], from_pool="inference", to_pool="training")


def test_a_node_is_in_one_plan_at_a_time_and_the_minimum_counts_plans_in_flight(pools, make_user):
    operator = make_user(Role.OPERATOR)
    first = plan_of(operator)
    with pytest.raises(services.LendingError) as refused:
        plan_of(operator)
    assert str(refused.value) == f"nodes: gpu03 is in lending plan #{first.pk}"
    plan_of(operator, nodes=["gpu02"])  # 3 nodes, one kept
    with pytest.raises(services.LendingError, match=r"lending 1 would leave 0$"):
        plan_of(operator, nodes=["gpu01"])
    services.reject(first, make_user(Role.ADMINISTRATOR), "not tonight")
    assert plan_of(operator, nodes=["gpu03"]).state == PlanState.PROPOSED  # a rejected plan holds nothing


def test_roles_an_operator_proposes_an_administrator_approves_a_viewer_does_neither(pools, make_user):
    operator, administrator, viewer = make_user(Role.OPERATOR), make_user(Role.ADMINISTRATOR), make_user(Role.VIEWER)
    with pytest.raises(services.LendingDenied, match="your role may not propose lending plans"):
        plan_of(viewer)
    with pytest.raises(services.LendingDenied, match="your role may not propose lending plans"):
        plan_of(make_user(Role.ML_ENGINEER))
    plan = plan_of(operator)
    with pytest.raises(services.LendingDenied, match="your role may not approve lending plans"):
        services.approve(plan, operator)
    own = plan_of(administrator, nodes=["gpu02"])
    with pytest.raises(services.LendingNotIndependent,
                       match=r"^approver: lending plan #\d+ .*needs another person, not the one who asked$"):
        services.approve(own, administrator)
    approved = services.approve(plan, administrator)
    assert (approved.state, approved.approved_by) == (PlanState.APPROVED, administrator)
    with pytest.raises(services.LendingError, match="^state: a approved plan cannot become approved$"):
        services.approve(plan, administrator)
    events = list(AuditRecord.objects.filter(event__startswith="lending.plan.").order_by("sequence")
                  .values_list("event", "outcome", "actor_username", "target_id"))
    assert events == [("lending.plan.propose", "success", "operator-user", str(plan.pk)),
                      ("lending.plan.propose", "success", "administrator-user", str(own.pk)),
                      ("lending.plan.approve", "failure", "administrator-user", str(own.pk)),
                      ("lending.plan.approve", "success", "administrator-user", str(plan.pk))]


def test_the_administrator_a_proposer_makes_cannot_approve_the_plan(pools, make_user):
    """The issue's attack: an Administrator proposes, makes `admin2` a second later, approves through it."""
    administrator = make_user(Role.ADMINISTRATOR, "ada")
    plan = plan_of(administrator)
    admin2 = create_user("admin2", Role.ADMINISTRATOR, PASSWORD, created_by=administrator)
    with pytest.raises(services.LendingNotIndependent) as refused:
        services.approve(plan, admin2)
    assert str(refused.value) == ("approver: 'admin2' was created by 'ada', who asked (directly or through accounts "
                                  "they made); the approver must be an account the requester did not make")
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.PROPOSED


def test_an_administrator_who_made_the_proposer_cannot_approve_even_through_another(pools, make_user):
    """A makes B, B proposes, A approves: refused; so through A -> C -> B; someone unlinked approves."""
    ada, other = make_user(Role.ADMINISTRATOR, "ada"), make_user(Role.ADMINISTRATOR, "other")
    made = settle(create_user("made", Role.OPERATOR, PASSWORD, created_by=ada))
    middle = settle(create_user("middle", Role.ADMINISTRATOR, PASSWORD, created_by=ada))
    chained = settle(create_user("chained", Role.OPERATOR, PASSWORD, created_by=middle))
    for proposer, node in ((made, "gpu03"), (chained, "gpu02")):
        plan = plan_of(proposer, nodes=[node])
        with pytest.raises(services.LendingNotIndependent) as refused:
            services.approve(plan, ada)
        assert str(refused.value) == (f"approver: 'ada' created {proposer.username!r}, who asked (directly or through "
                                      "accounts they made); the approver must not have made the requester's account")
    assert services.approve(plan, other).state == PlanState.APPROVED


def test_a_plan_by_a_fresh_account_cannot_be_approved(pools, make_user):
    """An account made an hour before it proposes (the plan is proposed at night(-1))."""
    fresh = settle(create_user("fresh", Role.OPERATOR, PASSWORD), ago=timezone.now() - night(-2))
    plan = plan_of(fresh)
    with pytest.raises(services.LendingNotIndependent, match="^requester: 'fresh' was created at 2026-12-01T21:00:00\\+00:00, less than "
                                                     "24 h before the request; .* a request made from "
                                                     r"2026-12-02T21:00:00\+00:00 on can be decided$"):
        services.approve(plan, make_user(Role.ADMINISTRATOR, "ada"))
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.PROPOSED


def test_automatic_approval_by_the_policy(pools, make_user):
    training, inference, policy = pools
    policy.automatic_approval = True
    policy.save()
    plan = plan_of(make_user(Role.OPERATOR))
    assert (plan.state, plan.approved_automatically, plan.approved_by) == (PlanState.APPROVED, True, None)
    assert list(plan.steps.values_list("name", "message")) == [
        ("propose", f"gpu03 from training to inference, {night().isoformat()} to {night(7).isoformat()}"),
        ("approve", "approved by the policy of pool training (automatic approval)")]


def test_a_plan_not_yet_due_waits_and_a_proposed_plan_is_not_advanced(pools, make_user):
    plan = plan_of(make_user(Role.OPERATOR))
    assert services.advance(plan, now=night(1)).state == PlanState.PROPOSED
    services.approve(plan, make_user(Role.ADMINISTRATOR))
    assert services.advance(plan, now=night(-0.5)).state == PlanState.APPROVED  # the window has not begun
    assert services.advance_due(now=night(-0.5)) == []
    # Nobody advanced it while its window lasted: it ends without touching anything.
    assert services.advance_due(now=night(7)) == [plan.pk]
    plan.refresh_from_db()
    assert (plan.state, plan.message) == (PlanState.ROLLED_BACK, "the window ended before the plan began: nothing was done")


def test_a_failed_slurm_command_fails_the_plan_and_it_can_be_rolled_back(pools, make_user, settings, tmp_path):
    # No Slurm runs for this state directory: the drain is refused, the plan fails, naming the command.
    settings.SIMULATION_DIR = tmp_path / "simulation"
    operator = make_user(Role.OPERATOR)
    plan = plan_of(operator)
    administrator = make_user(Role.ADMINISTRATOR)
    services.approve(plan, administrator)
    plan = services.advance(plan, now=night(0.1))
    assert plan.state == PlanState.FAILED
    assert plan.message.startswith("drain in Slurm failed: scontrol update NodeName=gpu03 State=DRAIN "
                                   "'Reason=lent to pool inference by lending plan")
    assert plan.message.endswith("slurm/etc/slurm.conf does not exist): run the workloads stage and start it")
    assert PoolMembership.objects.get(node__name="gpu03").pool.name == "training"
    with pytest.raises(services.LendingDenied):
        services.rollback(plan, operator, "undo")
    with pytest.raises(services.LendingError, match="^reason: say why the plan is rolled back$"):
        services.rollback(plan, administrator, "")
    plan = services.rollback(plan, administrator, "Slurm was down")
    assert plan.state == PlanState.ROLLED_BACK
    assert plan.steps.last().message == "rolled back by administrator-user: nothing had changed yet"
    outcome = AuditRecord.objects.filter(event="lending.plan.drain").values_list("outcome", flat=True).get()
    assert outcome == "failure"


def test_the_workloads_stage_is_rerun_on_the_plans_nodes_once_it_has_completed_on_the_appliance(pools, make_user):
    from appliance.provisioning.models import Run, StageRun
    from appliance.provisioning.states import RunState, StageState

    training, inference, policy = pools
    plan = plan_of(make_user(Role.OPERATOR))
    assert services._rerun_workloads(plan) == (
        "skipped", "the workloads stage has never completed on appliance lab: not rerun; the nodes keep the workload "
        "files they have", None)
    earlier = Run.objects.create(appliance=training.appliance, kind=Run.Kind.STAGES, stages=["workloads"],
                                 state=RunState.SUCCEEDED)
    StageRun.objects.create(run=earlier, stage="workloads", order=1, state=StageState.SUCCEEDED)
    outcome, message, run_id = services._rerun_workloads(plan)
    run = Run.objects.get(pk=run_id)
    assert (outcome, message) == ("success", f"the workloads stage runs on gpu03 (run #{run.pk})")
    assert (run.kind, run.stages, run.node_names, run.state) == ("node", ["workloads"], ["gpu03"], "pending")
    plan.run_id = run.pk
    assert services._run_result(plan) is None  # the plan waits for it
    Run.objects.filter(pk=run.pk).update(state=RunState.FAILED)
    assert services._run_result(plan) == "failed"


# ---- API and pages ---------------------------------------------------------------------------------------

def test_api_propose_approve_and_refusals(pools, client_for, users):
    operator, administrator, viewer = client_for(Role.OPERATOR), client_for(Role.ADMINISTRATOR), client_for(Role.VIEWER)
    start = timezone.now().replace(hour=23, minute=0, second=0, microsecond=0)
    while start.weekday() > 4 or start < timezone.now():
        start += timedelta(days=1)
    body = {"nodes": ["gpu03"], "from_pool": "training", "to_pool": "inference", "window_start": start.isoformat(),
            "window_end": (start + timedelta(hours=6)).isoformat(), "reason": "nightly idle"}
    assert viewer.post("/api/v1/lending/plans/", body, content_type="application/json").status_code == 403
    refused = operator.post("/api/v1/lending/plans/", {**body, "nodes": ["gpu04"]}, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"nodes": ["nodes: gpu04 not in pool training"]}
    created = operator.post("/api/v1/lending/plans/", body, content_type="application/json")
    assert created.status_code == 201, created.content
    plan = created.json()
    assert (plan["state"], plan["nodes"], plan["proposed_by"], [s["name"] for s in plan["steps"]]) == (
        "proposed", ["gpu03"], "operator-user", ["propose"])
    assert operator.post(f"/api/v1/lending/plans/{plan['id']}/approve/").status_code == 403
    approved = administrator.post(f"/api/v1/lending/plans/{plan['id']}/approve/")
    assert (approved.status_code, approved.json()["state"], approved.json()["approved_by"]) == (
        200, "approved", "administrator-user")
    again = administrator.post(f"/api/v1/lending/plans/{plan['id']}/approve/")
    assert (again.status_code, again.json()["error"]["message"]) == (409, "state: a approved plan cannot become approved")
    listed = viewer.get("/api/v1/lending/plans/?state=approved").json()
    assert [p["id"] for p in listed] == [plan["id"]]
    assert viewer.get("/api/v1/lending/plans/?state=lost").status_code == 400
    assert viewer.get(f"/api/v1/lending/plans/{plan['id']}/").json()["steps"][1]["actor"] == "administrator-user"
    no_reason = administrator.post(f"/api/v1/lending/plans/{plan['id']}/rollback/", {}, content_type="application/json")
    assert no_reason.status_code == 400


def test_api_the_administrator_a_proposer_makes_cannot_approve_the_plan(pools, make_user):
    """The issue's attack through the REST API: an Administrator proposes, makes `admin2` through the accounts
    API a moment later and approves through it. Refused as the lifecycle's promotions and audit retention refuse
    a four-eyes decision: 409, the message naming the approver, and `fields` the account at fault."""
    from django.test import Client

    from appliance.accounts.models import User

    plan = plan_of(make_user(Role.ADMINISTRATOR, "ada"))
    ada = Client()
    ada.force_login(User.objects.get(username="ada"))
    made = ada.post("/api/v1/accounts/users/", {"username": "admin2", "role": "administrator",
                                                "password": "Second-admin-pass-42"}, content_type="application/json")
    assert made.status_code == 201, made.content
    admin2 = Client()
    admin2.force_login(User.objects.get(username="admin2"))
    refused = admin2.post(f"/api/v1/lending/plans/{plan.pk}/approve/")
    message = ("approver: 'admin2' was created by 'ada', who asked (directly or through accounts they made); the "
               "approver must be an account the requester did not make")
    assert refused.status_code == 409
    assert refused.json()["error"] == {"status": 409, "code": "conflict", "message": message,
                                       "fields": {"approver": [message]}}
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.PROPOSED
    record = AuditRecord.objects.get(event="lending.plan.approve")
    assert (record.outcome, record.actor_username, record.reason, record.details["field"]) == (
        "failure", "admin2", message, "approver")


def test_api_policies(pools, client_for):
    training, inference, policy = pools
    url = f"/api/v1/lending/policies/{inference.pk}/"
    assert client_for(Role.VIEWER).put(url, {"may_lend": True}, content_type="application/json").status_code == 403
    # An Operator sets the policy (as in the portal's form) but not its automatic approval.
    refused = client_for(Role.OPERATOR).put(url, {"may_lend": True, "automatic_approval": True},
                                            content_type="application/json")
    assert refused.status_code == 403 and "automatic_approval" in refused.json()["error"]["message"]
    assert not LendingPolicy.objects.filter(pool=inference).exists()
    bad = client_for(Role.ADMINISTRATOR).put(url, {"window_days": [1, 9]}, content_type="application/json")
    assert bad.status_code == 400
    set_ = client_for(Role.ADMINISTRATOR).put(url, {"may_lend": True, "minimum_nodes": 0, "reclaim_minutes": 5},
                                              content_type="application/json")
    assert set_.status_code == 200, set_.content
    assert set_.json() == {"pool": "inference", "pool_id": inference.pk, "may_lend": True, "minimum_nodes": 0,
                           "window_days": [], "window_start_hour": 0, "window_end_hour": 24, "reclaim_minutes": 5,
                           "automatic_approval": False}
    listed = client_for(Role.VIEWER).get("/api/v1/lending/policies/").json()
    assert [p["pool"] for p in listed] == ["inference", "training"]
    assert AuditRecord.objects.filter(event="lending.lendingpolicy.create",
                                      target_name="lending policy of inference").count() == 1
    by_operator = client_for(Role.OPERATOR).put(url, {"minimum_nodes": 1, "automatic_approval": False},
                                                content_type="application/json")
    assert by_operator.status_code == 200 and by_operator.json()["minimum_nodes"] == 1


def test_portal_pages(pools, client_for, users):
    plan = plan_of(users[Role.OPERATOR])
    viewer, operator, administrator = client_for(Role.VIEWER), client_for(Role.OPERATOR), client_for(Role.ADMINISTRATOR)
    page = viewer.get("/lending/").content.decode()
    assert f'data-plan="{plan.pk}"' in page and 'data-state="proposed"' in page and 'hx-trigger="every 5s"' in page
    assert 'data-testid="propose"' not in page
    assert 'data-testid="propose"' in operator.get("/lending/").content.decode()
    assert viewer.get("/lending/propose/").status_code == 403
    detail = viewer.get(f"/lending/plans/{plan.pk}/").content.decode()
    assert 'data-testid="approve"' not in detail and "idle at night" in detail
    assert 'data-testid="approve"' in administrator.get(f"/lending/plans/{plan.pk}/").content.decode()
    assert operator.post(f"/lending/plans/{plan.pk}/approve/").status_code == 403
    assert administrator.post(f"/lending/plans/{plan.pk}/reject/", {"reason": "no"}).status_code == 302
    assert LendingPlan.objects.get(pk=plan.pk).state == PlanState.REJECTED
    form = operator.post("/lending/propose/", {"nodes": "gpu04", "from_pool": "training", "to_pool": "inference",
                                               "window_start": "2030-01-01T23:00", "window_end": "2030-01-02T05:00",
                                               "reason": "x"})
    assert form.status_code == 400 and "gpu04 not in pool training" in form.content.decode()
    made = operator.post("/lending/propose/", {"nodes": "gpu02", "from_pool": "training", "to_pool": "inference",
                                               "window_start": "2030-01-01T23:00", "window_end": "2030-01-02T05:00",
                                               "reason": "quiet night"})
    assert made.status_code == 302
    assert LendingPlan.objects.get(nodes=["gpu02"]).state == PlanState.PROPOSED


def test_the_beat_advances_plans_every_minute():
    from appliance.celery import app, beat_schedule

    assert beat_schedule()["lending-advance"] == {"task": "lending.advance", "schedule": 60}
    app.loader.import_default_modules()
    assert "lending.advance" in app.tasks


def test_a_policy_of_a_pool_id_past_the_integer_range_is_not_found(pools, client_for):
    """Found by schemathesis over demo data: a pool id past 2**63 overflowed the foreign key's lookup (500)."""
    for pool in ("667504508036010857201664", str(2**63), "999"):
        answer = client_for(Role.VIEWER).get(f"/api/v1/lending/policies/{pool}/")
        assert answer.status_code == 404, (pool, answer.status_code)
    put = client_for(Role.ADMINISTRATOR).put(f"/api/v1/lending/policies/{2**64}/", {"may_lend": True},
                                             content_type="application/json")
    assert put.status_code == 404
