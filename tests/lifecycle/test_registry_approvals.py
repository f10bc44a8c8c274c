"""Four-eyes promotion to production ("registry" part): who may approve, and what an approval does."""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.accounts.services import create_user, set_active, set_role
from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import services
from appliance.lifecycle.errors import Conflict, Forbidden, LifecycleError
from appliance.lifecycle.models import PromotionRequest
from tests.accounts.settled import settle

from .registry_support import write_model

pytestmark = pytest.mark.django_db
PASSWORD = "correct-horse-battery-9"



@pytest.fixture
def people(make_user):
    return {"erin": make_user(Role.ML_ENGINEER, "erin"), "amir": make_user(Role.ML_ENGINEER, "amir"),
            "ada": make_user(Role.ADMINISTRATOR, "ada"), "olga": make_user(Role.OPERATOR, "olga"),
            "val": make_user(Role.VIEWER, "val")}


def staged(root, people, directory="v1", seed=7):
    version = services.register_version("llama", source=str(write_model(root / directory, seed)),
                                        user=people["erin"])
    services.transition(version, "validated", user=people["erin"])
    services.transition(version, "staging", user=people["erin"])
    evaluation = services.add_evaluation(version, user=people["erin"], name="mmlu", metrics={"accuracy": 0.61},
                                         passed=True)
    return version, evaluation


def ask(version, evaluation, user):
    return services.request_transition(version, "production", user=user, reason="beats v0 on mmlu",
                                       evidence=[evaluation.pk])


def test_an_approval_of_changed_files_is_refused_naming_them(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    shard = root / "v1" / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes() + b" ")
    with pytest.raises(Conflict, match="model-00002-of-00002.safetensors"):
        services.approve(request, user=people["amir"], reason="evidence checked")
    version.refresh_from_db()
    request.refresh_from_db()
    assert (version.stage, request.state) == ("staging", "pending")
    assert AuditRecord.objects.filter(event="lifecycle.version.tampered").exists()
    refusal = AuditRecord.objects.get(event="lifecycle.request.approve")
    assert (refusal.outcome, refusal.actor_username) == ("failure", "amir")


