"""The simulated inference pool's Kubernetes: what the appliance applied (desired state) and what the
simulated scheduler and kubelet report (observed state), for one simulated appliance.

This is a simulation. No Kubernetes API server can be installed here (Debian ships only `kubectl`;
FIELD-NOTES), so the objects a real appliance would send to the API server (a Deployment and a Service
per inference service, lifecycle/manifests.py renders them) are kept in one JSON file,
SIMULATION_DIR/kubernetes/<appliance>.json, written atomically under an fcntl lock:

    {"workloads": {<object name>: {"desired": {...}, "observed": {...}}},
     "services": {<service name>: {"selects": <object name>}},
     "faults": {<object name>: "image_pull" | "crash_loop"}}

The appliance writes only `desired` (apply, delete, route). `observed` is written only by reconcile(),
the simulation's scheduler and kubelet: it places each workload's GPU requests on the node's GPUs as the
node's own state (state.py: the GPUs the driver sees, MIG mode and instances) offers them, the way the
device plugin advertises them (nvidia.com/gpu for a GPU without MIG, nvidia.com/mig-<profile> per MIG
instance with the mixed strategy), and it can fail: a GPU fallen off the bus (`gpu_missing` fault), a GPU
in MIG mode asked for whole, a MIG instance the node does not have, a device another workload holds, or a
fault injected here (an image that cannot be pulled, a container that keeps crashing). The workload
driver runs reconcile() every step; the lifecycle runs it when it follows a rollout and no driver runs.

The ready workloads' GPUs are what the workload model (workload.py) serves an inference load on, with
the service as the GPUs' owner in each node's job map.

Pure Python without Django: the workload driver imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from . import state as node_state

FORMAT_VERSION = 1
OBJECT_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
FAULTS = {
    "image_pull": ("Pending", "ErrImagePull", "failed to pull image {image}: not found in the appliance's registry"),
    "crash_loop": ("Running", "CrashLoopBackOff", "back-off restarting failed container {container}"),
}


class KubernetesError(node_state.StateError):
    """The simulated pool's state file is unreadable, or an object name is not a DNS label."""


def state_file(simulation_dir: str | os.PathLike, appliance: str) -> Path:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", appliance):
        raise KubernetesError(f"appliance {appliance!r}: not a name the simulation keeps a pool for")
    return Path(simulation_dir) / "kubernetes" / f"{appliance}.json"


def _empty() -> dict:
    return {"format": FORMAT_VERSION, "workloads": {}, "services": {}, "faults": {}}


@contextlib.contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _empty()
    except json.JSONDecodeError as exc:
        raise KubernetesError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise KubernetesError(f"{path}: expected a JSON object")
    return {**_empty(), **data}


def _write(path: Path, data: dict) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def read(path: str | os.PathLike) -> dict:
    path = Path(path)
    with _locked(path, exclusive=False):
        return _read(path)


@contextlib.contextmanager
def update(path: str | os.PathLike) -> Iterator[dict]:
    path = Path(path)
    with _locked(path, exclusive=True):
        data = _read(path)
        yield data
        _write(path, data)


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not OBJECT_NAME.fullmatch(name):
        raise KubernetesError(f"{what} {name!r}: not a DNS label ({OBJECT_NAME.pattern})")
    return name


# ---- the appliance's side: desired state -----------------------------------------------------------------

def apply(path, desired: dict) -> int:
    """Create or update a workload (one Deployment with its pods' GPU requests): `desired` holds name,
    service, node, devices [{gpu, profile, gpu_instance, resource}], image, container. Returns its
    generation; the observed state catches up at the next reconcile."""
    name = _check_name(desired.get("name"), "workload")
    _check_name(desired.get("service"), "service")
    with update(path) as data:
        current = data["workloads"].get(name) or {}
        generation = int((current.get("desired") or {}).get("generation", 0)) + 1
        data["workloads"][name] = {"desired": {**desired, "generation": generation, "applied_at": time.time()},
                                   "observed": current.get("observed") or {}}
    return generation


