"""The stage vars providers on the demo site imported into the database."""

import json
import os
import stat

import pytest
import yaml
from django.conf import settings

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance
from appliance.inventory.services import import_site
from appliance.partitioning.renderers import site_view, stage_vars
from appliance.simulation.services import demo_site_text, ensure_demo_credential


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    # The demo site names the credential demo-bmc, which the bootstrap creates before importing it.
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def test_site_view_reads_the_inventory_in_a_stable_order(demo):
    site = site_view(demo)
    assert [n.name for n in site.nodes] == ["gpu01", "gpu02", "gpu03", "gpu04", "mgmt01", "stor01", "stor02"]
    assert site.node("gpu01").gpu_count == 8 and site.node("gpu01").gpu_type == "h100"
    assert [p.device for p in site.node("gpu01").hca_ports][:2] == ["mlx5_0", "mlx5_1"]
    assert site.node("gpu04").pool == "inference"
    assert site_view(demo) == site


def test_workloads_vars_render_slurm_and_kubernetes(demo):
    result = stage_vars.workloads_vars(demo)
    slurm = result["appliance_slurm"]
    assert slurm["controller"] == "mgmt01" and slurm["nodes"] == ["gpu01", "gpu02", "gpu03"]
    assert "PartitionName=train Nodes=gpu01,gpu02,gpu03 OverSubscribe=EXCLUSIVE" in slurm["slurm_conf"]
    assert "NodeName=gpu03 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in slurm["gres_conf"]
    kubernetes = result["appliance_kubernetes"]
    assert kubernetes["nodes"] == ["gpu04"]
    config_map = yaml.safe_load(kubernetes["device_plugin_config_map"])
    assert yaml.safe_load(config_map["data"]["inference"])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]
    assert yaml.safe_load(kubernetes["node_settings"]["gpu04"])["labels"]["appliance.io/pool"] == "inference"


def test_munge_key_is_made_once_kept_private_and_never_in_the_vars(demo):
    first = stage_vars.workloads_vars(demo)["appliance_slurm"]["munge_key_file"]
    key = open(first, "rb").read()
    assert len(key) == stage_vars.MUNGE_KEY_BYTES
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    second = stage_vars.workloads_vars(demo)
    assert open(second["appliance_slurm"]["munge_key_file"], "rb").read() == key
    assert key.hex() not in json.dumps(second) and key.hex() not in json.dumps(stage_vars.fabric_vars(demo))
    assert AuditRecord.objects.filter(event="provisioning.secret.create").count() == 1


def test_fabric_gpudirect_storage_vars(demo):
    fabric = stage_vars.fabric_vars(demo)["appliance_fabric"]
    assert fabric["subnet_manager"]["node"] == "mgmt01"
    assert "sm_priority 15" in fabric["subnet_manager"]["opensm_conf"]
    assert "Address=10.10.2.1/16" in fabric["ipoib_files"]["gpu01"]["etc/systemd/network/10-appliance-ib0.network"]
    assert fabric["counter_thresholds"]["gpu01"]["SymbolErrorCounter"] == 10
    gpudirect = stage_vars.gpudirect_vars(demo)["appliance_gpudirect"]
    assert sorted(gpudirect["cufile_json"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert json.loads(gpudirect["cufile_json"]["gpu02"])["properties"]["rdma_dev_addr_list"] == ["10.10.2.2"]
    assert gpudirect["expected_affinity"]["gpu01"]["3"] == "mlx5_3"
    storage = stage_vars.storage_vars(demo)["appliance_storage_config"]
    assert [m["unit_name"] for m in storage["mounts"]] == ["mnt-datasets.mount", "mnt-scratch.mount"]
    assert 'options lnet networks="o2ib0(ib0)"' in storage["lnet_conf"]
