"""The inference pool a deployment lands on ("deploy" part): the manifests' GPU requests and quoting, the
simulated Kubernetes' scheduler and kubelet (what it refuses, and why), and the workload model serving a
deployed service's GPUs under its name."""

import pytest
import yaml

from appliance.lifecycle import deployments, manifests
from appliance.lifecycle.errors import Conflict
from appliance.partitioning import sizing
from appliance.simulation import kubernetes, workload
from appliance.simulation.services import inject_fault

from .deploy_support import cluster_file, demo, inference_node, lay_out_mig, node_gpu, owners  # noqa: F401

# The registry's small test model (tests/lifecycle/registry_support.py) as its files describe it.
SMALL = {"params": 32768, "layers": 2, "kv_heads": 2, "head_dim": 16, "hidden_size": 64, "attention_heads": 4,
         "intermediate_size": 128, "vocab_size": 256, "dtype": "fp32"}
# Llama 3.1 70B: needs TP 4 on H100 80GB at 8 x 8k tokens in bf16.
LARGE = {"params": 70_553_706_496, "layers": 80, "kv_heads": 8, "head_dim": 128, "hidden_size": 8192,
         "attention_heads": 64, "intermediate_size": 28672, "vocab_size": 128256, "dtype": "bf16"}


def render(runtime, devices, model="llama", shape=SMALL, **kwargs):
    result = sizing.size(shape, gpu_model="h100-80gb", context=8192, concurrency=8)
    text, _ = manifests.render(service="llama", workload="llama-7", deployment_id=7, model=model, version=3,
                               runtime=runtime, storage_path="/mnt/lustre/models/llama/3", pool="inference",
                               node="gpu04", devices=devices, sizing=result, context=8192, concurrency=8, **kwargs)
    return list(yaml.safe_load_all(text))


def test_the_gpu_requests_match_the_placement(settings):
    settings.LIFECYCLE_IMAGE_REGISTRY = "registry.site.example:5000/mirror"
    mig = [{"gpu": 1, "profile": "1g.10gb", "gpu_instance": 9, "resource": "nvidia.com/mig-1g.10gb"}]
    deployment, service = render("vllm", mig)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": 1}}
    assert container["image"] == "registry.site.example:5000/mirror/vllm/vllm-openai:v0.6.3.post1"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu04", "appliance.io/pool": "inference"}
    assert pod["volumes"][0] == {"name": "model", "hostPath": {"path": "/mnt/lustre/models/llama/3",
                                                               "type": "Directory"}}
    assert service["kind"] == "Service" and service["spec"]["selector"] == {"app.kubernetes.io/instance": "llama-7"}
    whole = [{"gpu": i, "profile": None, "gpu_instance": None, "resource": "nvidia.com/gpu"} for i in (2, 3, 4, 5)]
    deployment, _ = render("vllm", whole, shape=LARGE)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    assert container["args"][container["args"].index("--tensor-parallel-size") + 1] == "4"
    assert manifests.gpu_resource("1g.10gb", "single") == "nvidia.com/gpu"


@pytest.mark.parametrize("runtime,health", [("triton", "/v2/health/ready"), ("nim", "/v1/health/ready")])
def test_each_runtime_has_its_image_and_health_route(settings, runtime, health):
    settings.LIFECYCLE_SERVING_IMAGES = {"nim": "nim/meta/llama-3.1-8b-instruct:1.1.2"}
    deployment, _ = render(runtime, [{"gpu": 0, "profile": None, "gpu_instance": None, "resource": "nvidia.com/gpu"}])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == health
    assert container["image"].startswith("registry.appliance.local:5000/")
    if runtime == "nim":
        assert container["image"].endswith("/nim/meta/llama-3.1-8b-instruct:1.1.2")


