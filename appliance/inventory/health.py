"""A node's health: the latest verdict of every check on the node and its parts (GPUs, HCA ports,
mounts), written by whatever measured it (a provisioning stage's facts, the acceptance checks, later
telemetry) and read by the run code (a node is Ready only when nothing fails) and the portal.

A writer records the checks it ran, and only those: a stage that did not look at a GPU leaves that
GPU's rows as they were, so a rerun of an unrelated stage cannot make a failure disappear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from appliance import audit

from .choices import ComponentKind, HealthStatus
from .models import GPU, HealthCheck, Node

# open_failures() names at most this many checks; a node page shows them all.
_REASONS_SHOWN = 5


@dataclass(frozen=True)
class Observation:
    """One check's verdict on one component, as a writer hands it over."""

    component_kind: str
    component_id: str
    name: str
    status: str
    evidence: str = ""
    component_label: str = ""
    gpu: GPU | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.component_kind, self.component_id, self.name)


def gpu_label(gpu: GPU) -> str:
    return f"GPU {gpu.index}" + (f" ({short_pci(gpu.pci_bus_id)})" if gpu.pci_bus_id else "")


def short_pci(bus_id: str) -> str:
    """A PCI address as the kernel writes it (0000:9a:00.0), whatever form NVML gave (00000000:9A:00.0)."""
    text = (bus_id or "").strip().lower()
    if text.count(":") == 2:
        domain, rest = text.split(":", 1)
        text = f"{domain[-4:].rjust(4, '0')}:{rest}"
    return text


def record(node: Node, observations: Iterable[Observation], *, source: str, run_id: int | None = None) -> int:
    """Write the observations' rows (creating or updating each); rows of checks not observed stay as they
    are. Returns the number of rows whose status or evidence changed (each change is audited)."""
    observations = list(observations)
    if not observations:
        return 0
    now = timezone.now()
    changed = 0
    with transaction.atomic(), audit.batch():
        existing = {(row.component_kind, row.component_id, row.name): row
                    for row in HealthCheck.objects.filter(node=node)}
        for observation in observations:
            if observation.status not in HealthStatus.values:
                raise ValueError(f"health status {observation.status!r} is not one of {', '.join(HealthStatus.values)}")
            row = existing.get(observation.key) or HealthCheck(
                node=node, component_kind=observation.component_kind, component_id=observation.component_id,
                name=observation.name)
            if row.pk is None or row.status != observation.status or row.evidence != observation.evidence[:300]:
                changed += 1
            row.status = observation.status
            row.evidence = observation.evidence[:300]
            row.component_label = (observation.component_label or row.component_label)[:300]
            if observation.gpu is not None:
                row.gpu = observation.gpu
            row.source, row.run_id, row.checked_at = source[:200], run_id, now
            row.save()
            existing[observation.key] = row
    return changed


def failing(node: Node):
    """The node's failing checks: GPUs, HCA ports and mounts first (what to replace or reseat), node-wide last."""
    return (HealthCheck.objects.filter(node=node, status=HealthStatus.FAILING)
            .order_by("component_kind", "component_id", "name"))


def reason_of(row: HealthCheck) -> str:
    """A failing check in a few words: its evidence, or what failed where."""
    if row.evidence:
        return row.evidence
    where = row.component_label or (row.component_kind if row.component_kind != ComponentKind.NODE else "")
    return f"{where} {row.name} failing".strip()


def open_failures(node: Node) -> list[str]:
    """Short reasons of the node's current failing checks, one per part (a GPU missing is one reason, not
    one per check that saw it: its presence first), node-wide checks one each; empty when nothing stops
    the node being Ready."""
    by_part: dict[tuple[str, str], list[HealthCheck]] = {}
    for row in failing(node):
        part = (row.component_kind, row.component_id if row.component_kind != ComponentKind.NODE else row.name)
        by_part.setdefault(part, []).append(row)
    reasons = []
    for rows in by_part.values():
        rows.sort(key=lambda row: (row.name != "present", row.name))
        more = len(rows) - 1
        reasons.append(reason_of(rows[0]) + (f" (and {more} more failing check{'s' if more > 1 else ''})"
                                             if more else ""))
    return list(dict.fromkeys(reasons))


def failure_summary(node: Node) -> str:
    """One line for a node's state reason: the first failures and how many more."""
    reasons = open_failures(node)
    if not reasons:
        return ""
    shown = "; ".join(reasons[:_REASONS_SHOWN])
    more = len(reasons) - _REASONS_SHOWN
    return shown + (f" (and {more} more)" if more > 0 else "")


def summary(node: Node) -> dict:
    """Counts of the node's checks per status ({"ok": n, "failing": n, "unknown": n, "total": n}) and the
    failing GPUs' indexes, for pages."""
    counts = {status: 0 for status in HealthStatus.values}
    for row in HealthCheck.objects.filter(node=node).values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    counts["total"] = sum(counts[status] for status in HealthStatus.values)
    counts["failing_gpus"] = sorted({int(i) for i in HealthCheck.objects.filter(
        node=node, status=HealthStatus.FAILING, component_kind=ComponentKind.GPU).values_list(
        "component_id", flat=True) if str(i).isdigit()})
    return counts
