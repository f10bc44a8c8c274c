"""What the demo walk-through tripped on at the command line: `models request` takes the stage where
`models transition` takes it, and a request without evidence says which evaluations there are."""

import pytest
from django.core.management.base import CommandError

from appliance.accounts.tokens import issue_token
from appliance.core.roles import Role
from appliance.lifecycle import services
from appliance.lifecycle.models import PromotionRequest

from .registry_support import write_model
from .test_registry_cli import models, root  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def test_a_request_names_the_evaluations_to_choose_from_and_takes_the_stage_positionally(root, make_user,  # noqa: F811
                                                                                          monkeypatch):
    erin = make_user(Role.ML_ENGINEER, "erin")
    monkeypatch.setenv("APPLIANCE_TOKEN", issue_token(erin, "cli")[1])
    version = services.register_version("llama", source=str(write_model(root / "v1")), user=erin)
    services.transition(version, "validated", user=erin)
    services.transition(version, "staging", user=erin)
    with pytest.raises(CommandError, match=r"^evidence: production needs at least one evaluation of this version "
                                           r"\(it has none yet: add one first\)$"):
        models("request", "llama", "1", "production", "--reason", "ready")
    evaluation = services.add_evaluation(version, user=erin, name="mmlu", metrics={"accuracy": 0.6}, passed=True)
    with pytest.raises(CommandError, match=rf"^evidence: production needs at least one evaluation of this version "
                                           rf"\(its evaluations: #{evaluation.pk} mmlu\)$"):
        models("request", "llama", "1", "production", "--reason", "ready")
    printed = models("request", "llama", "1", "production", "--reason", "ready", "--evidence", str(evaluation.pk))
    request = PromotionRequest.objects.get()   # its number is the database's (sequences outlive a test)
    assert printed.startswith(f"request #{request.pk}: llama v1 to production, waiting for a second person until ")
    assert request.target_stage == "production"


def test_show_says_which_names_are_aliases(root, make_user):  # noqa: F811
    erin = make_user(Role.ML_ENGINEER, "erin")
    version = services.register_version("llama", source=str(write_model(root / "v1")), user=erin)
    services.set_alias(version.model, "candidate", version, user=erin)
    assert models("show", "llama", "1").startswith("llama v1: registered (aliases: candidate)\n")
