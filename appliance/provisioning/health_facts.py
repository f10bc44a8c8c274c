"""What a stage's facts and acceptance checks say about the health of a node and its parts.

Each function turns what one module reported into health observations (appliance.inventory.health)
for the checks that module ran, and nothing else: NVML's GPU list says which inventory GPUs are
present and their retired pages and NVLinks; ibstat says which HCA ports have a link; findmnt which
mounts are there; an acceptance check lands on the GPU or port it names (an Xid on a PCI address, an
ib_write_bw on a device), on the node otherwise.
"""

from __future__ import annotations

import re

from appliance.inventory.choices import ComponentKind, HealthStatus
from appliance.inventory.health import Observation, gpu_label, short_pci
from appliance.inventory.models import GPU, Node

OK, FAILING, UNKNOWN = HealthStatus.OK.value, HealthStatus.FAILING.value, HealthStatus.UNKNOWN.value

# How the acceptance module describes the Xids it found (appliance_fabric_acceptance.xid_checks):
# "Xid 79 on 0000:9a:00.0: GPU has fallen off the bus.; Xid 48 on ...".
_XID = re.compile(r"Xid (\d+) on ([0-9A-Fa-f:.]+): (.*?)(?=; Xid \d+ on |$)")
# Xid 79: the GPU has fallen off the bus; the driver no longer sees it.
XID_FELL_OFF_THE_BUS = 79
_EVIDENCE_CHARS = 160


