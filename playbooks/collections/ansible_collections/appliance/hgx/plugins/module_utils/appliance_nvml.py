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
