"""The model registry at scale (a benchmark, not a test; tests/bench is outside the default run).

Generates a registry of MODELS x VERSIONS versions (default 100 x 100 = 10,000), each with 3 artifacts, an
evaluation and its stage history, every model with a production and a champion alias, then reads, as an
Administrator, the pages and endpoints a user opens: the portal's model list, a model's page and a version's
page, the API's model list, version list and version detail, and MLflow's version search. For each: status,
queries, bytes, p50 and p95 server time. It runs twice, at 1 x 3 versions and at full size, and prints
whether the query counts stayed the same (the issue's target: a constant number of queries at 10,000
versions).

The rows are bulk-inserted through the models' base managers: the audit log's row capture (one record per
row) is not what is measured here, and would take most of the run.

Usage: .venv/bin/python tests/bench/bench_model_registry.py [--models 100] [--versions 100] [--repeat 10]
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_model_registry.py
"""

import hashlib
import sys
from datetime import UTC, datetime, timedelta

from bench_fleet import measure
from benchdb import bench_main

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def generate(prefix: str, models: int, versions: int, user) -> None:
    from appliance.lifecycle.models import (
        Alias,
        Artifact,
        Evaluation,
        ModelVersion,
        RegisteredModel,
        StageHistory,
    )

    made = RegisteredModel._base_manager.bulk_create([
        RegisteredModel(name=f"{prefix}{m:03d}", owner=user, description="bench", tags={"team": f"t{m % 7}"})
        for m in range(models)])
    rows = []
    for model in made:
        for number in range(1, versions + 1):
            stage = "production" if number == versions else "deprecated" if number > versions - 3 else "archived"
            rows.append(ModelVersion(
                model=model, number=number, stage=stage, source=f"/lustre/models/{model.name}/{number}",
                storage_path=f"/lustre/models/{model.name}/{number}", format="safetensors",
                architecture={"params": 8_030_261_248, "layers": 32, "dtype": "bf16"}, registered_by=user,
                training_job=str(1000 + number), training={"job": str(1000 + number), "user": "alice", "gpus": 8},
                datasets=[{"name": "corpus", "uri": "/lustre/data/corpus", "sha256": "0" * 64}],
                metrics={"loss": 1.5}, verification="verified"))
    ModelVersion._base_manager.bulk_create(rows, batch_size=2000)
    stored = list(ModelVersion._base_manager.filter(model__in=made).order_by("model_id", "number"))
    Artifact._base_manager.bulk_create([
        Artifact(version=v, path=f"model-{i:05d}-of-00003.safetensors", size=5_000_000_000,
                 sha256=hashlib.sha256(f"{v.pk}-{i}".encode()).hexdigest(), mtime_ns=1, inode=v.pk * 3 + i)
        for v in stored for i in range(3)], batch_size=5000)
    Evaluation._base_manager.bulk_create([
        Evaluation(version=v, name="mmlu", metrics={"accuracy": 0.61}, passed=True, created_by=user)
        for v in stored], batch_size=5000)
    StageHistory._base_manager.bulk_create([
        StageHistory(version=v, stage=v.stage, started=T0 + timedelta(hours=v.number), started_by="bench")
        for v in stored], batch_size=5000)
    latest = {v.model_id: v for v in stored if v.stage == "production"}
    Alias._base_manager.bulk_create([Alias(model=m, name=name, version=latest[m.pk])
                                     for m in made for name in ("production", "champion")])


def targets(prefix: str, versions: int) -> list[tuple[str, str]]:
    model = f"{prefix}000"
    middle = max(1, versions // 2)
    return [
        ("portal: model list", "/models/"),
        ("portal: a model", f"/models/{model}/"),
        ("portal: a version", f"/models/{model}/versions/{middle}/"),
        ("API: models", "/api/v1/lifecycle/models/"),
        ("API: versions", "/api/v1/lifecycle/versions/"),
        ("API: a version", f"/api/v1/lifecycle/models/{model}/versions/{middle}/"),
        ("MLflow: search versions", f"/api/2.0/mlflow/model-versions/search?filter=name%3D%27{model}%27"),
    ]


def count_queries(client, path: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    return len(queries.captured_queries)


def run(args) -> int:
    from django.test import Client

    from appliance.accounts.services import create_user
    from appliance.accounts.tokens import issue_token
    from appliance.core.roles import Role

    admin = create_user("bench-admin", Role.ADMINISTRATOR, "bench-password-0123456789")
    client = Client()
    client.force_login(admin)
    # MLflow's API takes a token, never a session.
    mlflow_client = Client(headers={"Authorization": f"Bearer {issue_token(admin, 'bench')[1]}"})
    client.get("/")  # the session's first request does its once-only work here, not in a measured page
    mlflow_client.get("/api/2.0/mlflow/registered-models/search")
    results = {}
    for label, prefix, models, versions in (("small", "s", 1, 3), ("full", "f", args.models, args.versions)):
        generate(prefix, models, versions, admin)
        print(f"== {label}: {models} model(s) x {versions} versions = {models * versions:,} versions ==")
        for name, path in targets(prefix, versions):
            caller = mlflow_client if path.startswith("/api/2.0/") else client
            figures = measure(caller, path, args.repeat)
            # What a session or a token refreshes once a minute lands in one request now and then and is not the
            # page's: the page's count is the least of a few.
            figures["queries"] = min(figures["queries"], *(count_queries(caller, path) for _ in range(3)))
            results[(label, name)] = figures
            print(f"{name:26} {figures['status']} {figures['queries']:3} queries {figures['bytes']:>8,} B "
                  f"p50 {figures['p50']:7.1f} ms  p95 {figures['p95']:7.1f} ms")
    print("== queries, small -> full ==")
    constant = True
    for name, _ in targets("f", args.versions):
        small, full = results[("small", name)]["queries"], results[("full", name)]["queries"]
        constant &= small == full
        print(f"{name:26} {small:3} -> {full:3} {'same' if small == full else 'GREW'}")
    print("constant number of queries:", "yes" if constant else "NO")
    return 0 if constant else 1


def arguments(parser) -> None:
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=10)


if __name__ == "__main__":
    sys.exit(bench_main(run, description=__doc__, database="appliance_registry_bench", arguments=arguments))
