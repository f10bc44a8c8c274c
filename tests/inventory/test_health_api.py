"""The health API the run code reads: failing checks give short reasons, a writer touches only the
checks it ran, and the counts per status."""

from appliance.inventory import health
from appliance.inventory.health import Observation
from appliance.inventory.models import HealthCheck


def _gpu(node, index, status, name="present", evidence=""):
    return Observation("gpu", str(index), name, status, evidence, component_label=f"GPU {index}")


def test_a_node_with_nothing_failing_has_no_open_failure(inventory):
    node = inventory.gpu_node
    assert health.open_failures(node) == []
    health.record(node, [_gpu(node, i, "ok") for i in range(8)], source="stage gpu, run #1", run_id=1)
    assert health.open_failures(node) == []
    assert health.summary(node) == {"ok": 8, "failing": 0, "unknown": 0, "total": 8, "failing_gpus": []}


def test_failing_checks_are_short_reasons_and_a_writer_leaves_other_checks_alone(inventory):
    node = inventory.gpu_node
    health.record(node, [_gpu(node, i, "ok") for i in range(8) if i != 5]
                  + [_gpu(node, 5, "failing", evidence="GPU 5 (0000:68:00.0) missing")],
                  source="stage gpu, run #1", run_id=1)
    health.record(node, [Observation("node", "", "acceptance os.memlock", "failing", "os.memlock: soft 64, hard 64")],
                  source="stage acceptance, run #1", run_id=1)
    assert health.open_failures(node) == ["GPU 5 (0000:68:00.0) missing", "os.memlock: soft 64, hard 64"]

    # A later stage that checked only the node-wide memlock clears that one and nothing else.
    health.record(node, [Observation("node", "", "acceptance os.memlock", "ok", "os.memlock: unlimited")],
                  source="stage acceptance, run #2", run_id=2)
    assert health.open_failures(node) == ["GPU 5 (0000:68:00.0) missing"]
    assert health.summary(node) == {"ok": 8, "failing": 1, "unknown": 0, "total": 9, "failing_gpus": [5]}
    row = HealthCheck.objects.get(node=node, component_kind="gpu", component_id="5")
    assert (row.source, row.run_id) == ("stage gpu, run #1", 1)
    assert health.open_failures(inventory.gpu_node_2) == []


def test_many_failures_make_one_line_that_says_how_many_more(inventory):
    node = inventory.gpu_node
    health.record(node, [_gpu(node, i, "failing", evidence=f"GPU {i} missing") for i in range(8)], source="stage gpu")
    assert health.failure_summary(node) == ("GPU 0 missing; GPU 1 missing; GPU 2 missing; GPU 3 missing; "
                                            "GPU 4 missing (and 3 more)")
