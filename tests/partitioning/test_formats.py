"""A planner result in the ecosystem's formats: mig-parted, the device plugin, Slurm's Gres=, the GPU
operator's values; exact output for a result written out here."""

import pytest
import yaml

from appliance.partitioning import formats

H100 = "h100-80gb"

RESULT = {"gpus": [
    {"id": "gpu04/gpu0", "model": H100,
     "mig": [{"profile": "3g.40gb", "start": 4}, {"profile": "1g.10gb", "start": 0},
             {"profile": "2g.20gb", "start": 2}], "time_slicing": None},
    {"id": "gpu04/gpu1", "model": H100,
     "mig": [{"profile": "1g.10gb", "start": 0}, {"profile": "2g.20gb", "start": 2},
             {"profile": "3g.40gb", "start": 4}], "time_slicing": None},
    {"id": "gpu04/gpu2", "model": H100, "mig": None, "time_slicing": {"replicas": 4}},
    {"id": "gpu04/gpu3", "model": H100, "mig": None, "time_slicing": {"replicas": 2}},
    {"id": "gpu04/gpu4", "model": H100, "mig": None, "time_slicing": {"replicas": 4}},
    {"id": "gpu04/gpu5", "model": H100, "mig": None, "time_slicing": None},
    {"id": "gpu01/gpu0", "model": H100, "mig": None, "time_slicing": None},
    {"id": "gpu01/gpu1", "model": H100, "mig": None, "time_slicing": None},
]}


def test_mig_parted_config():
    assert formats.mig_parted_config(RESULT) == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "gpu04": [
                {"devices": [0, 1], "mig-enabled": True,
                 "mig-devices": {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}},
                {"devices": [2, 3, 4, 5], "mig-enabled": False},
            ],
            "gpu01": [{"devices": [0, 1], "mig-enabled": False}],
        },
    }


def test_mig_parted_yaml_text():
    text = formats.to_yaml(formats.mig_parted_config({"gpus": RESULT["gpus"][:1]}))
    assert text == (
        "version: v1\n"
        "mig-configs:\n"
        "  all-disabled:\n"
        "  - devices: all\n"
        "    mig-enabled: false\n"
        "  gpu04:\n"
        "  - devices:\n"
        "    - 0\n"
        "    mig-enabled: true\n"
        "    mig-devices:\n"
        "      1g.10gb: 1\n"
        "      2g.20gb: 1\n"
        "      3g.40gb: 1\n")
    assert yaml.safe_load(text)["mig-configs"]["gpu04"][0]["mig-devices"] == {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}


def test_device_plugin_config_mixed_with_time_slicing():
    assert formats.device_plugin_config(RESULT, "gpu04", "mixed") == {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
        "sharing": {"timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": True,
            "resources": [
                {"name": "nvidia.com/gpu", "devices": ["2", "4"], "replicas": 4},
                {"name": "nvidia.com/gpu", "devices": ["3"], "replicas": 2},
            ],
        }},
    }
    assert formats.device_plugin_config(RESULT, "gpu01", "single") == {"version": "v1",
                                                                        "flags": {"migStrategy": "single"}}


def test_single_strategy_refuses_mixed_profiles():
    with pytest.raises(formats.FormatError) as caught:
        formats.device_plugin_config(RESULT, "gpu04", "single")
    assert str(caught.value) == ("node gpu04: the single MIG strategy needs every GPU of the node split into one "
                                 "profile; 2 of 6 GPUs are MIG with 1g.10gb, 2g.20gb, 3g.40gb (use the mixed strategy)")
    uniform = {"gpus": [{"id": f"n1/gpu{i}", "model": H100, "time_slicing": None,
                         "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}
                        for i in range(2)]}
    assert formats.device_plugin_config(uniform, "n1", "single") == {"version": "v1", "flags": {"migStrategy": "single"}}


def test_slurm_gres():
    assert formats.slurm_gres(RESULT, "gpu04") == "gpu:h100:4,gpu:1g.10gb:2,gpu:2g.20gb:2,gpu:3g.40gb:2"
    assert formats.slurm_gres(RESULT, "gpu01") == "gpu:h100:2"
    assert formats.slurm_gres(RESULT, "gpu01", whole="h100sxm") == "gpu:h100sxm:2"


def test_gpu_operator_values():
    values = formats.gpu_operator_values(RESULT)
    assert values["mig"] == {"strategy": "mixed"}
    assert values["migManager"]["enabled"] is True
    config = values["migManager"]["config"]
    assert {k: config[k] for k in ("create", "name", "default")} == {
        "create": True, "name": "appliance-mig-parted", "default": "all-disabled"}
    assert yaml.safe_load(config["data"]["config.yaml"]) == formats.mig_parted_config(RESULT)
    plugin = values["devicePlugin"]["config"]
    assert sorted(plugin["data"]) == ["gpu01", "gpu04"]
    assert yaml.safe_load(plugin["data"]["gpu04"])["sharing"]["timeSlicing"]["resources"][1] == {
        "name": "nvidia.com/gpu", "devices": ["3"], "replicas": 2}
    assert formats.node_labels(RESULT)["gpu04"] == {"nvidia.com/mig.config": "gpu04",
                                                    "nvidia.com/device-plugin.config": "gpu04"}


@pytest.mark.parametrize(("call", "message"), [
    (lambda: formats.mig_parted_config({"gpus": [{"id": "just-a-gpu", "model": H100, "mig": None}]}),
     "GPU 'just-a-gpu': not a <node>/gpu<index> id (the formats are per node and GPU index)"),
    (lambda: formats.slurm_gres(RESULT, "gpu09"), "node gpu09: no GPU of the plan is on it"),
    (lambda: formats.slurm_gres(RESULT, "gpu04 Gres=x"), "node 'gpu04 Gres=x': not a node name "
                                                         "(^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$)"),
    (lambda: formats.device_plugin_config(RESULT, "gpu04", "none"), "strategy 'none' is not one of single, mixed"),
    (lambda: formats.mig_parted_config({"gpus": [{"id": "all-disabled/gpu0", "model": H100, "mig": None}]}),
     "GPU all-disabled/gpu0: a node named all-disabled would clash with mig-parted's config of that name"),
])
def test_refusals_name_the_place(call, message):
    with pytest.raises(formats.FormatError) as caught:
        call()
    assert str(caught.value) == message
