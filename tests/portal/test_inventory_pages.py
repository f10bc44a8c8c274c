"""Node list and detail, transitions and the site import, as the Django test client sees them."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Node
from tests.api.sites import BROKEN_SITE, VALID_SITE

pytestmark = pytest.mark.django_db


def rows(response) -> list[str]:
    html = response.content.decode()
    return [chunk.split('"', 1)[0] for chunk in html.split('data-node="')[1:]]


@pytest.mark.parametrize(("query", "expected"), [
    ("", ["gpu-01", "gpu-02", "storage-01"]),
    ("?role=storage", ["storage-01"]),
    ("?state=maintenance", ["gpu-02"]),
    ("?pool=training", ["gpu-01"]),
    ("?role=gpu&pool=inference", ["gpu-02"]),
    ("?role=login", []),
])
def test_node_list_filters(client_for, inventory, query, expected):
    inventory.gpu_node_2.transition("maintenance", "cabling")
    response = client_for(Role.VIEWER).get(f"/inventory/nodes/{query}")
    assert rows(response) == expected
    if not expected:
        assert b"No node matches." in response.content


def test_node_list_shows_state_badges_and_pools(client_for, inventory):
    html = client_for(Role.VIEWER).get("/inventory/nodes/").content.decode()
    assert '<span class="state state-new">New</span>' in html
    assert ">training<" in html and ">inference<" in html
    assert 'hx-get="/inventory/nodes/"' in html


def test_node_list_htmx_request_gets_only_the_table(client_for, inventory):
    response = client_for(Role.VIEWER).get("/inventory/nodes/?role=storage", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="node-table"') and "<html" not in html
    assert rows(response) == ["storage-01"]


def test_node_detail_shows_gpus_ports_bmc_and_pool(client_for, inventory):
    html = client_for(Role.VIEWER).get("/inventory/nodes/gpu-01/").content.decode()
    assert "GPU-gpu-01-0007-5f3a-9c1e" in html and "NVIDIA H100 80GB HBM3" in html and "81559 MiB" in html
    assert html.count('class="state state-mig-enabled"') == 2
    assert "mlx5_7" in html and "400 Gb/s" in html and "GPU 7" in html and "Active" in html
    assert "https://127.0.0.1:8001/redfish/v1/" in html and "<code>sample-bmc</code> (user root)" in html
    assert 'TLS verification</th><td><span class="state state-failed">off</span>' in html
    assert 'data-testid="node-pool">training <span class="muted">(training: slurm, exclusive GPUs)' in html


@pytest.mark.parametrize("role", Role.values)
def test_transition_buttons_only_for_roles_that_may_change_the_inventory(client_for, inventory, role):
    html = client_for(role).get("/inventory/nodes/gpu-01/").content.decode()
    buttons = [chunk.split('"', 1)[0] for chunk in html.split('data-transition="')[1:]]
    if role in (Role.ADMINISTRATOR, Role.OPERATOR):
        assert buttons == ["maintenance", "retired"]  # provisioning: only a run
    else:
        assert buttons == []


def test_transition_from_the_page(client_for, inventory):
    client = client_for(Role.OPERATOR)
    response = client.post("/inventory/nodes/gpu-01/transition/", {"state": "maintenance", "reason": "fan swap"},
                           follow=True)
    assert b"gpu-01 is now maintenance." in response.content
    node = Node.objects.get(name="gpu-01")
    assert (node.state, node.state_reason) == ("maintenance", "fan swap")
    record = AuditRecord.objects.filter(event="inventory.node.transition").latest("sequence")
    assert record.channel == "web" and record.actor_username == "operator-user"


def test_forbidden_transition_from_the_page_explains_and_changes_nothing(client_for, inventory):
    response = client_for(Role.OPERATOR).post("/inventory/nodes/gpu-01/transition/", {"state": "ready"}, follow=True)
    assert b"cannot go from new to ready" in response.content
    assert Node.objects.get(name="gpu-01").state == "new"


def test_unknown_node_is_404(client_for, inventory):
    assert client_for(Role.VIEWER).get("/inventory/nodes/gpu-99/").status_code == 404


# --- site import ------------------------------------------------------------------------------------


@pytest.fixture
def importer(client_for, site_credentials):
    return client_for(Role.OPERATOR)


def upload(client, text, name="site.yml"):
    return client.post("/inventory/site/import/", {"file": SimpleUploadedFile(name, text.encode())})


def digest_of(response) -> str:
    return response.content.decode().split('name="digest" value="', 1)[1].split('"', 1)[0]


def test_upload_previews_then_confirm_imports(importer):
    preview = upload(importer, VALID_SITE)
    html = preview.content.decode()
    assert "what an import would change in upload-demo" in html and "Dry run" in html
    assert 'data-change="create"' in html and "up-gpu01" in html
    assert not Node.objects.filter(name="up-gpu01").exists()

    done = importer.post("/inventory/site/import/", {"confirm": "1", "digest": digest_of(preview)})
    assert "imported into upload-demo" in done.content.decode()
    assert Node.objects.filter(name__in=["up-gpu01", "up-gpu02"]).count() == 2
    assert AuditRecord.objects.filter(event="inventory.site.import", channel="web").count() == 1

    again = upload(importer, VALID_SITE)
    assert b"No changes: the inventory already matches this file." in again.content
    assert b'name="confirm"' not in again.content


def test_confirm_needs_the_previewed_digest(importer):
    preview = upload(importer, VALID_SITE)
    assert digest_of(preview)
    response = importer.post("/inventory/site/import/", {"confirm": "1", "digest": "0" * 64})
    assert b"no longer pending" in response.content
    assert not Node.objects.filter(name="up-gpu01").exists()


def test_upload_errors_are_listed_with_file_line_and_path(importer):
    html = upload(importer, BROKEN_SITE, name="broken.yml").content.decode()
    line = BROKEN_SITE.splitlines().index("    bmc: {url: not-a-url}") + 1
    assert f"<code>broken.yml:{line}</code>" in html
    assert "nodes[0].bmc.url" in html and "pools[0].nodes" in html
    assert html.count("data-site-error") >= 3
    assert 'name="confirm"' not in html
    assert not Node.objects.filter(name__startswith="up-").exists()


def test_upload_without_a_file_or_with_binary(importer):
    assert b"Choose a site definition file." in importer.post("/inventory/site/import/", {}).content
    response = importer.post("/inventory/site/import/", {"file": SimpleUploadedFile("x.yml", b"\xff\xfe\x00")})
    assert b"not UTF-8 text" in response.content


def test_overview_links_node_states_to_the_filtered_list(client_for, inventory):
    html = client_for(Role.VIEWER).get("/").content.decode()
    assert 'href="/inventory/nodes/?state=maintenance"' in html
    assert "demo" in html and "3 nodes" in html


def test_node_list_names_an_invalid_filter(client_for, inventory):
    response = client_for(Role.VIEWER).get("/inventory/nodes/?state=asleep")
    assert response.status_code == 200
    assert b"state: Select a valid choice. asleep is not one of the available choices." in response.content
