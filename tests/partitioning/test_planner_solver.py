"""The planner's exact solver (HiGHS) after its greedy search: on small cases its plan serves the exhaustive
optimum (the figures below come from the exhaustive search of tests/bench/bench_partition_planner.py, which
shares no code with the planner, and two of them are worked out by hand); the greedy plan is the fallback
when the solver is missing, out of time or faced with too large a program, and the plan says so; a plan
the solver makes that breaks a rule is never handed out."""

import pytest

from appliance.partitioning import planner, solver
from appliance.partitioning import profiles as P

from .test_planner import _check_rules, _random_case

H100 = "h100-80gb"

# (gpus, requests, the greedy plan's weight, the exhaustive optimum)
CASES = [
    pytest.param(
        # One H100: two 40 GB hard replicas of weight 5 fit a 4g.40gb and a 3g.40gb together (10); nothing
        # else fits beside them (the 8 memory slices are taken), and no other layout serves more.
        [{"id": "n0/gpu0", "model": H100, "pool": "a"}],
        [{"name": "r0", "memory_gb": 40.0, "isolation": "hard", "weight": 1, "pool": "a"},
         {"name": "r1", "memory_gb": 40.0, "replicas": 2, "isolation": "hard", "weight": 5},
         {"name": "r2", "memory_gb": 18.0, "isolation": "hard", "weight": 3, "pool": "a"},
         {"name": "r3", "memory_gb": 42.3, "isolation": "soft", "weight": 5, "compute_slices": 1}],
        8, 10, id="two-halves"),
    pytest.param(
        # One A100-80GB: r3 (5 GB, 4 compute slices, weight 5) in a 4g.40gb and one r2 (27 GB, weight 2)
        # in the 3g.40gb beside it serve 7; an r0 (71 GB) takes the whole 7g.80gb for 5; time-slicing the
        # two soft replicas serves 6.
        [{"id": "n0/gpu0", "model": "a100-80gb"}],
        [{"name": "r0", "memory_gb": 71.0, "replicas": 2, "isolation": "hard", "weight": 5},
         {"name": "r1", "memory_gb": 12.0, "isolation": "soft", "weight": 1},
         {"name": "r2", "memory_gb": 27.0, "replicas": 2, "isolation": "hard", "weight": 2},
         {"name": "r3", "memory_gb": 5.0, "isolation": "soft", "weight": 5, "compute_slices": 4}],
        6, 7, id="compute-share"),
    pytest.param(
        [{"id": "n0/gpu0", "model": "h200"}, {"id": "n0/gpu1", "model": "a100-40gb"}],
        [{"name": "r0", "memory_gb": 71.0, "isolation": "exclusive", "weight": 3},
         {"name": "r1", "memory_gb": 35.6, "replicas": 2, "isolation": "hard", "weight": 5, "compute_slices": 1},
         {"name": "r2", "memory_gb": 45.0, "isolation": "hard", "weight": 1}],
        10, 11, id="two-models"),
    pytest.param(
        [{"id": "n0/gpu0", "model": "h200"}, {"id": "n0/gpu1", "model": "h200"}],
        [{"name": "r0", "memory_gb": 27.9, "isolation": "soft", "weight": 5},
         {"name": "r1", "memory_gb": 71.0, "replicas": 3, "isolation": "soft", "weight": 2},
         {"name": "r2", "memory_gb": 90.3, "isolation": "soft", "weight": 5}],
        12, 14, id="time-slicing"),
    pytest.param(
        [{"id": "n0/gpu0", "model": "b200"}],
        [{"name": "r0", "memory_gb": 73.3, "isolation": "hard", "weight": 2, "compute_slices": 4, "pool": "b"},
         {"name": "r1", "memory_gb": 80.0, "replicas": 3, "isolation": "soft", "weight": 5, "compute_slices": 3},
         {"name": "r2", "memory_gb": 45.0, "isolation": "exclusive", "weight": 5},
         {"name": "r3", "memory_gb": 10.0, "isolation": "hard", "weight": 2}],
        7, 10, id="b200"),
    pytest.param(
        [{"id": "n0/gpu0", "model": "a100-40gb", "pool": "b"}, {"id": "n0/gpu1", "model": "b200"}],
        [{"name": "r0", "memory_gb": 96.2, "isolation": "exclusive", "weight": 1},
         {"name": "r1", "memory_gb": 40.0, "replicas": 3, "isolation": "hard", "weight": 5},
         {"name": "r2", "memory_gb": 88.0, "replicas": 2, "isolation": "hard", "weight": 3}],
        15, 18, id="pool-and-b200"),
    pytest.param(
        [{"id": "n0/gpu0", "model": "h100-nvl"}],
        [{"name": "r0", "memory_gb": 21.9, "replicas": 3, "isolation": "hard", "weight": 3},
         {"name": "r1", "memory_gb": 35.0, "replicas": 3, "isolation": "soft", "weight": 5},
         {"name": "r2", "memory_gb": 83.6, "isolation": "soft", "weight": 1, "compute_slices": 1}],
        10, 11, id="h100-nvl"),
]


