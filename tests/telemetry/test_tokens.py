"""The collectors' ingest tokens: issued once per node (the digest is what the appliance checks a write
by), audited without the token, revoked with an audit record, never issued by a dry run. (Through the
engine: tests/provisioning/test_collector_tokens_run.py.)"""

import hashlib
import json

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance, Node
from appliance.provisioning import catalogue as provisioning_catalogue
from appliance.provisioning.models import Run
from appliance.telemetry import stage_vars, tokens
from appliance.telemetry.models import NodeCollector


@pytest.fixture
def node(db):
    appliance = Appliance.objects.create(name="tok", simulated=False)
    return Node.objects.create(appliance=appliance, name="gpu07", role="gpu", management_address="10.0.0.7")


def test_a_token_is_issued_once_and_only_its_digest_reaches_the_audit_log(node):
    first = tokens.collector_token(node)
    again = tokens.collector_token(node)

    assert again == first
    assert len(first) >= 43  # 32 random bytes, URL-safe base64
    collector = NodeCollector.objects.get(node=node)
    assert collector.token_digest == hashlib.sha256(first.encode()).hexdigest()
    records = AuditRecord.objects.filter(event="telemetry.collector.register")
    assert records.count() == 1
    record = records.get()
    assert record.target_name == "gpu07"
    assert record.details["digest_prefix"] == collector.token_digest[:8]
    assert first not in json.dumps(record.details) + record.reason


def test_each_node_gets_its_own_token(node):
    other = Node.objects.create(appliance=node.appliance, name="gpu08", role="gpu")

    assert tokens.collector_token(node) != tokens.collector_token(other)


def test_a_revoked_token_is_gone_and_the_next_one_differs(node):
    first = tokens.collector_token(node)

    assert tokens.revoke(node) is True
    assert not NodeCollector.objects.filter(node=node).exists()
    record = AuditRecord.objects.filter(event="telemetry.collector.revoke").get()
    assert record.target_name == "gpu07" and first not in json.dumps(record.details)
    assert tokens.revoke(node) is False
    assert tokens.collector_token(node) != first


def test_a_dry_run_issues_no_token(node):
    run = Run.objects.create(appliance=node.appliance, kind=Run.Kind.STAGES, stages=["monitoring"], dry_run=True)

    secrets = stage_vars.monitoring_stage_secrets(run, [node])

    # (No InfluxDB token either: the site names no InfluxDB.)
    assert secrets == {"appliance_collector_tokens": {"gpu07": "not-issued-in-a-dry-run"},
                       "appliance_influxdb_tokens": {}}
    assert not NodeCollector.objects.exists()
    assert not AuditRecord.objects.filter(event="telemetry.collector.register").exists()


def test_the_monitoring_stage_finds_its_providers_by_name():
    stage = provisioning_catalogue.DEFAULT.get("monitoring")

    assert provisioning_catalogue.provider(stage.vars_provider) is stage_vars.monitoring_stage_vars
    assert provisioning_catalogue.provider(stage.secrets_provider) is stage_vars.monitoring_stage_secrets
    assert provisioning_catalogue.DEFAULT.names[-4:] == ["workloads", "partitioning", "monitoring", "acceptance"]
