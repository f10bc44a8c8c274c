"""The advisor's requests go through the planner unchanged: the MIG profile the planner picks for a
sized model is the one the advisor found, and a tensor-parallel model gets whole GPUs."""

from appliance.partitioning import planner, sizing
from tests.partitioning.test_sizing import LLAMA3_8B, LLAMA3_70B


def test_sized_requests_plan_where_the_advisor_said():
    small = sizing.size(LLAMA3_8B, dtype="bf16", context=4096, gpu_model="h100-80gb")
    large = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, gpu_model="h100-80gb")
    assert (small["placement"]["profile"], large["placement"]["tp"]) == ("3g.40gb", 4)
    requests = [sizing.request_for(small, "llama-3-8b", replicas=2, isolation="hard"),
                sizing.request_for(large, "llama-3-70b")]
    gpus = [{"id": f"gpu04/gpu{i}", "model": "h100-80gb"} for i in range(8)]
    result = planner.plan(gpus, requests)
    assert result["unplaced"] == []
    placed = sorted((p["request"], p["kind"], p["profile"]) for p in result["placed"])
    assert placed == [("llama-3-70b", "whole", None)] * 4 + [("llama-3-8b", "mig", "3g.40gb")] * 2
