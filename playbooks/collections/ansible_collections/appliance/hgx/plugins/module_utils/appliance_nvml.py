# Reading GPUs through NVML (pynvml) for the appliance's modules.
#
# On a simulated node APPLIANCE_SIM_NVML names the simulated libnvidia-ml.so.1: it is loaded with
# RTLD_GLOBAL before nvmlInit so that pynvml's own dlopen("libnvidia-ml.so.1") resolves to it. The
# library picks its node at nvmlInit from APPLIANCE_SIM_SYSROOT, which matters because one interpreter
# may serve every host (Mitogen): nothing here may cache a node's answers between calls.

from __future__ import annotations

import contextlib
import ctypes
import os

NVML_FEATURE_ENABLED = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0


class NvmlUnavailable(Exception):
    """NVML could not be opened on this node (library missing, driver not loaded, ...)."""


def _pynvml():
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("the Python package nvidia-ml-py (module pynvml) is not installed "
                              f"for this node's Python interpreter ({exc})") from exc
    return pynvml


@contextlib.contextmanager
def nvml_session():
    """Yield the pynvml module with NVML initialised; shut it down afterwards."""
    simulated_library = os.environ.get("APPLIANCE_SIM_NVML")
    if simulated_library:
        try:
            ctypes.CDLL(simulated_library, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise NvmlUnavailable(f"cannot load the simulated NVML library {simulated_library}: {exc}") from exc
    pynvml = _pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"nvmlInit failed: {exc}") from exc
    try:
        yield pynvml
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def optional(pynvml, call, *args):
    """The value of an NVML call a device may not support, or None when it does not."""
    try:
        return call(*args)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
            pynvml.NVMLError_InvalidArgument):
        return None


