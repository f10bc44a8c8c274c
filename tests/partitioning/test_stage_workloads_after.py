"""What the workloads stage renders from the layout the partitioning stage recorded: gres.conf with a File=
line per MIG device on a Slurm node, and an inference node's own device plugin config (time-slicing of
the GPUs it time-slices, MIG with the mixed strategy) selected by its labels."""

import pytest
import yaml
from django.conf import settings

from appliance.inventory.models import Appliance, Node
from appliance.inventory.services import import_site
from appliance.partitioning.renderers import stage_vars
from appliance.simulation.services import demo_site_text, ensure_demo_credential


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def record(name, instances, time_slicing=None):
    node = Node.objects.get(name=name)
    node.facts = {**node.facts, "mig_instances": instances, "time_slicing": time_slicing}
    node.save()


def test_workloads_render_the_recorded_layout(demo):
    record("gpu03", [{"gpu": 0, "profile": "3g.40gb", "start": 0, "gpu_instance": 2, "compute_instance": 0},
                     {"gpu": 0, "profile": "3g.40gb", "start": 4, "gpu_instance": 1, "compute_instance": 0}])
    record("gpu04", [{"gpu": 0, "profile": "2g.20gb", "start": 0, "gpu_instance": 3, "compute_instance": 0},
                     {"gpu": 0, "profile": "1g.10gb", "start": 2, "gpu_instance": 9, "compute_instance": 0}],
           {"replicas": 4, "gpus": [1]})
    result = stage_vars.workloads_vars(demo)

    gres = result["appliance_slurm"]["gres_conf"]
    # GPU 0 of gpu03: its two GPU instances (caps minors 3 + 9 * gi, +1 + ci), the seven others whole.
    assert ("NodeName=gpu03 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,"
            "/dev/nvidia-caps/nvidia-cap22") in gres
    assert ("NodeName=gpu03 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,"
            "/dev/nvidia-caps/nvidia-cap13") in gres
    assert "NodeName=gpu03 Name=gpu Type=h100 File=/dev/nvidia[1-7]" in gres

    kubernetes = result["appliance_kubernetes"]
    config_map = yaml.safe_load(kubernetes["device_plugin_config_map"])
    assert yaml.safe_load(config_map["data"]["gpu04"]) == {
        "version": "v1", "flags": {"migStrategy": "mixed"},
        "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "devices": ["1"], "replicas": 4}]}}}
    assert "gpu03" not in config_map["data"]  # a Slurm node, not the device plugin's
    labels = yaml.safe_load(kubernetes["node_settings"]["gpu04"])["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "gpu04" and labels["nvidia.com/mig.config"] == "gpu04"


def test_nodes_never_partitioned_keep_their_pool_config(demo):
    result = stage_vars.workloads_vars(demo)
    config_map = yaml.safe_load(result["appliance_kubernetes"]["device_plugin_config_map"])
    assert "gpu04" not in config_map["data"]
    labels = yaml.safe_load(result["appliance_kubernetes"]["node_settings"]["gpu04"])["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "inference"


def test_a_node_the_stage_found_unpartitioned_keeps_its_pool_config(demo):
    """Every bootstrap's partitioning stage records each GPU node's layout: on a node nobody partitioned, its
    pool's (demo.yml time-slices the inference pool x4, every GPU). Such a node keeps its pool's config, so a
    second bootstrap renders what the first did; a plan that makes its GPUs whole gives it its own."""
    before = stage_vars.workloads_vars(demo)["appliance_kubernetes"]
    record("gpu04", [], {"replicas": 4, "gpus": list(range(8))})
    record("gpu01", [], None)  # a Slurm node: the device plugin does not serve it
    after = stage_vars.workloads_vars(demo)["appliance_kubernetes"]
    assert after == before
    config_map = yaml.safe_load(after["device_plugin_config_map"])
    assert "gpu04" not in config_map["data"]
    assert yaml.safe_load(config_map["data"]["inference"])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]

    record("gpu04", [], None)  # a plan made every GPU whole, not shared
    config_map = yaml.safe_load(stage_vars.workloads_vars(demo)["appliance_kubernetes"]["device_plugin_config_map"])
    assert yaml.safe_load(config_map["data"]["gpu04"]) == {"version": "v1", "flags": {"migStrategy": "single"}}


def test_the_layout_of_a_node_nobody_partitioned_is_its_pools():
    """layout.laid_out: the pool's time-slicing on every GPU is the pool's layout, not the node's own."""
    from appliance.partitioning.layout import laid_out

    assert not laid_out({}, 8, 4)  # never recorded
    assert not laid_out({"mig_instances": [], "time_slicing": {"replicas": 4, "gpus": list(range(8))}}, 8, 4)
    assert laid_out({"mig_instances": [], "time_slicing": None}, 8, 4)
    assert laid_out({"mig_instances": [], "time_slicing": {"replicas": 4, "gpus": [1]}}, 8, 4)
    assert not laid_out({"mig_instances": [], "time_slicing": None}, 8, 0)
    assert laid_out({"mig_instances": [{"gpu": 0, "profile": "3g.40gb", "start": 0}], "time_slicing": None}, 8, 0)