@pytest.mark.parametrize(("gpus", "requests", "greedy", "optimum"), CASES)
def test_the_solver_plan_serves_the_exhaustive_optimum(gpus, requests, greedy, optimum):
    assert planner.plan(gpus, requests, options={"solver": False})["served_weight"] == greedy
    # Time to finish whatever the machine's load (the default share of a second is wall-clock time).
    result = planner.plan(gpus, requests, options={"time_limit": 30})
    _check_rules(gpus, requests, result)
    assert result["served_weight"] == optimum
    assert result["optimality"] == {
        "status": "optimal", "gap_percent": 0.0, "bound_weight": optimum, "plan_from": "solver",
        "solver": solver.version(), "solver_status": "optimal", "note": "HiGHS solved the program"}


def test_optimal_when_the_greedy_plan_already_serves_the_optimum():
    gpus = [{"id": "n0/gpu0", "model": H100}]
    requests = [{"name": "big", "memory_gb": 70, "replicas": 2, "isolation": "hard"}]   # one 7g.80gb: 1 of 2
    result = planner.plan(gpus, requests, options={"time_limit": 30})
    assert result["served_weight"] == 1
    assert result["optimality"]["status"] == "optimal" and result["optimality"]["bound_weight"] == 1
    assert result["optimality"]["plan_from"] == "greedy"
    assert result["optimality"]["note"] == "HiGHS solved the program; the greedy plan serves as much"


GPUS, REQUESTS, GREEDY, OPTIMUM = CASES[0].values


def test_without_the_solver_the_greedy_plan_and_the_simple_bound(monkeypatch):
    monkeypatch.setattr(solver, "highspy", None)
    result = planner.plan(GPUS, REQUESTS)
    _check_rules(GPUS, REQUESTS, result)
    assert result["served_weight"] == GREEDY == 8
    # The simple bound: every replica that fits some GPU alone (all 5 here: weights 1 + 5 + 5 + 3 + 5).
    assert result["optimality"] == {
        "status": "within_bound", "gap_percent": 57.89, "bound_weight": 19, "plan_from": "greedy",
        "solver": None, "solver_status": "unavailable",
        "note": "the solver is unavailable (highspy is not installed): the greedy plan and the simple bound "
                "(every replica that fits some GPU)"}


def test_a_solver_out_of_time_leaves_the_greedy_plan_and_says_so():
    result = planner.plan(GPUS, REQUESTS, options={"time_limit": 0})
    assert result["served_weight"] == GREEDY
    optimality = result["optimality"]
    assert (optimality["status"], optimality["plan_from"], optimality["solver_status"]) == (
        "within_bound", "greedy", "time_limit")
    assert "time limit (0 s)" in optimality["note"]
    assert optimality["gap_percent"] > 0


def test_too_large_a_program_is_not_tried(monkeypatch):
    monkeypatch.setattr(solver, "MAX_COLUMNS", 5)
    result = planner.plan(GPUS, REQUESTS)
    assert result["served_weight"] == GREEDY
    assert (result["optimality"]["plan_from"], result["optimality"]["solver_status"]) == ("greedy", "too_large")
    assert result["optimality"]["note"].startswith("the solver was not run: the program would have about ")


def test_a_large_program_gets_its_linear_relaxation_for_a_bound(monkeypatch):
    # Past MAX_MIP_COLUMNS the program is relaxed: a bound, no plan of the solver's own.
    monkeypatch.setattr(solver, "MAX_MIP_COLUMNS", 5)
    result = planner.plan(GPUS, REQUESTS, options={"time_limit": 30})
    optimality = result["optimality"]
    assert (optimality["plan_from"], optimality["solver_status"]) == ("greedy", "bound")
    assert "linear relaxation" in optimality["note"]
    assert result["served_weight"] == GREEDY
    # Between the optimum (10) and the simple bound (19).
    assert OPTIMUM <= optimality["bound_weight"] < 19