def delete(path, name: str) -> bool:
    """Delete a workload (its pods stop, their GPUs are free at the next reconcile). Returns whether it existed."""
    with update(path) as data:
        data["faults"].pop(name, None)
        return data["workloads"].pop(name, None) is not None


def route(path, service: str, workload: str | None) -> None:
    """Point a Service at a workload's pods (its selector), or delete the Service (workload None)."""
    _check_name(service, "service")
    with update(path) as data:
        if workload is None:
            data["services"].pop(service, None)
        else:
            data["services"][service] = {"selects": _check_name(workload, "workload")}


def inject_fault(path, workload: str, kind: str) -> None:
    """Make a workload's pods fail the way a real pod does: `image_pull` (the image is not in the registry)
    or `crash_loop` (the server exits at start)."""
    if kind not in FAULTS:
        raise KubernetesError(f"fault {kind!r}: unknown (known: {', '.join(FAULTS)})")
    with update(path) as data:
        data["faults"][_check_name(workload, "workload")] = kind


def clear_fault(path, workload: str) -> None:
    with update(path) as data:
        data["faults"].pop(workload, None)


# ---- the simulation's side: scheduler and kubelet -----------------------------------------------------------

def _devices_offered(state: dict) -> dict[int, dict]:
    """GPU index -> {"mig": bool, "instances": {gpu instance id: profile}} for the GPUs the driver sees."""
    offered = {}
    for gpu in node_state.visible_gpus(state):
        mig = gpu.get("mig") or {}
        offered[int(gpu["index"])] = {
            "mig": bool(mig.get("current")),
            "instances": {int(gi["id"]): str(gi["profile"]) for gi in mig.get("gpu_instances", [])},
        }
    return offered


def _schedule(desired: dict, offered: dict[str, dict | None], taken: dict) -> tuple[list[tuple], str]:
    """The device keys a workload's pod gets, or ([], why it cannot be placed) as the scheduler says it."""
    node = desired.get("node")
    devices = desired.get("devices") or []
    if node not in offered:
        return [], f"0/1 nodes are available: node {node!r} is not a node of the inference pool"
    gpus = offered[node]
    if gpus is None:
        return [], f"0/1 nodes are available: node {node} has no simulated state (not prepared)"
    keys = []
    for device in devices:
        index = int(device["gpu"])
        resource = device.get("resource") or "nvidia.com/gpu"
        profile, instance = device.get("profile"), device.get("gpu_instance")
        gpu = gpus.get(index)
        if gpu is None:
            return [], (f"0/1 nodes are available: 1 Insufficient {resource} (GPU {index} of {node} is not "
                        "visible to the driver: fallen off the bus)")
        if profile is None:
            if gpu["mig"]:
                return [], (f"0/1 nodes are available: 1 Insufficient {resource} (GPU {index} of {node} is in "
                            "MIG mode: the device plugin does not offer it whole)")
            key = (node, index, None)
        else:
            if not gpu["mig"] or gpu["instances"].get(int(instance if instance is not None else -1)) != profile:
                have = ", ".join(f"{p} (instance {i})" for i, p in sorted(gpu["instances"].items())) or "none"
                return [], (f"0/1 nodes are available: 1 Insufficient {resource} (GPU {index} of {node} offers "
                            f"no {profile} instance {instance}; its MIG instances: {have})")
            key = (node, index, int(instance))
        # A whole GPU excludes every instance of it; an instance excludes itself and the whole GPU.
        holder = next((who for (n, i, g), who in taken.items()
                       if n == node and i == index and (key[2] is None or g is None or g == key[2])), None)
        if holder:
            return [], f"0/1 nodes are available: 1 Insufficient {resource} (GPU {index} of {node} is held by {holder})"
        keys.append(key)
    return keys, ""


