"""Partitioning's pages and endpoints of each capability (read, change) as every role and anonymously
(tests/access.py); apply and rollback, which also need provisioning.run, are checked role by role in
test_api_partitioning.py and test_views_partitioning.py."""

import pytest

from appliance.core.roles import Role
from tests.access import AccessMatrix, Endpoint
from tests.partitioning.test_api_partitioning import REQUESTS
from tests.partitioning.test_api_partitioning import lab as lab_appliance  # noqa: F401 (fixture)

SIZE = {"params": 8_000_000_000, "layers": 32, "kv_heads": 8, "head_dim": 128}


class TestPartitioningAccess(AccessMatrix):
    endpoints = [
        Endpoint("/partitioning/", "partitioning.view"),
        Endpoint("/partitioning/plans/", "partitioning.view"),
        Endpoint("/partitioning/plans/{plan}/", "partitioning.view"),
        Endpoint("/partitioning/advisor/", "partitioning.view"),
        Endpoint("/partitioning/plans/new/", "partitioning.change"),
        Endpoint("/api/v1/partitioning/layout/", "partitioning.view"),
        Endpoint("/api/v1/partitioning/plans/", "partitioning.view"),
        Endpoint("/api/v1/partitioning/plans/{plan}/", "partitioning.view"),
        Endpoint("/api/v1/partitioning/size/", "partitioning.view", method="post", payload=SIZE),
        Endpoint("/api/v1/partitioning/preview/", "partitioning.change", method="post",
                 payload={"requests": REQUESTS}),
        Endpoint("/api/v1/partitioning/plans/", "partitioning.change", method="post",
                 payload={"requests": REQUESTS}),
    ]

    @pytest.fixture
    def url_values(self, users, lab_appliance):  # noqa: F811
        from appliance.partitioning import services

        plan = services.save_plan(lab_appliance, REQUESTS, user=users[Role.OPERATOR])
        return {"plan": plan.number}