def test_a_solver_plan_that_breaks_a_rule_is_never_handed_out(monkeypatch):
    # A solver answer serving everything, the 40 GB replicas in 1g.10gb instances: refused by the checks,
    # and the greedy plan is kept.
    def wrong(gpus, items, **_):
        uses = [("mig", [("1g.10gb", item.index) for item in items if item.isolation == "hard"])]
        return solver.Solution("optimal", bound=19.0, assignment={(H100, "a", ("bare",)): uses},
                               weight=sum(item.weight for item in items))

    monkeypatch.setattr(solver, "solve", wrong)
    result = planner.plan(GPUS, REQUESTS)
    _check_rules(GPUS, REQUESTS, result)
    assert result["served_weight"] == GREEDY
    assert result["optimality"]["plan_from"] == "greedy"
    assert "its plan broke a rule (GPU n0/gpu0: " in result["optimality"]["note"]


@pytest.mark.parametrize("seed", range(60))
def test_solver_plans_keep_the_rules_and_never_serve_less_than_the_greedy_one(seed):
    gpus, requests = _random_case(seed)
    greedy = planner.plan(gpus, requests, options={"solver": False})
    result = planner.plan(gpus, requests, options={"time_limit": 30})
    _check_rules(gpus, requests, result)
    assert result["served_weight"] >= greedy["served_weight"]
    optimality = result["optimality"]
    assert result["served_weight"] <= optimality["bound_weight"] + 1e-6
    if optimality["status"] == "optimal":
        assert optimality["gap_percent"] == 0 and optimality["bound_weight"] == result["served_weight"]
    else:
        assert optimality["gap_percent"] == pytest.approx(
            100 * (optimality["bound_weight"] - result["served_weight"]) / optimality["bound_weight"], abs=0.01)


def test_options_are_checked():
    with pytest.raises(planner.PlanInputError, match="options.solver"):
        planner.plan(GPUS, REQUESTS, options={"solver": "yes"})
    with pytest.raises(planner.PlanInputError, match="options.time_limit"):
        planner.plan(GPUS, REQUESTS, options={"time_limit": -1})


def test_the_profiles_of_every_model_form_a_chain():
    # The program's MIG part rests on it (solver.py): if a board ever breaks it, the solver says so and the
    # planner keeps its greedy plan.
    for gpu_model in P.MODELS.values():
        assert solver.chain(gpu_model) is not None, gpu_model.id


def test_a_solver_that_fails_or_answers_nonsense_leaves_the_greedy_plan(monkeypatch):
    def fails(*_, **__):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(solver, "solve", fails)
    result = planner.plan(GPUS, REQUESTS)
    assert result["served_weight"] == GREEDY
    assert (result["optimality"]["solver_status"], result["optimality"]["bound_weight"]) == ("error", 19)
    assert "RuntimeError: out of memory" in result["optimality"]["note"]

    # A "bound" below what the greedy plan serves is no bound: not used, and said.
    monkeypatch.setattr(solver, "solve", lambda *_, **__: solver.Solution("optimal", bound=3.0))
    result = planner.plan(GPUS, REQUESTS)
    assert result["served_weight"] == GREEDY
    assert (result["optimality"]["status"], result["optimality"]["bound_weight"]) == ("within_bound", 19)
    assert "its bound 3 is below the greedy plan's weight and was not used" in result["optimality"]["note"]


@pytest.mark.parametrize("seed", range(30))
def test_the_pooled_program_keeps_the_rules_too(monkeypatch, seed):
    # Past MAX_SLOT_COLUMNS the time-sliced GPUs of a class are one pooled knapsack, and its replicas are
    # packed GPU by GPU afterwards: the plans it gives keep every rule, and its bound holds.
    monkeypatch.setattr(solver, "MAX_SLOT_COLUMNS", 0)
    gpus, requests = _random_case(seed)
    greedy = planner.plan(gpus, requests, options={"solver": False})
    result = planner.plan(gpus, requests, options={"time_limit": 30})
    _check_rules(gpus, requests, result)
    assert greedy["served_weight"] <= result["served_weight"] <= result["optimality"]["bound_weight"] + 1e-6