def reconcile(path, sysroots: dict[str, str], now: float | None = None) -> dict[str, dict]:
    """One pass of the simulated scheduler and kubelets over every workload, the earliest applied first
    (a running pod keeps its GPUs). `sysroots`: node name -> sysroot of the pool's nodes. Writes and
    returns each workload's observed state: {generation, phase, ready, ready_replicas, replicas, reason,
    message, node, devices, restarts, since, checked_at}."""
    now = time.time() if now is None else now
    offered: dict[str, dict | None] = {}
    for node, sysroot in sysroots.items():
        try:
            offered[node] = _devices_offered(node_state.load(sysroot)) if sysroot else None
        except node_state.StateError:
            offered[node] = None
    with update(path) as data:
        taken: dict[tuple, str] = {}
        order = sorted(data["workloads"].items(),
                       key=lambda item: (not (item[1].get("observed") or {}).get("ready"),
                                         item[1]["desired"].get("applied_at", 0), item[0]))
        for name, workload in order:
            desired, before = workload["desired"], workload.get("observed") or {}
            keys, why = _schedule(desired, offered, taken)
            fault = data["faults"].get(name)
            restarts = int(before.get("restarts", 0))
            if why:
                phase, ready, reason, message = "Pending", False, "Unschedulable", why
            elif fault:
                phase, reason, template = FAULTS[fault]
                ready = False
                message = template.format(image=desired.get("image", ""), container=desired.get("container", ""))
                restarts += fault == "crash_loop"
            else:
                phase, ready, reason, message = "Running", True, "", ""
            for key in keys:  # a scheduled pod holds its GPUs, ready or not
                taken[key] = desired.get("service", name)
            changed = (before.get("phase"), before.get("ready"), before.get("reason"),
                       before.get("generation")) != (phase, ready, reason, desired["generation"])
            workload["observed"] = {
                "generation": desired["generation"], "phase": phase, "ready": ready,
                "ready_replicas": 1 if ready else 0, "replicas": 1, "reason": reason, "message": message,
                "node": desired.get("node"),
                "devices": [{"gpu": key[1], "gpu_instance": key[2]} for key in keys],
                "restarts": restarts, "since": now if changed else before.get("since", now), "checked_at": now,
            }
        return {name: workload["observed"] for name, workload in data["workloads"].items()}


def _ready_devices(path) -> list[tuple[str, int, int | None, str]]:
    """(node, GPU index, GPU instance or None, service) of every device a ready pod holds."""
    found = []
    for workload in read(path)["workloads"].values():
        observed = workload.get("observed") or {}
        if not observed.get("ready") or observed.get("generation") != workload["desired"].get("generation"):
            continue
        for device in observed.get("devices", []):
            found.append((observed["node"], int(device["gpu"]), device.get("gpu_instance"),
                          workload["desired"]["service"]))
    return sorted(found, key=lambda item: (item[0], item[1], -1 if item[2] is None else item[2], item[3]))


def serving(path) -> dict[str, dict[int, str]]:
    """node -> {GPU index: service} for the GPUs that ready pods hold (what the workload model loads). A GPU
    whose MIG instances serve several services is named after the service of its lowest instance here;
    instance_owners() names each instance's."""
    result: dict[str, dict[int, str]] = {}
    for node, gpu, _instance, service in _ready_devices(path):
        result.setdefault(node, {}).setdefault(gpu, service)
    return result


def instance_owners(path) -> dict[str, dict[str, str]]:
    """node -> {"<GPU index>/<GPU instance>": service} for the MIG instances that ready pods hold: the job
    map's per-instance entries (the collector labels an instance's series with them)."""
    result: dict[str, dict[str, str]] = {}
    for node, gpu, instance, service in _ready_devices(path):
        if instance is not None:
            result.setdefault(node, {})[f"{gpu}/{instance}"] = service
    return result
