"""The demo appliance with its inference node (gpu04, 8 x H100 80GB) prepared as a simulated node, for the
deployment tests ("deploy" part)."""

from pathlib import Path

import pytest
from django.conf import settings

from appliance.core.roles import Role
from appliance.inventory.models import GPU, Appliance, Node, Pool
from appliance.inventory.services import import_site
from appliance.lifecycle import services
from appliance.simulation import gpu_ops
from appliance.simulation import state as node_state
from appliance.simulation.kubernetes import state_file
from appliance.simulation.services import demo_site_text, ensure_demo_credential, prepare_node

from .registry_support import write_model


@pytest.fixture
def demo(db, settings, tmp_path):
    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    settings.KEYS_DIR = tmp_path / "keys"
    settings.STATE_DIR.mkdir()
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    appliance = Appliance.objects.get(name="demo")
    prepare_node(Node.objects.get(name="gpu04"))
    return appliance


def inference_node() -> Node:
    return Node.objects.get(name="gpu04")


def node_gpu(index: int) -> dict:
    state = node_state.load(inference_node().sysroot)
    return next(gpu for gpu in state["gpus"] if gpu["index"] == index)


def owners() -> dict:
    return node_state.load(inference_node().sysroot).get("gpu_owners", {})


def cluster_file(appliance) -> Path:
    return state_file(settings.SIMULATION_DIR, appliance.name)


def lay_out_mig(appliance, index: int, profile_id: int = 19, *, on_node: bool = True, count: int = 1) -> list[int]:
    """GPU `index` of gpu04 in MIG mode with `count` instances (19: 1g.10gb, each with its compute instance),
    recorded as the partitioning stage records them (the node's facts), the pool on the mixed strategy.
    on_node False records them without creating them on the node. Returns the GPU instance ids."""
    node = inference_node()
    instances = list(range(1, count + 1))
    if on_node:
        with node_state.update(node.sysroot) as state:
            gpu_ops.gpu(state, index)["mig"]["current"] = True
            instances = [gpu_ops.create_gpu_instance(state, index, profile_id, start) for start in range(count)]
            for instance in instances:
                gpu_ops.create_compute_instance(state, index, instance)
    GPU.objects.filter(node=node, index=index).update(mig_mode=GPU.MigMode.ENABLED)
    node.facts = {**(node.facts or {}), "time_slicing": None, "mig_instances": [
        {"gpu": index, "profile": "1g.10gb", "start": start, "gpu_instance": instance, "compute_instance": 0,
         "uuid": f"MIG-test-{instance}"} for start, instance in enumerate(instances)]}
    node.save()
    pool = Pool.objects.get(appliance=appliance, kind="inference")
    pool.settings = {**pool.settings, "mig_strategy": "mixed"}
    pool.save()
    return instances



@pytest.fixture
def people(make_user):
    return {"erin": make_user(Role.ML_ENGINEER, "erin"), "amir": make_user(Role.ML_ENGINEER, "amir"),
            "olga": make_user(Role.OPERATOR, "olga"), "val": make_user(Role.VIEWER, "val")}


def production(root, people, directory, seed):
    """A version of model "llama" registered from a small real safetensors model, in production after a
    request by erin and amir's approval."""
    version = services.register_version("llama", source=str(write_model(root / directory, seed)),
                                        user=people["erin"])
    services.transition(version, "validated", user=people["erin"])
    services.transition(version, "staging", user=people["erin"])
    evaluation = services.add_evaluation(version, user=people["erin"], name="mmlu", metrics={"accuracy": 0.6},
                                         passed=True)
    request = services.request_transition(version, "production", user=people["erin"], reason="evaluated",
                                          evidence=[evaluation.pk])
    services.approve(request, user=people["amir"], reason="checked")
    version.refresh_from_db()
    return version
