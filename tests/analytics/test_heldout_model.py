"""The workload model's held-out additions: a job with several causes at once (its ground truth, what
its node reads), nodes whose storage gives less, and a demo whose day stays the one analytics was
written against."""

from collections import Counter

from appliance.simulation.workload import Model, NodeSpec

NODE = NodeSpec("gpu11", "training", 8)


def test_a_mixed_job_has_several_causes_at_once():
    model = Model("mixed", 6, (NODE,))
    [job] = [a for a in model.activities(0) if a.start == 0]
    assert job.kind == "mixed" and len(job.special) == 4 and job.gpus == tuple(range(8))
    loading = [line["state"] for line in model.ground_truth(NODE, 5)]
    assert Counter(loading) == {"input-bound": 6, "allocated-idle": 2}
    assert [loading[gpu] for gpu in job.special[2:]] == ["allocated-idle"] * 2
    later = [line["state"] for line in model.ground_truth(NODE, 45)]
    assert Counter(later) == {"communication-bound": 4, "allocated-idle": 2, "straggler": 1, "throttled": 1}
    assert later[job.special[0]] == "straggler" and later[job.special[1]] == "throttled"
    between = Counter(line["state"] for line in model.ground_truth(NODE, 30))  # before the hot GPU throttles
    assert between == {"communication-bound": 5, "allocated-idle": 2, "straggler": 1}


def test_a_loading_job_saturates_its_own_nodes_storage():
    slow = NodeSpec("gpu12", "training", 8, storage_read_gbps=9.0)
    load = Model("mixed", 6, (slow,)).node_load(slow, 5)
    assert 0.85 * 9e9 <= load["fs_read"] <= 0.99 * 9e9
    assert Model("input-bound", 6, (slow,)).node_load(slow, 5)["fs_read"] <= 0.99 * 9e9
    assert Model("input-bound", 6, (NODE,)).node_load(NODE, 5)["fs_read"] >= 0.93 * 21.4e9


def test_the_demo_never_draws_the_mixed_job_unless_asked():
    nodes = tuple(NodeSpec(f"gpu0{i}", "training", 8) for i in range(1, 4))
    kinds = {a.kind for seed in range(1, 6) for day in range(3) for a in Model("demo", seed, nodes).activities(day)}
    assert "mixed" not in kinds and {"compute-bound", "input-bound", "straggler", "thermal", "notebook"} <= kinds
    wider = Model("demo", 1, nodes, demo_kinds=("mixed", "notebook"), job_half_hours=(1, 1))
    assert {a.kind for a in wider.activities(0)} == {"mixed", "notebook"}
    assert {a.duration for a in wider.activities(0) if a.end < 86400} == {1800}
