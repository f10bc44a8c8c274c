"""The planner: exact plans for small cases, least disruption against a current layout, the rules it never
breaks (checked on random cases with code written here), and the errors bad input gets."""

import random

import pytest

from appliance.partitioning import planner
from appliance.partitioning import profiles as P

H100 = "h100-80gb"


def test_small_case_exact():
    gpus = [{"id": "n1/gpu0", "model": H100}, {"id": "n1/gpu1", "model": H100}]
    requests = [{"name": "chat", "memory_gb": 10, "replicas": 3, "isolation": "hard"},
                {"name": "embed", "memory_gb": 30, "isolation": "soft"},
                {"name": "train", "memory_gb": 70, "isolation": "exclusive", "weight": 2}]
    result = planner.plan(gpus, requests)
    assert result == {
        "gpus": [
            {"id": "n1/gpu0", "model": H100,
             "mig": [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1},
                     {"profile": "1g.10gb", "start": 2}, {"profile": "3g.40gb", "start": 4}],
             "time_slicing": None},
            {"id": "n1/gpu1", "model": H100, "mig": None, "time_slicing": None},
        ],
        "placed": [
            {"request": "chat", "replica": 0, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 0, "kind": "mig"},
            {"request": "chat", "replica": 1, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 1, "kind": "mig"},
            {"request": "chat", "replica": 2, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 2, "kind": "mig"},
            {"request": "embed", "replica": 0, "gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4, "kind": "mig"},
            {"request": "train", "replica": 0, "gpu": "n1/gpu1", "profile": None, "start": None, "kind": "whole"},
        ],
        "unplaced": [],
        "served_weight": 6.0,
        "total_weight": 6.0,
        "disruption": {
            "destroyed": [],
            "created": [{"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 0},
                        {"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 1},
                        {"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 2},
                        {"gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4}],
            "kept": [],
            "mig_mode_changes": [{"gpu": "n1/gpu0", "enabled": True}],
            "time_slicing_changes": [],
            "gpus_changed": ["n1/gpu0"],
        },
        "optimality": {"status": "optimal", "gap_percent": 0.0, "bound_weight": 6, "plan_from": "greedy",
                       "solver": result["optimality"]["solver"], "solver_status": "not needed",
                       "note": "the greedy plan places every replica that fits some GPU"},
    }


def test_planning_again_against_the_plan_changes_nothing():
    gpus = [{"id": f"n1/gpu{i}", "model": H100} for i in range(3)]
    requests = [{"name": "chat", "memory_gb": 10, "replicas": 5, "isolation": "hard"},
                {"name": "rag", "memory_gb": 18, "replicas": 2, "isolation": "soft"},
                {"name": "llm", "memory_gb": 40, "replicas": 2, "isolation": "hard", "weight": 3},
                {"name": "train", "memory_gb": 80, "isolation": "exclusive"}]
    first = planner.plan(gpus, requests)
    again = planner.plan(gpus, requests, first["gpus"])
    assert again["gpus"] == first["gpus"]
    # 14 asked; the GPU with the 1g instances has no room for a fifth chat next to the two rag replicas.
    assert again["served_weight"] == first["served_weight"] == 13
    assert again["disruption"]["gpus_changed"] == []
    assert again["disruption"]["created"] == again["disruption"]["destroyed"] == []


def test_current_instances_that_fit_are_kept_and_idle_gpus_keep_their_layout():
    gpus = [{"id": "n1/gpu0", "model": H100}, {"id": "n1/gpu1", "model": H100}]
    current = [{"id": "n1/gpu0", "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 4},
                                         {"profile": "1g.10gb", "start": 5}], "time_slicing": None},
               {"id": "n1/gpu1", "mig": None, "time_slicing": {"replicas": 3}}]
    result = planner.plan(gpus, [{"name": "llm", "memory_gb": 35, "isolation": "hard"},
                                 {"name": "emb", "memory_gb": 8, "isolation": "hard"}], current)
    assert result["placed"] == [
        {"request": "llm", "replica": 0, "gpu": "n1/gpu0", "profile": "3g.40gb", "start": 0, "kind": "mig"},
        {"request": "emb", "replica": 0, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 4, "kind": "mig"},
    ]
    assert result["gpus"][0]["mig"] == current[0]["mig"]
    assert result["gpus"][1] == {"id": "n1/gpu1", "model": H100, "mig": None, "time_slicing": {"replicas": 3}}
    assert result["disruption"] == {
        "destroyed": [], "created": [],
        "kept": [{"gpu": "n1/gpu0", "profile": "3g.40gb", "start": 0},
                 {"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 4},
                 {"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 5}],
        "mig_mode_changes": [], "time_slicing_changes": [], "gpus_changed": []}


def test_new_instances_go_around_the_current_ones():
    gpus = [{"id": "n1/gpu0", "model": H100}, {"id": "n1/gpu1", "model": H100}]
    current = [{"id": "n1/gpu0", "mig": [{"profile": "3g.40gb", "start": 4}], "time_slicing": None}]
    result = planner.plan(gpus, [{"name": "a", "memory_gb": 40, "isolation": "hard"},
                                 {"name": "b", "memory_gb": 20, "isolation": "hard"}], current)
    # The current 3g.40gb at 4 serves one of them; one instance is created beside it on the same GPU, and
    # the other GPU is left alone.
    assert [p["gpu"] for p in result["placed"]] == ["n1/gpu0", "n1/gpu0"]
    assert {"gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4} in [
        {"gpu": p["gpu"], "profile": p["profile"], "start": p["start"]} for p in result["placed"]]
    assert result["disruption"]["kept"] == [{"gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4}]
    assert len(result["disruption"]["created"]) == 1
    assert result["disruption"]["destroyed"] == []
    assert result["disruption"]["gpus_changed"] == ["n1/gpu0"]


def test_exclusive_takes_a_whole_gpu_and_turns_mig_off_when_it_must():
    gpus = [{"id": "n1/gpu0", "model": H100}]
    current = [{"id": "n1/gpu0", "mig": [{"profile": "7g.80gb", "start": 0}], "time_slicing": None}]
    result = planner.plan(gpus, [{"name": "train", "memory_gb": 60, "isolation": "exclusive"}], current)
    assert result["gpus"] == [{"id": "n1/gpu0", "model": H100, "mig": None, "time_slicing": None}]
    assert result["placed"] == [{"request": "train", "replica": 0, "gpu": "n1/gpu0", "profile": None,
                                 "start": None, "kind": "whole"}]
    assert result["disruption"]["destroyed"] == [{"gpu": "n1/gpu0", "profile": "7g.80gb", "start": 0}]
    assert result["disruption"]["mig_mode_changes"] == [{"gpu": "n1/gpu0", "enabled": False}]


def test_time_sliced_services_never_exceed_the_gpu_memory():
    result = planner.plan([{"id": "a/gpu0", "model": H100}],
                          [{"name": "big", "memory_gb": 50, "replicas": 2, "isolation": "soft"}])
    # 50 + 50 GB > 80 GB: one replica only (MIG's 7g.80gb holds one as well).
    assert len(result["placed"]) == 1
    assert result["unplaced"] == [{"request": "big", "replica": 1, "reason":
                                   "needs 50 GB in a MIG instance or a time-sliced share; no room left on the 1 GPU "
                                   "that could hold it once the replicas with more weight per GPU share were placed"}]
    result = planner.plan([{"id": "a/gpu0", "model": H100}],
                          [{"name": "small", "memory_gb": 26, "replicas": 3, "isolation": "soft"}])
    # 3 x 26 = 78 GB shares one time-sliced GPU (MIG would give 3g.40gb twice, no more).
    assert result["gpus"] == [{"id": "a/gpu0", "model": H100, "mig": None, "time_slicing": {"replicas": 3}}]
    assert [p["kind"] for p in result["placed"]] == ["time_slicing"] * 3


def test_hard_isolation_is_never_time_sliced():
    result = planner.plan([{"id": "a/gpu0", "model": H100}],
                          [{"name": "small", "memory_gb": 26, "replicas": 3, "isolation": "hard"}])
    assert result["gpus"][0]["time_slicing"] is None
    assert [(p["profile"], p["start"]) for p in result["placed"]] == [("3g.40gb", 0), ("3g.40gb", 4)]
    assert len(result["unplaced"]) == 1


def test_compute_share_picks_a_profile_with_enough_slices():
    result = planner.plan([{"id": "a/gpu0", "model": H100}],
                          [{"name": "c", "memory_gb": 10, "compute_slices": 3, "isolation": "hard"}])
    assert result["placed"][0]["profile"] == "3g.40gb"


def test_reasons_for_what_does_not_fit():
    gpus = [{"id": "a/gpu0", "model": H100, "pool": "training"}]
    result = planner.plan(gpus, [
        {"name": "big", "memory_gb": 90, "isolation": "hard"},
        {"name": "x", "memory_gb": 5, "isolation": "soft", "pool": "inference"},
        {"name": "t", "memory_gb": 100, "isolation": "exclusive"},
        {"name": "s", "memory_gb": 85, "isolation": "soft"},
    ])
    assert result["unplaced"] == [
        {"request": "big", "replica": 0, "reason": "needs 90 GB in a MIG instance; the largest MIG instance of "
                                                   "h100-80gb is 80 GB"},
        {"request": "x", "replica": 0, "reason": "no GPU in pool inference"},
        {"request": "t", "replica": 0, "reason": "needs 100 GB on a whole GPU; one h100-80gb has 80 GB"},
        {"request": "s", "replica": 0, "reason": "needs 85 GB; one whole h100-80gb has 80 GB"},
    ]
    assert result["served_weight"] == 0 and result["total_weight"] == 4


def test_pool_limits_the_gpus():
    gpus = [{"id": "a/gpu0", "model": H100, "pool": "training"}, {"id": "a/gpu1", "model": H100, "pool": "inference"}]
    result = planner.plan(gpus, [{"name": "x", "memory_gb": 5, "isolation": "hard", "pool": "inference",
                                  "replicas": 2}])
    assert {p["gpu"] for p in result["placed"]} == {"a/gpu1"}


def test_weight_decides_what_is_left_out():
    gpus = [{"id": "a/gpu0", "model": H100}]
    result = planner.plan(gpus, [{"name": "cheap", "memory_gb": 80, "isolation": "hard"},
                                 {"name": "dear", "memory_gb": 80, "isolation": "hard", "weight": 3}])
    assert [p["request"] for p in result["placed"]] == ["dear"]
    assert result["served_weight"] == 3


# --- rules on random cases, checked by code written here ---------------------------------------------------

def _check_rules(gpus, requests, result):
    by_id = {g["id"]: g for g in gpus}
    wanted = {r["name"]: r for r in requests}
    for gpu in result["gpus"]:
        model = P.model(by_id[gpu["id"]]["model"])
        assert not (gpu["mig"] is not None and gpu["time_slicing"] is not None)
        if gpu["mig"] is not None:
            assert P.layout_errors(model, [(i["profile"], i["start"]) for i in gpu["mig"]]) == []
    out = {g["id"]: g for g in result["gpus"]}
    used_instances = set()
    ts_memory: dict[str, float] = {}
    whole: dict[str, int] = {}
    served = 0
    for placed in result["placed"]:
        request = wanted[placed["request"]]
        served += request.get("weight", 1)
        gpu = out[placed["gpu"]]
        if request.get("pool"):
            assert by_id[placed["gpu"]].get("pool") == request["pool"]
        model = P.model(by_id[placed["gpu"]]["model"])
        if placed["kind"] == "mig":
            assert request["isolation"] in ("hard", "soft")
            assert {"profile": placed["profile"], "start": placed["start"]} in gpu["mig"]
            key = (placed["gpu"], placed["profile"], placed["start"])
            assert key not in used_instances
            used_instances.add(key)
            profile = model.profile(placed["profile"])
            assert profile.memory_gb >= request["memory_gb"]
            assert profile.compute_slices >= (request.get("compute_slices") or 0)
        elif placed["kind"] == "time_slicing":
            assert request["isolation"] == "soft"
            assert gpu["mig"] is None and gpu["time_slicing"] is not None
            ts_memory[placed["gpu"]] = ts_memory.get(placed["gpu"], 0) + request["memory_gb"]
        else:
            assert request["isolation"] == "exclusive"
            assert gpu["mig"] is None and gpu["time_slicing"] is None
            assert request["memory_gb"] <= model.memory_gb
            whole[placed["gpu"]] = whole.get(placed["gpu"], 0) + 1
    for gpu_id, memory in ts_memory.items():
        assert memory <= P.model(by_id[gpu_id]["model"]).memory_gb + 1e-9
        assert out[gpu_id]["time_slicing"]["replicas"] == sum(1 for p in result["placed"] if p["gpu"] == gpu_id)
    assert all(n == 1 for n in whole.values())
    assert not set(whole) & set(ts_memory)
    assert result["served_weight"] == pytest.approx(served)
    assert len(result["placed"]) + len(result["unplaced"]) == sum(r.get("replicas", 1) for r in requests)


def _random_case(seed):
    """A few GPUs of the table's models (some in pools) and up to 10 requests: hard, soft and exclusive,
    some with a compute share or a pool."""
    rng = random.Random(seed)
    models = list(P.MODELS)
    gpus = [{"id": f"n{k // 4}/gpu{k % 4}", "model": rng.choice(models),
             **({"pool": rng.choice(["p", "q"])} if rng.random() < 0.3 else {})} for k in range(rng.randint(1, 8))]
    requests = []
    for k in range(rng.randint(1, 10)):
        isolation = rng.choice(["hard", "soft", "soft", "exclusive"])
        request = {"name": f"r{k}", "memory_gb": round(rng.uniform(1, 120), 1), "replicas": rng.randint(1, 4),
                   "isolation": isolation, "weight": rng.choice([1, 2, 3])}
        if isolation != "exclusive" and rng.random() < 0.3:
            request["compute_slices"] = rng.randint(1, 4)
        if rng.random() < 0.2:
            request["pool"] = rng.choice(["p", "q"])
        requests.append(request)
    return gpus, requests


@pytest.mark.parametrize("seed", range(40))
def test_rules_hold_on_random_cases(seed):
    gpus, requests = _random_case(seed)
    result = planner.plan(gpus, requests)
    _check_rules(gpus, requests, result)
    again = planner.plan(gpus, requests, result["gpus"])
    _check_rules(gpus, requests, again)


NO_DISRUPTION_KEYS = ("destroyed", "created", "mig_mode_changes", "time_slicing_changes", "gpus_changed")


@pytest.mark.parametrize("seed", range(300))
def test_planning_the_same_requests_again_is_a_no_op(seed):
    # An operator who presses "plan" twice is not told to re-partition anything: the layout the first
    # plan made serves what it served, so the second plan keeps it, unless it finds a plan that serves
    # more weight (weight comes first; then it may change what it must).
    gpus, requests = _random_case(seed)
    # The exact solver with time to finish (its default share of a second can run out on a loaded machine,
    # and a plan cut short may change more than it must).
    options = {"time_limit": 30}
    first = planner.plan(gpus, requests, options=options)
    again = planner.plan(gpus, requests, first["gpus"], options=options)
    _check_rules(gpus, requests, again)
    assert again["served_weight"] >= first["served_weight"]
    if again["served_weight"] == first["served_weight"]:
        assert again["gpus"] == first["gpus"]
        assert {key: again["disruption"][key] for key in NO_DISRUPTION_KEYS} == {key: [] for key in NO_DISRUPTION_KEYS}
    # A layout the second plan made (not one a plan from scratch makes), handed back whole with where it
    # put each replica: the third plan serves at least as much and, serving as much, changes nothing.
    third = planner.plan(gpus, requests, again, options=options)
    _check_rules(gpus, requests, third)
    assert third["served_weight"] >= again["served_weight"]
    if third["served_weight"] == again["served_weight"]:
        assert third["gpus"] == again["gpus"]
        assert {key: third["disruption"][key] for key in NO_DISRUPTION_KEYS} == {key: [] for key in NO_DISRUPTION_KEYS}


def test_time_sliced_shares_are_kept_when_planning_again():
    # Before: the second plan packed the soft services into the time-sliced GPUs in another way (r0 and
    # r8 beside r1 on the A100, r6 on the H200), serving the same weight but changing two GPUs' replicas.
    gpus = [{"id": "n0/gpu0", "model": "h100-nvl", "pool": "q"}, {"id": "n0/gpu1", "model": "h100-nvl"},
            {"id": "n0/gpu2", "model": H100}, {"id": "n0/gpu3", "model": H100},
            {"id": "n1/gpu0", "model": "a100-80gb"}, {"id": "n1/gpu1", "model": H100, "pool": "p"},
            {"id": "n1/gpu2", "model": "h200"}]
    requests = [{"name": "r0", "memory_gb": 37.9, "isolation": "soft", "weight": 3},
                {"name": "r1", "memory_gb": 52.7, "replicas": 2, "isolation": "soft", "weight": 3},
                {"name": "r2", "memory_gb": 8.4, "isolation": "soft"},
                {"name": "r3", "memory_gb": 73.8, "replicas": 3, "isolation": "hard"},
                {"name": "r4", "memory_gb": 23.7, "replicas": 2, "isolation": "hard", "pool": "q"},
                {"name": "r5", "memory_gb": 10.6, "replicas": 3, "isolation": "hard", "weight": 3},
                {"name": "r6", "memory_gb": 66.6, "isolation": "soft", "weight": 3},
                {"name": "r7", "memory_gb": 115.7, "replicas": 3, "isolation": "soft", "weight": 2, "compute_slices": 4},
                {"name": "r8", "memory_gb": 35.5, "replicas": 2, "isolation": "soft", "compute_slices": 3}]
    greedy = {"solver": False}   # the greedy search's own packing
    first = planner.plan(gpus, requests, options=greedy)
    shares = {g["id"]: g["time_slicing"] for g in first["gpus"] if g["time_slicing"]}
    assert shares == {"n1/gpu0": {"replicas": 1}, "n1/gpu1": {"replicas": 1}, "n1/gpu2": {"replicas": 3}}
    again = planner.plan(gpus, requests, first["gpus"], options=greedy)
    assert again["served_weight"] == first["served_weight"] == 28
    assert again["gpus"] == first["gpus"]
    assert again["disruption"]["time_slicing_changes"] == again["disruption"]["gpus_changed"] == []
    # The solver's plan serves one more (29 is the optimum) and is kept as well, time-sliced shares included.
    first = planner.plan(gpus, requests)
    assert first["served_weight"] == 29 and first["optimality"]["plan_from"] == "solver"
    again = planner.plan(gpus, requests, first["gpus"])
    assert again["served_weight"] == 29
    assert again["gpus"] == first["gpus"]
    assert again["disruption"]["time_slicing_changes"] == again["disruption"]["gpus_changed"] == []


def test_one_replica_more_disrupts_only_the_gpu_it_lands_on():
    gpus = [{"id": f"n1/gpu{i}", "model": H100} for i in range(3)]
    requests = [{"name": "chat", "memory_gb": 9, "replicas": 3, "isolation": "hard"},
                {"name": "llm", "memory_gb": 38, "isolation": "hard", "weight": 3},
                {"name": "rag", "memory_gb": 25, "replicas": 2, "isolation": "soft"},
                {"name": "train", "memory_gb": 75, "isolation": "exclusive"}]
    applied = planner.plan(gpus, requests)["gpus"]
    gpu0 = [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1},
            {"profile": "1g.10gb", "start": 2}, {"profile": "3g.40gb", "start": 4}]
    assert applied == [{"id": "n1/gpu0", "model": H100, "mig": gpu0, "time_slicing": None},
                       {"id": "n1/gpu1", "model": H100, "mig": None, "time_slicing": {"replicas": 2}},
                       {"id": "n1/gpu2", "model": H100, "mig": None, "time_slicing": None}]

    # A fourth chat replica: one 1g.10gb created in the free slice beside the others, nothing destroyed,
    # the time-sliced GPU and the training GPU untouched.
    more_chat = [{**requests[0], "replicas": 4}] + requests[1:]
    result = planner.plan(gpus, more_chat, applied)
    assert result["served_weight"] == 10
    assert result["gpus"][1:] == applied[1:]
    assert result["disruption"] == {
        "destroyed": [],
        "created": [{"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 3}],
        "kept": [{"gpu": "n1/gpu0", **instance} for instance in gpu0],
        "mig_mode_changes": [], "time_slicing_changes": [], "gpus_changed": ["n1/gpu0"]}
    assert [(p["request"], p["replica"], p["gpu"], p["profile"], p["start"]) for p in result["placed"]] == [
        ("chat", 0, "n1/gpu0", "1g.10gb", 0), ("chat", 1, "n1/gpu0", "1g.10gb", 1),
        ("chat", 2, "n1/gpu0", "1g.10gb", 2), ("chat", 3, "n1/gpu0", "1g.10gb", 3),
        ("llm", 0, "n1/gpu0", "3g.40gb", 4), ("rag", 0, "n1/gpu1", None, None),
        ("rag", 1, "n1/gpu1", None, None), ("train", 0, "n1/gpu2", None, None)]

    # A third rag replica: one more share on the GPU time-sliced now (75 GB of 80), no MIG instance touched.
    more_rag = requests[:2] + [{**requests[2], "replicas": 3}] + requests[3:]
    result = planner.plan(gpus, more_rag, applied)
    assert result["served_weight"] == 10
    assert result["gpus"][0]["mig"] == gpu0 and result["gpus"][2] == applied[2]
    assert result["disruption"] == {
        "destroyed": [], "created": [],
        "kept": [{"gpu": "n1/gpu0", **instance} for instance in gpu0],
        "mig_mode_changes": [], "time_slicing_changes": [{"gpu": "n1/gpu1", "from": 2, "to": 3}],
        "gpus_changed": ["n1/gpu1"]}


# --- bad input -----------------------------------------------------------------------------------------------

GPU = [{"id": "n1/gpu0", "model": H100}]
OK = {"name": "a", "memory_gb": 10, "isolation": "hard"}


@pytest.mark.parametrize(("gpus", "requests", "current", "message"), [
    (GPU, [OK, {**OK, "name": "b", "memory_gb": -4}], None, "requests[1].memory_gb: -4 must be greater than 0"),
    (GPU, [{**OK, "memory_gb": "10"}], None, "requests[0].memory_gb: '10' is not a number"),
    (GPU, [{**OK, "memory_gb": True}], None, "requests[0].memory_gb: True is not a number"),
    (GPU, [{**OK, "replicas": 0}], None, "requests[0].replicas: 0 is not between 1 and 20000"),
    (GPU, [{**OK, "compute_slices": 8}], None, "requests[0].compute_slices: 8 is not between 1 and 7"),
    (GPU, [{**OK, "isolation": "strict"}], None, "requests[0].isolation: 'strict' is not one of hard, soft, exclusive"),
    (GPU, [{**OK, "name": "../etc"}], None, "requests[0].name: '../etc' does not match ^[a-z0-9][a-z0-9._-]{0,62}$"),
    (GPU, [OK, OK], None, "requests[1].name: 'a' appears twice"),
    (GPU, [{**OK, "memroy_gb": 3}], None, "requests[0]: unknown field 'memroy_gb' (fields: compute_slices, isolation, "
                                          "memory_gb, name, pool, replicas, weight)"),
    (GPU, [{**OK, "weight": 0}], None, "requests[0].weight: 0 must be greater than 0"),
    (GPU, [{**OK, "pool": "a b"}], None, "requests[0].pool: 'a b' does not match ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"),
    (GPU, {"a": 1}, None, "requests: a list is needed, not dict"),
    ([{"id": "n1/gpu0", "model": "v100"}], [OK], None,
     "gpus[0].model: 'v100' is not a GPU model of the profile table (a100-40gb, a100-80gb, h100-80gb, h100-nvl, h200, b200)"),
    ([{"id": "n1 gpu0", "model": H100}], [OK], None,
     "gpus[0].id: 'n1 gpu0' does not match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$"),
    (GPU + GPU, [OK], None, "gpus[1].id: 'n1/gpu0' appears twice"),
    (GPU, [OK], [{"id": "n1/gpu9", "mig": None}], "current[0].id: 'n1/gpu9' is not one of the GPUs planned"),
    (GPU, [OK], [{"id": "n1/gpu0", "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "4g.40gb", "start": 0}]}],
     "current[0].mig: not a valid layout for h100-80gb: 4g.40gb at 0 overlaps 3g.40gb at 0 on memory slice 0"),
    (GPU, [OK], [{"id": "n1/gpu0", "mig": [], "time_slicing": {"replicas": 2}}],
     "current[0]: a GPU is MIG or time-sliced, not both"),
    (GPU, [OK], {"gpus": [], "placed": {"a": 1}},
     "current.placed: a list of {request, replica, gpu, profile, start} is needed"),
    (GPU, [OK], {"gpus": [], "placed": [{"request": "a", "replica": -1, "gpu": "n1/gpu0"}]},
     "current.placed[0].replica: -1 is not between 0 and 19999"),
    (GPU, [OK], {"gpus": [], "placed": [{"request": "a", "replica": 0, "gpu": "n1/gpu0", "profile": "1g.10gb",
                                         "start": 9}]},
     "current.placed[0].start: 9 is not between 0 and 7"),
    (GPU, [OK], {"gpus": [{"id": "n1/gpu0", "mig": [{"profile": "2g.10gb", "start": 0}]}]},
     "current.gpus[0].mig[0].profile: GPU model h100-80gb has no MIG profile '2g.10gb' (profiles: 1g.10gb, "
     "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)"),
])
def test_bad_input_names_the_item(gpus, requests, current, message):
    with pytest.raises(planner.PlanInputError) as caught:
        planner.plan(gpus, requests, current)
    assert str(caught.value) == message


def test_every_valid_layout_is_enumerated():
    # Counted independently: every set of (profile, start) pairs that layout_errors accepts, for h100-80gb.
    model = P.model(H100)
    pairs = [(p.name, s) for p in model.profiles for s in p.placements]
    found = 0

    def walk(k, chosen):
        nonlocal found
        found += 1
        for j in range(k, len(pairs)):
            candidate = chosen + [pairs[j]]
            if not P.layout_errors(model, candidate):
                walk(j + 1, candidate)

    walk(0, [])
    assert sum(len(v) for v in planner.valid_layouts(model).values()) == found


def test_the_size_of_a_plan_is_bounded():
    requests = [{"name": f"r{i}", "memory_gb": 1, "replicas": 5000, "isolation": "soft"} for i in range(5)]
    with pytest.raises(planner.PlanInputError) as caught:
        planner.plan(GPU, requests)
    assert str(caught.value) == "requests[4].replicas: the requests ask for more than 20000 replicas in all"
