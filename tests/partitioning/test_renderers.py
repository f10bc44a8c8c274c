"""Kubernetes, storage, GPUDirect and fabric configuration rendered from the demo-like site."""

import json
from dataclasses import replace

import pytest
import yaml

from appliance.partitioning.renderers import fabric, gpudirect, kubernetes, storage
from appliance.partitioning.renderers.site import RenderError

from .demo_site import demo_site


def test_gpu_operator_values_use_the_host_driver_and_rdma():
    values = yaml.safe_load(kubernetes.render_gpu_operator_values(demo_site()))
    assert values["driver"] == {"enabled": False, "rdma": {"enabled": True, "useHostMofed": True}}
    assert values["toolkit"] == {"enabled": True}
    assert values["mig"] == {"strategy": "single"}
    assert values["devicePlugin"]["config"] == {"name": "appliance-device-plugin-config", "default": "serve"}


def test_device_plugin_time_slicing_from_the_pool_settings():
    config_map = yaml.safe_load(kubernetes.render_device_plugin_config_map(demo_site()))
    config = yaml.safe_load(config_map["data"]["serve"])
    assert config["version"] == "v1"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    mixed = replace(demo_site().pools[0], settings={"time_slicing": {"replicas": 2}, "mig_strategy": "mixed"})
    resources = kubernetes.device_plugin_config(mixed, ["1g.10gb", "3g.40gb"])["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}, {"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]


def test_node_labels_and_taints_per_pool():
    nodes = kubernetes.node_settings(demo_site())
    assert nodes["gpu03"]["labels"]["appliance.io/pool"] == "serve"
    assert nodes["gpu03"]["labels"]["nvidia.com/device-plugin.config"] == "serve"
    assert nodes["gpu03"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert nodes["gpu01"]["labels"]["appliance.io/pool-kind"] == "training"
    assert yaml.safe_load(kubernetes.render_node_settings(demo_site()))["nodes"] == nodes


def test_a_bad_mig_strategy_names_the_pool():
    site = demo_site()
    bad = replace(site, pools=(replace(site.pools[0], settings={"mig_strategy": "half"}), site.pools[1]))
    with pytest.raises(RenderError, match="pool serve: settings.mig_strategy 'half'"):
        kubernetes.render_gpu_operator_values(bad)


def test_mount_units_carry_the_declared_options():
    site = demo_site()
    lustre, home, scratch = site.filesystems
    assert storage.unit_name_for_path("/mnt/lustre") == "mnt-lustre.mount"
    assert storage.unit_name_for_path("/home/shared-x") == "home-shared\\x2dx.mount"
    unit = storage.render_mount_unit(lustre)
    assert "What=172.17.0.21@o2ib:/lustre" in unit and "Type=lustre" in unit
    assert "Options=_netdev,flock,noatime" in unit and "Requires=lnet.service" in unit
    nfs = storage.render_mount_unit(home).splitlines()
    assert "Type=nfs" in nfs
    assert "Options=proto=rdma,port=20049,nconnect=16,_netdev,vers=4.2" in nfs
    beegfs = storage.render_mount_unit(scratch)
    assert "Options=cfgFile=/etc/beegfs/beegfs-client-scratch.conf,_netdev" in beegfs
    assert "connUseRDMA = true" in storage.render_beegfs_client_conf(scratch)
    assert "sysMgmtdHost = 172.17.0.22" in storage.render_beegfs_client_conf(scratch)
    bad = replace(home, options=("proto=tcp",))
    with pytest.raises(RenderError, match="filesystems home: option proto=tcp"):
        storage.render_mount_unit(bad)


def test_lnet_and_lustre_tunables():
    site = demo_site()
    lnet = storage.render_lnet_conf(site)
    assert 'options lnet networks="o2ib0(ib0.8002)"' in lnet  # the storage partition's child interface
    assert "options ko2iblnd peer_credits=32" in lnet
    tunables = storage.render_lustre_tunables_unit(site.filesystems[0])
    assert "ExecStart=/usr/sbin/lctl set_param osc.*.max_rpcs_in_flight=64" in tunables
    assert storage.render_lustre_tunables_unit(site.filesystems[1]) is None


def test_cufile_json_lists_the_node_rdma_addresses():
    site = demo_site()
    config = json.loads(gpudirect.render_cufile_json(site, site.node("gpu01")))
    assert config["properties"]["rdma_dev_addr_list"] == ["172.16.0.11", "172.17.0.11"]
    assert config["fs"]["lustre"]["mount_table"] == {"/mnt/lustre": {"dev_addr_list": ["172.17.0.11"]}}
    assert config["fs"]["nfs"]["mount_table"] == {"/home/shared": {"dev_addr_list": ["172.17.0.11"]}}
    assert config["properties"]["use_poll_mode"] is False
    assert gpudirect.render_cufile_json(site, site.node("gpu01")) == gpudirect.render_cufile_json(site, site.node("gpu01"))


def test_opensm_and_partitions():
    site = demo_site()
    conf = fabric.render_opensm_conf(site)
    assert "sm_priority 14" in conf
    assert "guid" not in conf  # ports not discovered yet: opensm binds the first active port
    partitions = fabric.render_partitions_conf(site)
    assert "Default=0x7fff, ipoib, mtu=5, defmember=full : ALL=full;" in partitions
    assert "ib_storage=0x0002, ipoib, mtu=5 : ALL=full;" in partitions
    with pytest.raises(RenderError, match="unknown node 'nowhere'"):
        fabric.render_opensm_conf(replace(site, settings={"fabric": {"subnet_manager": {"kind": "opensm", "node": "nowhere"}}}))


def test_ipoib_files_create_the_partition_child():
    site = demo_site()
    files = fabric.ipoib_files(site, site.node("gpu01"))
    assert sorted(files) == ["etc/systemd/network/10-appliance-ib0.network",
                             "etc/systemd/network/20-appliance-ib-storage.netdev",
                             "etc/systemd/network/20-appliance-ib-storage.network"]
    parent = files["etc/systemd/network/10-appliance-ib0.network"]
    assert "Address=172.16.0.11/16" in parent and "IPoIB=ib0.8002" in parent
    assert "PartitionKey=0x8002" in files["etc/systemd/network/20-appliance-ib-storage.netdev"]
    assert "Address=172.17.0.11/16" in files["etc/systemd/network/20-appliance-ib-storage.network"]
    stor = fabric.ipoib_files(site, site.node("stor01"))
    assert "LinkLocalAddressing=no" in stor["etc/systemd/network/10-appliance-ib0.network"]
    outside = replace(site.node("gpu01"), ipoib_addresses={"ib-compute": "192.168.1.1"})
    with pytest.raises(RenderError, match="node gpu01: ipoib address 192.168.1.1 is outside network ib-compute"):
        fabric.ipoib_files(site, outside)
