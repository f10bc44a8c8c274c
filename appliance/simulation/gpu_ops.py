"""Changes to a simulated GPU (persistence, MIG mode, MIG instances), shared by the simulated
nvidia-smi and the simulated NVML library so both follow the same rules. Pure Python, no Django.

Rules follow Hopper: a MIG mode change applies at once on an idle GPU (no reset) and is refused while GPU
instances exist; GPU instances take memory slices [start, start + size) that may not overlap, at the
placements the profile allows, at most `max` of a profile and at most one instance holding the media
extensions (+me) on a GPU; compute instances share their GPU instance's compute slices, and a GPU
instance with compute instances cannot be destroyed. The return codes are those real NVML gives:
MIG mode off NOT_SUPPORTED, a placement the profile does not allow INVALID_ARGUMENT, overlap or no room
INSUFFICIENT_RESOURCES, instances still there IN_USE. The simulated NVML library (nvml/simnvml.c) checks
the same before it calls here.
"""

from __future__ import annotations

from . import hardware
from .state import visible_gpus

# NVML return codes (nvml.h) these operations can end with.
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23

# compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_* (the profile id of a compute instance is the same value)
COMPUTE_PROFILES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}
COMPUTE_PROFILE_SLICES = {value: slices for slices, value in COMPUTE_PROFILES.items()}


class GpuError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def gpu(state: dict, index: int) -> dict:
    for candidate in visible_gpus(state):
        if candidate["index"] == index:
            return candidate
    raise GpuError(NVML_ERROR_NOT_FOUND, f"GPU {index} not found on {state['node']}")


