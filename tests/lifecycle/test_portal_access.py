"""The lifecycle's portal pages and forms as every role and anonymously ("portal" part; tests/access.py):
everybody reads, ML engineers and Administrators change and approve, Operators too deploy. The forms that
need a whole inference pool to succeed are sent with input the form refuses: a role that holds the
capability gets past the check to that refusal (400/404), the others get 403."""

import pytest

from appliance.accounts.services import create_user
from appliance.core.roles import Role
from appliance.lifecycle import services
from tests.access import AccessMatrix, Endpoint
from tests.accounts.settled import settle
from tests.conftest import PASSWORD

from .portal_support import model_root, register  # noqa: F401 (fixture)

VERSION = "/models/{model}/versions/1"


class TestLifecyclePortalAccess(AccessMatrix):
    endpoints = [
        Endpoint("/models/", "models.view"),
        Endpoint("/models/?q=acc&stage=registered", "models.view"),
        Endpoint("/models/approvals/", "models.view"),
        Endpoint("/models/deployments/", "models.view"),
        Endpoint("/models/{model}/", "models.view"),
        Endpoint(VERSION + "/", "models.view"),
        Endpoint(VERSION + "/card.md", "models.view"),
        Endpoint(VERSION + "/verify/", "models.view", "post", {}, success=(302,)),
        Endpoint(VERSION + "/transition/", "models.change", "post", {"stage": "validated"}, success=(302,)),
        Endpoint(VERSION + "/evaluations/", "models.change", "post", {"name": "smoke", "metrics": "a=1"},
                 success=(302,)),
        Endpoint("/models/{model}/aliases/", "models.change", "post", {"alias": "champion", "version": "1"},
                 success=(302,)),
        Endpoint("/models/{model}/aliases/delete/", "models.change", "post", {"alias": "old"}, success=(302,)),
        Endpoint("/models/requests/{request}/approve/", "models.approve", "post", {"reason": "ok"},
                 success=(302,)),
        Endpoint("/models/requests/{request}/reject/", "models.approve", "post", {"reason": "not yet"},
                 success=(302,)),
        Endpoint("/models/deployments/", "models.deploy", "post", {"version": "nothing/1"}, success=(400,),
                 note="no production version to choose: the form refuses it"),
        Endpoint("/models/deployments/rollback/", "models.deploy", "post", {"service": "gone", "reason": "x"},
                 success=(404,), note="no such service"),
        Endpoint("/models/deployments/999999/stop/", "models.deploy", "post", {"reason": "x"}, success=(404,)),
    ]

    @pytest.fixture
    def url_values(self, users, model_root):  # noqa: F811
        # The role accounts and the requester are older than the four-eyes cooling period and unlinked: each role
        # account may be the request's independent approver.
        requester = settle(create_user("requester", Role.ML_ENGINEER, PASSWORD))
        version = register(model_root, "access-model", 31, user=requester)
        services.set_alias(version.model, "old", version, user=requester)
        staged = register(model_root, "access-model", 32, user=requester)
        services.transition(staged, "validated", user=requester)
        services.transition(staged, "staging", user=requester)
        evaluation = services.add_evaluation(staged, user=requester, name="acc", metrics={"acc": 0.9})
        request = services.request_transition(staged, "production", user=requester, reason="ready",
                                              evidence=[evaluation.pk])
        return {"model": "access-model", "request": request.pk}
