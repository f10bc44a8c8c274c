"""The Kubernetes manifests of an inference service: one Deployment per rollout (named
<service>-<deployment id>, so the previous one keeps serving until the new one is healthy) and the
Service that routes to it, for a vLLM, Triton or NIM-style serving runtime.

The GPU requests match the placement the lifecycle chose: `nvidia.com/gpu` for whole GPUs, and for a MIG
instance `nvidia.com/mig-<profile>` with the device plugin's mixed strategy (each profile its own
resource) or `nvidia.com/gpu` with the single strategy (every instance of the node alike). The pod is
pinned to its node and pool and tolerates the inference nodes' `nvidia.com/gpu` taint
(partitioning/renderers/kubernetes.py). The model's files are mounted read-only from the parallel
filesystem at the path the registry recorded.

Images: an air-gapped appliance pulls from its own registry. LIFECYCLE_IMAGE_REGISTRY (a setting, default
below) prefixes each runtime's image; LIFECYCLE_SERVING_IMAGES ({runtime: "repository:tag"}) replaces
the defaults. Everything is written as plain YAML (no anchors) from dicts: a model's name, a path or a tag is
quoted as YAML needs, never pasted into text.
"""

from __future__ import annotations

import re

from django.conf import settings

from appliance.core import plainyaml

from .errors import LifecycleError

DEFAULT_REGISTRY = "registry.appliance.local:5000"
DEFAULT_IMAGES = {
    "vllm": "vllm/vllm-openai:v0.6.3.post1",
    "triton": "nvidia/tritonserver:24.10-trtllm-python-py3",
    "nim": "nim/nvidia/llm-nim:1.3.0",
}
REGISTRY_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]{1,128}){0,4}$")
IMAGE_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,254}[a-z0-9])?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")
POOL_LABEL = "appliance.io/pool"
PORT = 8000
MODEL_MOUNT = "/models/weights"
# vLLM's --dtype names for the advisor's
VLLM_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "auto", "int8": "auto", "int4": "auto"}
# The runtime's readiness endpoint (its own health route)
HEALTH_PATHS = {"vllm": "/health", "triton": "/v2/health/ready", "nim": "/v1/health/ready"}


def image(runtime: str) -> str:
    """The image reference a runtime is pulled as: the appliance's registry, then the repository and tag."""
    registry = str(getattr(settings, "LIFECYCLE_IMAGE_REGISTRY", "") or DEFAULT_REGISTRY).rstrip("/")
    images = {**DEFAULT_IMAGES, **(getattr(settings, "LIFECYCLE_SERVING_IMAGES", None) or {})}
    if not REGISTRY_PATTERN.fullmatch(registry):
        raise LifecycleError(f"LIFECYCLE_IMAGE_REGISTRY: {registry!r} is not a registry host[:port][/path]",
                             "runtime")
    if runtime not in images:
        raise LifecycleError(f"runtime: no image for {runtime!r}", "runtime")
    reference = str(images[runtime])
    if not IMAGE_PATTERN.fullmatch(reference):
        raise LifecycleError(f"LIFECYCLE_SERVING_IMAGES[{runtime}]: {reference!r} is not repository[:tag]", "runtime")
    return f"{registry}/{reference}"


def gpu_resource(profile: str | None, strategy: str) -> str:
    """The extended resource a pod asks for: a whole GPU, or a MIG instance as the device plugin names it."""
    if profile is None or strategy != "mixed":
        return "nvidia.com/gpu"
    return f"nvidia.com/mig-{profile}"


def _container(runtime: str, *, model: str, sizing: dict, context: int, concurrency: int) -> dict:
    placement = sizing["placement"]
    if runtime == "vllm":
        command = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        args = ["--model", MODEL_MOUNT, "--served-model-name", model, "--port", str(PORT),
                "--tensor-parallel-size", str(placement["tp"]), "--pipeline-parallel-size", str(placement["pp"]),
                "--max-model-len", str(context), "--max-num-seqs", str(concurrency),
                "--gpu-memory-utilization", "0.9", "--dtype", VLLM_DTYPES.get(sizing["dtype"], "auto"),
                "--kv-cache-dtype", "auto" if sizing["kv_dtype"] in ("bf16", "fp16", "fp32") else sizing["kv_dtype"]]
        env = []
    elif runtime == "triton":
        command = ["tritonserver"]
        args = [f"--model-repository={MODEL_MOUNT}", f"--http-port={PORT}", "--grpc-port=8001",
                "--metrics-port=8002", "--model-control-mode=none"]
        env = []
    else:  # NIM-style: the container reads its model and limits from the environment
        command, args = [], []
        env = [{"name": "NIM_MODEL_NAME", "value": MODEL_MOUNT}, {"name": "NIM_SERVED_MODEL_NAME", "value": model},
               {"name": "NIM_MAX_MODEL_LEN", "value": str(context)},
               {"name": "NIM_TENSOR_PARALLEL_SIZE", "value": str(placement["tp"])},
               {"name": "NIM_PIPELINE_PARALLEL_SIZE", "value": str(placement["pp"])},
               {"name": "NIM_SERVER_PORT", "value": str(PORT)}]
    container = {"name": runtime, "image": image(runtime), "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "http", "containerPort": PORT}],
                 "readinessProbe": {"httpGet": {"path": HEALTH_PATHS[runtime], "port": PORT},
                                    "periodSeconds": 10, "failureThreshold": 3},
                 "volumeMounts": [{"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True},
                                  {"name": "shm", "mountPath": "/dev/shm"}]}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if env:
        container["env"] = env
    return container


def render(*, service: str, workload: str, deployment_id: int, model: str, version: int, runtime: str,
           storage_path: str, pool: str, node: str, devices: list[dict], sizing: dict, context: int,
           concurrency: int) -> tuple[str, dict]:
    """(the YAML of the Deployment and the Service, the container as rendered). `devices`: the placement,
    [{gpu, profile, gpu_instance, resource}] on `node`."""
    resources: dict[str, int] = {}
    for device in devices:
        resources[device["resource"]] = resources.get(device["resource"], 0) + 1
    container = _container(runtime, model=model, sizing=sizing, context=context, concurrency=concurrency)
    container["resources"] = {"limits": {name: count for name, count in sorted(resources.items())}}
    labels = {"app.kubernetes.io/name": service, "app.kubernetes.io/instance": workload,
              "app.kubernetes.io/managed-by": "appliance", "appliance.io/deployment": str(deployment_id)}
    annotations = {"appliance.io/model": model, "appliance.io/model-version": str(version),
                   "appliance.io/placement": ", ".join(
                       f"{node}/gpu{d['gpu']}" + (f"/{d['profile']}" if d.get("profile") else "") for d in devices)}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": workload, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": workload}},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node, POOL_LABEL: pool},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                    "volumes": [{"name": "model", "hostPath": {"path": storage_path, "type": "Directory"}},
                                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
                },
            },
        },
    }
    route = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service, "labels": {"app.kubernetes.io/name": service,
                                                 "app.kubernetes.io/managed-by": "appliance"},
                     "annotations": {"appliance.io/model": model}},
        "spec": {"selector": {"app.kubernetes.io/instance": workload},
                 "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]},
    }
    text = plainyaml.dump_all([deployment, route])
    return text, container
