"""The Overview shows health (nodes ok or failing, GPUs missing or failing) and each node's latest
acceptance verdict, with links to its checks and run, in a constant number of queries."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from appliance.core.roles import Role
from appliance.inventory.models import Node
from appliance.provisioning.facts import FactsSink
from appliance.provisioning.models import Run, StageRun


def _acceptance(inventory, results_by_node):
    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.STAGES, stages=["acceptance"])
    stage_run = StageRun.objects.create(run=run, stage="acceptance", order=1)
    sink = FactsSink(stage_run, {n.name: n for n in inventory.appliance.nodes.all()}, dry_run=False)
    for node, checks in results_by_node.items():
        sink(node, {"appliance_acceptance": [
            {"check": name, "node": node, "expected": 8, "measured": measured, "passed": passed, "source": "",
             "message": message} for name, measured, passed, message in checks]})
    return run


def _row(html, name):
    return html.split(f'data-testid="overview-node-{name}"')[1].split("</tr>")[0]


def test_overview_shows_health_and_the_latest_verdict_per_node(client_for, inventory):
    xid = "1 Xid errors: Xid 79 on 0000:68:00.0: pid=0, name=nvidia, GPU has fallen off the bus."
    first = _acceptance(inventory, {
        "gpu-01": [("gpu.count", 7, False, "NVML reports 7 GPUs"), ("gpu.xid_errors", 1, False, xid)],
        "gpu-02": [("gpu.count", 7, False, "NVML reports 7 GPUs")],
    })
    # gpu-02 measured again and passing: its latest verdict is the second run's.
    _acceptance(inventory, {"gpu-02": [("gpu.count", 8, True, "NVML reports 8 GPUs"),
                                                ("gpu.xid_errors", 0, True, "no NVRM Xid")]})
    html = client_for(Role.OPERATOR).get("/").content.decode()

    assert '<td data-testid="nodes-failing"><span class="bad">1</span></td>' in html
    assert '<td data-testid="nodes-healthy">2</td>' in html
    assert '<td data-testid="gpus-missing"><span class="bad">1</span></td>' in html
    assert '<td data-testid="gpus-failing"><span class="bad">1</span></td>' in html
    assert '<td data-testid="acceptance-passed">1</td>' in html
    assert '<td data-testid="acceptance-failed"><span class="bad">1</span></td>' in html
    assert '<td data-testid="acceptance-unmeasured">1</td>' in html

    failed = _row(html, "gpu-01")
    assert '<span class="state state-fail">failed</span>' in failed
    assert 'href="/provisioning/acceptance/?node=gpu-01"' in failed and f'href="/provisioning/runs/{first.pk}/"' in failed
    assert "GPU 5 (0000:68:00.0) missing: XID 79, fallen off the bus" in failed
    assert 'href="/inventory/nodes/gpu-01/"' in failed
    # gpu-02 passed its latest acceptance and has no failing check left: nothing to attend to.
    assert 'data-testid="overview-node-gpu-02"' not in html


def test_a_failed_node_that_was_never_measured_is_listed_as_not_measured(client_for, inventory):
    node = inventory.storage_node
    node.transition("provisioning", "run #9")
    node.transition("failed", "run #9 did not complete")
    html = client_for(Role.VIEWER).get("/").content.decode()
    assert "not measured" in _row(html, "storage-01")
    # A Viewer may see runs (provisioning.view); an ML engineer sees the verdict without the links.
    ml = client_for(Role.ML_ENGINEER).get("/").content.decode()
    assert "/provisioning/acceptance/" not in ml


def test_overview_queries_do_not_grow_with_the_nodes(client_for, inventory):
    client = client_for(Role.VIEWER)
    client.get("/")
    with CaptureQueriesContext(connection) as few:
        client.get("/")
    for index in range(30):
        node = Node.objects.create(appliance=inventory.appliance, name=f"extra-{index:02d}", role="gpu",
                                   management_address=f"10.0.9.{index + 1}")
        node.transition("provisioning", "run #1")
        node.transition("failed", "run #1 did not complete")
    with CaptureQueriesContext(connection) as many:
        client.get("/")
    assert len(many.captured_queries) == len(few.captured_queries)


def test_node_list_shows_failing_checks_and_labels(client_for, inventory):
    _acceptance(inventory, {"gpu-01": [("gpu.count", 7, False, "NVML reports 7 GPUs"),
                                       ("os.memlock", "unlimited", False, "memlock 64")]})
    Node.objects.filter(pk=inventory.gpu_node.pk).update(labels={"rack": "R12", "slot": "U17"})
    html = client_for(Role.VIEWER).get("/inventory/nodes/").content.decode()
    row = html.split('data-node="gpu-01"')[1].split("</tr>")[0]
    assert '<td data-testid="node-health"><span class="state state-fail">2 failing</span></td>' in row
    assert '<span class="badge">rack: R12</span> <span class="badge">slot: U17</span>' in row
    other = html.split('data-node="gpu-02"')[1].split("</tr>")[0]
    assert '<td data-testid="node-health">—</td>' in other
    detail = client_for(Role.VIEWER).get("/inventory/nodes/gpu-01/").content.decode()
    assert '<span class="badge">rack: R12</span> <span class="badge">slot: U17</span>' in detail


def test_node_page_shows_failing_checks_first_and_folds_the_passed(client_for, inventory):
    _acceptance(inventory, {"gpu-01": [("gpu.count", 7, False, "NVML reports 7 GPUs"),
                                       ("os.memlock", "unlimited", True, "memlock unlimited")]})
    html = client_for(Role.VIEWER).get("/inventory/nodes/gpu-01/").content.decode()
    shown = html.split('data-testid="node-checks"')[1].split("</table>")[0]
    folded = html.split('<details data-testid="node-checks-ok">')[1].split("</details>")[0]
    assert "gpu.count: NVML reports 7 GPUs" in shown and "os.memlock" not in shown
    assert "1 node-wide check passed" in folded and "os.memlock: memlock unlimited" in folded