def test_names_that_yaml_would_read_as_other_types_stay_strings():
    for name in ("1e3", "null", "yes", "0x10"):
        deployment, service = render("nim", [{"gpu": 0, "profile": None, "gpu_instance": None,
                                              "resource": "nvidia.com/gpu"}], model=name)
        env = {item["name"]: item["value"] for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["NIM_SERVED_MODEL_NAME"] == name
        assert service["metadata"]["annotations"]["appliance.io/model"] == name


def test_a_site_image_setting_that_is_not_an_image_reference_is_refused(settings):
    settings.LIFECYCLE_SERVING_IMAGES = {"vllm": "vllm --privileged"}
    with pytest.raises(Exception, match=r"LIFECYCLE_SERVING_IMAGES\[vllm\]"):
        manifests.image("vllm")


def test_placement_takes_a_free_mig_instance_then_whole_gpus_of_one_node():
    small = sizing.size(SMALL, gpu_model="h100-80gb", context=4096, concurrency=8)
    assert small["placement"]["kind"] == "mig" and small["placement"]["profile"] == "1g.10gb"
    gpus = [{"node": "gpu04", "index": 0, "model": "h100-80gb", "mig": [
        {"profile": "3g.40gb", "start": 0, "gpu_instance": 2}, {"profile": "1g.10gb", "start": 6, "gpu_instance": 13}]},
        *({"node": "gpu04", "index": i, "model": "h100-80gb", "mig": None} for i in range(1, 8))]
    assert deployments.place(small, gpus, set(), "mixed") == ("gpu04", [
        {"node": "gpu04", "gpu": 0, "profile": "1g.10gb", "gpu_instance": 13, "resource": "nvidia.com/mig-1g.10gb"}])
    # The 1g instance held by another service: the next smallest that holds the model.
    assert deployments.place(small, gpus, {("gpu04", 0, 13)}, "mixed")[1][0]["profile"] == "3g.40gb"
    large = sizing.size(LARGE, gpu_model="h100-80gb", context=8192, concurrency=8)
    assert large["placement"]["tp"] == 4
    used = {("gpu04", 1, None), ("gpu04", 3, None)}
    assert [d["gpu"] for d in deployments.place(large, gpus, used, "mixed")[1]] == [2, 4, 5, 6]
    used |= {("gpu04", 5, None), ("gpu04", 6, None)}
    with pytest.raises(Conflict, match="placement: the inference pool has no 4 free whole GPU"):
        deployments.place(large, gpus, used, "mixed")


def desired(name, devices, service="llama"):
    return {"name": name, "service": service, "node": "gpu04", "devices": devices, "image": "r/vllm:1",
            "container": "vllm"}


def whole(index):
    return [{"gpu": index, "profile": None, "gpu_instance": None, "resource": "nvidia.com/gpu"}]


def test_the_simulated_kubelet_reports_what_the_node_offers(demo):  # noqa: F811
    path = cluster_file(demo)
    sysroots = {"gpu04": inference_node().sysroot}
    kubernetes.apply(path, desired("llama-1", whole(0)))
    kubernetes.apply(path, desired("other-2", whole(0), service="other"))
    [instance] = lay_out_mig(demo, 3)
    kubernetes.apply(path, desired("small-3", [{"gpu": 3, "profile": "1g.10gb", "gpu_instance": instance,
                                                "resource": "nvidia.com/mig-1g.10gb"}], service="small"))
    kubernetes.apply(path, desired("absent-4", [{"gpu": 3, "profile": "2g.20gb", "gpu_instance": 5,
                                                 "resource": "nvidia.com/mig-2g.20gb"}], service="absent"))
    kubernetes.apply(path, desired("whole-5", whole(3), service="whole"))
    observed = kubernetes.reconcile(path, sysroots)
    assert (observed["llama-1"]["phase"], observed["llama-1"]["ready"]) == ("Running", True)
    assert observed["other-2"]["reason"] == "Unschedulable"
    assert "GPU 0 of gpu04 is held by llama" in observed["other-2"]["message"]
    assert observed["small-3"]["ready"] is True
    assert "offers no 2g.20gb instance 5; its MIG instances: 1g.10gb (instance 1)" in observed["absent-4"]["message"]
    assert "GPU 3 of gpu04 is in MIG mode" in observed["whole-5"]["message"]
    assert kubernetes.serving(path) == {"gpu04": {0: "llama", 3: "small"}}

    kubernetes.inject_fault(path, "llama-1", "crash_loop")
    observed = kubernetes.reconcile(path, sysroots)
    assert (observed["llama-1"]["ready"], observed["llama-1"]["reason"]) == (False, "CrashLoopBackOff")
    assert observed["other-2"]["reason"] == "Unschedulable"  # a crashing pod still holds its GPU
    kubernetes.delete(path, "llama-1")
    inject_fault(inference_node(), "gpu_missing", index=0)
    observed = kubernetes.reconcile(path, sysroots)
    assert "GPU 0 of gpu04 is not visible to the driver: fallen off the bus" in observed["other-2"]["message"]
    with pytest.raises(kubernetes.KubernetesError, match="not a DNS label"):
        kubernetes.apply(path, desired("../etc", whole(1)))


def test_the_workload_model_serves_the_deployed_service_under_its_name(demo):  # noqa: F811
    path = cluster_file(demo)
    kubernetes.apply(path, desired("llama-1", whole(2)))
    kubernetes.reconcile(path, {"gpu04": inference_node().sysroot})
    specs = [workload.NodeSpec(**spec) for spec in workload.node_specs(demo)[0]]
    assert [spec.name for spec in specs] == ["gpu04"]
    workload.serve(specs, kubernetes.serving(path), now=16 * 3600.0)  # 16:00, the day's peak
    assert owners() == {"2": {"kind": "inference", "service": "llama"}}
    assert node_gpu(2)["memory_used_bytes"] > 30 * 2**30 and node_gpu(2)["utilization_gpu"] > 50
    assert node_gpu(1)["memory_used_bytes"] == 0 and node_gpu(1)["utilization_gpu"] == 0
    # The collector labels the GPU's series with the service (its job map).
    job_map = (inference_node().sysroot + "/run/appliance/gpu-owners.json")
    assert '"service": "llama"' in open(job_map).read()
    kubernetes.delete(path, "llama-1")
    kubernetes.reconcile(path, {"gpu04": inference_node().sysroot})
    workload.serve(specs, kubernetes.serving(path), now=16 * 3600.0 + 60)
    assert owners() == {} and node_gpu(2)["memory_used_bytes"] == 0


def test_the_driver_step_gives_a_deployed_service_its_gpus_and_the_ground_truth_names_it():
    model = workload.Model("demo", 7, (workload.NodeSpec("gpu04", "inference", 8),),
                           services={"gpu04": {1: "llama"}})
    truth = model.ground_truth(model.nodes[0], 960)
    assert [(line["gpu"], line["activity"]) for line in truth[:3]] == [(0, "chat-gpu04"), (1, "llama"),
                                                                       (2, "chat-gpu04")]
    assert truth[1]["kind"] == "inference-diurnal" and truth[1]["state"] == "busy"


def test_the_running_driver_reconciles_the_pool_and_serves_the_service_in_place_of_the_background(
        demo, tmp_path):  # noqa: F811
    path = cluster_file(demo)
    kubernetes.apply(path, desired("llama-1", whole(2)))
    nodes, _, _ = workload.node_specs(demo)
    driver = workload.Driver({"directory": str(tmp_path), "profile": "inference-diurnal", "seed": 1, "speed": 60.0,
                              "started_at": 0.0, "nodes": nodes, "user": "nobody", "slurm_conf": "",
                              "kubernetes": str(path)})
    driver.step(16 * 3600 / 60.0)   # simulated 16:00
    assert kubernetes.read(path)["workloads"]["llama-1"]["observed"]["ready"] is True
    held = owners()
    assert held["2"] == {"kind": "inference", "service": "llama"}
    assert {held[str(i)]["service"] for i in (0, 1, 3, 4, 5, 6, 7)} == {"chat-gpu04"}


def test_the_default_service_name_is_the_model_name_as_a_dns_label():
    assert deployments.service_name_for("Llama-3.1_8B") == "llama-3-1-8b"
    assert deployments.service_name_for("7b.chat") == "m-7b-chat"
    assert deployments.service_name_for("a" * 100) == "a" * 52
    assert deployments.SERVICE_NAME.match(deployments.service_name_for("x" * 51 + "--y"))
