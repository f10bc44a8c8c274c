"""Lending's pages and endpoints of each capability (read, propose, approve) as every role and anonymously
(tests/access.py); the others are checked role by role in test_plans.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from appliance.core.roles import Role
from appliance.inventory.models import Appliance, Node, Pool, PoolMembership
from appliance.lending import services
from appliance.lending.models import LendingPolicy
from tests.access import AccessMatrix, Endpoint


class TestLendingAccess(AccessMatrix):
    endpoints = [
        Endpoint("/lending/", "analytics.view"),
        Endpoint("/lending/propose/", "analytics.change"),
        Endpoint("/lending/policies/{pool}/", "analytics.change"),
        Endpoint("/api/v1/lending/plans/{plan}/", "analytics.view"),
        Endpoint("/api/v1/lending/plans/{plan}/approve/", "pools.approve", method="post"),
    ]

    @pytest.fixture
    def url_values(self, users):
        appliance = Appliance.objects.create(name="lab", simulated=True)
        training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
        Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
        for name in ("gpu01", "gpu02"):
            PoolMembership.objects.create(pool=training, node=Node.objects.create(appliance=appliance, name=name))
        LendingPolicy.objects.create(pool=training, may_lend=True, minimum_nodes=1)
        start = timezone.now() + timedelta(hours=1)
        plan = services.propose(nodes=["gpu02"], from_pool="training", to_pool="inference", window_start=start,
                                window_end=start + timedelta(hours=4), reason="idle", actor=users[Role.OPERATOR])
        return {"plan": plan.pk, "pool": training.pk}