def nvlink_links(pynvml, handle):
    """(links up, links present) of one GPU."""
    up = present = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = optional(pynvml, pynvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            continue
        present += 1
        up += int(state == NVML_FEATURE_ENABLED)
    return up, present


def retired_pages(pynvml, handle):
    """Retired pages plus pending or failed row remaps; None when the GPU reports neither."""
    total, measured = 0, False
    for cause in (pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                  pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
        pages = optional(pynvml, pynvml.nvmlDeviceGetRetiredPages, handle, cause)
        if pages is not None:
            total += len(pages)
            measured = True
    # Hopper and Ampere replace page retirement by row remapping: a pending or failed remap counts.
    remapped = optional(pynvml, pynvml.nvmlDeviceGetRemappedRows, handle)
    if remapped is not None:
        _corrected, _uncorrected, pending, failed = remapped
        total += int(bool(pending)) + int(bool(failed))
        measured = True
    return total if measured else None


def retirement_detail(pynvml, handle):
    """(pages retired for double-bit ECC errors, pages pending retirement); None for what the GPU does not report."""
    pages = optional(pynvml, pynvml.nvmlDeviceGetRetiredPages, handle,
                     pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = optional(pynvml, pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    return (None if pages is None else len(pages)), (None if pending is None else int(pending == NVML_FEATURE_ENABLED))


def gpu_records(pynvml, health=False):
    """One dict per GPU: index, uuid, name, memory_mib, pci_bus_id, persistence_mode, mig_mode,
    nvlink_peers; with `health`, also nvlink_links_up/present, pcie_link_width, retired_pages (with
    retired_pages_dbe and retired_pages_pending) and ecc_uncorrected_volatile."""
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    records = []
    for index, handle in enumerate(handles):
        persistence = optional(pynvml, pynvml.nvmlDeviceGetPersistenceMode, handle)
        mig = optional(pynvml, pynvml.nvmlDeviceGetMigMode, handle)
        peers = []
        for other_index, other in enumerate(handles):
            if other_index == index:
                continue
            status = optional(pynvml, pynvml.nvmlDeviceGetP2PStatus, handle, other, NVML_P2P_CAPS_INDEX_NVLINK)
            if status == NVML_P2P_STATUS_OK:
                peers.append(other_index)
        record = {
            "index": index,
            "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
            "name": _text(pynvml.nvmlDeviceGetName(handle)),
            "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
            "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            "persistence_mode": None if persistence is None else persistence == NVML_FEATURE_ENABLED,
            "mig_mode": None if mig is None else ("enabled" if mig[0] == 1 else "disabled"),
            "mig_mode_pending": None if mig is None else ("enabled" if mig[1] == 1 else "disabled"),
            "nvlink_peers": peers,
        }
        if health:
            up, present = nvlink_links(pynvml, handle)
            record["nvlink_links_up"] = up
            record["nvlink_links_present"] = present
            record["pcie_link_width"] = optional(pynvml, pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
            record["retired_pages"] = retired_pages(pynvml, handle)
            record["retired_pages_dbe"], record["retired_pages_pending"] = retirement_detail(pynvml, handle)
            # Uncorrectable (double-bit) ECC errors since the driver loaded; None where ECC is off or unsupported.
            record["ecc_uncorrected_volatile"] = optional(
                pynvml, pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC)
        records.append(record)
    return records


def driver_record(pynvml):
    cuda = optional(pynvml, pynvml.nvmlSystemGetCudaDriverVersion)
    return {
        "version": _text(pynvml.nvmlSystemGetDriverVersion()),
        "cuda": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def contradictions(gpus, driver, expected):
    """Messages for each way the GPUs or the driver contradict `expected`
    ({count, model, memory_mib, driver_version})."""
    problems = []
    if expected.get("count") is not None and len(gpus) != expected["count"]:
        problems.append(f"NVML sees {len(gpus)} GPUs, the platform has {expected['count']}")
    if expected.get("model"):
        wrong = [f"GPU {g['index']} is {g['name']!r}" for g in gpus if g["name"] != expected["model"]]
        if wrong:
            problems.append(f"expected model {expected['model']!r}: " + ", ".join(wrong))
    if expected.get("memory_mib"):
        wrong = [f"GPU {g['index']} has {g['memory_mib']} MiB" for g in gpus if g["memory_mib"] != expected["memory_mib"]]
        if wrong:
            problems.append(f"expected {expected['memory_mib']} MiB per GPU: " + ", ".join(wrong))
    if expected.get("driver_version") and driver["version"] != expected["driver_version"]:
        problems.append(f"driver {driver['version']} is loaded, the platform requires {expected['driver_version']}")
    return problems


# ---- MIG layouts (the partitioning stage's module mig_layout) ------------------------------------
# A GPU's layout is the set of its GPU instances as (profile name, first memory slice). `profiles` maps
# each profile name of the GPU's model to {"nvml_profile": NVML_GPU_INSTANCE_PROFILE_*, "compute_slices"}.

# NVML_COMPUTE_INSTANCE_PROFILE_* of the compute instance that takes a whole GPU instance, by its slices.
_FULL_COMPUTE_PROFILE = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
_CI_ENGINE_SHARED = 0
_MAX_INSTANCES = 8


class MigLayoutError(Exception):
    """NVML refused a step; the message names the GPU, the instance and NVML's answer."""


def _gpu_instances_of(pynvml, handle, profile_id):
    array = (pynvml.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def _compute_instances_of(pynvml, gpu_instance):
    found = []
    for profile in sorted(set(_FULL_COMPUTE_PROFILE.values())):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gpu_instance, profile, _CI_ENGINE_SHARED)
        except pynvml.NVMLError:
            continue
        array = (pynvml.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(0)
        try:
            pynvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, array, ctypes.byref(count))
        except pynvml.NVMLError:
            continue
        found += [array[i] for i in range(count.value)]
    return found


def mig_enabled(pynvml, handle):
    mode = optional(pynvml, pynvml.nvmlDeviceGetMigMode, handle)
    return bool(mode and mode[0] == 1)


def gpu_instances(pynvml, handle, profiles):
    """[{profile, start, gpu_instance, handle, compute_instances: [ci handles]}] as NVML reports them."""
    if not mig_enabled(pynvml, handle):
        return []
    found = []
    for name, profile in profiles.items():
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile["nvml_profile"])
        except pynvml.NVMLError:
            continue  # a profile this board does not offer
        for gi in _gpu_instances_of(pynvml, handle, info.id):
            gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
            found.append({"profile": name, "start": int(gi_info.placement.start), "gpu_instance": int(gi_info.id),
                          "handle": gi, "compute_instances": _compute_instances_of(pynvml, gi)})
    return sorted(found, key=lambda i: (i["start"], i["gpu_instance"]))


def mig_devices(pynvml, handle):
    """{(gpu instance id, compute instance id): MIG device UUID} of one GPU."""
    devices = {}
    if not mig_enabled(pynvml, handle):
        return devices
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:
            continue
        key = (int(pynvml.nvmlDeviceGetGpuInstanceId(device)), int(pynvml.nvmlDeviceGetComputeInstanceId(device)))
        devices[key] = _text(pynvml.nvmlDeviceGetUUID(device))
    return devices


def gpu_diff(pynvml, handle, target, profiles):
    """What bringing one GPU to `target` ({"mig": [{profile, start}] | None}) takes: destroy, create,
    complete (kept instances missing their compute instance), mig_mode (None, "enable" or "disable")."""
    have = gpu_instances(pynvml, handle, profiles)
    enabled = mig_enabled(pynvml, handle)
    wanted = {(i["profile"], int(i["start"])) for i in (target.get("mig") or [])}
    present = {(i["profile"], i["start"]) for i in have}
    mode = None
    if target.get("mig") is not None and not enabled:
        mode = "enable"
    elif target.get("mig") is None and enabled:
        mode = "disable"
    return {
        "destroy": [{"profile": i["profile"], "start": i["start"], "gpu_instance": i["gpu_instance"]}
                    for i in have if (i["profile"], i["start"]) not in wanted],
        "create": [{"profile": p, "start": s} for p, s in sorted(wanted - present, key=lambda i: i[1])],
        "complete": [{"profile": i["profile"], "start": i["start"], "gpu_instance": i["gpu_instance"]}
                     for i in have if (i["profile"], i["start"]) in wanted and not i["compute_instances"]],
        "mig_mode": mode,
    }


def _step(pynvml, what, call, *args):
    try:
        return call(*args)
    except pynvml.NVMLError as exc:
        raise MigLayoutError(f"{what}: NVML answered {exc}") from None


def reconcile_gpu(pynvml, handle, index, target, profiles):
    """Bring GPU `index` to `target` from whatever NVML reports now (so a run killed halfway finishes
    on the next): destroy what is not planned (compute instances first), switch MIG mode, create each
    missing GPU instance at its explicit placement with one compute instance taking all of it."""
    diff = gpu_diff(pynvml, handle, target, profiles)
    wanted = {(i["profile"], i["start"]) for i in diff["create"]}
    for instance in gpu_instances(pynvml, handle, profiles):
        if any(d["gpu_instance"] == instance["gpu_instance"] for d in diff["destroy"]):
            where = f"GPU {index} {instance['profile']} at {instance['start']} (GI {instance['gpu_instance']})"
            for ci in instance["compute_instances"]:
                _step(pynvml, f"{where}: destroying a compute instance", pynvml.nvmlComputeInstanceDestroy, ci)
            _step(pynvml, f"{where}: destroying the GPU instance", pynvml.nvmlGpuInstanceDestroy, instance["handle"])
    if diff["mig_mode"]:
        enable = diff["mig_mode"] == "enable"
        _step(pynvml, f"GPU {index}: {'enabling' if enable else 'disabling'} MIG mode",
              pynvml.nvmlDeviceSetMigMode, handle, 1 if enable else 0)
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
        if current != int(enable):
            raise MigLayoutError(f"GPU {index}: MIG mode is pending ({pending}) and needs a GPU reset "
                                 "(nvidia-smi -r) with no process on the GPU; rerun the stage after it")
    for name, start in sorted(wanted, key=lambda i: i[1]):
        profile = profiles[name]
        where = f"GPU {index} {name} at {start}"
        info = _step(pynvml, f"{where}: reading the profile", pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                     handle, profile["nvml_profile"])
        # The placement's size is in memory slices, as NVML lists the possible ones for the profile.
        possible = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(_MAX_INSTANCES)
        _step(pynvml, f"{where}: reading the possible placements", pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
              handle, info.id, possible, ctypes.byref(count))
        sizes = [possible[i].size for i in range(count.value) if possible[i].start == start]
        if not sizes:
            raise MigLayoutError(f"{where}: NVML offers this profile at memory slices "
                                 f"{sorted(possible[i].start for i in range(count.value))} only")
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, sizes[0]
        _step(pynvml, f"{where}: creating the GPU instance", pynvml.nvmlDeviceCreateGpuInstanceWithPlacement,
              handle, info.id, ctypes.byref(placement))
    for instance in gpu_instances(pynvml, handle, profiles):
        if instance["compute_instances"] or (instance["profile"], instance["start"]) not in (
                wanted | {(c["profile"], c["start"]) for c in diff["complete"]}):
            continue
        where = f"GPU {index} {instance['profile']} at {instance['start']} (GI {instance['gpu_instance']})"
        slices = profiles[instance["profile"]]["compute_slices"]
        info = _step(pynvml, f"{where}: reading the compute profile", pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                     instance["handle"], _FULL_COMPUTE_PROFILE[slices], _CI_ENGINE_SHARED)
        _step(pynvml, f"{where}: creating the compute instance", pynvml.nvmlGpuInstanceCreateComputeInstance,
              instance["handle"], info.id)
    return diff


def mig_records(pynvml, handle, index, profiles):
    """The fact appliance_mig_instances of one GPU: [{gpu, profile, start, gpu_instance, compute_instance,
    uuid}], one per compute instance (a GPU instance without one is listed with compute_instance None)."""
    uuids = mig_devices(pynvml, handle)
    records = []
    for instance in gpu_instances(pynvml, handle, profiles):
        # Compute instance ids through the MIG device handles (nvmlComputeInstanceGetInfo_v2 is younger
        # than the drivers some appliances run).
        ci_ids = sorted(ci for gi, ci in uuids if gi == instance["gpu_instance"]) or [None]
        for ci_id in sorted(ci_ids, key=lambda i: -1 if i is None else i):
            records.append({"gpu": index, "profile": instance["profile"], "start": instance["start"],
                            "gpu_instance": instance["gpu_instance"], "compute_instance": ci_id,
                            "uuid": uuids.get((instance["gpu_instance"], ci_id), "")})
    return records
