"""The partitioning pages as each role: the layout drawn as 8 memory slices per GPU (now and planned), the
plan editor (rows or YAML, preview without saving, save), a plan with Apply shown only to roles that may
apply, rollback, and the sizing advisor; the server refuses what the buttons hide."""

import re

import pytest

from appliance.core.roles import Role
from appliance.partitioning.models import Plan
from appliance.provisioning.models import Run
from tests.partitioning.test_api_partitioning import REQUESTS, lab  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def _blocks(html: str, which: str, gpu: str) -> list[tuple[str, str, str, str]]:
    """(kind, start, span, label) of each block drawn for `gpu` in the `which` row (now / planned)."""
    card = html.split(f'data-gpu="{gpu}"', 1)[1].split("</article>", 1)[0]
    row = card.split(f'data-testid="slices-{which}"', 1)[1].split('<span class="row-label">', 1)[0]
    # A MIG profile's label may break after its compute part ("1g.<wbr>10gb").
    return [(kind, start, span, label.replace("<wbr>", "").strip()) for kind, start, span, label in re.findall(
        r'data-kind="(\w+)" data-start="(\d)" data-span="(\d)"[^>]*>\s*<span class="block-label">((?:[^<]|<wbr>)*)</span>',
        row)]


def test_layout_page_draws_each_gpu_as_memory_slices_for_every_role(client_for, lab):  # noqa: F811
    for role in Role.values:
        assert client_for(role).get("/partitioning/").status_code == 200, role
    html = client_for(Role.VIEWER).get("/partitioning/").content.decode()
    assert _blocks(html, "now", "gpu01/gpu0") == [
        ("mig", "0", "4", "3g.40gb"), ("free", "4", "1", "free"), ("free", "5", "1", "free"),
        ("mig", "6", "1", "1g.10gb"), ("free", "7", "1", "free")]
    assert _blocks(html, "now", "gpu01/gpu1") == [("whole", "0", "8", "whole GPU")]
    assert 'data-testid="slice-legend"' in html
    assert "/partitioning/plans/new/" not in html  # a Viewer is not offered the editor


def test_editor_is_refused_to_viewer_and_auditor(client_for, lab):  # noqa: F811
    for role in (Role.VIEWER, Role.AUDITOR, Role.ML_ENGINEER):
        client = client_for(role)
        assert client.get("/partitioning/plans/new/").status_code == 403
        assert client.post("/partitioning/plans/new/", {"action": "save"}).status_code == 403
    assert Plan.objects.count() == 0


def _rows(rows: list[dict], **extra) -> dict:
    data = {"r-TOTAL_FORMS": str(len(rows)), "r-INITIAL_FORMS": "0", "appliance": "lab", **extra}
    for index, row in enumerate(rows):
        data.update({f"r-{index}-{key}": value for key, value in row.items()})
    return data


ROWS = [{"name": "chat-7b", "memory_gb": "18", "replicas": "2", "isolation": "hard", "weight": "1"},
        {"name": "train", "memory_gb": "80", "replicas": "1", "isolation": "exclusive", "weight": "1"}]


