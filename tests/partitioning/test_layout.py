"""current_layout: the GPUs of the demo appliance with the instances and time-slicing their nodes' facts
recorded."""

import pytest
from django.conf import settings

from appliance.inventory.models import GPU, Appliance, Node
from appliance.inventory.services import import_site
from appliance.partitioning.layout import current_layout, planner_current, planner_gpus
from appliance.simulation.services import demo_site_text, ensure_demo_credential


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def test_unpartitioned_appliance_lists_every_gpu_whole(demo):
    layout = current_layout(demo)
    ids = [g["id"] for g in layout["gpus"]]
    assert len(ids) == 32
    assert ids[:2] == ["gpu01/gpu0", "gpu01/gpu1"] and ids[-1] == "gpu04/gpu7"
    first = layout["gpus"][0]
    assert first == {"id": "gpu01/gpu0", "node": "gpu01", "index": 0, "model": "h100-80gb", "pool": "training",
                     "mig_mode": "disabled", "mig": None, "time_slicing": None}
    assert layout["gpus"][-1]["pool"] == "inference"
    # demo.yml's inference pool time-slices every GPU x4 (the pool's device plugin config): that is the
    # layout of gpu04's GPUs until a plan gives the node its own.
    assert [g["time_slicing"] for g in layout["gpus"] if g["node"] == "gpu04"] == [{"replicas": 4}] * 8
    assert {g["time_slicing"] is None for g in layout["gpus"] if g["node"] != "gpu04"} == {True}


def test_facts_give_instances_and_time_slicing(demo):
    node = Node.objects.get(name="gpu04")
    GPU.objects.filter(node=node, index=0).update(mig_mode=GPU.MigMode.ENABLED)
    GPU.objects.filter(node=node, index=2).update(mig_mode=GPU.MigMode.ENABLED)
    node.facts = {
        "mig_instances": [
            {"gpu": 0, "profile": "1g.10gb", "start": 6, "gpu_instance": 13, "compute_instance": 0, "uuid": "MIG-b"},
            {"gpu": 0, "profile": "3g.40gb", "start": 0, "gpu_instance": 2, "compute_instance": 0, "uuid": "MIG-a"},
        ],
        "time_slicing": {"replicas": 4, "gpus": [1]},
    }
    node.save()
    gpus = {g["id"]: g for g in current_layout(demo)["gpus"]}
    assert gpus["gpu04/gpu0"]["mig"] == [
        {"profile": "3g.40gb", "start": 0, "gpu_instance": 2, "compute_instance": 0, "uuid": "MIG-a"},
        {"profile": "1g.10gb", "start": 6, "gpu_instance": 13, "compute_instance": 0, "uuid": "MIG-b"},
    ]
    assert gpus["gpu04/gpu0"]["time_slicing"] is None
    assert gpus["gpu04/gpu1"]["mig"] is None and gpus["gpu04/gpu1"]["time_slicing"] == {"replicas": 4}
    assert gpus["gpu04/gpu2"]["mig"] == [] and gpus["gpu04/gpu2"]["mig_mode"] == "enabled"
    assert gpus["gpu04/gpu3"]["mig"] is None and gpus["gpu04/gpu3"]["time_slicing"] is None

    current = {g["id"]: g for g in planner_current(current_layout(demo))}
    assert current["gpu04/gpu0"] == {"id": "gpu04/gpu0", "model": "h100-80gb",
                                     "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 6}],
                                     "time_slicing": None}
    assert {"id": "gpu04/gpu5", "model": "h100-80gb", "pool": "inference"} in planner_gpus(current_layout(demo))

    # A GPU the profile table does not know is neither planned nor given as current.
    GPU.objects.filter(node=node, index=7).update(model="NVIDIA GeForce RTX 4090")
    layout = current_layout(demo)
    assert [g["model"] for g in layout["gpus"] if g["id"] == "gpu04/gpu7"] == [None]
    assert "gpu04/gpu7" not in {g["id"] for g in planner_current(layout)}
    assert "gpu04/gpu7" not in {g["id"] for g in planner_gpus(layout)}
