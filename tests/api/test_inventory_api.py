"""The inventory API as a client sees it: nesting, filters, transitions, site upload, error bodies."""

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Node
from tests.access import assert_error_body
from tests.api.sites import BROKEN_SITE, VALID_SITE

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client_for):
    return client_for(Role.OPERATOR)


@pytest.fixture
def viewer(client_for):
    return client_for(Role.VIEWER)


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


def test_node_detail_nests_brief_gpus_ports_pool_and_a_bmc_without_password(viewer, inventory):
    body = viewer.get(f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/").json()
    assert body["name"] == "gpu-01"
    assert body["appliance"]["name"] == "demo"
    assert body["appliance"]["url"].endswith(f"/api/v1/inventory/appliances/{inventory.appliance.pk}/")
    assert body["platform"]["slug"] == "hgx-h100-8gpu"
    assert body["pool"] == {"id": inventory.training.pk, "name": "training", "kind": "training",
                            "url": f"http://testserver/api/v1/inventory/pools/{inventory.training.pk}/"}
    assert [g["index"] for g in body["gpus"]] == list(range(8))
    assert set(body["gpus"][0]) == {"id", "url", "index", "uuid", "model", "memory_mib", "mig_mode"}
    assert body["gpus"][7]["mig_mode"] == "enabled"
    assert [(p["device"], p["rate_gbps"], p["closest_gpu_index"]) for p in body["hca_ports"]][:2] == [
        ("mlx5_0", 400, 0), ("mlx5_1", 400, 1)]
    assert body["bmc"] == {"url": "https://127.0.0.1:8001/redfish/v1/", "credential": "sample-bmc",
                           "verify_tls": False, "system_id": ""}
    assert body["state"] == "new"
    assert body["allowed_transitions"] == ["maintenance", "retired"]  # provisioning: only a run


def test_node_without_bmc_or_pool(viewer, inventory):
    body = viewer.get(f"/api/v1/inventory/nodes/{inventory.storage_node.pk}/").json()
    assert body["bmc"] is None and body["pool"] is None and body["gpus"] == [] and body["platform"] is None


@pytest.mark.parametrize(("query", "expected"), [
    ("", ["gpu-01", "gpu-02", "storage-01"]),
    ("?role=gpu", ["gpu-01", "gpu-02"]),
    ("?role=storage", ["storage-01"]),
    ("?role=gpu&role=storage", ["gpu-01", "gpu-02", "storage-01"]),
    ("?appliance=demo", ["gpu-01", "gpu-02", "storage-01"]),
    ("?appliance=other", []),
    ("?pool=training", ["gpu-01"]),
    ("?pool=inference", ["gpu-02"]),
    ("?state=maintenance", ["gpu-02"]),
    ("?state=new", ["gpu-01", "storage-01"]),
    ("?platform=hgx-h100-8gpu", ["gpu-01", "gpu-02"]),
    ("?search=storage", ["storage-01"]),
    ("?ordering=-name", ["storage-01", "gpu-02", "gpu-01"]),
])
def test_node_filters(viewer, inventory, query, expected):
    inventory.gpu_node_2.transition("maintenance", "cabling")
    assert names(viewer.get(f"/api/v1/inventory/nodes/{query}")) == expected


def test_node_filters_by_ids(viewer, inventory):
    assert names(viewer.get(f"/api/v1/inventory/nodes/?pool_id={inventory.inference.pk}")) == ["gpu-02"]
    assert len(names(viewer.get(f"/api/v1/inventory/nodes/?appliance_id={inventory.appliance.pk}"))) == 3


def test_unknown_filter_value_is_a_400_in_the_common_error_body(viewer, inventory):
    response = viewer.get("/api/v1/inventory/nodes/?state=sleeping")
    error = assert_error_body(response, 400)
    assert "state" in error["fields"]


@pytest.mark.parametrize(("query", "count"), [
    ("", 16), ("?node=gpu-01", 8), ("?mig_mode=enabled", 4), ("?mig_mode=enabled&node=gpu-02", 2),
    ("?model=nvidia h100 80gb hbm3", 16), ("?model=A100", 0), ("?index=3", 2),
])
def test_gpu_filters(viewer, inventory, query, count):
    body = viewer.get(f"/api/v1/inventory/gpus/{query}").json()
    assert body["count"] == count
    if count:
        assert set(body["results"][0]["node"]) == {"id", "url", "name", "role", "state"}


def test_gpu_filter_by_node_id(viewer, inventory):
    body = viewer.get(f"/api/v1/inventory/gpus/?node_id={inventory.gpu_node.pk}&index=0").json()
    assert [g["uuid"] for g in body["results"]] == ["GPU-gpu-01-0000-5f3a-9c1e"]


def test_ports_and_hcas(viewer, inventory):
    port = viewer.get(f"/api/v1/inventory/hca-ports/{inventory.port.pk}/").json()
    assert port["node"]["name"] == "gpu-01" and port["hca"]["device"] == "mlx5_0"
    assert port["closest_gpu"]["index"] == 0 and port["rate_gbps"] == 400 and port["state"] == "Active"
    assert viewer.get("/api/v1/inventory/hca-ports/?node=gpu-02").json()["count"] == 8
    hca = viewer.get(f"/api/v1/inventory/hcas/{inventory.hca.pk}/").json()
    assert [p["port"] for p in hca["ports"]] == [1]


def test_pools_list_their_node_counts_and_scheduler(viewer, inventory):
    pools = {p["name"]: p for p in viewer.get("/api/v1/inventory/pools/").json()["results"]}
    assert pools["training"]["scheduler"] == "slurm" and pools["training"]["sharing"] == "exclusive"
    assert pools["inference"]["scheduler"] == "kubernetes" and pools["inference"]["sharing"] == "shared"
    # A list stays small at fleet scale: counts and where the nodes are, not the nodes themselves.
    assert pools["training"]["node_count"] == 1 and "nodes" not in pools["training"]
    training = inventory.training.pk
    assert pools["training"]["nodes_url"] == f"http://testserver/api/v1/inventory/nodes/?pool_id={training}"
    assert [n["name"] for n in viewer.get(pools["training"]["nodes_url"]).json()["results"]] == ["gpu-01"]
    detail = viewer.get(f"/api/v1/inventory/pools/{training}/").json()
    assert [n["name"] for n in detail["nodes"]] == ["gpu-01"] and detail["node_count"] == 1


def test_other_collections(viewer, inventory):
    assert viewer.get("/api/v1/inventory/appliances/").json()["results"][0]["node_count"] == 3
    assert names(viewer.get("/api/v1/inventory/switches/?kind=infiniband")) == ["ib-leaf-1"]
    assert names(viewer.get("/api/v1/inventory/networks/?kind=ipoib")) == ["ib0"]
    assert names(viewer.get("/api/v1/inventory/filesystems/?type=lustre")) == ["scratch"]
    assert viewer.get("/api/v1/inventory/platforms/").json()["results"][0]["gpu_count"] == 8


def test_pagination(viewer, inventory):
    body = viewer.get("/api/v1/inventory/gpus/?page_size=5&page=2").json()
    assert body["count"] == 16 and len(body["results"]) == 5 and body["next"] and body["previous"]


def test_token_authentication(inventory, users):
    from appliance.accounts.tokens import issue_token

    _token, key = issue_token(users[Role.VIEWER])
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/inventory/nodes/").status_code == 200
    assert client.post(f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/",
                       {"state": "maintenance"}, content_type="application/json").status_code == 403
    bad = Client(HTTP_AUTHORIZATION="Token 0000000000000000000000000000000000000000")
    assert_error_body(bad.get("/api/v1/inventory/nodes/"), 401)


# --- transitions ------------------------------------------------------------------------------------


def test_transition_moves_the_node_and_records_it(operator, inventory):
    url = f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/"
    response = operator.post(url, {"state": "maintenance", "reason": "fan swap"}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "maintenance"
    assert response.json()["allowed_transitions"] == ["ready", "retired"]
    node = Node.objects.get(pk=inventory.gpu_node.pk)
    assert (node.state, node.state_reason) == ("maintenance", "fan swap")
    record = AuditRecord.objects.filter(event="inventory.node.transition").latest("sequence")
    assert record.details == {"from": "new", "to": "maintenance", "reason": "fan swap"}
    assert record.actor_username == "operator-user" and record.channel == "api"
    assert record.request_id == response["X-Request-ID"]


def test_only_a_run_moves_a_node_into_or_out_of_provisioning(operator, inventory):
    url = f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/"
    error = assert_error_body(operator.post(url, {"state": "provisioning", "reason": "by hand"},
                                            content_type="application/json"), 409)
    assert "only a provisioning run moves a node into or out of provisioning" in error["message"]
    # A node a run holds: no person moves it on (the run does, or the watchdog when the run died).
    node = Node.objects.get(pk=inventory.gpu_node.pk)
    node.transition("provisioning", "run #1")
    error = assert_error_body(operator.post(url, {"state": "failed", "reason": "by hand"},
                                            content_type="application/json"), 409)
    assert (error["current"], error["allowed"]) == ("provisioning", [])
    assert Node.objects.get(pk=node.pk).state == "provisioning"


def test_transition_the_table_forbids_is_a_409_listing_what_is_allowed(operator, inventory):
    url = f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/"
    response = operator.post(url, {"state": "ready"}, content_type="application/json")
    error = assert_error_body(response, 409)
    assert error["code"] == "invalid_transition"
    assert error["current"] == "new"
    assert error["allowed"] == ["maintenance", "retired"]
    assert "new to ready" in error["message"]
    assert Node.objects.get(pk=inventory.gpu_node.pk).state == "new"
    assert not AuditRecord.objects.filter(event="inventory.node.transition").exists()


def test_transition_to_an_unknown_state_is_a_400_naming_the_field(operator, inventory):
    url = f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/"
    error = assert_error_body(operator.post(url, {"state": "asleep"}, content_type="application/json"), 400)
    assert error["code"] == "invalid" and list(error["fields"]) == ["state"]


def test_error_bodies_for_unknown_objects_and_methods(operator, inventory):
    error = assert_error_body(operator.get("/api/v1/inventory/nodes/999999/"), 404)
    assert error["code"] == "not_found"
    error = assert_error_body(operator.delete(f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/"), 405)
    assert error["code"] == "method_not_allowed"
    error = assert_error_body(operator.post(f"/api/v1/inventory/nodes/{inventory.gpu_node.pk}/transition/", "{not json",
                                            content_type="application/json"), 400)
    assert error["code"] == "parse_error"


# --- site upload ------------------------------------------------------------------------------------


@pytest.fixture
def uploads(operator, site_credentials):
    return operator


def upload(client, text: str, url="/api/v1/inventory/site/import/", name="site.yml", **extra):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return client.post(url, {"file": SimpleUploadedFile(name, text.encode(), "application/yaml"), **extra})


def test_upload_dry_run_reports_changes_and_changes_nothing(uploads):
    response = upload(uploads, VALID_SITE, dry_run="true")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["dry_run"] is True and body["changed"] is True and body["appliance"] == "upload-demo"
    assert body["filename"] == "site.yml"
    created = {(c["model"], c["name"]) for c in body["changes"] if c["action"] == "create"}
    assert ("node", "up-gpu01") in created and ("pool", "training") in created
    assert body["counts"]["create"] == len([c for c in body["changes"] if c["action"] == "create"])
    assert not Node.objects.filter(name="up-gpu01").exists()


def test_upload_imports_and_a_second_upload_changes_nothing(uploads):
    first = upload(uploads, VALID_SITE).json()
    assert first["dry_run"] is False and first["changed"] is True
    node = Node.objects.get(name="up-gpu01")
    assert node.gpus.count() == 8 and node.pool_membership.pool.name == "training"
    last = AuditRecord.objects.latest("sequence").sequence
    second = upload(uploads, VALID_SITE).json()
    assert second["changed"] is False and second["changes"] == []
    changes = AuditRecord.objects.filter(sequence__gt=last, event__startswith="inventory.").exclude(
        event="inventory.site.import")
    assert list(changes.values_list("event", flat=True)) == []


def test_raw_yaml_body_with_filename_and_dry_run_query(uploads):
    response = uploads.post("/api/v1/inventory/site/import/?dry_run=1&filename=racks/site-a.yml", VALID_SITE,
                            content_type="application/yaml")
    assert response.status_code == 200, response.content
    assert response.json()["filename"] == "site-a.yml" and response.json()["dry_run"] is True
    assert not Node.objects.filter(name="up-gpu01").exists()


def test_invalid_site_lists_every_error_with_file_line_and_path(uploads):
    response = upload(uploads, BROKEN_SITE, name="broken.yml")
    error = assert_error_body(response, 400)
    assert error["code"] == "invalid_site"
    errors = error["errors"]
    assert len(errors) >= 3, errors
    assert {e["file"] for e in errors} == {"broken.yml"}
    by_path = {e["path"]: e for e in errors}
    url_error = next(e for path, e in by_path.items() if path.endswith("bmc.url"))
    assert url_error["line"] == BROKEN_SITE.splitlines().index('    bmc: {url: not-a-url}') + 1
    assert any(path.startswith("pools[0].nodes") for path in by_path)
    assert any(path.startswith("nodes[0].gpus") for path in by_path)
    assert all(isinstance(e["line"], int) and e["message"] for e in errors)
    assert not Node.objects.filter(name__startswith="up-").exists()


def test_validate_writes_nothing(uploads):
    response = uploads.post("/api/v1/inventory/site/validate/", VALID_SITE, content_type="text/yaml")
    assert response.json() == {"filename": "site.yml", "appliance": "upload-demo", "valid": True,
                               "summary": response.json()["summary"]}
    assert "2 nodes" in response.json()["summary"]
    assert not Node.objects.filter(name__startswith="up-").exists()
    error = assert_error_body(upload(uploads, BROKEN_SITE, url="/api/v1/inventory/site/validate/"), 400)
    assert len(error["errors"]) >= 3


def test_upload_input_errors(uploads):
    error = assert_error_body(uploads.post("/api/v1/inventory/site/import/", b"", content_type="application/yaml"), 400)
    assert "file" in error["fields"]
    error = assert_error_body(uploads.post("/api/v1/inventory/site/import/", b"\xff\xfe name: x",
                                           content_type="application/yaml"), 400)
    assert "UTF-8" in error["message"]
    error = assert_error_body(uploads.post("/api/v1/inventory/site/import/", "{}", content_type="application/xml"), 415)
    assert error["code"] == "unsupported_media_type"