def test_preview_from_rows_shows_placements_and_the_planned_slices_without_saving(client_for, lab):  # noqa: F811
    response = client_for(Role.OPERATOR).post("/partitioning/plans/new/", _rows(ROWS, action="preview"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="preview-heading"' in html
    assert "Every request fits." in html
    assert 'data-status="optimal"' in html and "Optimal: no plan serves more weight (bound 3)." in html
    planned = _blocks(html, "planned", "gpu01/gpu0")
    assert ("mig", "0", "4", "3g.40gb") in planned  # the instance serving chat-7b is kept
    assert _blocks(html, "planned", "gpu01/gpu1") == [("whole", "0", "8", "whole GPU")]
    assert "train#0" in html and "chat-7b#0" in html and "chat-7b#1" in html
    assert Plan.objects.count() == 0


def test_yaml_requests_and_their_errors(client_for, lab):  # noqa: F811
    client = client_for(Role.OPERATOR)
    text = "requests:\n  - {name: chat-7b, memory_gb: 18, isolation: hard, replicas: 2}\n"
    response = client.post("/partitioning/plans/new/", _rows([], action="preview", requests_yaml=text))
    assert response.status_code == 200 and "chat-7b#1" in response.content.decode()
    response = client.post("/partitioning/plans/new/", _rows([], action="preview",
                                                              requests_yaml="- {name: x, memory_gb: [\n"))
    assert response.status_code == 400 and "yaml:" in response.content.decode()
    bad = "- {name: ok, memory_gb: 10, isolation: soft}\n- {name: b, memory_gb: 0, isolation: soft}\n"
    response = client.post("/partitioning/plans/new/", _rows([], action="preview", requests_yaml=bad))
    assert response.status_code == 400
    assert "requests[1].memory_gb" in response.content.decode()
    # An alias bomb is refused by the limits before it is expanded.
    ten = ", ".join(["x"] * 10)
    bomb = ("- {name: a, memory_gb: 1, isolation: soft, pool: [&a [" + ten + "], &b [" + ", ".join(["*a"] * 10)
            + "], &c [" + ", ".join(["*b"] * 10) + "], &d [" + ", ".join(["*c"] * 10) + "], ["
            + ", ".join(["*d"] * 10) + "]]}\n")
    response = client.post("/partitioning/plans/new/", _rows([], action="preview", requests_yaml=bomb))
    assert response.status_code == 400
    assert "expands the document beyond 50000 nodes" in response.content.decode()
    assert Plan.objects.count() == 0


def test_bad_row_names_the_field(client_for, lab):  # noqa: F811
    rows = [{**ROWS[0], "name": "../etc/passwd"}]
    response = client_for(Role.OPERATOR).post("/partitioning/plans/new/", _rows(rows, action="save"))
    assert response.status_code == 400
    assert "lower-case letters, digits" in response.content.decode()
    assert Plan.objects.count() == 0


def test_save_then_the_plan_page_offers_apply_only_to_who_may_apply(client_for, lab):  # noqa: F811
    response = client_for(Role.OPERATOR).post("/partitioning/plans/new/",
                                              _rows(ROWS, action="save", description="two services"))
    assert response.status_code == 302 and response["Location"] == "/partitioning/plans/1/?appliance=lab"
    plan = Plan.objects.get()
    assert (plan.number, plan.description, plan.state) == (1, "two services", "draft")
    operator_page = client_for(Role.OPERATOR).get("/partitioning/plans/1/").content.decode()
    assert 'data-testid="apply"' in operator_page
    viewer_page = client_for(Role.VIEWER).get("/partitioning/plans/1/").content.decode()
    assert 'data-testid="apply"' not in viewer_page and 'data-testid="plan-result"' in viewer_page
    history = client_for(Role.VIEWER).get("/partitioning/plans/").content.decode()
    assert 'data-plan="1"' in history
    # The server refuses what the page hides.
    for role in (Role.VIEWER, Role.AUDITOR, Role.ML_ENGINEER):
        assert client_for(role).post("/partitioning/plans/1/apply/", {"appliance": "lab"}).status_code == 403
        assert client_for(role).post("/partitioning/rollback/", {"appliance": "lab"}).status_code == 403
    assert Run.objects.count() == 0
    assert client_for(Role.VIEWER).get("/partitioning/?plan=1").status_code == 200
    assert client_for(Role.VIEWER).get("/partitioning/?plan=9").status_code == 404
    assert client_for(Role.VIEWER).get("/partitioning/?plan=x").status_code == 404


def test_rollback_without_an_applied_plan_says_why(client_for, lab):  # noqa: F811
    response = client_for(Role.OPERATOR).post("/partitioning/rollback/", {"appliance": "lab"}, follow=True)
    assert "no applied partition plan" in response.content.decode()


def test_advisor_shows_every_figure_and_refuses_bad_values(client_for):
    query = ("params_billion=8.03&layers=32&kv_heads=8&head_dim=128&dtype=bf16&context=8192&concurrency=4"
             "&gpu=h100-80gb&gpus_per_node=8&nodes=1")
    response = client_for(Role.VIEWER).get("/partitioning/advisor/?" + query)
    assert response.status_code == 200
    html = response.content.decode()
    assert "16.06 GB (16060000000 B)" in html  # 8.03e9 parameters x 2 bytes
    assert "128 KiB (131072 B)" in html  # KV per token: 2 x 32 x 8 x 128 x 2 bytes
    assert 'data-testid="assumptions"' in html and "KV cache per token" in html
    assert 'data-testid="planner-request"' in html and "&quot;name&quot;: &quot;model&quot;" in html
    bad = client_for(Role.VIEWER).get("/partitioning/advisor/?" + query.replace("gpu=h100-80gb", "gpu=../x"))
    assert bad.status_code == 400 and 'data-testid="sizing"' not in bad.content.decode()


def test_operator_applies_from_the_plan_page_and_sees_its_run(client_for, lab):  # noqa: F811
    client = client_for(Role.OPERATOR)
    assert client.post("/partitioning/plans/new/", _rows(ROWS, action="save")).status_code == 302
    response = client.post("/partitioning/plans/1/apply/", {"appliance": "lab"}, follow=True)
    run = Run.objects.get()
    html = response.content.decode()
    assert f"Plan 1 is being applied by run #{run.pk}." in html
    assert f'href="/provisioning/runs/{run.pk}/"' in html
    assert 'data-testid="apply"' not in html  # applying: no second Apply
    assert 'hx-trigger="every 5s"' in html     # the page follows the run
    again = client.post("/partitioning/plans/1/apply/", {"appliance": "lab"}, follow=True)
    assert "plan 1 is applying; only a draft" in again.content.decode()
    assert Run.objects.count() == 1


def test_a_large_appliance_is_drawn_32_nodes_a_page(client_for, lab):  # noqa: F811
    from appliance.inventory.models import GPU, Node

    for number in range(2, 35):
        node = Node.objects.create(appliance=lab, name=f"gpu{number:02d}", role=Node.Role.GPU)
        GPU.objects.create(node=node, index=0, model="NVIDIA H100 80GB HBM3", memory_mib=81559)
    first = client_for(Role.VIEWER).get("/partitioning/?appliance=lab").content.decode()
    assert re.findall(r'data-node="([^"]+)"', first) == [f"gpu{n:02d}" for n in range(1, 33)]
    assert 'href="?appliance=lab&amp;page=2"' in first
    second = client_for(Role.VIEWER).get("/partitioning/?appliance=lab&page=2").content.decode()
    assert re.findall(r'data-node="([^"]+)"', second) == ["gpu33", "gpu34"]


def test_a_gpu_is_marked_changed_against_the_layout_now_not_the_one_the_plan_was_made_on(client_for, lab):  # noqa: F811
    """An applied plan whose layout NVML now reports marks no GPU "changes"; a plan that differs from it does."""
    as_now = {"gpus": [
        {"id": "gpu01/gpu0", "model": "h100-80gb", "mig": [{"profile": "3g.40gb", "start": 0},
                                                            {"profile": "1g.10gb", "start": 6}], "time_slicing": None},
        {"id": "gpu01/gpu1", "model": "h100-80gb", "mig": None, "time_slicing": None}],
        "placed": [], "unplaced": [], "disruption": {"gpus_changed": ["gpu01/gpu0"]}}
    different = {**as_now, "gpus": [as_now["gpus"][0],
                                     {"id": "gpu01/gpu1", "model": "h100-80gb", "mig": None,
                                      "time_slicing": {"replicas": 4}}]}
    Plan.objects.create(appliance=lab, number=1, result=as_now, state=Plan.State.APPLIED)
    Plan.objects.create(appliance=lab, number=2, result=different, state=Plan.State.DRAFT)
    viewer = client_for(Role.VIEWER)

    def marked(number: int) -> list[str]:
        html = viewer.get(f"/partitioning/?appliance=lab&plan={number}").content.decode()
        cards = re.findall(r'<article class="gpu-card( changed)?" data-gpu="([^"]+)"', html)
        return [gpu for changed, gpu in cards if changed]

    assert marked(1) == []
    assert marked(2) == ["gpu01/gpu1"]