def _short(text: str, limit: int = _EVIDENCE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def identify_gpus(node: Node, items: list[dict]) -> list[tuple[GPU | None, dict]]:
    """Pair each GPU NVML listed with the inventory's GPU: by UUID, then PCI address, then (for an inventory
    row nothing identifies yet) by index. NVML numbers the GPUs it sees from 0, so when one is missing
    the indexes of the ones after it shift: an index never overrides a UUID or an address."""
    inventory = list(GPU.objects.filter(node=node))
    by_uuid = {gpu.uuid: gpu for gpu in inventory if gpu.uuid}
    by_pci = {short_pci(gpu.pci_bus_id): gpu for gpu in inventory if gpu.pci_bus_id}
    by_index = {gpu.index: gpu for gpu in inventory}
    paired: list[tuple[GPU | None, dict]] = []
    taken: set[int] = set()
    pending = []
    for item in items:
        gpu = by_uuid.get(str(item.get("uuid") or "")) or by_pci.get(short_pci(str(item.get("pci_bus_id") or "")))
        if gpu is not None and gpu.pk not in taken:
            taken.add(gpu.pk)
            paired.append((gpu, item))
        else:
            pending.append(item)
    used = set(by_index)
    for item in pending:
        gpu = by_index.get(int(item["index"]))
        if gpu is None or gpu.pk in taken or gpu.uuid or gpu.pci_bus_id:
            # A card the inventory does not know; its NVML index may belong to a GPU it does know.
            index = int(item["index"]) if int(item["index"]) not in used else max(used) + 1
            used.add(index)
            paired.append((None, {**item, "index": index}))
            continue
        taken.add(gpu.pk)
        paired.append((gpu, item))
    return paired


def gpu_observations(node: Node, listed: list[GPU], present: dict[int, dict]) -> list[Observation]:
    """`listed`: the node's GPUs after the facts were applied; `present`: GPU pk -> NVML's record of it."""
    observations = []
    for gpu in listed:
        label = gpu_label(gpu)
        item = present.get(gpu.pk)
        if item is None:
            observations.append(Observation(ComponentKind.GPU, str(gpu.index), "present", FAILING,
                                            f"{label} missing: NVML does not list it", label, gpu))
            continue
        observations.append(Observation(ComponentKind.GPU, str(gpu.index), "present", OK,
                                        f"{label} listed by NVML", label, gpu))
        observations.extend(_gpu_health(gpu, label, item))
    return observations


def _gpu_health(gpu: GPU, label: str, item: dict) -> list[Observation]:
    """The health NVML reported with a GPU (the gpu stage asks for it; other readers may not)."""
    observations = []

    def observe(name, status, evidence):
        observations.append(Observation(ComponentKind.GPU, str(gpu.index), name, status, evidence, label, gpu))

    if "retired_pages" in item:
        pending = item.get("retired_pages_pending")
        total = item.get("retired_pages")
        if total is None:
            observe("retired_pages", UNKNOWN, f"{label}: NVML reports neither retired pages nor remapped rows")
        elif total:
            detail = f"retired pages pending: {total}" if pending else f"retired pages: {total}"
            observe("retired_pages", FAILING, f"{label} {detail}")
        else:
            observe("retired_pages", OK, f"{label}: no retired or pending pages")
    if "retired_pages_dbe" in item or "ecc_uncorrected_volatile" in item:
        # Uncorrectable ECC errors since the driver loaded where NVML counts them; else the pages retired for them.
        volatile, dbe = item.get("ecc_uncorrected_volatile"), item.get("retired_pages_dbe")
        if volatile:
            observe("ecc", FAILING, f"{label} ECC DBE {volatile} since the driver loaded")
        elif dbe:
            observe("ecc", FAILING, f"{label} ECC DBE {dbe} (pages retired)")
        elif volatile is None and dbe is None:
            observe("ecc", UNKNOWN, f"{label}: NVML reports no ECC error count")
        else:
            observe("ecc", OK, f"{label}: no ECC DBE")
    if "nvlink_links_up" in item and item.get("nvlink_links_present"):
        up, present = int(item["nvlink_links_up"]), int(item["nvlink_links_present"])
        observe("nvlink", OK if up == present else FAILING,
                f"{label} NVLink {up} of {present} links up")
    return observations


def port_observations(ports: list[dict]) -> list[Observation]:
    observations = []
    for item in ports:
        if not isinstance(item, dict) or not item.get("device"):
            continue
        component = f"{item['device']}/{int(item.get('port') or 1)}"
        state, physical = str(item.get("state") or ""), str(item.get("physical_state") or "")
        up = state == "Active" and physical == "LinkUp"
        evidence = (f"{component} link up ({state}, {physical})" if up
                    else f"{component} link down ({state or 'no state'}, {physical or 'no physical state'})")
        observations.append(Observation(ComponentKind.HCA_PORT, component, "link", OK if up else FAILING,
                                        evidence, f"HCA port {component}"))
    return observations


def mount_observations(mounts: list[dict]) -> list[Observation]:
    observations = []
    for item in mounts:
        if not isinstance(item, dict) or not item.get("mount_point"):
            continue
        point = str(item["mount_point"])
        present = bool(item.get("present"))
        evidence = (f"{point} mounted ({item.get('fstype') or 'unknown type'})" if present
                    else f"{point} not mounted")
        observations.append(Observation(ComponentKind.MOUNT, point, "mounted", OK if present else FAILING,
                                        evidence, f"mount {point}"))
    return observations


def acceptance_observations(node: Node, results: list[dict]) -> list[Observation]:
    """One observation per acceptance check of `node`, on the component the check names where it names one."""
    gpus = list(GPU.objects.filter(node=node))
    observations = []
    for item in results:
        name = str(item["check"])
        passed = bool(item.get("passed"))
        message = str(item.get("message") or "")
        if name == "gpu.xid_errors":
            observations.extend(_xid_observations(item, gpus))
            continue
        if name == "gpu.count" and passed and item.get("measured") == len(gpus):
            # NVML listed as many GPUs as the inventory has: each is present (a count short of it names none).
            observations.extend(Observation(ComponentKind.GPU, str(gpu.index), "present", OK,
                                            f"{gpu_label(gpu)}: NVML lists all {len(gpus)} GPUs", gpu_label(gpu), gpu)
                                for gpu in gpus)
        if name.startswith("ib_write_bw."):
            device = name.split(".", 1)[1]
            match = re.match(rf"{re.escape(device)}/(\d+):", message)
            component = f"{device}/{match.group(1) if match else 1}"
            observations.append(Observation(
                ComponentKind.HCA_PORT, component, "acceptance ib_write_bw", OK if passed else FAILING,
                _short(message or f"{component}: ib_write_bw {'passed' if passed else 'failed'}"),
                f"HCA port {component}"))
            continue
        observations.append(Observation(ComponentKind.NODE, "", f"acceptance {name}", OK if passed else FAILING,
                                        _short(f"{name}: {message}" if message else name)))
    return observations


def _xid_observations(item: dict, gpus: list[GPU]) -> list[Observation]:
    """Xids land on the GPU at their PCI address; an Xid 79 (fallen off the bus) means that GPU is missing.
    The module describes at most a few Xids: GPUs it may not have named are unknown, not ok."""
    message = str(item.get("message") or "")
    measured = item.get("measured")
    if measured is None:
        return [Observation(ComponentKind.NODE, "", "acceptance gpu.xid_errors", FAILING,
                            _short(f"gpu.xid_errors: {message}"))]
    found = [(int(x), short_pci(pci), text.strip()) for x, pci, text in _XID.findall(message)]
    all_described = len(found) >= int(measured or 0)
    by_pci = {short_pci(gpu.pci_bus_id): gpu for gpu in gpus if gpu.pci_bus_id}
    observations, named = [], set()
    for gpu in gpus:
        label = gpu_label(gpu)
        mine = [(xid, text) for xid, pci, text in found if by_pci.get(pci) is gpu]
        if mine:
            named.add(gpu.pk)
            described = "; ".join(f"XID {xid} at {short_pci(gpu.pci_bus_id)}: {text}" for xid, text in mine)
            observations.append(Observation(ComponentKind.GPU, str(gpu.index), "xid", FAILING,
                                            _short(f"{label} {described}"), label, gpu))
            if any(xid == XID_FELL_OFF_THE_BUS for xid, _ in mine):
                observations.append(Observation(ComponentKind.GPU, str(gpu.index), "present", FAILING,
                                                f"{label} missing: XID 79, fallen off the bus", label, gpu))
        elif all_described:
            observations.append(Observation(ComponentKind.GPU, str(gpu.index), "xid", OK,
                                            f"{label}: no XID in the kernel log since boot", label, gpu))
        else:
            observations.append(Observation(ComponentKind.GPU, str(gpu.index), "xid", UNKNOWN,
                                            f"{label}: more XIDs were logged than the check described", label, gpu))
    stray = [(xid, pci) for xid, pci, _ in found if pci not in by_pci]
    if stray:
        observations.append(Observation(
            ComponentKind.NODE, "", "acceptance gpu.xid_errors", FAILING,
            _short("XID on a PCI address no inventory GPU has: "
                   + "; ".join(f"XID {xid} at {pci}" for xid, pci in stray))))
    elif int(measured or 0) == 0 or all_described:
        observations.append(Observation(ComponentKind.NODE, "", "acceptance gpu.xid_errors", OK,
                                        "every XID is on the GPU it names" if measured else
                                        "no XID in the kernel log since boot"))
    return observations
