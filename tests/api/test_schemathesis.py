"""The whole API against its own OpenAPI schema: schemathesis generates valid and invalid requests for
every operation and runs all its checks on the answers (no server error, every status and content
type documented, bodies matching the schema, invalid input refused, valid input accepted,
authentication enforced). A signed-in Administrator sends them, against the WSGI application, with
a small number of examples per operation so that the run takes about a minute."""

import json
import uuid

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from appliance.core.roles import Role
from tests.conftest import PASSWORD

MAX_EXAMPLES = 8


def administrator_token() -> str:
    """A fresh Administrator and token for each example: an example may deactivate or demote the
    user it acts as, or revoke the token it sends, and the next one must not inherit that."""
    from appliance.accounts.services import create_user
    from appliance.accounts.tokens import issue_token

    user = create_user(f"st-admin-{uuid.uuid4().hex[:12]}", Role.ADMINISTRATOR, PASSWORD)
    return issue_token(user, "schemathesis")[1]


def served_schema() -> dict:
    """The schema exactly as /api/v1/schema/ serves it (drf-spectacular's generator and renderer)."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


schema = schemathesis.openapi.from_dict(served_schema())
schema.app = get_wsgi_application()
# Strings without NUL: PostgreSQL stores no NUL in text or JSON, and the API refuses it (400 naming the field)
# for a reason no JSON schema can state; every other character is generated.
schema.config.generation.update(allow_x00=False)


@pytest.fixture
def appliance_with_data(transactional_db, settings, tmp_path):
    """The sample inventory and what a demo appliance holds besides (each the first of its kind, so that the
    ids schemathesis tries first find it, and its answer is checked against the schema): a run started from
    the command line (no requesting account), a model with a version, an evaluation, an alias and a pending
    production request, the pools' lending policies and a proposed lending plan."""
    from datetime import timedelta

    from django.utils import timezone

    from appliance.accounts.services import create_user
    from appliance.lending import services as lending
    from appliance.lending.models import LendingPolicy
    from appliance.lifecycle import services as lifecycle
    from appliance.provisioning.models import Run
    from tests.accounts.settled import settle
    from tests.lifecycle.registry_support import write_model
    from tests.sample_inventory import build_sample_inventory

    # Runs the API starts are queued for a worker that never takes them: they stay pending, so no
    # playbook runs while the schema is exercised.
    settings.CELERY_BROKER_URL = "memory://"
    settings.LIFECYCLE_ARTIFACT_ROOTS = [str(tmp_path / "models")]
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    sample = build_sample_inventory()
    Run.objects.create(appliance=sample.appliance, kind=Run.Kind.BOOTSTRAP, stages=["os"], requested_by=None,
                       state="succeeded", started=timezone.now(), ended=timezone.now())
    engineer, lead = settle(create_user("st-engineer", Role.ML_ENGINEER, PASSWORD),
                            create_user("st-lead", Role.ADMINISTRATOR, PASSWORD))
    version = lifecycle.register_version("llama", source=str(write_model(tmp_path / "models" / "llama" / "v1")),
                                         user=engineer)
    evaluation = lifecycle.add_evaluation(version, user=engineer, name="mmlu", metrics={"accuracy": 0.7},
                                          passed=True)
    lifecycle.transition(version, "validated", user=engineer)
    lifecycle.transition(version, "staging", user=engineer)
    lifecycle.set_alias(version.model, "champion", version, user=engineer)
    lifecycle.request_transition(version, "production", user=engineer, reason="evaluated", evidence=[evaluation])
    LendingPolicy.objects.create(pool=sample.inference, may_lend=True, minimum_nodes=0)
    LendingPolicy.objects.create(pool=sample.training, may_lend=False)
    start = timezone.now() + timedelta(hours=1)
    lending.propose(nodes=[sample.gpu_node_2.name], from_pool="inference", to_pool="training", window_start=start,
                    window_end=start + timedelta(hours=4), reason="idle at night", actor=lead)


# Operations whose success depends on rules or state that a JSON schema cannot state: a schema-valid
# request may be refused with a 400 naming the rule. For these alone the check that valid data is
# accepted (positive_data_acceptance) is not run; every other check is, on every operation.
RULES_BEYOND_THE_SCHEMA = {
    "POST /api/v1/accounts/me/password/": "the old password must be the current one, the new one pass the validators",
    "POST /api/v1/accounts/users/": "the password must pass the validators (common, numeric, like the username)",
    "POST /api/v1/audit/exports/": "the time range must hold records",
    "POST /api/v1/inventory/credentials/": "the endpoints must be BMC URLs the appliance may send a login to",
    "POST /api/v1/inventory/site/import/": "the body must be a valid site definition",
    "POST /api/v1/inventory/site/validate/": "the body must be a valid site definition",
    "POST /api/v1/provisioning/runs/": "the appliance, stages and nodes named must exist",
    "GET /api/v1/analytics/efficiency/": "times are ISO 8601 dates or times, the pool named must exist",
    "GET /api/v1/analytics/report/": "times are ISO 8601 dates or times, the pool named must exist",
    "POST /api/v1/lending/plans/": "the pools and nodes named must exist, the window must be in order",
    "POST /api/v1/partitioning/plans/": "each request is what the planner takes (a name's pattern, memory, replicas)",
    "POST /api/v1/partitioning/preview/": "each request is what the planner takes (a name's pattern, memory, replicas)",
    "POST /api/v1/partitioning/size/": "the model's figures must hold together (KV heads divide attention heads)",
    "POST /api/v1/lifecycle/models/": "tag names follow a pattern; text holds no control characters",
    "PATCH /api/v1/lifecycle/models/{name}/": "tag names follow a pattern; text holds no control characters",
    "POST /api/v1/lifecycle/versions/": "the source must be a model's files inside an artifact root",
}


@schema.parametrize()
# derandomize: the same examples on every run (each operation's drawn from its own name), so that a run fails
# for what changed in the code, not for what the generator happened to draw that day.
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_api_conforms_to_its_schema(case, appliance_with_data):
    excluded = [positive_data_acceptance] if case.operation.label in RULES_BEYOND_THE_SCHEMA else []
    case.call_and_validate(headers={"Authorization": f"Token {administrator_token()}"}, excluded_checks=excluded)


def test_the_exempted_operations_exist():
    labels = {operation.ok().label for operation in schema.get_all_operations()}
    assert set(RULES_BEYOND_THE_SCHEMA) <= labels