def test_a_second_person_approves_and_the_version_serves_production(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    services.approve(request, user=people["amir"], reason="evidence checked")
    version.refresh_from_db()
    request.refresh_from_db()
    assert version.stage == "production"
    assert version.model.aliases.get(name="production").version == version
    assert (request.state, request.decided_by_username) == ("approved", "amir")
    assert AuditRecord.objects.filter(event="lifecycle.request.approve", outcome="success").count() == 1

    second, second_evaluation = staged(root, people, "v2", seed=8)
    services.approve(ask(second, second_evaluation, people["erin"]), user=people["ada"])
    version.refresh_from_db()
    assert version.stage == "deprecated"
    assert version.model.aliases.get(name="production").version.number == 2
    assert services.previous_production(version.model) == version
    back = services.rollback_production(version.model, user=people["olga"], reason="v2 answers wrong")
    second.refresh_from_db()
    assert (back.number, back.stage, second.stage) == (1, "production", "deprecated")
    assert version.model.aliases.get(name="production").version.number == 1


def test_an_approval_also_points_the_alias_the_request_named(root, people):
    version, evaluation = staged(root, people)
    request = services.request_transition(version, "production", user=people["erin"], reason="ship",
                                          evidence=[evaluation], alias="champion")
    services.approve(request, user=people["amir"])
    assert dict(version.model.aliases.values_list("name", "version__number")) == {"champion": 1, "production": 1}


def test_the_requester_cannot_approve_their_own_request(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    with pytest.raises(Conflict, match="needs a second person, not the one who asked"):
        services.approve(request, user=people["erin"])
    version.refresh_from_db()
    request.refresh_from_db()
    assert (version.stage, request.state) == ("staging", "pending")
    refusal = AuditRecord.objects.get(event="lifecycle.request.approve")
    assert refusal.outcome == "failure" and "not the one who asked" in refusal.reason


def test_an_account_the_requester_created_cannot_approve_even_through_another(root, people):
    """B makes A (directly, or through an account B made): B asks, A may not approve, however old A is."""
    made = create_user("erins-admin", Role.ADMINISTRATOR, PASSWORD, created_by=people["erin"])
    made_by_made = create_user("erins-puppet", Role.ML_ENGINEER, PASSWORD, created_by=made)
    settle(made, made_by_made)
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    for approver in (made, made_by_made):
        with pytest.raises(Conflict, match="was created by 'erin', who asked"):
            services.approve(request, user=approver)
    request.refresh_from_db()
    assert request.state == "pending"


def test_the_account_that_made_the_requester_cannot_approve_even_through_another(root, people):
    """A makes B (directly, or A makes C who makes B): B asks, A may not approve, however old B is."""
    ada = people["ada"]
    sock = settle(create_user("sock", Role.ML_ENGINEER, PASSWORD, created_by=ada))
    middle = settle(create_user("middle", Role.ADMINISTRATOR, PASSWORD, created_by=ada))
    chained = settle(create_user("chained", Role.ML_ENGINEER, PASSWORD, created_by=middle))
    for requester in (sock, chained):
        version, evaluation = staged(root, people, f"v-{requester.username}")
        request = ask(version, evaluation, requester)
        with pytest.raises(Conflict) as refused:
            services.approve(request, user=ada, reason="looks fine")
        assert str(refused.value) == (
            f"approver: 'ada' created {requester.username!r}, who asked (directly or through accounts they made); "
            "the approver must not have made the requester's account")
        assert refused.value.field == "approver"
        request.refresh_from_db()
        version.refresh_from_db()
        assert (request.state, version.stage) == ("pending", "staging")
    # A third person, linked to neither, approves the chained account's request.
    services.approve(request, user=people["amir"], reason="evidence checked")
    assert PromotionRequest.objects.get(pk=request.pk).state == "approved"


def test_a_request_by_a_fresh_account_cannot_be_approved_until_it_is_asked_again_a_day_later(root, people):
    """The issue's attack: an account made two seconds before its request; nobody may approve it."""
    fresh = create_user("fresh", Role.ML_ENGINEER, PASSWORD)
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, fresh)
    with pytest.raises(Conflict) as refused:
        services.approve(request, user=people["amir"])
    made = fresh.date_joined
    assert str(refused.value) == (
        f"requester: 'fresh' was created at {made.isoformat(timespec='seconds')}, less than 24 h before the "
        "request; an account takes part in a four-eyes decision only 24 h after it was created, re-enabled or "
        "given its role: a request made from "
        f"{(made + timedelta(hours=24)).isoformat(timespec='seconds')} on can be decided")
    assert refused.value.field == "requester"
    assert PromotionRequest.objects.get(pk=request.pk).state == "pending"


def test_the_cooling_period_is_a_setting(root, people, settings):
    settings.FOUR_EYES_COOLING_PERIOD = timedelta(hours=2)
    version, evaluation = staged(root, people)
    recent = settle(create_user("recent", Role.ML_ENGINEER, PASSWORD), ago=timedelta(hours=1))
    with pytest.raises(Conflict, match="^requester: 'recent' was created at .*, less than 2 h before the request"):
        services.approve(ask(version, evaluation, recent), user=people["amir"])
    older = settle(create_user("older", Role.ML_ENGINEER, PASSWORD), ago=timedelta(hours=3))
    second, second_evaluation = staged(root, people, "v2", seed=8)
    services.approve(ask(second, second_evaluation, older), user=people["amir"])
    second.refresh_from_db()
    assert second.stage == "production"


def test_an_approver_created_promoted_or_re_enabled_lately_cannot_approve(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    newcomer = create_user("newcomer", Role.ML_ENGINEER, PASSWORD)
    with pytest.raises(Conflict, match="^approver: 'newcomer' was created at .*, less than 24 h before the request"):
        services.approve(request, user=newcomer)
    promoted = people["val"]
    set_role(promoted, Role.ML_ENGINEER)
    with pytest.raises(Conflict, match="^approver: 'val' was given the role ml_engineer at .*, less than 24 h"):
        services.approve(request, user=promoted)
    amir = people["amir"]
    set_active(amir, False)
    set_active(amir, True)
    with pytest.raises(Conflict, match="^approver: 'amir' was re-enabled at .*, less than 24 h"):
        services.approve(request, user=amir)
    assert PromotionRequest.objects.get(pk=request.pk).state == "pending"
    refusals = AuditRecord.objects.filter(event="lifecycle.request.approve", outcome="failure").count()
    assert refusals == 3


def test_an_expired_request_cannot_be_approved_and_is_marked_expired(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    PromotionRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    with pytest.raises(Conflict, match="expired"):
        services.approve(request, user=people["amir"])
    request.refresh_from_db()
    version.refresh_from_db()
    assert (request.state, version.stage) == ("expired", "staging")
    assert AuditRecord.objects.filter(event="lifecycle.request.expire").count() == 1


def test_expire_requests_marks_only_requests_past_their_lifetime(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    assert services.expire_requests(now=request.expires_at - timedelta(seconds=1)) == 0
    assert services.expire_requests(now=request.expires_at) == 1
    assert PromotionRequest.objects.get(pk=request.pk).state == "expired"


def test_roles_without_models_approve_and_nobody_cannot_approve(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    for user in (people["val"], people["olga"]):
        with pytest.raises(Forbidden, match="needs models.approve"):
            services.approve(request, user=user)
    with pytest.raises(Forbidden, match="APPLIANCE_TOKEN"):
        services.approve(request, user=None)
    assert PromotionRequest.objects.get(pk=request.pk).state == "pending"


def test_a_request_carries_evaluation_evidence_of_the_version(root, people):
    version, evaluation = staged(root, people)
    with pytest.raises(LifecycleError, match="production needs at least one evaluation") as caught:
        services.request_transition(version, "production", user=people["erin"], reason="ship it")
    assert caught.value.field == "evidence"
    other, other_evaluation = staged(root, people, "v2", seed=8)
    with pytest.raises(LifecycleError, match="are not evaluations of llama v1"):
        services.request_transition(version, "production", user=people["erin"], reason="ship it",
                                    evidence=[other_evaluation.pk])
    request = ask(version, evaluation, people["erin"])
    assert list(request.evidence.all()) == [evaluation]
    with pytest.raises(Conflict, match="pending already"):
        ask(version, evaluation, people["amir"])


def test_reject_and_cancel(root, people):
    version, evaluation = staged(root, people)
    request = ask(version, evaluation, people["erin"])
    with pytest.raises(Forbidden, match="only they can withdraw it"):
        services.cancel(request, user=people["amir"])
    services.reject(request, user=people["amir"], reason="accuracy too low")
    with pytest.raises(Conflict, match="is rejected, not pending"):
        services.approve(request, user=people["ada"])
    again = ask(version, evaluation, people["erin"])
    services.cancel(again, user=people["erin"])
    assert PromotionRequest.objects.get(pk=again.pk).state == "cancelled"
