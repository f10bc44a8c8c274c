"""The workload model's heat agrees with an H100's thresholds: a GPU throttled for heat reads between the
temperature at which the driver slows it (GPU max operating, 87 C) and the one at which it is powered off
(92 C), the hardware's own slowdown reason only from 89 C; no cooler GPU reports a thermal slowdown."""

import pytest

from appliance.simulation.workload import HW_THERMAL, SW_THERMAL, Model, NodeSpec

NODES = (NodeSpec("gpu01", "training", 8), NodeSpec("gpu02", "training", 8))
THERMAL = SW_THERMAL | HW_THERMAL


def loads(profile: str, seed: int):
    model = Model(profile, seed, NODES)
    for interval in range(0, 1440, 3):
        for node in NODES:
            yield from model.node_load(node, interval)["gpus"]


@pytest.mark.parametrize(("profile", "seed"), [("thermal", 1), ("mixed", 2), ("demo", 7)])
def test_a_gpu_throttled_for_heat_is_as_hot_as_an_h100_gets_before_it_slows(profile, seed):
    throttled = hot_reports = 0
    for load in loads(profile, seed):
        temperature, reasons = round(load["temperature"]), int(load["reasons"])
        if load["label"] == "throttled":
            throttled += 1
            assert 87 <= temperature < 92, load
            assert reasons & SW_THERMAL, load
            assert bool(reasons & HW_THERMAL) == (temperature >= 89), load
        if reasons & THERMAL:
            hot_reports += 1
            assert temperature >= 87, load
    assert throttled and hot_reports >= throttled  # the profile throttles at all