def require_driver(state: dict) -> None:
    if "nvidia" not in state.get("modules", []):
        raise GpuError(NVML_ERROR_DRIVER_NOT_LOADED,
                       "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                       "Make sure that the latest NVIDIA driver is installed and running.")


def set_persistence(state: dict, index: int, enabled: bool) -> bool:
    target = gpu(state, index)
    changed = target["persistence_mode"] != enabled
    target["persistence_mode"] = enabled
    return changed


def set_mig_mode(state: dict, index: int, enabled: bool) -> bool:
    target = gpu(state, index)
    mig = target["mig"]
    if not mig.get("capable"):
        raise GpuError(NVML_ERROR_NOT_SUPPORTED, f"MIG mode is not supported on GPU {index} ({target['name']})")
    if not enabled and mig["gpu_instances"]:
        raise GpuError(NVML_ERROR_IN_USE, f"GPU {index} still has {len(mig['gpu_instances'])} GPU instance(s): "
                                          "destroy them before disabling MIG mode")
    changed = mig["current"] != enabled
    mig["current"] = mig["pending"] = enabled
    return changed


def profile(target: dict, *, profile_id: int | None = None, name: str | None = None,
            nvml_profile: int | None = None) -> dict:
    for candidate in target["mig"]["profiles"]:
        if (profile_id is not None and candidate["id"] == profile_id) or (name and candidate["name"] == name) or (
                nvml_profile is not None and candidate["nvml_profile"] == nvml_profile):
            return candidate
    wanted = name or profile_id if profile_id is not None or name else f"NVML profile {nvml_profile}"
    raise GpuError(NVML_ERROR_INVALID_ARGUMENT, f"GPU {target['index']}: no MIG profile {wanted} "
                                                f"(profiles: {', '.join(p['name'] for p in target['mig']['profiles'])})")


def _require_mig(target: dict) -> None:
    if not target["mig"].get("current"):
        raise GpuError(NVML_ERROR_NOT_SUPPORTED, f"GPU {target['index']} is not in MIG mode")


def _media_holder(target: dict) -> dict | None:
    """The GPU instance holding the media extensions, if one does."""
    media_ids = {p["id"] for p in target["mig"]["profiles"] if p.get("media_extensions")}
    return next((gi for gi in target["mig"]["gpu_instances"] if gi["profile_id"] in media_ids), None)


def remaining_capacity(target: dict, chosen: dict) -> int:
    """How many more instances of `chosen` fit the GPU now (nvmlDeviceGetGpuInstanceRemainingCapacity): the
    free placements that do not overlap one another, within the profile's maximum and the +me rule."""
    if chosen.get("media_extensions") and _media_holder(target) is not None:
        return 0
    existing = sum(1 for gi in target["mig"]["gpu_instances"] if gi["profile_id"] == chosen["id"])
    fitting, end = 0, -1
    for start in free_placements(target, chosen):
        if start >= end:
            fitting, end = fitting + 1, start + chosen["memory_slices"]
    return max(0, min(fitting, chosen["max"] - existing))


def engines(chosen: dict) -> dict:
    """The engines of an instance of a Hopper profile (MIG user guide, H100 profiles): one copy engine,
    decoder and JPEG engine per compute slice (8 copy engines on the whole GPU); the media extensions
    take every decoder and JPEG engine and the optical-flow accelerator; no encoders in MIG mode."""
    compute = chosen["compute_slices"]
    if chosen.get("media_extensions"):
        return {"copy": compute, "decoders": 7, "encoders": 0, "jpeg": 7, "ofa": 1}
    return {"copy": 8 if compute == 7 else compute, "decoders": compute, "encoders": 0, "jpeg": compute,
            "ofa": 1 if compute == 7 else 0}


def free_placements(target: dict, chosen: dict) -> list[int]:
    used = [(gi["placement_start"], gi["placement_start"] + gi["placement_size"]) for gi in target["mig"]["gpu_instances"]]
    return [start for start in chosen["placements"]
            if all(start + chosen["memory_slices"] <= low or start >= high for low, high in used)]


def create_gpu_instance(state: dict, index: int, profile_id: int, placement: int | None = None) -> int:
    target = gpu(state, index)
    _require_mig(target)
    chosen = profile(target, profile_id=profile_id)
    instances = target["mig"]["gpu_instances"]
    if placement is not None and placement not in chosen["placements"]:
        raise GpuError(NVML_ERROR_INVALID_ARGUMENT, f"GPU {index}: {chosen['name']} cannot start at memory slice "
                                                    f"{placement} (allowed: {chosen['placements']})")
    if sum(1 for gi in instances if gi["profile_id"] == chosen["id"]) >= chosen["max"]:
        raise GpuError(NVML_ERROR_INSUFFICIENT_RESOURCES,
                       f"GPU {index}: at most {chosen['max']} instance(s) of {chosen['name']}")
    holder = _media_holder(target) if chosen.get("media_extensions") else None
    if holder is not None:
        raise GpuError(NVML_ERROR_INSUFFICIENT_RESOURCES,
                       f"GPU {index}: GPU instance {holder['id']} ({holder['profile']}) already holds the media "
                       "extensions; one instance per GPU may")
    free = free_placements(target, chosen)
    if placement is None:
        if not free:
            raise GpuError(NVML_ERROR_INSUFFICIENT_RESOURCES, f"GPU {index}: no free placement for {chosen['name']}")
        placement = free[0]
    elif placement not in free:
        raise GpuError(NVML_ERROR_INSUFFICIENT_RESOURCES,
                       f"GPU {index}: {chosen['name']} at slice {placement} overlaps an existing instance")
    taken = {gi["id"] for gi in instances}
    gi_id = next(candidate for candidate in range(1, 64) if candidate not in taken)
    instances.append({"id": gi_id, "profile_id": chosen["id"], "profile": chosen["name"],
                      "placement_start": placement, "placement_size": chosen["memory_slices"],
                      "compute_slices": chosen["compute_slices"], "compute_instances": []})
    instances.sort(key=lambda gi: gi["id"])
    return gi_id


def gpu_instance(target: dict, gi_id: int) -> dict:
    for instance in target["mig"]["gpu_instances"]:
        if instance["id"] == gi_id:
            return instance
    raise GpuError(NVML_ERROR_NOT_FOUND, f"GPU {target['index']}: no GPU instance {gi_id}")


def create_compute_instance(state: dict, index: int, gi_id: int, compute_profile: int | None = None) -> int:
    target = gpu(state, index)
    _require_mig(target)
    instance = gpu_instance(target, gi_id)
    slices = instance["compute_slices"] if compute_profile is None else COMPUTE_PROFILE_SLICES.get(compute_profile)
    if slices is None or slices > instance["compute_slices"]:
        raise GpuError(NVML_ERROR_INVALID_ARGUMENT,
                       f"GPU {index} GPU instance {gi_id}: compute profile {compute_profile} does not fit "
                       f"{instance['compute_slices']} compute slice(s)")
    used = sum(ci["slices"] for ci in instance["compute_instances"])
    if used + slices > instance["compute_slices"]:
        raise GpuError(NVML_ERROR_INSUFFICIENT_RESOURCES,
                       f"GPU {index} GPU instance {gi_id}: no free compute slices for {slices} more")
    taken = {ci["id"] for ci in instance["compute_instances"]}
    ci_id = next(candidate for candidate in range(0, 8) if candidate not in taken)
    instance["compute_instances"].append({"id": ci_id, "profile_id": COMPUTE_PROFILES[slices], "slices": slices,
                                          "uuid": hardware.mig_uuid(target["uuid"], gi_id, ci_id)})
    return ci_id


def destroy_compute_instance(state: dict, index: int, gi_id: int, ci_id: int) -> None:
    instance = gpu_instance(gpu(state, index), gi_id)
    remaining = [ci for ci in instance["compute_instances"] if ci["id"] != ci_id]
    if len(remaining) == len(instance["compute_instances"]):
        raise GpuError(NVML_ERROR_NOT_FOUND, f"GPU {index} GPU instance {gi_id}: no compute instance {ci_id}")
    instance["compute_instances"] = remaining


def destroy_gpu_instance(state: dict, index: int, gi_id: int) -> None:
    target = gpu(state, index)
    instance = gpu_instance(target, gi_id)
    if instance["compute_instances"]:
        raise GpuError(NVML_ERROR_IN_USE, f"GPU {index} GPU instance {gi_id} still has compute instances")
    target["mig"]["gpu_instances"] = [gi for gi in target["mig"]["gpu_instances"] if gi["id"] != gi_id]
