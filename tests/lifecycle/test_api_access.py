"""Every endpoint of the lifecycle API as every role and anonymously ("api" part; tests/access.py): models.view
for everybody, models.change for ML engineers and Administrators, models.approve the same, models.deploy
also for Operators (tests/expected_roles.py). A test below checks that the matrix names every route.

Writes that would need a running inference pool (deploy, rollback, stop) are sent with a body the deployments
service refuses after the role check (an unknown version: 404; a stopped service: 409): a role that may deploy
gets that refusal, one that may not gets 403 before the service is reached."""

from datetime import timedelta

import pytest
from django.urls import get_resolver, resolve
from django.utils import timezone

from appliance.core.roles import Role
from appliance.inventory.models import Appliance
from appliance.lifecycle.models import (
    Alias,
    Deployment,
    Evaluation,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    StageHistory,
)
from tests.access import AccessMatrix, Endpoint
from tests.api.conftest import fresh_users, make_role_users, shared_rows  # noqa: F401 (fixture)
from tests.api.test_access import _named_routes

pytestmark = pytest.mark.django_db

API = "/api/v1/lifecycle/"
V1 = API + "models/llama/versions/1/"
V2 = API + "models/llama/versions/2/"
VIEW, CHANGE, APPROVE, DEPLOY = "models.view", "models.change", "models.approve", "models.deploy"

ENDPOINTS = [
    Endpoint(API, VIEW),
    Endpoint(API + "models/", VIEW),
    Endpoint(API + "models/", CHANGE, "post", {"name": "whisper"}, success=(201,)),
    Endpoint(API + "models/llama/", VIEW),
    Endpoint(API + "models/llama/", CHANGE, "patch", {"description": "a chat model"}),
    Endpoint(API + "models/empty/", CHANGE, "delete", success=(204,)),
    Endpoint(API + "models/llama/history/", VIEW),
    Endpoint(API + "models/llama/aliases/champion/", CHANGE, "put", {"version": 2}),
    Endpoint(API + "models/llama/aliases/champion/", CHANGE, "delete", success=(204,)),
    Endpoint(API + "versions/", VIEW),
    # The source must be a model's files inside an artifact root: a path outside is refused (400) after
    # the role check; registration itself is tested in test_api_registry.py.
    Endpoint(API + "versions/", CHANGE, "post", {"model": "llama", "source": "/etc"}, success=(400,)),
    Endpoint(V1, VIEW),
    Endpoint(V1 + "evaluations/", VIEW),
    Endpoint(V1 + "evaluations/", CHANGE, "post", {"name": "mmlu", "metrics": {"accuracy": 0.5}}, success=(201,)),
    Endpoint(V1 + "transition/", CHANGE, "post", {"stage": "validated"}),
    Endpoint(V1 + "verify/", DEPLOY, "post"),
    Endpoint(V1 + "card/", VIEW),
    Endpoint(V1 + "card/?format=md", VIEW),
    Endpoint(API + "requests/", VIEW),
    Endpoint(API + "requests/", CHANGE, "post", {"model": "llama", "version": 2, "reason": "beats v1",
                                                "evidence": ["{evaluation}"]}, success=(409,),
             note="v2 has a pending request already: the role passes, the state refuses"),
    Endpoint(API + "requests/{request}/", VIEW),
    Endpoint(API + "requests/{request}/approve/", APPROVE, "post", {"reason": "checked"}, success=(409,),
             note="v2's files are not on the appliance: the role passes, the integrity check refuses (approvals "
                  "themselves: test_api_registry.py)"),
    Endpoint(API + "requests/{request}/reject/", APPROVE, "post", {"reason": "not yet"}),
    Endpoint(API + "deployments/", VIEW),
    Endpoint(API + "deployments/", DEPLOY, "post", {"model": "llama", "version": 99}, success=(404,)),
    Endpoint(API + "deployments/{deployment}/", VIEW),
    Endpoint(API + "deployments/{deployment}/rollback/", DEPLOY, "post", {"reason": "bad answers"}, success=(409,)),
    Endpoint(API + "deployments/{deployment}/stop/", DEPLOY, "post", {"reason": "maintenance"}, success=(409,)),
]


