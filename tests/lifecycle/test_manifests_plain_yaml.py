"""Generated Kubernetes manifests are plain YAML, as `kubectl get -o yaml` shows them: no anchors (&id001)
and no aliases (*id001), every value written where it is used."""

import re

import yaml

from appliance.core import plainyaml
from appliance.lifecycle import manifests
from appliance.partitioning import sizing
from appliance.partitioning.formats import to_yaml
from appliance.partitioning.renderers import kubernetes
from tests.partitioning.demo_site import demo_site

SMALL = {"params": 32768, "layers": 2, "kv_heads": 2, "head_dim": 16, "hidden_size": 64, "attention_heads": 4,
         "intermediate_size": 128, "vocab_size": 256, "dtype": "fp32"}
ANCHOR_OR_ALIAS = re.compile(r"(^|[\s:\-\[,])[&*][A-Za-z0-9_]+", re.MULTILINE)


def test_a_deployment_whose_pod_shares_the_deployments_labels_is_written_out_twice():
    result = sizing.size(SMALL, gpu_model="h100-80gb", context=8192, concurrency=8)
    text, _ = manifests.render(service="llama", workload="llama-7", deployment_id=7, model="llama", version=3,
                               runtime="vllm", storage_path="/mnt/lustre/models/llama/3", pool="inference",
                               node="gpu04", devices=[{"gpu": 1, "profile": "1g.10gb", "gpu_instance": 9,
                                                       "resource": "nvidia.com/mig-1g.10gb"}],
                               sizing=result, context=8192, concurrency=8)
    assert ANCHOR_OR_ALIAS.findall(text) == []
    deployment, service = yaml.safe_load_all(text)
    labels = {"app.kubernetes.io/name": "llama", "app.kubernetes.io/instance": "llama-7",
              "app.kubernetes.io/managed-by": "appliance", "appliance.io/deployment": "7"}
    assert deployment["metadata"]["labels"] == labels
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    assert text.count("app.kubernetes.io/managed-by: appliance") == 3  # the deployment, its pods, the service
    assert service["kind"] == "Service"


def test_shared_objects_are_written_in_full():
    shared = {"key": "nvidia.com/gpu", "operator": "Exists"}
    data = {"a": [shared], "b": [shared]}
    assert plainyaml.dump(data) == ("a:\n- key: nvidia.com/gpu\n  operator: Exists\n"
                                    "b:\n- key: nvidia.com/gpu\n  operator: Exists\n")
    assert plainyaml.dump_all([data, {"c": shared}], sort_keys=True).count("&") == 0
    assert to_yaml(data) == plainyaml.dump(data)


def test_the_pool_renderers_write_no_anchor():
    site = demo_site()
    for text in (kubernetes.render_device_plugin_config_map(site), kubernetes.render_gpu_operator_values(site),
                 kubernetes.render_node_settings(site)):
        assert ANCHOR_OR_ALIAS.findall(text) == []
        assert yaml.safe_load(text)
