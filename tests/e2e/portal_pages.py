"""Every portal page, collected from the URL conf (never a hand-picked few), for the browser checks
that must hold on all of them (axe-core, layout at small widths).

A URL pattern with placeholders is filled from `PLACEHOLDERS`, whose values come from the `portal_objects`
fixture (a sample appliance, a finished run with an acceptance report, audit records). A pattern whose
placeholder has no value fails the collection: a new page with a new placeholder must say here what to
show. Routes that are not pages (file downloads, the API, Django's admin) are listed with the reason.
"""

import re
from dataclasses import dataclass

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

# Prefixes of routes that are not the portal: the API (JSON; its reference pages are third-party
# bundles), Django's admin (not part of the portal; Administrators only, styled by Django) and the probe.
NOT_PORTAL_PREFIXES = ("api/", "django-admin/", "health/", "i18n/")
# Routes inside the portal that answer with something other than a page.
NOT_PAGES = {
    "portal:pool-config": "a generated configuration file, downloaded as text",
    "audit:export": "a bundle download (its form lives on the audit log page)",
    "lifecycle:version-card": "a model card download (HTML, Markdown or JSON made by lifecycle/cards.py)",
}
# Pages no route names: the 404 page; search results.
EXTRA_PAGES = [("portal:not-found", "/no-such-page/"), ("portal:search-results", "/search/?q=gpu")]


@dataclass(frozen=True)
class PortalPage:
    name: str  # namespace:url_name
    url: str


def _walk(patterns, prefix="", namespace=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}:{pattern.namespace}".strip(":") if pattern.namespace else namespace
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}".strip(":") if pattern.name else prefix
            yield prefix + str(pattern.pattern), name, pattern


def portal_routes() -> list[tuple[str, str, URLPattern]]:
    return [(route, name, pattern) for route, name, pattern in _walk(get_resolver().url_patterns)
            if not route.startswith(NOT_PORTAL_PREFIXES) and name not in NOT_PAGES]


def portal_pages(placeholders: dict[str, str]) -> list[PortalPage]:
    """The portal's GET-able URLs with their placeholders filled. Routes that only take a POST
    (logout, transitions, cancel, revoke) answer 405 to the browser and are dropped by the caller."""
    pages = []
    for route, name, pattern in portal_routes():
        converters = pattern.pattern.converters
        url = "/" + route
        for param in converters:
            key = f"{name}.{param}" if f"{name}.{param}" in placeholders else param
            if key not in placeholders:
                pytest.fail(f"{name} ({route}): no value for the placeholder <{param}> in "
                            f"tests/e2e/portal_pages.py PLACEHOLDERS; add one to the portal_objects fixture")
            url = re.sub(rf"<(?:\w+:)?{param}>", str(placeholders[key]), url)
        pages.append(PortalPage(name, url))
    pages.extend(PortalPage(name, url) for name, url in EXTRA_PAGES)
    return pages


@pytest.fixture
def portal_objects(db, users):
    """Something behind every placeholder: the sample appliance, a failed run with a stage, events and
    an acceptance report, and audit records from creating them. Returns the placeholder values."""
    from django.utils import timezone

    from appliance.audit.models import AuditRecord
    from appliance.provisioning.models import (
        AcceptanceCheck,
        AcceptanceReport,
        HostResult,
        Run,
        StageRun,
        TaskEvent,
    )
    from tests.sample_inventory import build_sample_inventory

    inventory = build_sample_inventory()
    now = timezone.now()
    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["os", "acceptance"],
                             state="failed", started=now, ended=now,
                             failed_stage="acceptance", failed_host="gpu-02", requested_by=users["operator"])
    os_stage = StageRun.objects.create(run=run, stage="os", order=1, state="succeeded", hosts=["gpu-01", "gpu-02"],
                                       started=now, ended=now, ok_count=12, changed_count=3)
    StageRun.objects.create(run=run, stage="acceptance", order=2, state="failed", hosts=["gpu-01", "gpu-02"],
                            started=now, ended=now, failed_host="gpu-02",
                            failed_task="ib_write_bw", ok_count=4, failed_count=1)
    HostResult.objects.create(stage_run=os_stage, node=inventory.gpu_node, host="gpu-01", ok=6, changed=2)
    TaskEvent.objects.create(stage_run=os_stage, counter=1, event="runner_on_ok", host="gpu-01", play="os",
                             task="Set the kernel parameters", changed=True, stdout="ok: [gpu-01]", created=now)
    report = AcceptanceReport.objects.create(run=run, passed=False, checks_total=2, checks_failed=1)
    for host, check, expected, measured, passed in [("gpu-01", "gpu.count", 8, 8, True),
                                                    ("gpu-02", "ib_write_bw.mlx5_3", ">= 380 Gb/s", 196.4, False)]:
        AcceptanceCheck.objects.create(report=report, host=host, name=check, expected=expected, measured=measured,
                                       passed=passed, source="firmware/platforms/hgx-h100-8gpu.yaml:71",
                                       message="" if passed else f"{check}: measured below the gate")
    from appliance.partitioning.models import Plan

    Plan.objects.create(appliance=inventory.appliance, number=1, description="sample plan",
                        created_by=users["operator"])
    model_name = _sample_model(users, now)
    record = AuditRecord.objects.order_by("-sequence").first()
    return {
        "name": inventory.gpu_node.name,
        "inventory:credential-update.name": "sample-bmc",
        "pk": run.pk,
        "accounts:user-update.pk": users["viewer"].pk,
        "accounts:token-revoke.pk": 1,
        "provisioning:stage-output.pk": os_stage.pk,
        "sequence": record.sequence if record else 1,
        "username": users["administrator"].username,
        "form": "html",
        "appliance": inventory.appliance.name,
        "filename": "gres.conf",
        "gpu": 0,
        "job": "4242",
        "lending:policy.pool": inventory.training.pk,
        "number": 1,
        **{f"lifecycle:{route}.name": model_name for route in (
            "model", "alias-set", "alias-delete", "version", "version-verify", "version-transition",
            "version-request", "version-evaluation")},
    }


def _sample_model(users, now) -> str:
    """A registered model with version 1 (staging, one evaluation) and a pending request for production,
    so that the model, version and approvals pages show their content."""
    from datetime import timedelta

    from appliance.lifecycle.models import (
        Artifact,
        Evaluation,
        ModelVersion,
        PromotionRequest,
        RegisteredModel,
    )

    model = RegisteredModel.objects.create(name="sample-model", owner=users["ml_engineer"], tags={"team": "nlp"},
                                           description="a sample model")
    version = ModelVersion.objects.create(
        model=model, number=1, stage="staging", source="/models/sample-model/1", format="safetensors",
        training_job="4242", training={"job": "4242", "user": "alice", "nodes": ["gpu-01"], "gpu_hours": 12.5,
                                       "efficiency": 0.81},
        datasets=[{"name": "corpus", "uri": "file:///data/corpus", "sha256": "ab" * 32}],
        registered_by=users["ml_engineer"])
    Artifact.objects.create(version=version, path="model.safetensors", size=1024, sha256="cd" * 32, mtime_ns=1,
                            inode=1)
    evaluation = Evaluation.objects.create(version=version, name="held-out accuracy", metrics={"accuracy": 0.91},
                                           passed=True, created_by=users["ml_engineer"])
    request = PromotionRequest.objects.create(
        version=version, target_stage="production", requested_by=users["ml_engineer"],
        requested_by_username=users["ml_engineer"].username, reason="ready", expires_at=now + timedelta(days=1))
    request.evidence.add(evaluation)
    return model.name