# Who may withdraw a request is a person, not a role (only its requester): tested there.
ROUTES_TESTED_ELSEWHERE = {
    "lifecycle-api-request-cancel": "test_api_registry.py: only the requester withdraws",
    "lifecycle-api-clear-tampered": "test_api_deployments.py: an Administrator only (models.change reaches the "
                                    "view, the service admits Administrators), on a version made tampered there",
}


def registry_rows(requester) -> dict:
    """llama v1 (registered, alias champion) and v2 (staging, an evaluation, a pending request by `requester`
    made now), an empty model, and a stopped deployment of v1 on a simulated appliance."""
    now = timezone.now()
    model = RegisteredModel.objects.create(name="llama", owner=requester)
    RegisteredModel.objects.create(name="empty")
    first = ModelVersion.objects.create(model=model, number=1, source="/models/llama/1")
    second = ModelVersion.objects.create(model=model, number=2, source="/models/llama/2", stage="staging")
    for version in (first, second):
        StageHistory.objects.create(version=version, stage=version.stage, started=now - timedelta(minutes=5))
    Alias.objects.create(model=model, name="champion", version=first)
    evaluation = Evaluation.objects.create(version=second, name="mmlu", metrics={"accuracy": 0.6}, passed=True)
    request = PromotionRequest.objects.create(version=second, target_stage="production", requested_by=requester,
                                              requested_by_username=requester.username, reason="ready",
                                              created=now, expires_at=now + timedelta(hours=72))
    request.evidence.set([evaluation])
    appliance = Appliance.objects.create(name="lab", simulated=True)
    deployment = Deployment.objects.create(name="llama", version=first, appliance=appliance, pool="inference",
                                           state="stopped")
    return {"request": request.pk, "deployment": deployment.pk, "evaluation": evaluation.pk}


@pytest.fixture(scope="module")
def module_values(shared_rows):  # noqa: F811 (the fixture imported above)
    """The role users, the requester and the registry's rows, written once for the module (tests/api/conftest.py):
    each case runs in a savepoint rolled back after it. The approvers exist before the request is made."""
    from appliance.accounts.services import create_user
    from tests.conftest import PASSWORD

    with shared_rows():
        users = make_role_users()
        return users, registry_rows(create_user("requester", Role.ML_ENGINEER, PASSWORD))


@pytest.fixture
def users(module_values):
    return fresh_users(module_values[0])


class TestLifecycleAPIAccess(AccessMatrix):
    endpoints = ENDPOINTS

    @pytest.fixture
    def url_values(self, module_values, settings, tmp_path):
        settings.LIFECYCLE_ARTIFACT_ROOTS = [tmp_path / "models"]
        settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
        settings.SIMULATION_DIR = tmp_path / "simulation"
        return module_values[1]

    def test_access(self, endpoint, role, users, url_values):
        # The evidence id is a number in the body, filled in here (tests/access.py formats only the URL).
        if endpoint.payload and endpoint.payload.get("evidence") == ["{evaluation}"]:
            endpoint = Endpoint(endpoint.url, endpoint.capability, endpoint.method,
                                {**endpoint.payload, "evidence": [url_values["evaluation"]]}, success=endpoint.success)
        super().test_access(endpoint, role, users, url_values)


def test_the_matrix_covers_every_route_of_the_lifecycle_api():
    covered = {resolve(endpoint.url.split("?")[0].format(request=1, deployment=1)).url_name for endpoint in ENDPOINTS}
    routes = {name for name in _named_routes(get_resolver()) if name.startswith("lifecycle-api")}
    assert routes - covered - set(ROUTES_TESTED_ELSEWHERE) == set()
